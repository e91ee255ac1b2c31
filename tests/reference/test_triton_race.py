"""The Triton exponential race (reference.triton_race) picks exactly the torch race's tokens.

Without CUDA these run the kernels under the Triton interpreter, so shapes stay small.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import reference.triton_race as triton_race
from reference.step_samplers import exponential_race, exponential_race_torch
from reference.triton_race import BLOCK_V, exponential_race_triton
from tests.helpers import subprocess_env

pytestmark = pytest.mark.interpreter

RaceInputs = dict[str, torch.Tensor]
# The compiled kernel takes CUDA tensors; without CUDA the interpreter takes CPU ones.
KERNEL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _on_kernel_device(inputs: RaceInputs) -> RaceInputs:
    return {name: tensor.to(KERNEL_DEVICE) for name, tensor in inputs.items()}


def _race_inputs(bs: int, vocab: int, seed: int, dtype: torch.dtype = torch.float32) -> RaceInputs:
    """Seeded race inputs: logits ~ 3 * N(0, 1), T in [0.05, 2], alternating greedy rows."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(bs, vocab, generator=g) * 3).to(dtype)
    noise = torch.empty(bs, vocab).exponential_(generator=g)
    temperatures = torch.linspace(0.05, 2.0, bs)[torch.randperm(bs, generator=g)]
    greedy_mask = torch.arange(bs) % 2 == seed % 2  # both kinds of row once bs >= 2
    return _on_kernel_device(
        {"logits": logits, "temperatures": temperatures, "greedy_mask": greedy_mask, "noise": noise}
    )


def _both_races(inputs: RaceInputs) -> tuple[torch.Tensor, torch.Tensor]:
    return exponential_race_triton(**inputs), exponential_race_torch(**inputs)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("vocab", "bs"),
    [(1, 1), (5, 2), (1023, 3), (1024, 4), (1025, 5), (2049, 5), (5003, 5)],
)
def test_triton_race_returns_exactly_the_torch_race_tokens(vocab: int, bs: int, seed: int) -> None:
    inputs = _race_inputs(bs, vocab, seed)
    got, want = _both_races(inputs)
    assert got.dtype == torch.int64
    assert got.shape == (bs,)
    assert torch.equal(got, want)


def test_noise_moves_sampled_rows_and_leaves_greedy_rows_on_the_argmax() -> None:
    inputs = _race_inputs(4, 2049, seed=3)
    inputs["temperatures"] = torch.ones(4)
    inputs["noise"][:, 2000] = 1e-30  # a near-zero draw wins any sampled row
    got, want = _both_races(inputs)
    greedy = inputs["greedy_mask"]
    assert torch.equal(got, want)
    assert torch.equal(got[~greedy], torch.full_like(got[~greedy], 2000))
    assert torch.equal(got[greedy], inputs["logits"][greedy].argmax(dim=-1))


@pytest.mark.parametrize(
    ("low", "high"),
    [(BLOCK_V - 1, BLOCK_V), (3, 700), (17, 2 * BLOCK_V)],
    ids=["straddling-tile-boundary", "same-tile", "first-and-last-tile"],
)
def test_exact_tie_goes_to_the_lower_index(low: int, high: int) -> None:
    inputs = _race_inputs(2, 2 * BLOCK_V + 1, seed=4)
    inputs["logits"][:, [low, high]] = 20.0  # equal maxima, far above the ~N(0, 9) rest
    inputs["temperatures"] = torch.tensor([0.7, 1.3])
    inputs["greedy_mask"] = torch.tensor([True, False])
    inputs["noise"] = torch.ones_like(inputs["noise"])
    inputs["noise"][1, [low, high]] = 0.5  # the sampled row ties on equal noise too
    got, want = _both_races(inputs)
    assert torch.equal(want, torch.tensor([low, low]))
    assert torch.equal(got, want)


