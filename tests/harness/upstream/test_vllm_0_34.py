"""vLLM 0.34 judged under its own code (``harness.upstream.vllm_0_34``).

Without the wheel: the drafter's ``markov_step`` carries the case's rnn and gated heads
exactly (the bias of each step is the head's own), and the contract says which cases it
cannot express. On the real wheel (marker ``releases``, a process of its own under
Triton's interpreter): the release passes every lossless check on small cases of each
head and path, its draft keys stay off its verifier's, the dense path fuses the Markov
bias into the Gumbel kernel and the unfused path does not; defects planted into a copy
of the wheel's speculator source (the fused path dropping the bias, the unfused path
adding it twice, ``_markov_step`` dropping the recurrent state, the draft draws keyed
unsalted) are each caught by the check that should catch them; the oracle's calls under
its own ``rejection_sample``, handed the replicated ``DraftLogitsCache``, find nothing.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.case import build_inputs, make_case
from harness.upstream.vllm_0_34 import VLLM_0_34, RecurrentDrafter


@pytest.mark.parametrize("head_kind", ["vanilla", "gated", "rnn"])
def test_markov_step_carries_the_cases_head_exactly(head_kind: str) -> None:
    """Walked through 0.34's hook as its speculator walks it (the state ``None`` at the
    start of a block, then what the hook returned), ``markov_bias`` of each step's
    embedding is the head's own ``step_bias`` on the same tokens: bit for bit."""
    case = make_case(
        bs=3, gamma=4, vocab_size=32, hidden_size=16, markov_rank=8, head_kind=head_kind, seed=4
    )
    toy = build_inputs(case).model
    drafter = RecurrentDrafter(model=toy, confidence_fn=None)
    assert drafter.has_recurrent_markov_head is (head_kind != "vanilla")
    generator = torch.Generator().manual_seed(0)
    prev = torch.randint(0, 32, (3, 4), generator=generator)
    hidden = torch.randn(3, 4, 16, generator=generator)
    head = toy.markov_head
    state, theirs = None, head.initial_state(3, like=hidden)
    for step in range(4):
        if drafter.has_recurrent_markov_head:
            embedding, state = drafter.markov_step(prev[:, step], hidden[:, step], state)
        else:
            embedding = drafter.markov_embed(prev[:, step])
        bias, theirs = head.step_bias(prev[:, step], hidden[:, step], theirs)
        assert torch.equal(drafter.markov_bias(embedding), bias), step


def test_a_markov_step_that_drops_the_state_is_not_the_rnn_head() -> None:
    """The comparison above sees the recurrence: restarting the state at every step
    changes the rnn head's bias from the second step on."""
    case = make_case(
        bs=3, gamma=4, vocab_size=32, hidden_size=16, markov_rank=8, head_kind="rnn", seed=4
    )
    toy = build_inputs(case).model
    drafter = RecurrentDrafter(model=toy, confidence_fn=None)
    generator = torch.Generator().manual_seed(0)
    prev = torch.randint(0, 32, (3, 2), generator=generator)
    hidden = torch.randn(3, 2, 16, generator=generator)
    _, state = drafter.markov_step(prev[:, 0], hidden[:, 0], None)
    carried, _ = drafter.markov_step(prev[:, 1], hidden[:, 1], state)
    dropped, _ = drafter.markov_step(prev[:, 1], hidden[:, 1], None)
    assert not torch.equal(drafter.markov_bias(carried), drafter.markov_bias(dropped))


@pytest.mark.parametrize(
    ("head_kind", "confidence", "outside"),
    [
        ("vanilla", True, None),
        ("gated", False, None),
        ("rnn", False, None),
        ("rnn", True, "reads the rnn head's step embedding"),
        ("gated", True, "reads the gated head's step embedding"),
    ],
)
def test_which_heads_0_34s_contract_carries(
    head_kind: str, confidence: bool, outside: str | None
) -> None:
    """Every head through ``markov_embed`` or ``markov_step``; a confidence head beside a
    gated or rnn head is outside it (the speculator hands it the step's embedding)."""
    case = make_case(
        bs=2,
        gamma=3,
        vocab_size=16,
        hidden_size=16,
        markov_rank=8,
        head_kind=head_kind,
        confidence=confidence,
        seed=1,
    )
    reason = VLLM_0_34.outside_contract(case, sampler_class=object)
    if outside is None:
        assert reason is None
    else:
        assert reason is not None and outside in reason


