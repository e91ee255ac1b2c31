"""Command line: ``python -m harness [COMMAND] [options]``.

Commands, each in its own module of this package with ``add_arguments(parser)``,
``command(args) -> ExitCode`` and, where it has options of its own to refuse before any
work, ``validate(args)`` (run after the shared options' checks of
``harness.cli.validate``): ``report`` (the default: the standard matrix, the
statistical oracle and the eliminated work), ``compare``, ``repro``, ``stats``,
``scan``, ``words``, ``versions``, ``releases``, ``work``, ``sweep``, ``graphs``,
``gpu-figures``, each declared once in ``COMMAND_TABLE`` (its module, its help's
description and examples, what it writes in ``--out-dir``). Every command ends
through ``harness.cli.emit`` and returns an ``ExitCode`` (``harness.cli.exit_codes``):
0 when every expectation holds, 1 when any fails, 2 on bad usage or bad input (an
unknown command included).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import signal
import sys
import textwrap
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness.cli.emit import UsageError, usage_error
from harness.cli.exit_codes import ExitCode
from harness.cli.names import did_you_mean
from harness.interrupts import StopRequested, stop_on_signals
from harness.io.files import JournalError, OutputWriteError
from harness.io.lock import OutDirBusy, claim_out_dir
from harness.options import DEFAULT_OPTIONS, RolesError
from harness.pipeline.memory import MemoryLimitError
from harness.plugins.errors import ImplementationError
from harness.upstream.releases.eras import FIRST_WITH_DSPARK


@dataclass(frozen=True)
class CommandSpec:
    """One command: the module that owns it (under ``harness.cli``), its line in
    ``python -m harness --help``, what its own ``--help`` opens with (a description and
    examples that parse), what it writes in ``--out-dir`` (a command that writes nothing
    there does not claim the folder, so it runs beside a run that holds it), and whether
    its implementations' calls honour ``--time-limit``."""

    module: str
    summary: str
    description: str
    examples: tuple[str, ...]
    out_dir: str  # the help of --out-dir: what lands there
    time_limited: bool = False
    writes_out_dir: bool = True


