"""A vLLM release's verify target held against its own non-speculative sampler
(``harness.upstream.vllm_laws``, ``harness.releases.laws``).

On a package of our own shaped like vLLM's (``tmp_path``, put first on ``sys.path`` for
the test): a ``Sampler`` whose ``sample`` draws from temperature, min-p, then top-k and
top-p, and verify targets (its ``apply_sampling_params``) that keep that law, in another
form (no false alarm), or drop min-p, drop top-p or read another row's parameters, each
caught where it acts and nowhere else. Its parameter buffers are allocated pinned, which
a CPU refuses, and its Triton top-k/top-p path refuses to run, as vLLM's do here: the
comparison must stand in for both. Then the installed vLLM 0.33 (marker ``vllm``), whose
verify hands ``rejection_sample`` exactly its sampler's law.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.releases.laws import far_logits, grid, server_laws
from harness.upstream.releases.eras import era_of, known_versions
from harness.upstream.vllm_laws import TRITON_NOT_RUN, compare_laws

SAMPLING_PARAMS = """
from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
"""

BUFFERS = """
import torch


class UvaBuffer:
    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype, pin_memory=True)  # refused on a CPU
        self.np = self.cpu.numpy()
        self._uva = self.cpu

    def uva(self, n=None):
        return self._uva if n is None else self._uva[:n]


class UvaBackedTensor:
    def __init__(self, size, dtype):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self.buffer = UvaBuffer(size, dtype)
        self.copy_to_uva()

    def copy_to_uva(self):
        self.buffer.np[:] = self.np
        self.gpu = self.buffer.uva()
        return self.gpu
"""

STATES = """
import torch

from vllm.v1.worker.gpu.buffer_utils import UvaBackedTensor


class SamplingStates:
    def __init__(self, max_num_reqs, vocab_size):
        self.vocab_size = vocab_size
        self.temperature = UvaBackedTensor(max_num_reqs, dtype=torch.float32)
        self.top_k = UvaBackedTensor(max_num_reqs, dtype=torch.int32)
        self.top_p = UvaBackedTensor(max_num_reqs, dtype=torch.float32)
        self.min_p = UvaBackedTensor(max_num_reqs, dtype=torch.float32)

    def add_request(self, req_idx, sampling_params):
        self.temperature.np[req_idx] = sampling_params.temperature
        top_k = sampling_params.top_k
        self.top_k.np[req_idx] = top_k if 0 < top_k < self.vocab_size else self.vocab_size
        self.top_p.np[req_idx] = sampling_params.top_p
        self.min_p.np[req_idx] = sampling_params.min_p
        return True

    def apply_staged_writes(self):
        for buffer in (self.temperature, self.top_k, self.top_p, self.min_p):
            buffer.copy_to_uva()
"""

TOP_K_TOP_P = '''
import torch

HAS_TRITON = True


def apply_top_k_top_p(logits, k, p):
    """Keep the k highest, then ranks while the kept mass above them is below p."""
    if HAS_TRITON:
        raise RuntimeError("the Triton kernel needs CUDA")
    ranked, order = logits.sort(dim=-1, descending=True, stable=True)
    keep = torch.arange(logits.shape[-1]) < k.unsqueeze(-1)
    if p is not None:
        probs = ranked.masked_fill(~keep, float("-inf")).softmax(-1)
        keep &= probs.cumsum(-1) - probs < p.unsqueeze(-1)
    return logits.masked_fill(~torch.zeros_like(keep).scatter(-1, order, keep), float("-inf"))
'''

SAMPLER = """
import torch

from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

DESIGN = "{design}"


class Sampler:
    def add_request(self, req_idx, sampling_params):
        staged = self.sampling_states.add_request(req_idx, sampling_params)
        self.needs_logits_processing[req_idx] = staged
        self.penalties_state.add_request(req_idx, sampling_params)

    def apply_staged_writes(self):
        self.sampling_states.apply_staged_writes()
        self.penalties_state.apply_staged_writes()

    def apply_sampling_params(self, logits, expanded_idx_mapping, idx_mapping_np, pos,
                              skip_top_k_top_p=False):
        verify = not skip_top_k_top_p
        states = self.sampling_states
        rows = expanded_idx_mapping.long()
        if verify and DESIGN == "other_rows":
            rows = rows.flip(0)
        self.penalties_state.apply_penalties(logits, expanded_idx_mapping, idx_mapping_np)
        temperature = states.temperature.gpu[rows].unsqueeze(-1)
        logits = logits / torch.where(temperature == 0, 1.0, temperature)
        if verify and DESIGN == "probability_form":
            probs = logits.softmax(-1)
            peak = probs.amax(-1, keepdim=True)
            probs = probs.masked_fill(probs < states.min_p.gpu[rows].unsqueeze(-1) * peak, 0)
            kept = apply_top_k_top_p(probs.log(), states.top_k.gpu[rows], states.top_p.gpu[rows])
            return (kept.softmax(-1) * 2).log()  # the same law, other logits
        if not (verify and DESIGN == "drops_min_p"):
            probs = logits.softmax(-1)
            peak = probs.amax(-1, keepdim=True)
            dropped = probs < states.min_p.gpu[rows].unsqueeze(-1) * peak
            logits = logits.masked_fill(dropped, float("-inf"))
        if skip_top_k_top_p:
            return logits
        top_p = None if DESIGN == "drops_top_p" else states.top_p.gpu[rows]
        return apply_top_k_top_p(logits, states.top_k.gpu[rows], top_p)

    def sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids,
               return_logprobs=False):
        processed = self.apply_sampling_params(
            logits, expanded_idx_mapping, idx_mapping_np, pos, skip_top_k_top_p=True
        )
        rows = expanded_idx_mapping.long()
        states = self.sampling_states
        processed = apply_top_k_top_p(processed, states.top_k.gpu[rows], states.top_p.gpu[rows])
        return processed.argmax(-1), processed
