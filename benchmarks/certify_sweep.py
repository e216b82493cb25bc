"""Benchmark: the §4.4 / Appendix E certification sweep, vectorized vs a per-grid-point loop.

50 splits x 4 alphas x 2 certified strata x 20 grid points on synthetic MedQA-sized data
(n = 1,273). The vectorized ``repeated_splits`` is timed against ``_repeated_splits_loop``
(straightforward Algorithm 2, one grid point at a time, built on ``_ltt_threshold_loop``) in the
same run; both must produce the same table.

    .venv/bin/python benchmarks/certify_sweep.py [--n 1273] [--splits 50] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd

from _synthetic import synthetic_medqa  # benchmarks/ is on sys.path when run as a script
from probeguard_core.certify import (
    DEFAULT_ALPHAS,
    DEFAULT_GRID,
    _repeated_splits_loop,
    repeated_splits,
    summarize,
)


COLS = ["split", "alpha", "stratum", "threshold", "certified", "n_cal", "n_test", "coverage", "risk",
        "violated"]


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1273)
    ap.add_argument("--splits", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    s, e, strata = synthetic_medqa(args.n)
    repeated_splits(s, e, strata, n_splits=2)  # warm-up (imports, caches)
    t_vec, df = timed(lambda: repeated_splits(s, e, strata, alphas=DEFAULT_ALPHAS, n_splits=args.splits),
                      args.repeats)
    t_loop, ref = timed(lambda: _repeated_splits_loop(s, e, strata, alphas=DEFAULT_ALPHAS,
                                                      n_splits=args.splits), max(1, args.repeats // 3))

    got = df[df.stratum.isin(["S1", "S2"])][COLS].reset_index(drop=True)
    ref = ref[COLS].sort_values(["split", "alpha", "stratum"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, ref, check_dtype=False)

    work = args.splits * len(DEFAULT_ALPHAS) * 2 * DEFAULT_GRID.size
    print(f"n = {args.n}, {args.splits} splits x {len(DEFAULT_ALPHAS)} alphas x 2 strata x "
          f"{DEFAULT_GRID.size} grid points = {work} tests")
    print(f"vectorized repeated_splits : {t_vec * 1e3:8.2f} ms (median of {args.repeats})")
    print(f"per-grid-point loop        : {t_loop * 1e3:8.2f} ms (median of {max(1, args.repeats // 3)})")
    print(f"speed-up                   : {t_loop / t_vec:8.1f}x   (tables identical)")
    summ = summarize(df)
    pd.set_option("display.width", 140)
    print(summ[summ.stratum.isin(["S1", "S2", "all"])]
          [["alpha", "stratum", "n_certified", "coverage_mean", "coverage_sd", "risk_mean", "violations"]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
