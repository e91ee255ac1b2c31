"""``python -m harness words``: each installed server's word-to-noise conversions run on
every 32-bit word (``harness.upstream.noise_words``, ``harness.measure.word_sweep``),
or on the words of ``--words-range``; per conversion the words whose uniform is 0 or 1
and whose noise is infinite or NaN, each with its exact probability per draw. Exit 0
when no conversion gives a non-finite noise value, 1 when one does, 2 on bad usage or
when no server named loads here.
"""

from __future__ import annotations

import argparse
import time

from harness.cli.emit import UsageError, emit
from harness.cli.exit_codes import ExitCode
from harness.cli.names import check_known

WORDS = 1 << 32  # every uint32 word
SERVERS = ("sglang", "vllm")
CHUNK = 1 << 22


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_words_range(text: str) -> tuple[int, int]:
    """``"A:B"`` (decimal or 0x hex) -> ``(A, B)`` with ``0 <= A < B <= 2^32``."""
    first, sep, last = text.partition(":")
    try:
        start, stop = int(first, 0), int(last, 0)
    except ValueError:
        start, stop = -1, -1
    if not sep or not 0 <= start < stop <= WORDS:
        raise UsageError(f"--words-range {text!r}: expected A:B with 0 <= A < B <= {WORDS}")
    return start, stop


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness words``."""
    parser.add_argument(
        "--servers", type=_names, default=SERVERS, metavar="NAME[,NAME...]",
        help=f"servers whose conversions to check (default {','.join(SERVERS)}; one not "
        "installed here is named with why)",
    )  # fmt: skip
    parser.add_argument(
        "--words-range", default=f"0:{WORDS}", metavar="A:B",
        help=f"check the words A <= w < B only (default 0:{WORDS}, every word)",
    )  # fmt: skip
    parser.add_argument(
        "--chunk", type=int, default=CHUNK, metavar="N",
        help=f"words converted at a time (default {CHUNK}; the counts do not depend on it)",
    )  # fmt: skip


def validate(args: argparse.Namespace) -> None:
    """The servers, the range and the chunk, before any work (and before torch)."""
    check_known(args.servers, SERVERS, option="--servers", what="server")
    if not args.servers:
        raise UsageError("--servers names no server")
    parse_words_range(args.words_range)
    if args.chunk < 1:
        raise UsageError(f"--chunk must be a positive integer, got {args.chunk}")
    if args.device != "cpu":
        raise UsageError(
            f"words runs the packages' conversions on the CPU (Triton's interpreter); "
            f"got --device {args.device}"
        )


def command(args: argparse.Namespace) -> ExitCode:
    """Sweep every available server's conversions and report the counts."""
    from harness.cli.options import run_options
    from harness.judgement import Judgement, WordsVerdict
    from harness.measure.word_sweep import sweep
    from harness.render.progress import progress_printer
    from harness.render.words import words_section
    from harness.upstream.noise_words import server_conversions

    start, stop = parse_words_range(args.words_range)
    progress = progress_printer(quiet=bool(args.quiet))
    conversions, unavailable = [], {}
    for server in args.servers:
        found, reason = server_conversions(server)
        conversions.extend(found)
        if reason is not None:
            unavailable[server] = reason
    if not conversions:
        raise UsageError(
            "words: no server's conversion loads here: "
            + "; ".join(f"{name}: {why}" for name, why in unavailable.items())
        )
    began = time.perf_counter()
    sweeps = []
    for conversion in conversions:
        progress(f"words: {conversion.name}, words [{start}, {stop})")
        sweeps.append(
            sweep(conversion, start=start, stop=stop, chunk=args.chunk, progress=progress)
        )
    judgement = Judgement.of_parts(run_options(args), words=WordsVerdict.of(sweeps))
    return emit(
        args,
        command="words",
        heading=f"DSpark draft-sampler harness: every word of the noise streams "
        f"(words [{start}, {stop}))",
        sections=[words_section(sweeps, unavailable=unavailable, ok=judgement.ok)],
        ok=judgement.ok,
        timing={"words_s": round(time.perf_counter() - began, 3)},
    )
