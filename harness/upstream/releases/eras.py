"""The contracts the DSpark releases ship, as data: one ``ReleaseEra`` per era.

Read from the wheels themselves (``pip download --no-deps``; docs/releases.md has the
table in words). Each era says once where its sampler lives in the wheel, its
constructor, how the server stages parameters, where its noise comes from, what it
writes, which of the harness's verifiers is its own server's, how the harness loads it
(``Loading``), the light dependencies its modules import, the convention object that
builds and reads its samplers and which sampler classes speak it (``ConventionRef``),
and the plug-in era whose ``sglang`` its files import. ``ERAS`` is the one registry of
server eras: the release sweep, the versions table, ``convention_of``
(``harness.upstream.dispatch``) and every test and doc check that enumerates eras read
it. A new patch release of a known era is one more version in ``versions``; a new
contract is one more value here (and, where its calling convention is new, one module
that holds it; docs/releases.md, "Adding a contract"); a version in no era, or whose
files do not fit its era's contract (``contract_differences``), is not judged:
"unknown contract", with what differs.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass, replace
from pathlib import Path

from harness.upstream.releases.era_laws import DFLASH_LAWS, SPECULATIVE_LAWS, VLLM_LAWS
from harness.upstream.releases.era_parts import ConventionRef, OracleDepth, ServerLaws
from harness.upstream.releases.wheels import version_key


class Loading(enum.Enum):
    """How the harness loads an era's sampler from the extracted wheel."""

    # The sampler module itself, as a file plug-in: its few ``sglang`` imports get the
    # bug era's surface (docs/plugins.md), its own code runs unchanged.
    SERVER_FILE = "server-file"
    # The DSpark modules through the sglang loader, with the era's stand-ins.
    SGLANG_PACKAGE = "sglang-package"
    # The whole package imported from the extracted folder (vLLM's own imports).
    VLLM_PACKAGE = "vllm-package"
    # sglang 0.5.16: the wheel's dspark_draft.py under the bug era's surface and the
    # worker's names as stand-ins; its folded sampler and eager block driven as its
    # proposer drives them (harness.upstream.sglang_0_5_16)
    SGLANG_0_5_16 = "sglang-0.5.16"
    NONE = "none"  # the harness has no convention for this contract


class PluginEra(enum.Enum):
    """The server eras a plug-in module can be built for (``--impl FILE@ERA``,
    ``harness.plugins.eras``): the ``sglang`` its imports get while it loads. Each but
    ``INSTALLED`` is the ``plugin_era`` of the release eras whose files import it."""

    # the bug era's server (the PR's before/after-fix modules), through the harness's
    # surface (``harness.plugins.sglang_surface``) mapped onto ``reference``
    PR36934 = "pr36934"
    SGLANG_0_5_23 = "sglang-0.5.23"  # the released package's own DSpark modules
    INSTALLED = "installed"  # whatever ``import sglang`` finds, as it is (only when named)


@dataclass(frozen=True)
class ReleaseEra:
    """One contract and the released versions that ship it."""

    name: str
    package: str
    versions: tuple[str, ...]
    sampler_file: str  # the sampler's module, inside the wheel
    sampler_class: str
    constructor: tuple[str, ...]  # the keywords every version of the era takes
    later_keywords: tuple[str, ...]  # keywords a later version of the era adds
    methods: tuple[str, ...]  # the methods the harness relies on
    staging: str
    noise: str
    outputs: str
    verifier: str | None  # the harness's verifier that is this server's own; None: chain
    loading: Loading
    light_deps: str  # the requirements file of what its modules import (beyond torch)
    members: tuple[str, ...]  # the wheel's folders the loader reads
    variants: tuple[str, ...] = ("",)  # vLLM: "dense", "topk=4"
    layouts: tuple[str, ...] = ("anchor", "no-anchor")  # the query layouts it serves
    not_covered: tuple[str, ...] = ()  # what of the release the judgement does not run
    why_not_judged: str = ""  # Loading.NONE: why
    # the Triton kernels its sampling runs, read for libdevice calls under the interpreter
    kernel_files: tuple[str, ...] = ()
    # the convention that builds and reads its samplers; None: the constructor says
    # (ours and the PR-era server's, ``harness.plugins.conventions``), or the harness has
    # none yet (``Loading.NONE``, ``why_not_judged``)
    convention: ConventionRef | None = None
    # the plug-in era whose ``sglang`` its files import; None: its files import no sglang
    plugin_era: PluginEra | None = None
    # the statistical oracle's depth on its row where its kernels run under Triton's
    # interpreter; None: its convention's own cut
    oracle_depth: OracleDepth | None = None
    # judged rows a request state of its life across the junction asks for where its
    # drafter runs under Triton's interpreter; None: the full depth
    # (harness.releases.life, docs/releases.md)
    life_rows: int | None = None
    # its server's two laws of a request, held against each other on its row; None: the
    # harness reads no such pair from its wheel
    laws: ServerLaws | None = None

    @property
    def first(self) -> str:
        return self.versions[0]

    @property
    def last(self) -> str:
        return self.versions[-1]


