"""The options every command shares, checked before any work: each bad value refused
with the option's name and the expected form (exit status 2), and nothing written yet.
A command with options of its own checks them in its module's ``validate(args)``, which
runs right after these (``harness.cli``)."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

from harness.case import SEED_LIMIT, CaseError, check_device
from harness.cli.emit import UsageError
from harness.pipeline import memory

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
    """Known, distinct names of verifiers that can run here, and an oracle to run them."""
    from harness.oracles.problem import StatsError
    from harness.oracles.verifiers import verifiers_named

    if no_stats:
        raise UsageError(
            "--verifiers names the statistical oracle's verifiers, and --no-stats skips the "
            "oracle: give one of them"
        )
    try:
        verifiers_named(names)
    except StatsError as error:
        raise UsageError(str(error)) from None


def check_max_memory(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return memory.parse_size(text)
    except ValueError as error:
        raise UsageError(f"--max-memory: {error}") from None


def validate_global_options(args: argparse.Namespace) -> None:
    """Every option all commands share."""
    try:
        check_device(args.device, what="--device")
    except CaseError as error:
        raise UsageError(str(error)) from None
    check_seed(args.seed)
    if getattr(args, "time_limit", None) is not None:  # only where calls are time-limited
        check_time_limit(args.time_limit)
    check_threads(args.threads)
    check_max_memory(args.max_memory)  # refused before any work; the run's options keep it
    if getattr(args, "verifiers", None) is not None:  # only where the oracle runs
        check_verifiers(args.verifiers, no_stats=getattr(args, "no_stats", False))
    check_out_dir(args.out_dir)
    # before any plug-in loads: one that changes the directory must not move the output
    args.out_dir = args.out_dir.absolute()
