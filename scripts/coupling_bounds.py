"""The oracle on each planted coupling of tests/plugins/shared_stream_defects.py, at the
default config on the shared plumbing (chain verifier): its rows, its family p-value,
and the detection bound of a coupling of that kind (the smallest fraction of coupled
rows the oracle sees with 99% power, ``harness.oracles.power.coupling_fraction``),
then the oracle again at that fraction and at half of it. docs/statistics.md quotes it.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/coupling_bounds.py
"""

from __future__ import annotations

import math

from harness.oracles import stats
from harness.oracles.fits import family_size, head_tables
from harness.oracles.power import TARGET_POWER, coupling_fraction
from harness.oracles.problem import DEFAULT_CONFIG, build_problems
from harness.plugins.implementations import Implementation
from reference.verifier import CHAIN_VERIFIER
from tests.plugins.shared_stream_defects import SHARED_STREAM_DEFECTS


def main() -> None:
    problems = build_problems(DEFAULT_CONFIG)
    level = DEFAULT_CONFIG.alpha / sum(family_size(p.config) for p in problems)
    for name, sampler_class in SHARED_STREAM_DEFECTS.items():
        result, decoded = stats.decode_and_fit(
            Implementation(name, sampler_class, f"scripts:{name}"),
            problems=problems,
            time_limit_s=None,
            verifier=CHAIN_VERIFIER,
        )
        assert decoded is not None
        bounds = []
        for problem in problems:
            for head, run in decoded[problem.target.name].items():
                tables = head_tables(
                    run, problem=problem, head_kind=head, row_group=problem.row_group
                )
                for table in tables.chi2_tables:
                    fraction = coupling_fraction(table, level=level, power=TARGET_POWER)
                    if fraction is not None:
                        label = f"{problem.target.name}/{head}/{table.group}/{table.test}"
                        bounds.append((fraction, label))
        fraction, carrier = min(bounds)
        print(
            f"{name}: rows {result.rows}, family p {result.p_value:.3g}, "
            f"{len(result.rejections())} tests rejected; detection bound {fraction:.3f} "
            f"of the rows ({carrier}, power {TARGET_POWER}, level {level:.3g})"
        )
        for share in (fraction, fraction / 2):
            partial = type(f"{sampler_class.__name__}Partial", (sampler_class,), {})
            partial.coupled_fraction = math.ceil(share * 1000) / 1000
            run = stats.run_stats(
                Implementation(name, partial, f"scripts:{name}"), problems=problems
            )
            print(
                f"  at {partial.coupled_fraction:.3f} of the rows: "
                f"{'REJECTED' if run.rejected else 'passes'} (family p {run.p_value:.3g})"
            )


if __name__ == "__main__":
    main()