_SERVER_FILE = "sglang/srt/speculative/dspark_components/dspark_draft_sampler.py"
# What of sglang 0.5.16-0.5.21 still stands in: their sampler, step kernel, Markov heads
# and flags are the wheel's own (harness.upstream.sglang_wheel).
_STEP_KERNEL_ON_CUDA = (
    "the Triton kernel of its step sampler (SampleStepTokens.triton): CUDA only; on a CPU "
    "the wheel's own SampleStepTokens.execute runs its torch path, which is judged"
)
_FUSED_GREEDY_ON_CUDA = (
    "the vanilla head's fused greedy walk (sample_block_greedy_fused over MarkovGreedyStep's "
    "Triton kernel): CUDA only; off CUDA the wheel's head returns None and the sampler "
    "walks the head step by step, which is judged"
)
_CONFIDENCE_STANDS_IN = (
    "the confidence function the sampler is handed: its server's planner's; the case's "
    "linear probe stands in"
)
_PR_STAGING = "stage_sampling_params: temperatures clamped >= 1e-5, greedy_mask = top_k <= 1"
_PR_OUTPUTS = "out[: bs*gamma]; corrected_out (the kept step logits); confidence_out"

_PR_SERVER_ERA = ReleaseEra(
    name="sglang-0.5.17-0.5.18",
    package="sglang",
    versions=("0.5.17", "0.5.18"),
    sampler_file=_SERVER_FILE,
    sampler_class="DsparkDraftSampler",
    constructor=(
        "model",
        "gamma",
        "max_bs",
        "device",
        "confidence_fn",
        "out",
        "folded_sampling",
    ),
    later_keywords=(),
    methods=("stage_sampling_params", "__call__"),
    staging=_PR_STAGING,
    noise="torch's generator: exp_noise.exponential_() in the graph, one sample_block",
    outputs=_PR_OUTPUTS,
    verifier=None,
    loading=Loading.SERVER_FILE,
    light_deps="requirements/sglang-dspark.txt",
    members=("sglang/",),
    plugin_era=PluginEra.PR36934,
    laws=DFLASH_LAWS,
    # the wheel's own step kernel, heads and flags (a wheel holding only the sampler
    # file is a file plug-in under the bug era's surface, and its row says so)
    convention=ConventionRef(
        "harness.upstream.sglang_wheel.SGLANG_WHEEL",
        speaks="harness.upstream.sglang_wheel.speaks_sglang_wheel",
    ),
    layouts=("anchor",),  # the sampler has no sample_from_anchor: gamma rows a request
    not_covered=(
        _STEP_KERNEL_ON_CUDA,
        _CONFIDENCE_STANDS_IN,
        "its server's verifier: the harness has none",
    ),
)

# A vLLM row's oracle under Triton's interpreter: what its paths' decodes under both
# verifiers fit in a row of 3 minutes on a 2-core machine, spent where vLLM's double walk
# shows (the far target, rounds before rows: docs/releases.md, "A vLLM row's depth").
VLLM_ROW_DEPTH = OracleDepth(rows=200, targets=("far",), rounds=12)
# A vLLM row's life: what two lives of its drafter, its model runner's batch building
# and its verifier, all under Triton's interpreter, fit in ~17 s of CPU.
VLLM_LIFE_ROWS = 40

