"""Benchmark: the same certification work through MAPIE's BinaryClassificationController,
through our vectorized LTT and through our per-grid-point loop, with agreement counts.

Work: 50 even calibration/test splits x 4 alphas x 2 certified strata (S1, S2) of synthetic
MedQA-sized data (n = 1,273), 20 coverage grid points each (Appendix E). Only calibration is
timed (thresholds per split, alpha and stratum); test evaluation is not part of the work.

    .venv/bin/python benchmarks/certify_vs_mapie.py [--n 1273] [--splits 50] [--repeats 3]

Times are medians over ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from _synthetic import calibration_sets, synthetic_medqa  # benchmarks/ is on sys.path when run as a script
from probeguard_core.certify import (
    DEFAULT_ALPHAS,
    _ltt_threshold_loop,
    ltt_test,
    repeated_splits,
)


DELTA, STRATA = 0.05, ("S1", "S2")

DIFFERENCES = """\
What differs between MAPIE's controller and Algorithm 2 (and how this run bridges it):
 1. Parameters: MAPIE tests a parameter list fixed when the controller is built; our lambda_c are
    calibration quantiles (k = ceil(c*n - 1e-9)-th largest score), so they are computed first
    (by ltt_test, before and outside MAPIE's timed region) and passed as list_predict_params.
 2. Direction: MAPIE answers iff proba >= param; we answer iff score > lambda, so the run passes
    nextafter(lambda_c, +inf).
 3. Risk: no built-in MAPIE risk is "error rate among answered" with alpha passed as is
    (precision would need target 1 - alpha, which is not exactly alpha in floating point); a
    custom BinaryRisk(occurrence = wrong, condition = answered, higher_is_better=False) is used.
 4. p-value: MAPIE uses min(Hoeffding, BinomCDF(ceil(n * r_hat); n, alpha)) with r_hat = E/n a
    float mean; ceil(n * (E/n)) can exceed E by one when n is not a power of two, so its p-value
    is never smaller than Eq. (6)'s and sometimes larger (MAPIE is at most as powerful).
 5. Multiplicity: MAPIE's Bonferroni covers the controller's own parameters (delta / 20); the
    factor for the m = 2 certified strata is passed as confidence_level = 1 - delta / 2.
 6. Empty answered set (n_c = 0): MAPIE's p-value is NaN (effective n = -1), ours is 1; neither
    rejects.
 7. Selection: MAPIE picks, among valid parameters, the one of largest recall (ties: larger risk),
    i.e. the lowest valid threshold; Algorithm 2 picks the largest rejected coverage, i.e. the same
    lowest threshold.
"""


def selective_error():
    from mapie.risk_control import BinaryRisk

    return BinaryRisk(risk_occurrence=lambda yt, yp: yt.ravel() == 0,
                      risk_condition=lambda yt, yp: yp.ravel() == 1, higher_is_better=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1273)
    ap.add_argument("--splits", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from mapie.risk_control import BinaryClassificationController

    s, e, strata = synthetic_medqa(args.n)
    sets = list(calibration_sets(s, e, strata, args.splits))
    risk = selective_error()

    def predict(X):
        return np.column_stack([1.0 - X, X])

    def timed(fn):
        times, out = [], None
        for _ in range(max(1, args.repeats)):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), out

    # --- ours, vectorized across splits (repeated_splits also evaluates the test half)
    repeated_splits(s, e, strata, n_splits=2)  # warm-up
    t_sweep, df = timed(lambda: repeated_splits(s, e, strata, alphas=DEFAULT_ALPHAS, n_splits=args.splits))
    # --- ours, one vectorized ltt_test per (split, alpha, stratum)
    t_vec, ours = timed(lambda: {(j, a, S): ltt_test(cs, ce, a, DELTA, n_strata=2)
                                 for j, S, cs, ce in sets for a in DEFAULT_ALPHAS})
    # --- ours, plain loop over grid points
    t_loop, loop = timed(lambda: {(j, a, S): _ltt_threshold_loop(cs, ce, a, DELTA, n_strata=2)
                                  for j, S, cs, ce in sets for a in DEFAULT_ALPHAS})

    # --- MAPIE: the lambda_c grid (calibration quantiles, which MAPIE cannot compute itself) is
    # computed before the timed region, so MAPIE's time is its own work only
    lams = {(j, a, S): ltt_test(cs, ce, a, DELTA, n_strata=2).lambdas for j, S, cs, ce in sets for a in DEFAULT_ALPHAS}

    def run_mapie():
        thr, pv = {}, {}
        for j, S, cs, ce in sets:
            for a in DEFAULT_ALPHAS:
                lam = lams[(j, a, S)]
                ctl = BinaryClassificationController(
                    predict_function=predict, risk=risk, target_level=float(a),
                    confidence_level=1 - DELTA / 2, best_predict_param_choice="recall",
                    list_predict_params=np.nextafter(lam, np.inf), fwer_method="bonferroni")
                with warnings.catch_warnings():  # MAPIE warns when nothing is valid
                    warnings.simplefilter("ignore")
                    ctl.calibrate(cs, (~ce).astype(int))
                bp = ctl.best_predict_param
                thr[(j, a, S)] = None if bp is None else float(np.nextafter(bp, -np.inf))
                pv[(j, a, S)] = np.asarray(ctl.p_values)[:, 0]
        return thr, pv

    t_mapie, (mapie, pv_mapie) = timed(run_mapie)

    keys = list(ours)
    same_loop = sum(ours[k].threshold == loop[k] for k in keys)
    same_mapie = sum(ours[k].threshold == mapie[k] for k in keys)
    n_ours = sum(ours[k].threshold is not None for k in keys)
    n_mapie = sum(mapie[k] is not None for k in keys)
    looser = sum(mapie[k] is not None and ours[k].threshold is not None and ours[k].threshold < mapie[k]
                 for k in keys)
    pv_larger = pv_equal = pv_total = 0
    for k in keys:
        ok = ours[k].n_c > 0
        mine, theirs = ours[k].p_values[ok], pv_mapie[k][ok]
        pv_total += ok.sum()
        pv_equal += np.isclose(mine, theirs, rtol=1e-12, atol=0).sum()
        pv_larger += (theirs > mine * (1 + 1e-12)).sum()
    sweep_thr = {(int(r.split), float(r.alpha), r.stratum): r.threshold
                 for r in df[df.stratum.isin(STRATA)].itertuples()}
    same_sweep = sum((np.isnan(sweep_thr[k]) and ours[k].threshold is None)
                     or sweep_thr[k] == ours[k].threshold for k in keys)

    print(f"n = {args.n}: {args.splits} splits x {len(DEFAULT_ALPHAS)} alphas x {len(STRATA)} strata = "
          f"{len(keys)} certifications, 20 grid points each")
    print(f"{'method':42s} {'time (ms)':>10s} {'vs MAPIE':>9s}")
    rows = [("ours: repeated_splits (vectorized, + test)", t_sweep),
            ("ours: ltt_test per certification", t_vec),
            ("ours: _ltt_threshold_loop (per grid point)", t_loop),
            ("MAPIE BinaryClassificationController", t_mapie)]
    for name, t in rows:
        print(f"{name:42s} {t * 1e3:10.1f} {t_mapie / t:8.1f}x")
    print(f"loop / repeated_splits speed-up: {t_loop / t_sweep:.1f}x")
    K = len(keys)
    print(f"thresholds: ours certifies {n_ours}/{K}, MAPIE {n_mapie}/{K}; identical to loop {same_loop}/{K}, "
          f"to repeated_splits {same_sweep}/{K}, to MAPIE {same_mapie}/{K}; "
          f"ours strictly looser than MAPIE in {looser}")
    print(f"p-values (n_c > 0): {pv_equal}/{pv_total} equal to 1e-12, MAPIE larger in {pv_larger}, "
          f"ours larger in {pv_total - pv_equal - pv_larger}")
    print()
    print(DIFFERENCES)


if __name__ == "__main__":
    main()
