"""Cross-check of the Learn-then-Test p-values and decisions against MAPIE (mapie.risk_control).

MAPIE's binary LTT p-value (``compute_hoeffding_bentkus_p_value(..., binary=True)``) is
``min(Hoeffding, BinomCDF(ceil(n * r_hat); n, alpha))`` with ``r_hat = E / n`` a float mean.
- Where ``n`` is a power of two, ``E / n`` is exact, ``ceil(n * r_hat) = E`` and the binomial
  terms coincide; the Hoeffding bound ``exp(-n KL(r_hat || alpha))`` is never below the exact
  binomial tail, and equals it mathematically when ``E = 0`` (both are ``(1 - alpha)^n``), where
  MAPIE's minimum can pick a float one rounding step away: there we require agreement to 1e-12.
- Elsewhere ``n * (E / n)`` can round above ``E`` and the ceiling adds one error, so ours <= theirs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

mapie_rc = pytest.importorskip("mapie.risk_control")
from mapie.risk_control import BinaryClassificationController, BinaryRisk  # noqa: E402
from mapie.risk_control._base_controller import ltt_procedure  # noqa: E402

from probeguard_core.certify import binomial_pvalue, ltt_test  # noqa: E402

ALPHAS = [0.05, 0.1, 0.15, 0.2, 0.3]


def mapie_pvalues(E, n, alpha, delta=0.05):
    E = np.asarray(E, dtype=float)
    n = np.asarray(n, dtype=float)
    valid, p = ltt_procedure((E / n)[None, :], np.array([[alpha]]), delta, n[None, :], True,
                             fwer_method="bonferroni")
    return p[:, 0], valid[0]


@pytest.mark.parametrize("alpha", ALPHAS)
def test_pvalues_agree_exactly_at_powers_of_two(alpha):
    for k in range(11):
        n = 2**k
        E = np.arange(n + 1)
        N = np.full(n + 1, n)
        ours = binomial_pvalue(E, N, alpha)
        theirs, _ = mapie_pvalues(E, N, alpha)
        np.testing.assert_array_equal(ours[1:], theirs[1:])
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_ours_never_above_mapie_elsewhere(alpha):
    rng = np.random.default_rng(42)
    N = rng.integers(1, 1500, size=4000)
    E = rng.integers(0, N + 1)
    ours = binomial_pvalue(E, N, alpha)
    theirs, _ = mapie_pvalues(E, N, alpha)
    assert (ours <= theirs * (1 + 1e-12)).all()
    if alpha != 0.05:  # the float recovery of E genuinely costs MAPIE power at some (E, n)
        assert (theirs > ours * (1 + 1e-6)).any()


def test_rejections_on_ltt_grid_contained_in_ours():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(50, 600))
        s = rng.uniform(size=n)
        e = rng.uniform(size=n) < 0.4 * (1 - s)
        for alpha in (0.1, 0.15, 0.2):
            res = ltt_test(s, e, alpha, delta=0.05, n_strata=2)
            assert (res.n_c > 0).all()  # distinct scores: every grid point has n_c >= 1
            # MAPIE's Bonferroni divides delta by its 20 hypotheses; the strata factor m = 2 goes
            # into delta, so both test at 0.05 / 40
            theirs, valid = mapie_pvalues(res.E_c, res.n_c, alpha, delta=0.05 / 2)
            assert (res.p_values <= theirs * (1 + 1e-12)).all()
            assert set(valid) <= set(np.flatnonzero(res.rejected).tolist())
            pow2 = (res.n_c & (res.n_c - 1)) == 0
            for i in np.flatnonzero(pow2 & (res.E_c > 0)):
                assert (i in valid) == bool(res.rejected[i])


def _selective_error() -> BinaryRisk:
    # y_true = 1 for a correct answer, y_pred = 1 for "answer": error rate among answered
    return BinaryRisk(risk_occurrence=lambda yt, yp: yt.ravel() == 0,
                      risk_condition=lambda yt, yp: yp.ravel() == 1, higher_is_better=False)


def test_binary_classification_controller_is_never_less_conservative():
    rng = np.random.default_rng(11)
    agree = certified = 0
    for _ in range(30):
        n = int(rng.integers(100, 500))
        s = rng.uniform(size=n)
        correct = rng.uniform(size=n) >= 0.4 * (1 - s)
        for alpha in (0.1, 0.15, 0.2):
            res = ltt_test(s, ~correct, alpha, delta=0.05, n_strata=2)
            # MAPIE answers iff proba >= param: nextafter turns our strict "> lambda" into ">="
            params = np.nextafter(res.lambdas, np.inf)
            ctl = BinaryClassificationController(
                predict_function=lambda X: np.column_stack([1 - X, X]), risk=_selective_error(),
                target_level=alpha, confidence_level=1 - 0.05 / 2, best_predict_param_choice="recall",
                list_predict_params=params, fwer_method="bonferroni")
            with warnings.catch_warnings():  # MAPIE warns when nothing is valid
                warnings.simplefilter("ignore")
                ctl.calibrate(s, correct.astype(int))
            if ctl.best_predict_param is None:
                continue
            certified += 1
            assert res.threshold is not None
            mapie_lam = float(np.nextafter(ctl.best_predict_param, -np.inf))
            assert res.threshold <= mapie_lam  # ours answers at least as much
            agree += res.threshold == mapie_lam
    assert certified >= 10 and agree > 0