_VLLM_ERA = ReleaseEra(
    name="vllm-0.25-0.27",
    package="vllm",
    versions=("0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1"),
    sampler_file="vllm/v1/worker/gpu/spec_decode/dspark/speculator.py",
    sampler_class="DSparkSpeculator",
    constructor=("vllm_config", "device"),
    later_keywords=(),
    methods=("load_draft_model", "_sample_sequential", "_generate_draft"),
    staging="per request: temperature, seed, positions",
    noise=(
        "Gumbel from Triton's Philox: tl.rand of each token under the key "
        "tl.randint(request seed, position), no salt (the verifier's own keys)"
    ),
    outputs=(
        "draft tokens; the draft logits cache (output_processed_logits), temperature "
        "applied, written by the sampling call"
    ),
    verifier="vllm-rejection",
    loading=Loading.VLLM_PACKAGE,
    convention=ConventionRef(
        "harness.upstream.vllm_eras.VLLM_0_25",
        speaks="harness.upstream.vllm_eras.speaks_vllm_0_25",
    ),
    # 0.33's pins serve 0.25-0.27 too: its speculator, Gumbel sampler and rejection
    # sampler import with them (tests/harness/upstream/test_releases_real.py)
    light_deps="requirements/vllm-0.33.txt",
    members=("vllm/",),
    variants=("dense",),
    kernel_files=("vllm/v1/worker/gpu/sample/gumbel.py",),
    oracle_depth=VLLM_ROW_DEPTH,
    life_rows=VLLM_LIFE_ROWS,
    laws=VLLM_LAWS,
)

_VLLM_0_31_ERA = replace(
    _VLLM_ERA,
    name="vllm-0.31-0.33",
    convention=ConventionRef(
        "harness.upstream.vllm_convention.VLLM_0_33",
        speaks="harness.upstream.vllm_eras.speaks_vllm_0_31",
    ),
    versions=("0.31.0", "0.32.0", "0.33.0"),
    methods=(
        "load_draft_model",
        "_sample_logits",
        "_sample_sequential",
        "_sample_sequential_topk",
        "_generate_draft",
    ),
    staging="per request: temperature, seed, positions; top-k",
    noise=(
        "Gumbel from murmur3_hash32 of the request's seed (0.33: the step mixed in, "
        "spec_step_seed) and the position salted with _DRAFT_NOISE_SALT"
    ),
    variants=("dense", "topk=4"),
)