COMMAND_TABLE: dict[str, CommandSpec] = {
    "report": CommandSpec(
        module="report",
        summary="the main job (default): matrix, stats, work",
        description="The main job, and the command run when none is named: the standard "
        "matrix for reference, fixed and legacy (and every --impl), each implementation's "
        "lossless and drop-in verdicts with the statistical oracle in them, the divergence "
        "ledger between the pair (--pair, default legacy,fixed) and the work the fix "
        "eliminates; the verdict first. Exit 0 when every expectation holds, 1 when any "
        "fails, 2 on bad usage.",
        examples=(
            "python -m harness report --seed 7 --json",
            "python -m harness report --impl mine=my_sampler.py --require lossless",
        ),
        out_dir="folder for report.{json,md,txt}, report-power.png and report.cases.jsonl",
        time_limited=True,
    ),
    "compare": CommandSpec(
        module="compare",
        summary="chosen cases and implementations side by side",
        description="Chosen cases (--case FILE, default the standard matrix) and "
        "implementations (--only, --impl) side by side: the per-call checks and the ledger "
        "on each case, and every lossless verdict with the statistical oracle in it, as in "
        "report (--no-stats: checks only). Exit 0 when every expectation holds, 1 when any "
        "fails, 2 on bad usage.",
        examples=(
            "python -m harness compare --only reference,fixed --impl mine=my_sampler.py",
            "python -m harness compare --case case.json --no-stats",
        ),
        out_dir="folder for compare.{json,md,txt} and compare.cases.jsonl",
        time_limited=True,
    ),
    "repro": CommandSpec(
        module="repro",
        summary="write the smallest failing case, or replay one",
        description="With --out FILE: find the smallest failing case of the standard matrix "
        "for one implementation (--target, default the one --impl names, else legacy; a "
        "failure of --check NAME when given), shrink it and write it to FILE (exit 1; 0 "
        "when no case fails). With FILE: replay it with its recorded implementation, or "
        "the one --impl names, and say whether the result is identical; exit 0 when the "
        "implementation now passes. It prints its result and writes only the --out FILE.",
        examples=(
            "python -m harness repro --out legacy.json",
            "python -m harness repro legacy.json",
            "python -m harness repro --impl mine=my_sampler.py --out mine.json",
        ),
        out_dir="not written: repro writes only its --out FILE",
        writes_out_dir=False,
        time_limited=True,
    ),
    "stats": CommandSpec(
        module="stats",
        summary="statistical losslessness oracle",
        description="The statistical losslessness oracle on its own: every head kind and "
        "temperature group decoded against exactly known targets, every committed position "
        "tested at the family-wise level --alpha. Exit 0 when the pair's buggy side "
        "(--pair, default legacy) and every --expect-fail name are rejected and every "
        "other implementation (fixed and each --impl) passes, under every verifier "
        "--verifiers names (default chain); 1 otherwise; 2 on bad usage.",
        examples=(
            "python -m harness stats --power",
            "python -m harness stats --impl mine=my_sampler.py --verifiers chain,sglang-blockwise",
        ),
        out_dir="folder for stats.{json,md,txt} and, with --power, stats-power.png",
        time_limited=True,
    ),
    "scan": CommandSpec(
        module="scan",
        summary="support scan over many (row, step, counter) triples, NaN/inf rule",
        description="The support scan: every implementation (--only, default fixed, plus "
        "each --impl) over --triples (row, step, counter) triples per point, at every head "
        "kind x dtype x row pattern, on degenerate rows where exactly one token may be "
        "drafted; then each on NaN and +-inf rows under the documented rule "
        "(docs/numerics.md). A draft outside the support is a lossless failure, its first "
        "hit written for repro FILE to replay. Exit 0 when no implementation hits (or every "
        "one that hits is named with --expect-fail), 1 otherwise, 2 on bad usage.",
        examples=(
            "python -m harness scan --triples 65536",
            "python -m harness scan --impl sglang=sglang --expect-fail sglang",
        ),
        out_dir="folder for scan.{json,md,txt} and scan-repro-NAME.json per implementation "
        "that hits",
    ),
    "words": CommandSpec(
        module="words",
        summary="each server's word-to-noise conversion on every 32-bit word",
        description="Each installed server's word-to-noise conversions (sglang 0.5.23's "
        "draft Gumbel, accept coin and residual draw; vLLM 0.33's Gumbel draw and accept "
        "coin), each read from the package, run on every 32-bit word (or the words of "
        "--words-range): the words whose uniform is 0 or 1 and whose noise is +inf, -inf "
        "or NaN, each with its exact probability per draw (count / 2^32), the extreme "
        "finite noise and the seconds. Exit 0 when no conversion gives a non-finite noise "
        "value (a guarded uniform at 0 or 1 is reported, not a failure), 1 when one does, "
        "2 on bad usage or when no server named loads here.",
        examples=(
            "python -m harness words --servers sglang",
            "python -m harness words --words-range 4294967040:4294967296 --json",
        ),
        out_dir="folder for words.{json,md,txt}",
    ),
    "versions": CommandSpec(
        module="versions",
        summary="before-fix, after-fix, sglang 0.5.23 and (where installed) vLLM 0.33 side by side",
        description="The before-fix module, the after-fix module, the installed sglang "
        "0.5.23 and, where the vllm package loads, vLLM 0.33's dense and top-k speculators "
        "side by side, measured in one run: lossless and drop-in with why, walks, torch "
        "random-number launches and counter advances per call, the A/B time per call "
        "against fixed, the statistical verdicts under both verifiers, and the findings. "
        "Needs the sglang package (exit 2 with one line without it); without vllm, one "
        "line says why its rows are absent. Exit 0 when the before-fix module is not "
        "lossless and the after-fix module is; 1 otherwise.",
        examples=("python -m harness versions --scan-triples 4096 --repeats 3",),
        out_dir="folder for versions.{json,md,txt}",
    ),
    "releases": CommandSpec(
        module="releases",
        summary="every released sglang and vLLM DSpark sampler, judged from its wheel",
        description="Every released DSpark sampler (sglang "
        f"{FIRST_WITH_DSPARK['sglang']} and later, vLLM {FIRST_WITH_DSPARK['vllm']} "
        "and later), each fetched as a wheel without dependencies into a cache, loaded "
        "unchanged under its own era's contract and judged in a process of its own: the "
        "checks on the standard matrix and the statistical oracle under its own server's "
        "verifier (chain where the harness has none, said so), the support scan, its life "
        "across the junction and its verify target against its own "
        "sampler's law. A release the harness cannot judge says why (unknown contract, "
        "not fetched, missing light dependencies). Then the advisory: per defect class, "
        "the affected releases (first, last), the first fixed, each class's first "
        "evidence and the command that replays it. As an audit tool exits: 1 when a "
        "judged release is not lossless (--exit-zero: 0, a sweep that only reports), when "
        "nothing could be judged or a release's task gave no answer; 0 otherwise; 2 on "
        "bad usage.",
        examples=(
            "python -m harness releases --sglang 0.5.19,0.5.21-0.5.23 --vllm none",
            "python -m harness releases --all --jobs 2 --resume",
            "python -m harness releases --sglang none --vllm none --impl up=dspark_sampler.py",
        ),
        out_dir="folder for releases.{json,md,txt} and releases-journal.jsonl",
    ),
    "work": CommandSpec(
        module="work",
        summary="work the fix eliminates (counters, model, --timing)",
        description="The work the fix eliminates: walks and the other counted work per "
        "call, against the work model for the built-ins and counted only for --impl "
        "plug-ins, and the surplus of the pair's buggy side over its fixed side (--pair, "
        "default legacy,fixed), which must be exactly one walk. --timing adds the pair's "
        "A/B time ratio (and callgrind instruction counts where valgrind exists).",
        examples=("python -m harness work --timing --repeats 3",),
        out_dir="folder for work.{json,md,txt}",
    ),
    "sweep": CommandSpec(
        module="sweep",
        summary="scaling sweep over bs, gamma and V",
        description="The scaling sweep: the pair (--pair, default legacy,fixed; either may "
        "be an --impl) timed at every point of a grid over bs, gamma and V, each point kept "
        "as it finishes, so an interrupted sweep resumes. Writes the points (JSON lines), "
        "CSV, JSON and a PNG plot under --out. On the default grid, exit 1 when the fixed "
        "sampler's walk-only scaling exponent is out of its range.",
        examples=(
            "python -m harness sweep --quick",
            "python -m harness sweep --bs 8,64 --gamma 4 --vocab 32768,131072",
        ),
        out_dir="folder for sweep.{json,md,txt} and, unless --out, sweep/",
    ),
    "graphs": CommandSpec(
        module="graphs",
        summary="CUDA-graph capture and replay checks, and the no-host-sync check (CUDA)",
        description="CUDA only: every case (--case FILE, default the standard matrix) "
        "captured in a CUDA graph and replayed --replays times on new inputs, each replay "
        "held to the checks and the ledger; every graph must redraw its noise, and no "
        "implementation but legacy may synchronise with the host in __call__. Exit 2 "
        "without a CUDA device.",
        examples=("python -m harness graphs --device cuda --replays 3",),
        out_dir="folder for graphs.{json,md,txt}",
    ),
    "gpu-figures": CommandSpec(
        module="gpu_figures",
        summary="GPU timing ratios and the step kernel's bandwidth (CUDA)",
        description="CUDA only: the legacy/fixed time ratio by CUDA events at one "
        "production-like shape, and the step kernel's achieved bandwidth against the "
        "device's (a 1 GiB copy). Exit 2 without a CUDA device.",
        examples=("python -m harness gpu-figures --device cuda --dtype bfloat16",),
        out_dir="folder for gpu-figures.{json,md,txt}",
    ),
}
COMMANDS = tuple(COMMAND_TABLE)
# bad usage or bad input (exit 2), importable without torch; CaseError is matched after
BAD_INPUT = (
    UsageError,
    ImplementationError,
    JournalError,
    RolesError,
    OutDirBusy,
    MemoryLimitError,
    OutputWriteError,
)