@pytest.mark.parametrize("layout", ["cropped-rows", "transposed"])
def test_strided_logits_and_noise_match_their_contiguous_copies(layout: str) -> None:
    g = torch.Generator().manual_seed(5)
    bs, vocab = 3, 1500
    if layout == "cropped-rows":
        logits = (torch.randn(bs, 2100, generator=g) * 3).to(KERNEL_DEVICE)[:, :vocab]
        noise = torch.empty(bs, 1800).exponential_(generator=g).to(KERNEL_DEVICE)[:, :vocab]
    else:
        logits = (torch.randn(vocab, bs, generator=g) * 3).to(KERNEL_DEVICE).t()
        noise = torch.empty(vocab, bs).exponential_(generator=g).to(KERNEL_DEVICE).t()
    assert not logits.is_contiguous() and not noise.is_contiguous()
    shared = _on_kernel_device(
        {"temperatures": torch.tensor([0.3, 1.0, 2.0]), "greedy_mask": torch.tensor([0, 1, 0]) > 0}
    )
    got = exponential_race_triton(logits, noise=noise, **shared)
    copied = exponential_race_triton(logits.contiguous(), noise=noise.contiguous(), **shared)
    assert torch.equal(got, copied)
    assert torch.equal(got, exponential_race_torch(logits, noise=noise, **shared))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_match_the_torch_race_on_the_same_inputs(dtype: torch.dtype) -> None:
    inputs = _race_inputs(4, 2049, seed=6, dtype=dtype)  # duplicate values make real ties
    got, want = _both_races(inputs)
    assert inputs["logits"].dtype == dtype
    assert torch.equal(got, want)


def test_masked_out_vocab_tiles_and_rows_match_the_torch_race() -> None:
    inputs = _race_inputs(3, 2049, seed=7)
    inputs["logits"][0, :BLOCK_V] = float("-inf")  # a whole tile out of the vocabulary
    inputs["logits"][1, ::2] = float("-inf")  # scattered masking
    inputs["logits"][2, :] = float("-inf")  # nothing left: torch's argmax of nan is 0
    got, want = _both_races(inputs)
    assert torch.equal(got, want)


def test_empty_batch_returns_no_tokens() -> None:
    got = exponential_race_triton(**_race_inputs(0, 7, seed=0))
    assert got.dtype == torch.int64
    assert got.shape == (0,)