ERAS: tuple[ReleaseEra, ...] = (
    ReleaseEra(
        name="sglang-0.5.16",
        package="sglang",
        versions=("0.5.16",),
        sampler_file="sglang/srt/speculative/dspark_components/dspark_draft.py",
        sampler_class="DsparkDraftSampler",
        constructor=("model", "gamma", "max_bs", "device", "confidence_fn", "out"),
        later_keywords=(),
        methods=("__call__",),
        staging=(
            "none in the sampler: the proposer hands each call the batch's sampling state "
            "(greedy_mask = top_k <= 1, temperatures clamped >= 1e-5)"
        ),
        noise=(
            "an all-greedy batch: the folded sampler's argmax walk, no noise; any other "
            "batch: the module's sample_draft_block, exponential_ noise per step"
        ),
        outputs=(
            "folded: out[: bs*gamma], confidence_out; eager: the returned block (tokens, "
            "corrected_logits, greedy_mask, temperatures)"
        ),
        verifier=None,
        loading=Loading.SGLANG_0_5_16,
        convention=ConventionRef(
            "harness.upstream.sglang_0_5_16.SGLANG_0_5_16",
            speaks="harness.upstream.sglang_0_5_16.speaks_sglang_0_5_16",
        ),
        plugin_era=PluginEra.PR36934,  # the wheel's file sees the bug era's surface
        laws=DFLASH_LAWS,
        light_deps="requirements/sglang-dspark.txt",
        members=("sglang/",),
        layouts=("anchor",),  # the sampler takes gamma query rows a request, anchor first
        not_covered=(
            _STEP_KERNEL_ON_CUDA,
            "the eager path's multinomial branch (SGLANG_DSPARK_FAST_SAMPLING=0): not run",
            "the proposer's draft forward pass: the case's hidden states stand in; the "
            "folded path is taken whenever the batch is all greedy (the draft graph runs)",
            _CONFIDENCE_STANDS_IN,
            "its server's verifier: the harness has none (chain)",
        ),
    ),
    _PR_SERVER_ERA,
    replace(  # 0.5.19 adds tp_sync to the constructor and serves both query layouts
        _PR_SERVER_ERA,
        name="sglang-0.5.19-0.5.21",
        versions=("0.5.19", "0.5.20", "0.5.21"),
        constructor=(
            "model",
            "gamma",
            "max_bs",
            "device",
            "tp_sync",
            "confidence_fn",
            "out",
            "folded_sampling",
        ),
        layouts=("anchor", "no-anchor"),
        not_covered=(_FUSED_GREEDY_ON_CUDA, *_PR_SERVER_ERA.not_covered),
    ),
    ReleaseEra(
        name="sglang-0.5.22-0.5.23",
        package="sglang",
        versions=("0.5.22", "0.5.23"),
        sampler_file=_SERVER_FILE,
        sampler_class="DsparkDraftSampler",
        constructor=(
            "model",
            "gamma",
            "max_bs",
            "device",
            "noise",
            "tp_sync",
            "greedy_draft",
            "out",
        ),
        later_keywords=("megakernel_sampler",),
        methods=("stage_sampling_params", "__call__"),
        staging="DraftParams: temperatures >= 1e-5, greedy_mask = top_k <= 1",
        noise="counter-based Philox: DraftNoise(key, offset), the offset advanced per block",
        outputs="out[: bs*gamma]; step_logits; confidence_out; verify_ids (0.5.23)",
        verifier="sglang-blockwise",
        loading=Loading.SGLANG_PACKAGE,
        convention=ConventionRef(
            "harness.upstream.sglang_convention.SGLANG_0_5_23",
            speaks="harness.upstream.loaders.sglang_loader.speaks_sglang_0_5_23",
        ),
        plugin_era=PluginEra.SGLANG_0_5_23,
        laws=SPECULATIVE_LAWS,
        light_deps="requirements/sglang-dspark.txt",
        members=("sglang/",),
        not_covered=("the megakernel path (NVIDIA only)",),
    ),
    _VLLM_ERA,
    replace(  # 0.28 adds the top-k path, which later releases keep
        _VLLM_0_31_ERA,
        name="vllm-0.28-0.30",
        versions=("0.28.0", "0.29.0", "0.30.0"),
        convention=ConventionRef(
            "harness.upstream.vllm_eras.VLLM_0_28",
            speaks="harness.upstream.vllm_eras.speaks_vllm_0_28",
        ),
        noise=(
            "Gumbel from Triton's Philox: tl.rand of each token under the key "
            "tl.randint(request seed, position), the position salted with "
            "_DRAFT_NOISE_SALT from 0.29 (0.28: no salt, the verifier's own keys)"
        ),
    ),
    _VLLM_0_31_ERA,
    replace(  # the DraftLogitsCache, the fused bias, recurrent heads (docs/releases.md)
        _VLLM_0_31_ERA,
        name="vllm-0.34",
        versions=("0.34.0",),
        convention=ConventionRef(
            "harness.upstream.vllm_0_34.VLLM_0_34",
            speaks="harness.upstream.vllm_0_34.speaks_vllm_0_34",
        ),
        methods=(
            *_VLLM_0_31_ERA.methods,
            "load_model",
            "_markov_step",
            "_sample_markov_chain",
            "_sample_sequential_sharded",
        ),
        staging=(
            "per request: temperature, seed, positions; top-k; the draft logits cache a "
            "DraftLogitsCache, replicated (row_mapping None) in one process"
        ),
        outputs=(
            "draft tokens; DraftLogitsCache.values written by the sampling call, the "
            "Markov bias fused into the Gumbel kernel where load_model allows it"
        ),
        variants=("dense", "topk=4"),
        # the oracle on the vanilla head, as 0.31-0.33's rows: the gated and rnn heads,
        # inside 0.34's contract, are judged by the per-call checks (not_covered)
        oracle_depth=replace(VLLM_ROW_DEPTH, heads=("vanilla",)),
        not_covered=(
            "the oracle on the gated and rnn heads (inside 0.34's contract through "
            "markov_step): not run at the row's depth, each head would add its paths' "
            "oracle time; their cases are held to the per-call checks",
            "the unfused path with the full draft vocabulary (vllm:unfused, "
            "_fuse_markov_bias off): not a path of the row (it would add half a row's "
            "oracle time); the cases with a reduced draft vocabulary run it, as "
            "load_model leaves it off there",
            "_sample_sequential_sharded: it runs only under tensor parallelism "
            "(load_model enables it where the cache is sharded); one process has none",
            "load_model: not called (it loads a real model); _fuse_markov_bias is set as "
            "it sets it for the case's drafter (on for a plain drafter, off for a reduced "
            "draft vocabulary); the drafter declares has_recurrent_markov_head for the "
            "gated and rnn heads, whose markov_step the case's head stands in for",
        ),
    ),
)

