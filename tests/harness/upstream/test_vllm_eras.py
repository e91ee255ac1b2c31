"""vLLM 0.25-0.30 judged under their own code, and each era's noise keys.

The key model (``harness.upstream.vllm_keying``) is read from a release's own Gumbel
module: Murmur3 where it defines ``murmur3_hash32``, Triton's Philox before; a draft
draw's salt where it has ``_DRAFT_NOISE_SALT``. On the real wheels (marker
``releases``, each release in a process of its own under Triton's interpreter, the
libdevice bodies installed): 0.30.0 keeps its draft keys off its verifier's and has
no lossless failure on a small case; a drafter of it keyed without the salt, or by the
next position, fails the exact key check; a float64 drafter of it passes. 0.28.0 keys
its draft draws by the verifier's own (seed, position) pairs (it has no salt): the
exact key check fails on the release itself, at every sampled step. 0.25.0 (sampled
inline, its cache tempered) does the same and nothing else of it fails a lossless check;
a drafter of it that walks twice, keeping the second walk's cache, is caught.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.upstream.vllm_convention import VLLM_0_33
from harness.upstream.vllm_eras import VLLM_0_25, VLLM_0_28, keywords_taken
from harness.upstream.vllm_keying import MURMUR3, PHILOX, draft_salt, keying_of


class _Constexpr:
    """What ``tl.constexpr(v)`` holds: its ``value``."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_the_keying_is_read_from_the_gumbel_module() -> None:
    assert keying_of(SimpleNamespace(murmur3_hash32=object())) is MURMUR3  # type: ignore[arg-type]
    assert keying_of(SimpleNamespace()) is PHILOX  # type: ignore[arg-type]
    assert "another function" in MURMUR3.coins and "same Philox block" in PHILOX.coins


def test_the_salt_is_the_modules_and_none_before_0_29() -> None:
    assert draft_salt(SimpleNamespace(_DRAFT_NOISE_SALT=_Constexpr(1 << 30))) == 1 << 30  # type: ignore[arg-type]
    assert draft_salt(SimpleNamespace(_DRAFT_NOISE_SALT=7)) == 7  # type: ignore[arg-type]
    assert draft_salt(SimpleNamespace()) == 0  # type: ignore[arg-type]


def test_a_keyword_the_release_does_not_take_is_left_out() -> None:
    def gumbel_sample(logits: int, *, apply_temperature: bool, use_fp64: bool = False) -> tuple:
        return logits, apply_temperature, use_fp64

    call = keywords_taken(gumbel_sample)
    assert call(1, apply_temperature=True, is_drafting=True) == (1, True, False)
    with pytest.raises(TypeError):
        call(1)  # a keyword it needs is still needed


def test_an_earlier_eras_oracle_cut_is_0_33s_in_its_own_name() -> None:
    cut = VLLM_0_33.oracle_cut
    if cut is None:
        pytest.skip("kernels are compiled here: no cut")
    for convention in (VLLM_0_25, VLLM_0_28):
        own = convention.oracle_cut
        assert own is not None and (own.rows, own.rounds, own.targets) == (
            cut.rows,
            cut.rounds,
            cut.targets,
        )
        assert own.by == cut.by.replace("vllm-0.33", convention.name) != cut.by


# -- the real wheels ------------------------------------------------------------------------
# Each implementation's lossless failures on a small case (row 1 greedy: it draws no
# noise), where the exact key check failed, and the walk count's verdict (drop-in).
_JUDGE = """
import importlib, json
from harness.case import make_case
from harness.pipeline.checks import tier_of
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation
from harness.upstream.dispatch import convention_of
from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies

base = vllm_loader.load_vllm().DSparkSpeculator
module = importlib.import_module(base.__module__)
case = make_case(bs=2, gamma=3, vocab_size=16, hidden_size=16, markov_rank=8,
                 greedy_rows=(False, True), max_bs=3, seed=15)

def keyed(shift, salted):
    class Planted(base):
        def _sample_logits(self, logits, idx_map, sample_pos, step):
            sample = module.gumbel_sample
            def planted(*args, **kwargs):
                args = (*args[:4], args[4] + shift, *args[5:])
                if "is_drafting" in kwargs:
                    kwargs["is_drafting"] = salted
                return sample(*args, **kwargs)
            module.gumbel_sample = planted
            try:
                return super()._sample_logits(logits, idx_map, sample_pos, step)
            finally:
                module.gumbel_sample = sample
    return Planted

class Float64(base):
    def _sample_sequential(self, num_reqs, head_hidden):
        self.use_fp64_gumbel = True
        super()._sample_sequential(num_reqs, head_hidden)

class SecondWalk(base):
    def _sample_sequential(self, num_reqs, head_hidden):
        super()._sample_sequential(num_reqs, head_hidden)
        first = self.draft_tokens[:num_reqs].clone()
        self.seeds += 1
        super()._sample_sequential(num_reqs, head_hidden)
        self.seeds -= 1
        self.draft_tokens[:num_reqs] = first

found = {"convention": convention_of(base).name}
planted = (
    (("unsalted", keyed(0, False)), ("next position", keyed(1, False)))
    if hasattr(base, "_sample_logits") else (("second walk", SecondWalk),)
)
for name, cls in (("release", base), *planted, ("float64", Float64)):
    with libdevice_bodies():
        run = run_case(case, [Implementation(name, cls, "test")])
    checks = evaluate_run(run, require_observable=False).checks[name]
    status = {c.name: c for c in checks}
    noise = status["noise_shared_with_verifier"]
    found[name] = {
        "lossless failures": sorted(
            c.name for c in checks if c.status == "fail" and tier_of(c.name) == "lossless"
        ),
        "key check": [noise.status, [list(p) for p in noise.positions or ()]],
        "single walk": status["single_walk"].status,
    }
print(json.dumps(found))
"""