"""

FILES = {
    "vllm/sampling_params.py": SAMPLING_PARAMS,
    "vllm/utils/torch_utils.py": "PIN_MEMORY = True\n",
    "vllm/v1/worker/gpu/buffer_utils.py": BUFFERS,
    "vllm/v1/worker/gpu/sample/states.py": STATES,
    "vllm/v1/sample/ops/topk_topp_sampler.py": TOP_K_TOP_P,
}


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A vLLM-shaped package under ``tmp_path``, first on ``sys.path``; the process's own
    ``vllm`` modules (if any) out of the way while the test runs, and back after."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        if (
            getattr(sys.modules[name], "__file__", "")
            and tmp_path in Path(sys.modules[name].__file__ or "").parents
        ):
            del sys.modules[name]


def _write(root: Path, design: str) -> None:
    for relative, text in {
        **FILES,
        "vllm/v1/worker/gpu/sample/sampler.py": SAMPLER.replace("{design}", design),
    }.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == root:
                break
            (folder / "__init__.py").touch()
        path.write_text(text)


def _compare(root: Path, design: str) -> dict[tuple[str, str], int]:
    _write(root, design)
    era = era_of("vllm", "0.33.0")
    assert era is not None and era.laws is not None
    compared = compare_laws(era.laws, root=root, sets=grid(), logits=far_logits())
    assert compared.not_run() == [f"its verify target against its sampler: {TRITON_NOT_RUN}"]
    assert len(compared.judged) == 2 * len(grid())  # each set alone, and all mixed
    return {(s.group, s.batch): s.differing for s in compared.sets if s.differing}


def _with(word: str) -> set[str]:
    return {s.label for s in grid() if word in s.label}


@pytest.mark.parametrize("design", ["faithful", "probability_form"])
def test_a_verify_target_that_is_its_samplers_law_passes(release: Path, design: str) -> None:
    assert _compare(release, design) == {}


@pytest.mark.parametrize("design, word", [("drops_min_p", "min-p"), ("drops_top_p", "top-p")])
def test_a_verify_target_that_drops_a_parameter_differs_where_it_acts(
    release: Path, design: str, word: str
) -> None:
    differing = _compare(release, design)
    assert {group for group, _ in differing} == _with(word)
    assert {batch for _, batch in differing} == {"alone", "mixed"}


def test_a_verify_target_that_reads_another_rows_parameters_differs_mixed_only(
    release: Path,
) -> None:
    differing = _compare(release, "other_rows")
    assert differing and {batch for _, batch in differing} == {"mixed"}


def test_a_vllm_row_whose_files_are_not_imported_here_says_so(tmp_path: Path) -> None:
    row = server_laws(era_of("vllm", "0.33.0"), root=tmp_path)
    assert row is not None and not row.evidence and row.judged == []
    assert len(row.not_covered) == 1 and "not run" in row.not_covered[0]


@pytest.mark.parametrize(
    "text, said",
    [
        ("class Sampler:\n    pass\n", "Sampler has no sample, add_request, apply_staged_writes"),
        ("def broken(:\n", "cannot be imported here (invalid syntax"),
    ],
    ids=["no-methods", "truncated"],
)
def test_a_damaged_sampler_file_is_not_run_and_said_in_one_line(
    release: Path, text: str, said: str
) -> None:
    _write(release, "faithful")
    (release / "vllm/v1/worker/gpu/sample/sampler.py").write_text(text)
    row = server_laws(era_of("vllm", "0.33.0"), root=release)
    assert row is not None and row.judged == [] and not row.evidence
    assert len(row.not_covered) == 1 and said in row.not_covered[0], row.not_covered


def test_every_vllm_era_names_its_verify_and_its_sampler() -> None:
    for version in known_versions("vllm"):
        era = era_of("vllm", version)
        assert era is not None and era.laws is not None, version
        assert era.laws.sampler.endswith("Sampler.sample"), version
        assert not era.laws.temperatures_otherwise  # the verify reads it for every batch


@pytest.mark.vllm
def test_vllm_0_33s_verify_target_is_its_samplers_law_on_the_grid() -> None:
    import vllm

    root = Path(vllm.__file__).parent.parent
    row = server_laws(era_of("vllm", "0.33.0"), root=root)
    assert row is not None and len(row.judged) == 2 * len(grid())
    assert row.evidence == ""
    assert row.not_covered == [f"its verify target against its sampler: {TRITON_NOT_RUN}"]