def command_module(name: str) -> Any:
    """The module that owns a command (``add_arguments`` and ``command``)."""
    return importlib.import_module(f"harness.cli.{COMMAND_TABLE[name].module}")


class CommandLineParser(argparse.ArgumentParser):
    """argparse, saying bad usage in one line (``error: ...``, as every other refusal of
    the command line) and offering the closest choice to a mistyped one."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE, f"error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's one check of ``choices``, here with the closest choice named
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            raise argparse.ArgumentError(
                action,
                f"invalid choice {value!r}; {did_you_mean([str(value)], choices)}"
                f"expected one of {', '.join(choices)}",
            )


def _common_options(spec: CommandSpec) -> CommandLineParser:
    """Options every command takes, ``--out-dir`` saying what the command writes there;
    ``--time-limit`` only where implementations' calls run under the per-call limit."""
    common = CommandLineParser(add_help=False)
    common.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_OPTIONS.seed,
        help=f"base seed of every case (default {DEFAULT_OPTIONS.seed})",
    )
    common.add_argument(
        "--device",
        default=DEFAULT_OPTIONS.device,
        help=f"device the cases run on: cpu or cuda[:N] (default {DEFAULT_OPTIONS.device})",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--out-dir",
        type=Path,
        default=Path("harness-report"),
        help=f"{spec.out_dir} (default ./harness-report)",
    )
    common.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    common.add_argument(
        "--dry-run",
        action="store_true",
        help="check every option as a run would, then exit (0) without running anything or "
        "writing --out-dir",
    )
    common.add_argument(
        "--long",
        action="store_true",
        help="print the whole evidence (every case, every test's p-value), as the .md and "
        ".txt files the command writes hold it; by default the terminal gets what fits "
        "100 columns",
    )
    common.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_OPTIONS.threads,
        metavar="N",
        help=f"torch intra-op threads (default {DEFAULT_OPTIONS.threads}: the shapes are small, "
        "and a second thread mostly waits on a busy machine; 0: torch's own default)",
    )
    common.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="refuse work estimated above SIZE (e.g. 64G; default: half the free memory)",
    )
    if not spec.time_limited:
        return common
    common.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_OPTIONS.time_limit_s,
        metavar="SECONDS",
        help=f"limit on each implementation's construction, staging and each call "
        f"(default {DEFAULT_OPTIONS.time_limit_s:g})",
    )
    return common