# -- the real wheel -------------------------------------------------------------------------
# A copy of the wheel's speculator source with one line changed, imported in its place;
# each implementation's lossless failures on small cases of each head and path.
_JUDGE = """
import importlib, importlib.util, json, sys
from harness.case import make_case
from harness.pipeline.checks import tier_of
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation
from harness.upstream.dispatch import convention_of
from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies
from harness.upstream.loaders.vllm_loader import SPECULATOR_MODULE, VllmPath, variant_class

PLANTS = {
    "release": ("", ""),
    "fused path drops the bias": (
        "logits_i, idx_map[:, i], sample_pos[:, i], i, bias\\n",
        "logits_i, idx_map[:, i], sample_pos[:, i], i, None\\n",
    ),
    "unfused path adds the bias twice": (
        "                bias = None\\n            draft_sampled_i",
        "                pass\\n            draft_sampled_i",
    ),
    "markov_step drops the state": (
        "self.model.markov_step(prev, draft_hidden, state)",
        "self.model.markov_step(prev, draft_hidden, None)",
    ),
    "unsalted draft keys": (
        "is_drafting=True,\\n            logits_cache=self.draft_logits.values,\\n"
        "            logits_cache_col=self._step_cols[step],\\n"
        "            use_fp64=self.use_fp64_gumbel,\\n            logits_cache_row_mapping",
        "is_drafting=False,\\n            logits_cache=self.draft_logits.values,\\n"
        "            logits_cache_col=self._step_cols[step],\\n"
        "            use_fp64=self.use_fp64_gumbel,\\n            logits_cache_row_mapping",
    ),
}

def planted(old, new):
    vllm_loader.load_vllm()  # the package's parents imported, its environment kept
    spec = importlib.util.find_spec(SPECULATOR_MODULE)
    source = open(spec.origin).read()
    assert source.count(old) == 1 or not old, old
    module = importlib.util.module_from_spec(spec)
    sys.modules[SPECULATOR_MODULE] = module
    exec(compile(source.replace(old, new), spec.origin, "exec"), module.__dict__)
    vllm_loader.load_vllm.cache_clear()
    variant_class.cache_clear()

found = {}
for name, (old, new) in PLANTS.items():
    planted(old, new)
    found[name] = {}
    for head in ("vanilla", "rnn"):
        case = make_case(bs=2, gamma=3, vocab_size=16, hidden_size=16, markov_rank=8,
                         head_kind=head, greedy_rows=(False, True), max_bs=3, seed=15)
        for path, text in ((VllmPath(), "dense"), (VllmPath(fused_bias=False), "unfused"),
                           (VllmPath(topk=4), "topk=4")):
            fused = []
            def seeing(self, *args):
                fused.append((self._fuse_markov_bias, len(args) > 4 and args[4] is not None))
                return super(cls, self)._sample_logits(*args)
            base = variant_class(path)
            cls = type(base.__name__, (base,), {"_sample_logits": seeing})
            with libdevice_bodies():
                run = run_case(case, [Implementation("v", cls, "test")])
            checks = evaluate_run(run, require_observable=False).checks["v"]
            found[name][f"{head}/{text}"] = {
                "convention": convention_of(cls).name,
                "lossless failures": sorted(
                    c.name for c in checks if c.status == "fail" and tier_of(c.name) == "lossless"
                ),
                "fused": sorted(set(fused)),
            }
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def judged() -> dict[str, dict[str, dict[str, object]]]:
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release

    return json.loads(_in_a_vllm_release("0.34.0", _JUDGE).splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.releases
def test_vllm_0_34_passes_every_lossless_check_on_each_head_and_path(
    judged: dict[str, dict[str, dict[str, object]]],
) -> None:
    release = judged["release"]
    assert set(release) == {
        f"{head}/{path}" for head in ("vanilla", "rnn") for path in ("dense", "unfused", "topk=4")
    }
    for where, entry in release.items():
        assert entry["convention"] == "vllm-0.34", where
        assert entry["lossless failures"] == [], where


@pytest.mark.releases
def test_the_dense_path_fuses_the_bias_into_the_kernel_and_the_unfused_path_does_not(
    judged: dict[str, dict[str, dict[str, object]]],
) -> None:
    """As ``load_model`` sets it for a plain drafter: every sampled step hands the bias
    to the Gumbel kernel; on the unfused path none does (the bias is added before);
    the top-k path gathers it itself and hands none."""
    release = judged["release"]
    for head in ("vanilla", "rnn"):
        assert release[f"{head}/dense"]["fused"] == [[True, True]], head
        assert release[f"{head}/unfused"]["fused"] == [[False, False]], head
        assert release[f"{head}/topk=4"]["fused"] == [[True, False]], head


@pytest.mark.releases
@pytest.mark.parametrize(
    ("plant", "caught_on", "check"),
    [
        ("fused path drops the bias", {"vanilla/dense", "rnn/dense"}, "teacher_forcing"),
        ("unfused path adds the bias twice", {"vanilla/unfused", "rnn/unfused"}, "teacher_forcing"),
        (
            "markov_step drops the state",
            {"rnn/dense", "rnn/unfused", "rnn/topk=4"},
            "teacher_forcing",
        ),
        ("unsalted draft keys", None, "noise_shared_with_verifier"),
    ],
)
def test_a_defect_planted_in_a_copy_of_the_wheel_is_caught_where_it_acts(
    judged: dict[str, dict[str, dict[str, object]]],
    plant: str,
    caught_on: set[str] | None,
    check: str,
) -> None:
    """Each planted defect fails ``check`` on every head and path it acts on (``None``:
    all of them) and leaves the others as the release is: no false alarm."""
    release = judged["release"]
    for where, entry in judged[plant].items():
        failures = entry["lossless failures"]
        if caught_on is None or where in caught_on:
            assert isinstance(failures, list) and check in failures, (plant, where, failures)
        else:
            assert failures == release[where]["lossless failures"], (plant, where)


_ROW = """
import json
from harness.releases.sweep import ReleaseTask, judge_release
from harness.upstream.releases.wheels import DEFAULT_CACHE
print(json.dumps(judge_release(ReleaseTask("vllm", "0.34.0", str(DEFAULT_CACHE), offline=True))))
"""


@pytest.mark.releases
def test_vllm_0_34s_row_is_judged_lossless_and_says_what_it_leaves_out() -> None:
    """The release's row at its era's depth (several minutes under the interpreter):
    judged under its own verifier and chain on its own plumbing, lossless, no finding;
    its oracle on the vanilla head only, and the row names what 0.34 ships that it does
    not run."""
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release

    row = json.loads(_in_a_vllm_release("0.34.0", _ROW).splitlines()[-1])
    assert (row["era"], row["judged"], row["lossless"], row["findings"]) == (
        "vllm-0.34",
        True,
        True,
        [],
    )
    plumbing = "shared: vLLM 0.34.0's plumbing"
    assert row["randomness"] == {"vllm-rejection": plumbing, "chain": plumbing}
    said = "\n".join(row["not_covered"])
    for line in (
        "the oracle on the gated and rnn heads",
        "the unfused path with the full draft vocabulary",
        "_sample_sequential_sharded: it runs only under tensor parallelism",
        "load_model: not called",
        "the vanilla head only",
    ):
        assert line in said, line


@pytest.mark.releases
def test_vllm_0_34s_verifier_reads_the_replicated_cache_and_finds_nothing() -> None:
    """The oracle's calls of 0.34's speculator (fused path, vanilla head), held to the
    per-call checks under its own ``rejection_sample``, which reads the replicated
    ``DraftLogitsCache`` as the model runner hands it, and under chain: nothing found."""
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release
    from tests.harness.upstream.test_vllm_eras import _HELD

    found = json.loads(_in_a_vllm_release("0.34.0", _HELD).splitlines()[-1])
    for verifier in ("vllm-rejection", "chain"):
        positions, findings = found[verifier]
        assert positions["teacher_forcing"] > 0 and positions["support"] > 0, positions
        assert findings == [], verifier


_LIFE = """
import json
from harness.releases.sweep import ReleaseTask, judge_release
from harness.upstream.releases.wheels import DEFAULT_CACHE
task = ReleaseTask("vllm", "0.34.0", str(DEFAULT_CACHE), offline=True, life_only=True)
print(json.dumps(judge_release(task)))
"""


@pytest.mark.releases
def test_vllm_0_34s_life_keeps_its_draft_logits_in_its_own_cache_and_passes() -> None:
    """0.34's life across the junction: its server keeps the draft logits inside the
    package's own ``DraftLogitsCache`` (the form its ``rejection_sample`` reads; a bare
    tensor fails there), every state runs and nothing is found."""
    from tests.harness.upstream.test_releases_real import _in_a_vllm_release

    row = json.loads(_in_a_vllm_release("0.34.0", _LIFE).splitlines()[-1])
    assert (row["judged"], row["lossless"], row["findings"]) == (True, True, []), row
    life = row["life"]
    assert life is not None and set(life["states"]) == {
        "steady",
        "joining",
        "reused slot",
        "resumed",
    }, life
