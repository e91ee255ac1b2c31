"""The options every command shares, checked before any work: each bad value refused
with the option's name and the expected form (exit status 2), and nothing written yet.
Every value's form is checked without torch, so bad usage answers at once; only what
asks the machine (a CUDA device, a verifier's package) imports more, and only after.
A command with options of its own checks them in its module's ``validate(args)``, which
runs right after these (``harness.cli``)."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.cli.emit import UsageError
from harness.cli.names import did_you_mean
from harness.defaults import BUILTIN_NAMES, DEFAULT_PAIR, DEVICE_FORM, SEED_LIMIT
from harness.oracles import defaults
from harness.oracles.defaults import VERIFIER_NAMES
from harness.pipeline import memory
from harness.plugins.errors import ImplementationError
from harness.plugins.specs import NO_BUILTINS, check_impl_name, parse_names, split_name

CLI_SEED_LIMIT = SEED_LIMIT >> 1  # room for the per-case offsets added to --seed


def check_seed(seed: int, *, option: str = "--seed") -> None:
    if not 0 <= seed < CLI_SEED_LIMIT:
        raise UsageError(f"{option} must be an integer in [0, 2^62), got {seed}")


def check_time_limit(seconds: float) -> None:
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--time-limit must be a finite number of seconds > 0, got {seconds}")


def check_threads(threads: int) -> None:
    if threads < 0:
        raise UsageError(f"--threads must be an integer >= 0 (0: torch's default), got {threads}")


def check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {jobs}")


def check_out_dir(path: Path) -> None:
    """A folder that exists, or can be created, and can be written; probed without
    leaving anything behind (the folder itself is created by the first write)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out-dir {path}: exists and is not a folder; expected a folder path")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"--out-dir {path}: {existing} is not a folder; expected a folder path")
    try:
        if existing == path:
            with tempfile.TemporaryFile(dir=path):
                pass
        else:
            os.rmdir(tempfile.mkdtemp(dir=existing))
    except OSError as error:
        raise UsageError(
            f"--out-dir {path}: cannot write there ({error.strerror or error}); "
            "expected a writable folder"
        ) from None


def check_verifiers(names: tuple[str, ...], *, no_stats: bool) -> None:
    """Known, distinct names of verifiers, and an oracle to run them; whether each can run
    here is ``check_verifiers_here``."""
    if no_stats:
        raise UsageError(
            "--verifiers names the statistical oracle's verifiers, and --no-stats skips the "
            "oracle: give one of them"
        )
    unknown = [name for name in names if name not in VERIFIER_NAMES]
    if unknown:
        raise UsageError(
            f"--verifiers: unknown verifier {unknown[0]!r}; "
            f"{did_you_mean(unknown, VERIFIER_NAMES)}expected {list(VERIFIER_NAMES)}"
        )
    if len(set(names)) != len(names) or not names:
        raise UsageError(f"--verifiers must name distinct verifiers, got {list(names)}")


def check_verifiers_here(names: tuple[str, ...]) -> None:
    """Each named verifier can run here (its package is installed)."""
    from harness.oracles.problem import StatsError
    from harness.oracles.verifiers import verifiers_named

    try:
        verifiers_named(names)
    except StatsError as error:
        raise UsageError(str(error)) from None


def check_oracle_run(args: argparse.Namespace) -> None:
    """The oracle's ``--rows`` (a positive integer) and the memory its run needs at them
    (with ``stats``' ``--gamma``, ``--vocab`` and ``--m`` where a command has them, else
    their defaults), before it runs: ``stats`` and ``compare`` alike."""
    if args.rows < 1:
        raise UsageError(f"--rows must be a positive integer, got {args.rows}")
    estimate = memory.stats_run_bytes(
        rows=max((args.rows, *getattr(args, "stage_rows", ()))),  # a stage decodes its rows too
        gamma=max(getattr(args, "gamma", defaults.DEFAULT_GAMMA), 1),
        vocab=getattr(args, "vocab", defaults.DEFAULT_VOCAB_SIZE),
        m=max(getattr(args, "m", defaults.DEFAULT_M), 1),
        hidden=defaults.DEFAULT_HIDDEN_SIZE,
        rank=defaults.DEFAULT_MARKOV_RANK,
    )
    memory.check_fits(
        estimate,
        what="the statistical oracle run",
        device=args.device,
        max_memory_bytes=check_max_memory(args.max_memory),
    )