def command_description(spec: CommandSpec) -> str:
    """What a command's ``--help`` opens with: its description, filled to the terminal,
    and its examples as they are typed."""
    width = min(shutil.get_terminal_size().columns - 2, 100)
    examples = "\n".join(f"  {example}" for example in spec.examples)
    heading = "example:" if len(spec.examples) == 1 else "examples:"
    description = textwrap.fill(spec.description, width=width, break_on_hyphens=False)
    return f"{description}\n\n{heading}\n{examples}"


def build_parser(*, with_options: Collection[str] = COMMANDS) -> argparse.ArgumentParser:
    """The whole command line; only the commands in ``with_options`` get their own
    options (``main`` builds just the one it runs, so that ``--help`` and bad usage
    answer without importing the other commands or torch)."""
    parser = CommandLineParser(
        prog="python -m harness",
        description="Differential harness for DSpark draft samplers "
        "(legacy double walk vs fixed single walk).",
        epilog="python -m harness COMMAND --help says what a command is for, with examples.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, spec in COMMAND_TABLE.items():
        sub = commands.add_parser(
            name,
            parents=[_common_options(spec)],
            help=spec.summary,
            description=command_description(spec),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name in with_options:
            command_module(name).add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its ``ExitCode``. No command (or options only) means ``report``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return usage_error(
            f"unknown command {argv[0]}; {did_you_mean([argv[0]], COMMANDS)}"
            f"expected one of {', '.join(COMMANDS)}"
        )
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["report", *argv]
    parser = build_parser(with_options=argv[:1])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse: --help (0) or bad usage (2)
        return int(exit_request.code or 0)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Validate the options, claim ``--out-dir`` and run the command; bad input,
    a stop request and a closed stdout each end the way the module docstring says."""
    from harness.cli.validate import validate_global_options

    try:
        with stop_on_signals():
            module = command_module(args.command)
            validate_global_options(args)
            if hasattr(module, "validate"):
                module.validate(args)
            if args.dry_run:
                print(f"{args.command}: every option is valid; --dry-run ran nothing")
                return int(ExitCode.OK)
            from harness.devices import intra_op_threads  # torch: after validation

            claim = COMMAND_TABLE[args.command].writes_out_dir
            with (
                claim_out_dir(args.out_dir) if claim else contextlib.nullcontext(),
                intra_op_threads(args.threads or None),
            ):
                return int(module.command(args))
    except BAD_INPUT as error:
        return usage_error(str(error))
    except _case_error() as error:
        return usage_error(str(error))
    except StopRequested as stop:
        return _stopped(stop, args)
    except BrokenPipeError:  # stdout closed early (``--json | head``): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _case_error() -> type[Exception]:
    """A case that does not describe a valid run (exit 2), imported only once a command
    has failed, since it lives beside torch."""
    from harness.case import CaseError

    return CaseError


BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a closed pipe


def _stopped(stop: StopRequested, args: argparse.Namespace) -> int:
    """One line on stderr and 130 (SIGINT) or 143 (SIGTERM)."""
    code = ExitCode.INTERRUPTED if stop.signum == signal.SIGINT else ExitCode.TERMINATED
    resumable = args.command in ("report", "compare", "sweep")
    print(
        f"interrupted by {signal.Signals(stop.signum).name}"
        + (
            ": finished work is kept; rerun with the same options and --resume" if resumable else ""
        ),
        file=sys.stderr,
    )
    return int(code)


__all__ = [
    "COMMANDS",
    "COMMAND_TABLE",
    "CommandSpec",
    "ExitCode",
    "build_parser",
    "command_module",
    "main",
]
