"""Monte-Carlo check of Theorem 1 (§3.3, proof in Appendix E).

Synthetic stratum with known risk: score s ~ U(0, 1) and P(error | s) = q(s) known, so that the
true selective risk of the rule "answer iff s > lambda" is available in closed form:
risk(lambda) = int_lambda^1 q(s) ds / (1 - lambda).
Over many independent calibration draws, the fraction of draws whose certified threshold has true
risk above alpha must not exceed delta (up to a binomial Monte-Carlo margin). The same harness
flags an invalid procedure (the naive quantile foil), so the check can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from probeguard_core.certify import ltt_test, ltt_threshold, naive_quantile_threshold

SEED = 42


def q_linear(s):
    """P(error | s) = (1 - s) / 2: risk(lambda) = (1 - lambda) / 4 (monotone)."""
    return 0.5 * (1.0 - s)


def risk_linear(lam):
    lam = np.clip(lam, 0.0, 1.0)
    return (1.0 - lam) / 4.0


def q_bump(s):
    """Over-confident top: P(error | s) = 0.5 above 0.9, 0.2 (1 - s) below (non-monotone risk)."""
    return np.where(s > 0.9, 0.5, 0.2 * (1.0 - s))


def risk_bump(lam):
    lam = float(np.clip(lam, 0.0, 1.0))
    if lam >= 0.9:
        return 0.5
    # int_lam^0.9 0.2 (1 - s) ds = 0.1 ((1 - lam)^2 - 0.01); int_0.9^1 0.5 ds = 0.05
    return (0.1 * ((1.0 - lam) ** 2 - 0.01) + 0.05) / (1.0 - lam)


def margin_bound(draws: int, delta: float) -> float:
    """Largest violation fraction compatible with a true rate delta (one-sided 0.999 quantile)."""
    return binom.ppf(0.999, draws, delta) / draws


def violation_rate(procedure, q, risk, *, n, alpha, draws, seed):
    rng = np.random.default_rng(seed)
    viol = cert = 0
    for _ in range(draws):
        s = rng.uniform(size=n)
        e = rng.uniform(size=n) < q(s)
        thr = procedure(s, e, alpha)
        if thr is not None:
            cert += 1
            viol += risk(thr) > alpha
    return viol / draws, cert / draws


def test_closed_form_risk_matches_simulation():
    rng = np.random.default_rng(SEED)
    s = rng.uniform(size=400_000)
    for q, risk in ((q_linear, risk_linear), (q_bump, risk_bump)):
        e = rng.uniform(size=s.size) < q(s)
        for lam in (0.0, 0.3, 0.6, 0.85, 0.95):
            assert e[s > lam].mean() == pytest.approx(risk(lam), abs=0.004)


@pytest.mark.parametrize("q,risk,alpha", [(q_linear, risk_linear, 0.10), (q_linear, risk_linear, 0.15),
                                          (q_bump, risk_bump, 0.20)])
def test_theorem1_paper_constants(q, risk, alpha):
    # default grid (20 points), delta = 0.05, Bonferroni over 2 strata, as in Appendix E
    draws, delta = 2000, 0.05
    rate, cert = violation_rate(lambda s, e, a: ltt_threshold(s, e, a, delta=delta, n_strata=2),
                                q, risk, n=800, alpha=alpha, draws=draws, seed=SEED)
    assert rate <= margin_bound(draws, delta)
    assert cert > 0.25, cert  # not vacuous: many draws certify a threshold


def test_theorem1_near_tight_single_grid_point():
    # one grid point at delta = 0.2: the binomial test is nearly exact and risk(lambda_0.5) ~ 0.125
    # sits just above alpha = 0.12 in most draws, so violations are frequent but must stay <= delta
    draws, delta = 5000, 0.2
    rate, _ = violation_rate(lambda s, e, a: ltt_threshold(s, e, a, delta=delta, grid=[0.5], n_strata=1),
                             q_linear, risk_linear, n=400, alpha=0.12, draws=draws, seed=SEED + 1)
    assert rate <= margin_bound(draws, delta)
    assert rate > 0.02  # the regime is sharp, not trivially conservative


def test_pvalue_valid_at_data_dependent_threshold():
    # Appendix E's key step: Pr[risk(lambda_c) > alpha and p_c <= u] <= u at every grid point
    rng = np.random.default_rng(SEED + 2)
    draws, alpha = 3000, 0.12
    us = np.array([0.05, 0.1, 0.2])
    hits = np.zeros((20, us.size))
    for _ in range(draws):
        s = rng.uniform(size=200)
        e = rng.uniform(size=200) < q_linear(s)
        res = ltt_test(s, e, alpha, delta=0.5, n_strata=1)
        null = risk_linear(res.lambdas) > alpha
        hits += null[:, None] & (res.p_values[:, None] <= us[None, :])
    bound = np.array([margin_bound(draws, u) for u in us])
    assert (hits / draws <= bound[None, :]).all()


def test_harness_detects_invalid_procedure():
    # the naive quantile foil has no confidence level: it violates in about half the draws
    draws, delta = 1000, 0.05
    rate, _ = violation_rate(lambda s, e, a: naive_quantile_threshold(s, e, a), q_linear, risk_linear,
                             n=400, alpha=0.12, draws=draws, seed=SEED + 3)
    assert rate > margin_bound(draws, delta)
