"""Global options checked before any work: each bad value refused with the option's
name and the expected form (exit status 2), and nothing written yet."""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

import torch

from harness.cli.emit import UsageError
from harness.pipeline import memory
from harness.pipeline.case import SEED_LIMIT, CaseError, check_device

CLI_SEED_LIMIT = SEED_LIMIT >> 1  # room for the per-case offsets added to --seed


def check_seed(seed: int, *, option: str = "--seed") -> None:
    if not 0 <= seed < CLI_SEED_LIMIT:
        raise UsageError(f"{option} must be an integer in [0, 2^62), got {seed}")


def check_time_limit(seconds: float) -> None:
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--time-limit must be a finite number of seconds > 0, got {seconds}")


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


def check_max_memory(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return memory.parse_size(text)
    except ValueError as error:
        raise UsageError(f"--max-memory: {error}") from None


def check_command_memory(args: argparse.Namespace, *, max_memory_bytes: int | None) -> None:
    """The memory estimate of a stats run or of each sweep point, before it runs, under
    ``max_memory_bytes`` (cases are checked by the comparison itself, once they are
    loaded)."""
    if args.command == "stats":
        if args.vocab < 2:
            raise UsageError(
                f"stats --vocab must be >= 2 (a 1-token vocabulary has no test), got {args.vocab}"
            )
        from harness.oracles.stats import DEFAULT_CONFIG

        estimate = memory.stats_run_bytes(
            rows=max(args.rows, 1),
            gamma=max(args.gamma, 1),
            vocab=args.vocab,
            m=max(args.m, 1),
            hidden=DEFAULT_CONFIG.hidden_size,
            rank=DEFAULT_CONFIG.markov_rank,
        )
        memory.check_fits(
            estimate,
            what="the statistical oracle run",
            device=args.device,
            max_memory_bytes=max_memory_bytes,
        )
    elif args.command == "sweep":
        from harness.cli.sweep import config_from_args
        from harness.measure.sweep import SweepError

        try:
            config, _ = config_from_args(args)
        except SweepError as error:
            raise UsageError(str(error)) from None
        for bs, gamma, vocab in config.points():
            estimate = memory.sampler_call_bytes(
                bs=bs,
                max_bs=bs,
                gamma=gamma,
                vocab=vocab,
                hidden=config.hidden_size,
                rank=config.markov_rank,
                dtype_bytes=torch.float32.itemsize,
            )
            memory.check_fits(
                estimate,
                what=f"sweep point bs={bs} gamma={gamma} V={vocab}",
                device=args.device,
                max_memory_bytes=max_memory_bytes,
            )


def validate_global_options(args: argparse.Namespace) -> None:
    """Every option all commands share, then the command's memory estimate."""
    try:
        check_device(args.device, what="--device")
    except CaseError as error:
        raise UsageError(str(error)) from None
    check_seed(args.seed)
    if getattr(args, "model_seed", None) is not None:
        check_seed(args.model_seed, option="--model-seed")
    if getattr(args, "time_limit", None) is not None:  # only where calls are time-limited
        check_time_limit(args.time_limit)
    max_memory_bytes = check_max_memory(args.max_memory)
    check_out_dir(args.out_dir)
    # before any plug-in loads: one that changes the directory must not move the output
    args.out_dir = args.out_dir.absolute()
    check_command_memory(args, max_memory_bytes=max_memory_bytes)