def test_triton_backend_dispatches_to_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def spy(logits: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        calls.append(logits.shape[0])
        return exponential_race_triton(logits, **kwargs)

    monkeypatch.setattr(triton_race, "exponential_race_triton", spy)
    inputs = _race_inputs(3, 1025, seed=8)
    got = exponential_race(**inputs, backend="triton")
    assert calls == [3]
    assert torch.equal(got, exponential_race_torch(**inputs))


def test_auto_backend_on_cpu_tensors_uses_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("auto backend launched the Triton kernel for CPU tensors")

    monkeypatch.setattr(triton_race, "exponential_race_triton", forbidden)
    inputs = {name: tensor.cpu() for name, tensor in _race_inputs(3, 1025, seed=9).items()}
    assert torch.equal(exponential_race(**inputs, backend="auto"), exponential_race_torch(**inputs))


def test_unknown_backend_name_raises_value_error() -> None:
    with pytest.raises(ValueError, match="backend"):
        exponential_race(**_race_inputs(1, 5, seed=0), backend="cuda")  # type: ignore[arg-type]


def _bad_inputs(case: str) -> RaceInputs:
    inputs = _race_inputs(2, 5, seed=0)
    if case == "1-D logits":
        inputs["logits"] = inputs["logits"][0]
    elif case == "3-D logits":
        inputs["logits"] = inputs["logits"][None]
    elif case == "empty vocab":
        inputs["logits"] = inputs["logits"][:, :0]
        inputs["noise"] = inputs["noise"][:, :0]
    elif case == "integer logits":
        inputs["logits"] = inputs["logits"].long()
    elif case == "temperatures bs":
        inputs["temperatures"] = torch.ones(3)
    elif case == "greedy_mask bs":
        inputs["greedy_mask"] = torch.ones(1, dtype=torch.bool)
    elif case == "greedy_mask dtype":
        inputs["greedy_mask"] = inputs["greedy_mask"].int()
    elif case == "noise bs":
        inputs["noise"] = torch.ones(3, 5)
    elif case == "noise V":
        inputs["noise"] = torch.ones(2, 6)
    return _on_kernel_device(inputs)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("1-D logits", "2-D"),
        ("3-D logits", "2-D"),
        ("empty vocab", "V >= 1"),
        ("integer logits", "float"),
        ("temperatures bs", "temperatures"),
        ("greedy_mask bs", "greedy_mask"),
        ("greedy_mask dtype", "bool"),
        ("noise bs", "noise"),
        ("noise V", "noise"),
    ],
)
def test_wrapper_rejects_bad_inputs_with_value_error(case: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        exponential_race_triton(**_bad_inputs(case))


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env(without=("TRITON_INTERPRET",))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


_SMALL_RACE = """
import torch
from reference.triton_race import exponential_race_triton
t = exponential_race_triton(torch.tensor([[0.0, 2.0, 1.0]]), temperatures=torch.ones(1),
                            greedy_mask=torch.ones(1, dtype=torch.bool), noise=torch.ones(1, 3))
print(t.tolist())
"""


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter fallback is CPU-only")
def test_fresh_cpu_process_imports_and_runs_the_kernels_interpreted() -> None:
    result = _run_python(
        "import os\n"
        "from reference.triton_interpreter import use_interpreter_without_cuda\n"
        "use_interpreter_without_cuda()\n"
        "import reference.triton_race as tr\n"
        "print(os.environ['TRITON_INTERPRET'], tr._INTERPRETED)\n" + _SMALL_RACE
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "True", "[1]"]


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter fallback is CPU-only")
def test_triton_imported_first_without_interpreter_gives_a_clear_error() -> None:
    result = _run_python("import triton\n" + _SMALL_RACE)
    assert result.returncode != 0
    assert "set TRITON_INTERPRET=1 before importing triton" in result.stderr


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter fallback is CPU-only")
def test_importing_the_kernels_leaves_the_environment_and_the_dispatch_sets_the_interpreter() -> (
    None
):
    result = _run_python(
        "import os\n"
        "import reference.triton_race\n"
        "print('TRITON_INTERPRET' in os.environ)\n"
        "import torch\n"
        "from reference.step_samplers import exponential_race\n"
        "t = exponential_race(torch.tensor([[0.0, 2.0, 1.0]]), temperatures=torch.ones(1),\n"
        "    greedy_mask=torch.ones(1, dtype=torch.bool), noise=torch.ones(1, 3),\n"
        "    backend='triton')\n"
        "print(t.tolist())\n"
    )
    assert result.returncode != 0  # the kernels were defined compiled: no interpreter was asked for
    assert "set TRITON_INTERPRET=1 before importing triton" in result.stderr
    assert result.stdout.split() == ["False"]  # the import changed nothing


@pytest.mark.e2e
@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter fallback is CPU-only")
def test_the_race_dispatch_asks_for_the_interpreter_before_the_kernels_are_imported() -> None:
    result = _run_python(
        "import os, torch\n"
        "from reference.step_samplers import exponential_race\n"
        "print('TRITON_INTERPRET' in os.environ)\n"
        "t = exponential_race(torch.tensor([[0.0, 2.0, 1.0]]), temperatures=torch.ones(1),\n"
        "    greedy_mask=torch.ones(1, dtype=torch.bool), noise=torch.ones(1, 3),\n"
        "    backend='triton')\n"
        "print(os.environ['TRITON_INTERPRET'], t.tolist())\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "1", "[1]"]
