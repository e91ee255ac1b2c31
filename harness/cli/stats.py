"""``python -m harness stats``: the statistical losslessness oracle on its own.

Options and the command; the oracle itself is ``harness.oracles``. ``--time-limit``
bounds each implementation's decode (every head kind); ``--out-dir`` receives
``stats.{json,md,txt}`` and, with ``--power``, ``stats-power.png``. ``--pair`` and
``--expect-fail`` give the roles, as in ``report``. Exit 0 when the pair's buggy side
(default legacy) is rejected (and not on position 0 alone), every ``--expect-fail``
name is rejected and every other implementation (fixed and each ``--impl``) passes,
under every verifier ``--verifiers`` names (default ``chain``; ``sglang-blockwise`` is
the released server's block-wise rejection, with the package installed;
``vllm-rejection`` vLLM 0.33's, with that package); 1 otherwise; 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from harness.cli.emit import UsageError, emit
from harness.cli.exit_codes import ExitCode
from harness.cli.options import (
    add_impl_option,
    add_isolate_option,
    add_jobs_option,
    add_role_options,
    add_rows_option,
    add_verifiers_option,
    comma_separated,
    run_options,
    selected_implementations,
)
from harness.io.files import write_atomically
from harness.oracles import defaults

POWER_PNG = "stats-power.png"
STATS_VERIFIERS = ("chain",)  # what ``stats`` verifies under when --verifiers is not given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``stats`` (``--seed``, ``--device``, ``--json``, ``--out-dir``,
    ``--quiet`` and ``--time-limit`` are the shared ones); their defaults are read
    without importing torch."""
    add_impl_option(parser, verb="also test")
    add_isolate_option(parser)
    add_jobs_option(parser)
    add_role_options(parser, require=False)
    add_rows_option(parser)
    parser.add_argument(
        "--stage-rows",
        type=comma_separated(int, what="--stage-rows", minimum=0),
        default=defaults.DEFAULT_STAGE_ROWS,
        metavar="N[,N...]",
        help="rows of each sequential stage, run when the family's p-value is below "
        f"{defaults.DEFAULT_SUSPICIOUS:g} but not decisive; 0: no stage (default "
        f"{','.join(map(str, defaults.DEFAULT_STAGE_ROWS))})",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=defaults.DEFAULT_ROUNDS,
        help=f"draft-verify rounds per row (default {defaults.DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--m",
        type=int,
        default=defaults.DEFAULT_M,
        help="committed tokens per row in the joint (>= 2)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=defaults.DEFAULT_ALPHA,
        help="family-wise level (default 1e-6)",
    )
    parser.add_argument(
        "--temperatures",
        type=comma_separated(float, what="temperatures"),
        default=defaults.DEFAULT_TEMPERATURES,
        metavar="T[,T...]",
        help="rows take these in turn, one test group each; 0 marks greedy rows "
        "(default 0.6,1.0,1.4,0)",
    )
    parser.add_argument(
        "--temperatures-only",
        action="store_true",
        help="leave out the truncated groups (top-k 3, top-p 0.8, min-p 0.2 at T=1, and all "
        "three at T=0.8) that run beside the temperatures at the far target by default",
    )
    parser.add_argument(
        "--heads",
        "--head",
        type=lambda text: tuple(part.strip() for part in text.split(",") if part.strip()),
        default=None,
        metavar="KIND[,KIND...]",
        help="Markov head kinds, each its own rows (default: every kind)",
    )
    parser.add_argument(
        "--gamma", type=int, default=defaults.DEFAULT_GAMMA, help="draft tokens per round"
    )
    parser.add_argument(
        "--vocab", type=int, default=defaults.DEFAULT_VOCAB_SIZE, help="vocabulary size V"
    )
    parser.add_argument(
        "--model-seed",
        type=int,
        default=defaults.DEFAULT_MODEL_SEED,
        help="seed of drafters, target and context (default 0)",
    )
    parser.add_argument(
        "--power", action="store_true", help="also draw legacy's power curve per head kind"
    )
    add_verifiers_option(parser, unnamed=",".join(STATS_VERIFIERS))


def validate(args: argparse.Namespace) -> None:
    """``--model-seed``, ``--vocab``, ``--rows`` and the memory estimate of the oracle
    run, before it runs."""
    from harness.cli.validate import check_oracle_run, check_seed

    if args.model_seed is not None:
        check_seed(args.model_seed, option="--model-seed")
    if args.vocab < 2:
        raise UsageError(
            f"stats --vocab must be >= 2 (a 1-token vocabulary has no test), got {args.vocab}"
        )
    check_oracle_run(args)


def command(args: argparse.Namespace) -> int:
    """Run the oracle; print text or JSON; write ``stats.{json,md,txt}`` (and the power
    figure) under ``--out-dir``."""
    from harness.judge import judge
    from harness.options import RolesError
    from harness.oracles.problem import DEFAULT_CONFIG, StatsError
    from harness.oracles.stats import default_implementations
    from harness.oracles.verifiers import verifiers_named
    from harness.pipeline.isolation import make_executor
    from harness.plugins.implementations import ImplementationError
    from harness.render.power_figure import power_curves_png
    from harness.render.statistics import stats_section

    try:
        options = run_options(args)
        progress, roles = options.progress, options.roles
        verifiers = args.verifiers or STATS_VERIFIERS
        verifiers_named(verifiers)  # an unknown name is bad usage, before any work
        options = replace(options, verifiers=verifiers, stats=True)
        config = replace(
            DEFAULT_CONFIG,
            rows=options.oracle_rows,
            rounds=args.rounds,
            m=args.m,
            gamma=args.gamma,
            vocab_size=args.vocab,
            head_kinds=DEFAULT_CONFIG.head_kinds if args.heads is None else args.heads,
            temperatures=args.temperatures,
            truncated=() if args.temperatures_only else defaults.DEFAULT_TRUNCATED,
            alpha=args.alpha,
            seed=args.seed,
            model_seed=args.model_seed,
            device=args.device,
            verifier_noise=options.verifier_noise,
            stage_rows=tuple(rows for rows in args.stage_rows if rows),
        )
        with make_executor(isolate=options.isolate) as executor:  # stopped before the report
            extras = selected_implementations(args, [], executor=executor)
            implementations = [*default_implementations(roles), *extras]
            names = [impl.name for impl in implementations]
            if len(set(names)) != len(names):
                raise ImplementationError(f"--impl names must differ, got {names}")
            roles.validate(names)
            judgement = judge(
                [],
                implementations,
                options=options,
                executor=executor,
                power=args.power,
                oracle_config=config,
            )
    except (ImplementationError, StatsError, RolesError) as error:
        print(f"error: {error}", file=sys.stderr)
        return ExitCode.USAGE
    assert judgement.oracle is not None  # the stats command always runs the oracle
    section = stats_section(judgement.oracle, roles=roles)
    oracle = judgement.oracle.run
    if oracle.curves:
        png = power_curves_png([curve.to_json_dict() for curve in oracle.curves])
        if png is None:
            progress("power figure skipped: matplotlib is not installed")
        else:
            write_atomically(args.out_dir / POWER_PNG, png)
            progress(f"written: {args.out_dir / POWER_PNG}")
    heading = (
        f"DSpark draft-sampler harness: statistical oracle ({config.rows} rows per head, "
        f"seed {config.seed}, {config.device})"
    )
    return emit(args, command="stats", heading=heading, sections=[section], judgement=judgement)