def _judged(version: str) -> dict[str, object]:
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release

    return json.loads(_in_a_vllm_release(version, _JUDGE).splitlines()[-1])


@pytest.mark.releases
def test_vllm_0_30_keeps_its_draft_keys_off_its_verifiers_and_a_wrong_key_is_caught() -> None:
    found = _judged("0.30.0")
    assert found["convention"] == "vllm-0.28"
    assert found["release"] == {
        "lossless failures": [],
        "key check": ["pass", []],
        "single walk": "pass",
    }
    assert found["float64"] == found["release"]  # another precision, the same keys: apart
    for planted in ("unsalted", "next position"):
        entry = found[planted]
        assert isinstance(entry, dict)
        assert "noise_shared_with_verifier" in entry["lossless failures"], planted
        assert entry["key check"][0] == "fail", planted


@pytest.mark.releases
def test_vllm_0_28_keys_its_draft_draws_as_its_verifier_does() -> None:
    """0.28 has no salt and no drafting flag: every sampled step of row 0 reads the
    (seed, position) pair whose Philox block keys the verifier's coin and residual at
    that position. A defect of the release, found on the release itself."""
    found = _judged("0.28.0")
    assert found["convention"] == "vllm-0.28"
    assert found["release"] == {
        "lossless failures": ["noise_shared_with_verifier"],
        "key check": ["fail", [[0, 0], [0, 1], [0, 2]]],
        "single walk": "pass",
    }


@pytest.mark.releases
def test_vllm_0_25_is_judged_sampling_inline_and_a_second_walk_is_caught() -> None:
    """0.25 samples inline and keeps tempered logits: driven as such, its one lossless
    failure is the key check (no salt, as 0.28), and its walk is counted once; a second
    walk whose cache the verifier would read fails teacher forcing, and is counted."""
    found = _judged("0.25.0")
    assert found["convention"] == "vllm-0.25"
    release = {
        "lossless failures": ["noise_shared_with_verifier"],
        "key check": ["fail", [[0, 0], [0, 1], [0, 2]]],
        "single walk": "pass",
    }
    assert found["release"] == release and found["float64"] == release
    second = found["second walk"]
    assert isinstance(second, dict)
    assert "teacher_forcing" in second["lossless failures"], second
    assert second["single walk"] == "fail"  # the inline walks are counted


# Two rows (T = 0.7 and greedy), two rounds, the far target: every call of the decode
# held to the per-call checks, under each verifier on the release's own plumbing.
_HELD = """
import json
from dataclasses import replace
from harness.defaults import VerifierNoise
from harness.oracles.percall import held_decode
from harness.oracles.problem import DEFAULT_CONFIG, build_problems
from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies
from harness.upstream.vllm_rejection import VLLM_REJECTION
from reference.verifier import CHAIN_VERIFIER

config = replace(DEFAULT_CONFIG, rows=2, rounds=2, m=2, head_kinds=("vanilla",),
                 temperatures=(0.7, 0.0), targets=DEFAULT_CONFIG.targets[:1],
                 restage=False, verifier_noise=VerifierNoise.SHARED)
problem = build_problems(config)[0]
speculator = vllm_loader.load_vllm().DSparkSpeculator
found = {}
for verifier in (VLLM_REJECTION, CHAIN_VERIFIER):
    with libdevice_bodies():
        _, held = held_decode(speculator, problem=problem, head_kind="vanilla", seed=0,
                              verifier=verifier)
    found[verifier.name] = [dict(held.positions), [f.check for f in held.findings]]
print(json.dumps(found))
"""


@pytest.mark.releases
def test_vllm_0_25s_tempered_cache_reads_as_its_logits_before_temperature() -> None:
    """0.25 keeps its cache divided by the temperature: the oracle's calls, held to the
    per-call checks at T = 0.7 under its own verifier (handed the cache as the release
    keeps it) and under chain, find nothing (no false alarm from the tempering)."""
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release

    found = json.loads(_in_a_vllm_release("0.25.0", _HELD).splitlines()[-1])
    for verifier in ("vllm-rejection", "chain"):
        positions, findings = found[verifier]
        assert positions["teacher_forcing"] > 0 and positions["support"] > 0, positions
        assert findings == [], verifier
