"""Tests for probeguard_core.metrics (§4.1): hand-worked values, properties, library cross-checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

from probeguard_core.metrics import aurc, auroc, paired_bootstrap, risk_coverage, wilson_interval


# ----------------------------------------------------------------------------- AUROC
def test_auroc_hand_example():
    # correct/wrong pairs: (.9>.8) (.9>.6) (.7<.8) (.7>.6) -> 3 of 4
    assert auroc([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == pytest.approx(0.75)


def test_auroc_ties_count_half():
    assert auroc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    # correct {1.0, 0.5}, wrong {0.5, 0.0}: 1 + 1 + 0.5 + 1 = 3.5 of 4
    assert auroc([1.0, 0.5, 0.5, 0.0], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)


def test_auroc_matches_mann_whitney():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 6, size=300).astype(float)  # many ties
    c = rng.uniform(size=300) < 0.3 + 0.1 * s
    u = mannwhitneyu(s[c], s[~c]).statistic
    assert auroc(s, c) == pytest.approx(u / (c.sum() * (~c).sum()), abs=1e-12)


def test_auroc_nan_raises_with_count():
    with pytest.raises(ValueError, match="2 NaN"):
        auroc([0.1, np.nan, 0.3, np.nan], [True, False, True, False])


def test_auroc_single_class_is_nan():
    assert math.isnan(auroc([0.1, 0.2, 0.3], [True, True, True]))
    assert math.isnan(auroc([0.1, 0.2, 0.3], [0, 0, 0]))


@pytest.mark.parametrize("scores,correct,msg", [
    ([0.1, 0.2], [True], "differ in length"),
    ([[0.1, 0.2]], [[True, False]], "1-D"),
    ([0.1, 0.2], [2, 0], "boolean or 0/1"),
    ([], [], "empty"),
])
def test_bad_input_raises(scores, correct, msg):
    for fn in (auroc, aurc, risk_coverage):
        with pytest.raises(ValueError, match=msg):
            fn(scores, correct)


# ----------------------------------------------------------------------------- risk-coverage / AURC
def test_risk_coverage_hand_example_with_ties():
    rc = risk_coverage([0.8, 0.9, 0.1, 0.8], [False, True, False, True])
    assert rc["threshold"].tolist() == [0.9, 0.8, 0.1]
    assert rc["n_answered"].tolist() == [1, 3, 4]
    np.testing.assert_allclose(rc["coverage"], [0.25, 0.75, 1.0])
    np.testing.assert_allclose(rc["risk"], [0.0, 1 / 3, 0.5])


def test_aurc_hand_example_with_ties():
    # blocks {0.9}: risk 0, {0.8,0.8}: risk 1/3 (weight 2), {0.1}: risk 2/4 -> (0 + 2/3 + 1/2)/4
    assert aurc([0.9, 0.8, 0.8, 0.1], [True, False, True, False]) == pytest.approx(7 / 24)


def test_aurc_hand_example_untied():
    # risk@1 = 1, risk@2 = 1/2, risk@3 = 1/3 -> mean = 11/18
    assert aurc([3.0, 2.0, 1.0], [False, True, True]) == pytest.approx(11 / 18)


def test_aurc_all_tied_is_error_rate():
    assert aurc([0.5] * 5, [1, 0, 1, 1, 0]) == pytest.approx(0.4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 5, allow_nan=False), st.booleans()), min_size=1, max_size=40,
                unique_by=lambda t: t[0]))
def test_aurc_untied_equals_mean_risk_at_k(data):
    s = np.array([d[0] for d in data])
    c = np.array([d[1] for d in data])
    order = np.argsort(-s)
    err = ~c[order]
    risk_at_k = [err[:k].mean() for k in range(1, len(s) + 1)]
    assert aurc(s, c) == pytest.approx(float(np.mean(risk_at_k)), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=40), st.randoms())
def test_tie_aware_curve_ignores_input_order(data, rnd):
    s = np.array([d[0] for d in data], dtype=float)
    c = np.array([d[1] for d in data])
    perm = list(range(len(s)))
    rnd.shuffle(perm)
    assert aurc(s, c) == pytest.approx(aurc(s[perm], c[perm]), abs=1e-12)
    rc = risk_coverage(s, c)
    assert len(rc) == len(np.unique(s))  # one point per distinct score
    assert rc["coverage"].is_monotonic_increasing and rc["coverage"].iloc[-1] == 1.0
    assert rc["risk"].iloc[-1] == pytest.approx((~c).mean())
    # each point = error rate among scores >= threshold
    for _, row in rc.iterrows():
        ans = s >= row["threshold"]
        assert row["n_answered"] == ans.sum()
        assert row["risk"] == pytest.approx((~c[ans]).mean())


# ----------------------------------------------------------------------------- Wilson
def test_wilson_matches_formula():
    k, n, z = 5, 20, 1.959963984540054
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(center - half, abs=1e-10)
    assert hi == pytest.approx(center + half, abs=1e-10)


def test_wilson_edge_cases():
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
    lo, hi = wilson_interval(0, 50)
    assert lo == pytest.approx(0.0, abs=1e-12) and 0 < hi < 0.1
    lo90, hi90 = wilson_interval(7, 50, level=0.90)
    lo95, hi95 = wilson_interval(7, 50)
    assert lo95 < lo90 < 7 / 50 < hi90 < hi95
    for bad in [(3, 2), (-1, 5), (1.5, 4)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError, match="level"):
        wilson_interval(1, 2, level=1.5)


# ----------------------------------------------------------------------------- bootstrap
def _asym(flip_probe, flip_ctrl, wrong):
    def gap(f):
        return (f * wrong).sum(-1) / wrong.sum(-1) - (f * ~wrong).sum(-1) / (~wrong).sum(-1)
    return gap(flip_probe) - gap(flip_ctrl)


def _asym_scalar(flip_probe, flip_ctrl, wrong):  # 1-D only: forces the loop path
    return float(flip_probe[wrong].mean() - flip_probe[~wrong].mean()
                 - (flip_ctrl[wrong].mean() - flip_ctrl[~wrong].mean()))


def test_paired_bootstrap_vectorized_equals_loop_and_is_deterministic():
    rng = np.random.default_rng(1)
    n = 400
    wrong = rng.uniform(size=n) < 0.15
    fp = rng.uniform(size=n) < np.where(wrong, 0.14, 0.04)
    fc = rng.uniform(size=n) < np.where(wrong, 0.01, 0.002)
    a = paired_bootstrap(_asym, fp, fc, wrong, n_boot=500)
    b = paired_bootstrap(_asym, fp, fc, wrong, n_boot=500, vectorized=False)
    c = paired_bootstrap(_asym_scalar, fp, fc, wrong, n_boot=500)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a, c, rtol=0, atol=1e-12)
    assert a == paired_bootstrap(_asym, fp, fc, wrong, n_boot=500)
    assert a != paired_bootstrap(_asym, fp, fc, wrong, n_boot=500, seed=7)
    est, lo, hi = a
    assert est == pytest.approx(_asym_scalar(fp, fc, wrong))
    assert lo < est < hi


def test_paired_bootstrap_keeps_pairs_together():
    rng = np.random.default_rng(2)
    x = rng.normal(size=200)
    # difference of paired means is exactly 1 in every paired resample; an unpaired resample
    # would give a wide interval
    est, lo, hi = paired_bootstrap(lambda a, b: (a - b).mean(-1), x + 1.0, x, n_boot=300)
    assert est == pytest.approx(1.0) and lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def test_paired_bootstrap_mean_interval_close_to_normal_theory():
    rng = np.random.default_rng(3)
    x = rng.normal(size=500)
    est, lo, hi = paired_bootstrap(lambda a: a.mean(-1), x, n_boot=4000)
    half = 1.959964 * x.std(ddof=1) / math.sqrt(x.size)
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert lo < x.mean() < hi


def test_paired_bootstrap_nan_policy_and_validation():
    wrong = np.zeros(30, dtype=bool)
    wrong[0] = True  # most resamples have no wrong question -> NaN statistic
    f = np.ones(30)
    with pytest.raises(ValueError, match="NaN"):
        paired_bootstrap(lambda f, w: f[w].mean() if w.any() else np.nan, f, wrong, n_boot=50)
    with pytest.warns(RuntimeWarning, match="omitted"):
        est, lo, hi = paired_bootstrap(lambda f, w: f[w].mean() if w.any() else np.nan, f, wrong,
                                       n_boot=50, nan_policy="omit")
    assert (est, lo, hi) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap(lambda a, b: 0.0, np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap(lambda a: a.mean(), np.ones(3), level=0)