def check_device_form(device: str) -> None:
    if DEVICE_FORM.fullmatch(device) is None:
        raise UsageError(f"--device must be 'cpu' or 'cuda[:N]' (a string), got {device!r}")


def check_device_here(device: str) -> None:
    """A CUDA device that this machine has (asking torch)."""
    from harness.case import CaseError, check_device

    try:
        check_device(device, what="--device")
    except CaseError as error:
        raise UsageError(str(error)) from None


def builtin_names(text: str) -> list[str]:
    """The built-ins ``--only`` names, each one known."""
    names = parse_names(text)
    unknown = [name for name in names if name not in BUILTIN_NAMES]
    if unknown:
        raise UsageError(
            f"--only: unknown built-in implementation(s) {unknown}; "
            f"{did_you_mean(unknown, [*BUILTIN_NAMES, NO_BUILTINS])}"
            f"expected some of {list(BUILTIN_NAMES)} or {NO_BUILTINS}"
        )
    return names


def impl_names(specs: Sequence[str]) -> list[str]:
    """The names of the ``--impl`` specs, each of the form ``NAME=TARGET`` (whether the
    target loads is known only once it is imported); ``builtin:NAME`` names no plug-in."""
    names = []
    for spec in specs:
        if spec.startswith("builtin:"):  # a built-in's own spec, as repro files record it
            continue
        try:
            name, _ = split_name(spec)
            check_impl_name(name)
        except ImplementationError as error:
            raise UsageError(str(error)) from None
        names.append(name)
    return names


def check_pair(pair: tuple[str, str], *, present: Sequence[str]) -> None:
    """A ``--pair`` other than the default names implementations of the comparison."""
    missing = [name for name in pair if name not in present]
    if pair != DEFAULT_PAIR and missing:
        raise UsageError(
            f"--pair names implementations not in the comparison: {missing}; "
            f"{did_you_mean(missing, present)}expected two of {list(present)}"
        )


def check_case_files(paths: Sequence[Path]) -> None:
    """Each ``--case`` file can be read (what it holds is checked when it is loaded)."""
    for path in paths:
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise UsageError(f"--case {path}: cannot read ({error.strerror})") from None


def check_max_memory(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return memory.parse_size(text)
    except ValueError as error:
        raise UsageError(f"--max-memory: {error}") from None


def validate_global_options(args: argparse.Namespace) -> None:
    """Every option all commands share, and the implementations and case files the
    commands that take them name: first the form of every value (no torch), then what
    only this machine can say."""
    check_device_form(args.device)
    check_seed(args.seed)
    if getattr(args, "time_limit", None) is not None:  # only where calls are time-limited
        check_time_limit(args.time_limit)
    check_threads(args.threads)
    if getattr(args, "jobs", None) is not None:
        check_jobs(args.jobs)
    check_max_memory(args.max_memory)  # refused before any work; the run's options keep it
    if getattr(args, "verifiers", None) is not None:  # only where the oracle runs
        check_verifiers(args.verifiers, no_stats=getattr(args, "no_stats", False))
    present = builtin_names(args.only) if hasattr(args, "only") else list(BUILTIN_NAMES)
    present += impl_names(getattr(args, "impl", ()))
    if hasattr(args, "pair"):
        check_pair(args.pair, present=present)
    check_case_files(getattr(args, "case", None) or ())
    check_out_dir(args.out_dir)
    # before any plug-in loads: one that changes the directory must not move the output
    args.out_dir = args.out_dir.absolute()
    if args.device != "cpu":
        check_device_here(args.device)
    if getattr(args, "verifiers", None) is not None:
        check_verifiers_here(args.verifiers)