FIRST_WITH_DSPARK = {"sglang": "0.5.16", "vllm": "0.25.0"}


def known_versions(package: str) -> tuple[str, ...]:
    """Every version the era table lists for ``package``, oldest first."""
    found = [v for era in ERAS if era.package == package for v in era.versions]
    return tuple(sorted(found, key=version_key))


def era_of(package: str, version: str) -> ReleaseEra | None:
    """The era whose versions list ``version`` (``None``: no era does)."""
    return next((era for era in ERAS if era.package == package and version in era.versions), None)


def nearest_era(package: str, version: str) -> ReleaseEra:
    """The latest era of ``package`` released at or before ``version`` (else its first)."""
    eras = [era for era in ERAS if era.package == package]
    earlier = [e for e in eras if version_key(e.first) <= version_key(version)]
    return (earlier or eras)[-1]


@dataclass(frozen=True)
class SamplerShape:
    """What a release's sampler file says of its class: constructor keywords, methods."""

    keywords: tuple[str, ...]
    methods: tuple[str, ...]


def read_shape(path: Path, *, class_name: str) -> SamplerShape | None:
    """The class's constructor parameters and methods, read (never run) from the file;
    ``None``: the file or the class is absent."""
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
            init = next((m for m in methods if m.name == "__init__"), None)
            keywords: list[str] = []
            if init is not None:
                keywords = [a.arg for a in [*init.args.args[1:], *init.args.kwonlyargs]]
            return SamplerShape(tuple(keywords), tuple(m.name for m in methods))
    return None


def contract_differences(era: ReleaseEra, *, files: Path) -> list[str]:
    """How the sampler in the extracted ``files`` differs from the era's contract (empty:
    it fits)."""
    shape = read_shape(files / era.sampler_file, class_name=era.sampler_class)
    if shape is None:
        return [f"no class {era.sampler_class} in {era.sampler_file}"]
    missing = [k for k in era.constructor if k not in shape.keywords]
    extra = [k for k in shape.keywords if k not in era.constructor and k not in era.later_keywords]
    lacking = [m for m in era.methods if m not in shape.methods]
    differences = []
    if missing:
        differences.append(f"constructor lacks {', '.join(missing)}")
    if extra:
        differences.append(f"constructor adds {', '.join(extra)}")
    if lacking:
        differences.append(f"{era.sampler_class} lacks {', '.join(lacking)}")
    return differences


# A libdevice call in a kernel: ``tldevice.log1p(...)``, ``libdevice.isnan(...)``.
_LIBDEVICE_CALL = re.compile(r"\b(?:tldevice|libdevice)\.(\w+)\(")


def libdevice_calls(era: ReleaseEra, *, files: Path) -> list[str]:
    """The libdevice calls in the code of the era's kernel files (``file:line calls
    name``), comments left out. Triton's interpreter does not run libdevice: there such
    a call gives ``None`` and the kernel raises, which says nothing of the release."""
    found = []
    for name in era.kernel_files:
        lines = (files / name).read_text().splitlines()
        for number, line in enumerate(lines, 1):
            code = line.split("#", 1)[0]
            calls = _LIBDEVICE_CALL.finditer(code)
            found += [f"{name}:{number} calls {call.group(0)[:-1]}" for call in calls]
    return found


def unknown_contract(package: str, version: str, *, files: Path | None) -> str:
    """Why a version that no era lists is not judged: its files against the nearest era."""
    era = nearest_era(package, version)
    if files is None:
        return f"{package} {version} is in no era of the table (nearest: {era.name})"
    differences = contract_differences(era, files=files)
    shape = read_shape(files / era.sampler_file, class_name=era.sampler_class)
    if shape is not None:
        known = set(era.methods) | {"__init__"}
        new = [m for m in shape.methods if m not in known and not m.startswith("__")]
        differences += [f"{era.sampler_class} also has {', '.join(new)}"] if new else []
    said = "; ".join(differences) or "its sampler's signature fits, its behaviour is unread"
    return f"{package} {version} is in no era of the table; against {era.name}: {said}"
