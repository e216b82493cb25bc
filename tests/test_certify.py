"""Tests for probeguard_core.certify (§3.3, Algorithm 2, Appendix E; DESIGN 3 "LTT")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probeguard_core import certify as C
from probeguard_core.certify import (
    DEFAULT_GRID,
    Certificate,
    alpha_sweep,
    binomial_pvalue,
    global_ltt,
    ltt_test,
    ltt_threshold,
    naive_quantile_threshold,
    repeated_splits,
    stratified_certify,
    summarize,
)


def binom_cdf_by_hand(E: int, n: int, a: float) -> float:
    return sum(math.comb(n, j) * a**j * (1 - a) ** (n - j) for j in range(E + 1))


# ----------------------------------------------------------------------------- grid, p-value
def test_default_grid_is_exact():
    assert DEFAULT_GRID.size == 20
    assert DEFAULT_GRID.tolist() == [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6,
                                     0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]


def test_binomial_pvalue():
    assert binomial_pvalue(0, 0, 0.1) == 1.0
    assert binomial_pvalue(2, 14, 0.4) == pytest.approx(binom_cdf_by_hand(2, 14, 0.4), rel=1e-12)
    np.testing.assert_allclose(binomial_pvalue(np.array([0, 1]), np.array([3, 3]), 0.5), [1 / 8, 4 / 8])
    with pytest.raises(ValueError):
        binomial_pvalue(4, 3, 0.1)
    with pytest.raises(ValueError):
        binomial_pvalue(1, 3, 1.0)


# ----------------------------------------------------------------------------- hand-worked LTT
# n = 20 distinct scores 1.00, 0.95, ..., 0.05 (rank r has score (21 - r) / 20), wrong answers at
# ranks 3, 12, 16, 17, 18. Grid (0.25, 0.5, 0.75, 1.0), one stratum, delta = 0.2: level = 0.05.
SCORES20 = np.array([(21 - r) / 20 for r in range(1, 21)])
ERRORS20 = np.isin(np.arange(1, 21), [3, 12, 16, 17, 18])


def test_ltt_hand_example_n20():
    perm = np.random.default_rng(5).permutation(20)  # input order must not matter
    res = ltt_test(SCORES20[perm], ERRORS20[perm], alpha=0.4, delta=0.2, grid=[0.25, 0.5, 0.75, 1.0],
                   n_strata=1)
    assert res.level == pytest.approx(0.05)
    assert res.coverage.tolist() == [1.0, 0.75, 0.5, 0.25]  # tested from the largest
    # c=1.0: k=20, lambda = rank-20 score, n_c=19 (ranks 1-19), E=5 (3,12,16,17,18)
    # c=.75: k=15, n_c=14, E=2 (3,12);  c=.5: k=10, n_c=9, E=1;  c=.25: k=5, n_c=4, E=1
    np.testing.assert_allclose(res.lambdas, [SCORES20[19], SCORES20[14], SCORES20[9], SCORES20[4]])
    assert res.n_c.tolist() == [19, 14, 9, 4]
    assert res.E_c.tolist() == [5, 2, 1, 1]
    # by hand: P[Bin(14,.4)<=2] = .6^14 + 14(.4)(.6^13) + 91(.16)(.6^12) = 0.039792
    #          P[Bin(9,.4)<=1] = .6^9 + 9(.4)(.6^8) = 0.070544; P[Bin(4,.4)<=1] = .1296+.3456 = 0.4752
    np.testing.assert_allclose(res.p_values, [0.162922, 0.039792, 0.070544, 0.4752], atol=1e-6)
    for p, n, E in zip(res.p_values, res.n_c, res.E_c):
        assert p == pytest.approx(binom_cdf_by_hand(int(E), int(n), 0.4), rel=1e-10)
    assert res.rejected.tolist() == [False, True, False, False]
    assert res.chosen == 1
    thr = ltt_threshold(SCORES20, ERRORS20, 0.4, 0.2, [0.25, 0.5, 0.75, 1.0], 1)
    assert thr == SCORES20[14] == res.threshold
    # deployment is strict: the question defining the threshold is not answered
    assert (SCORES20 > thr).sum() == 14
    # at alpha = 0.3 nothing is rejected (p(c=.75) = 0.1608 by hand)
    assert ltt_threshold(SCORES20, ERRORS20, 0.3, 0.2, [0.25, 0.5, 0.75, 1.0], 1) is None


def test_ltt_hand_example_paper_settings():
    # default grid, delta = .05, m = 2: level = .05 / 40 = .00125. All 20 correct: the c = 1 point
    # has n_c = 19, E = 0, p = (1 - alpha)^19: .7^19 = .00114 (reject), .75^19 = .00423 (not)
    ok = np.zeros(20, dtype=bool)
    res = ltt_test(SCORES20, ok, alpha=0.3)
    assert res.level == pytest.approx(0.00125)
    assert res.p_values[0] == pytest.approx(0.7**19)
    assert res.threshold == SCORES20[-1]
    res25 = ltt_test(SCORES20, ok, alpha=0.25)
    assert res25.p_values[0] == pytest.approx(0.75**19)
    assert res25.threshold is None and not res25.rejected.any()


def test_ltt_ties_k_and_strict_count():
    s = np.array([0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    e = np.zeros(10, dtype=bool)
    res = ltt_test(s, e, alpha=0.5, grid=[0.3, 0.5, 0.15, 1.0], n_strata=1)
    t = res.table().set_index("coverage")
    # c=.3: k=ceil(3 - 1e-9)=3 -> lambda=.8, only .9 strictly above
    assert t.loc[0.3, "lambda"] == 0.8 and t.loc[0.3, "n_c"] == 1
    # c=.15: k=ceil(1.5)=2 -> lambda=.8 as well
    assert t.loc[0.15, "lambda"] == 0.8 and t.loc[0.15, "n_c"] == 1
    assert t.loc[0.5, "lambda"] == 0.7 and t.loc[0.5, "n_c"] == 4
    assert t.loc[1.0, "lambda"] == 0.2 and t.loc[1.0, "n_c"] == 9


def test_k_uses_epsilon():
    # 0.55 * 100 = 55.00000000000001 in floating point; k must be 55, not 56
    assert 0.55 * 100 > 55
    s = np.arange(100, 0, -1) / 100.0  # distinct, descending
    res = ltt_test(s, np.zeros(100, dtype=bool), alpha=0.3, grid=[0.55], n_strata=1)
    assert res.lambdas[0] == s[54] and res.n_c[0] == 54


def test_empty_and_validation():
    assert ltt_threshold([], [], 0.1) is None
    with pytest.raises(ValueError, match="NaN"):
        ltt_threshold([0.1, np.nan], [0, 1], 0.1)
    with pytest.raises(ValueError, match="length"):
        ltt_threshold([0.1, 0.2], [0], 0.1)
    with pytest.raises(ValueError, match="0/1"):
        ltt_threshold([0.1, 0.2], [0, 2], 0.1)
    with pytest.raises(ValueError, match="1-D"):
        ltt_threshold([[0.1, 0.2]], [[0, 1]], 0.1)
    for a in (0, 1, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            ltt_threshold([0.1], [0], a)
    with pytest.raises(ValueError, match="delta"):
        ltt_threshold([0.1], [0], 0.1, delta=1.0)
    for g in ([0.0, 0.5], [0.5, 1.2], [0.5, 0.5], []):
        with pytest.raises(ValueError, match="grid"):
            ltt_threshold([0.1], [0], 0.1, grid=g)
    with pytest.raises(ValueError, match="n_strata"):
        ltt_threshold([0.1], [0], 0.1, n_strata=0)


# ----------------------------------------------------------------------------- properties
score_lists = st.lists(st.integers(0, 6), min_size=0, max_size=120)


def _data(draw_scores, seed, err_rate):
    rng = np.random.default_rng(seed)
    s = np.array(draw_scores, dtype=float) / 6.0
    e = rng.uniform(size=s.size) < err_rate * (1.2 - s)
    return s, e


@settings(max_examples=150, deadline=None)
@given(score_lists, st.integers(0, 2**16), st.floats(0.0, 0.8),
       st.sampled_from([0.05, 0.1, 0.15, 0.2, 0.3]), st.sampled_from([0.05, 0.2, 0.5]),
       st.sampled_from([None, [0.1, 0.33, 0.5, 0.9, 1.0], [0.5]]), st.integers(1, 3))
def test_vectorized_equals_loop(scores, seed, err_rate, alpha, delta, grid, m):
    s, e = _data(scores, seed, err_rate)
    assert ltt_threshold(s, e, alpha, delta, grid, m) == C._ltt_threshold_loop(s, e, alpha, delta, grid, m)


@settings(max_examples=100, deadline=None)
@given(score_lists, st.integers(0, 2**16), st.floats(0.0, 0.8), st.sampled_from([0.05, 0.3]))
def test_certified_coverage_monotone_in_alpha(scores, seed, err_rate, delta):
    s, e = _data(scores, seed, err_rate)
    alphas = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8]
    covs = []
    for a in alphas:
        thr = ltt_threshold(s, e, a, delta)
        covs.append(0.0 if thr is None else float((s > thr).mean()))
    assert all(x <= y for x, y in zip(covs, covs[1:])), covs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), max_size=200),
       st.sampled_from([0.05, 0.2, 0.5, 0.9]), st.sampled_from([0.05, 0.5, 0.9]))
def test_nothing_certified_when_every_answer_is_wrong(scores, alpha, delta):
    e = np.ones(len(scores), dtype=bool)
    assert ltt_threshold(scores, e, alpha, delta, n_strata=1) is None
    assert naive_quantile_threshold(scores, e, alpha) is None


# ----------------------------------------------------------------------------- stratified
def _three_strata(n=900, seed=0):
    rng = np.random.default_rng(seed)
    strata = rng.choice(["S1", "S2", "S3"], size=n, p=[0.6, 0.3, 0.1])
    s = rng.uniform(size=n)
    e = rng.uniform(size=n) < np.where(strata == "S1", 0.3, 0.5) * (1 - s) ** 2
    s[strata == "S3"] = np.nan  # S3 has no score
    return s, e, strata


def test_stratified_certify_matches_per_stratum_ltt():
    s, e, strata = _three_strata()
    cert = stratified_certify(s, e, strata, alpha=0.1)
    assert isinstance(cert, Certificate) and set(cert.thresholds) == {"S1", "S2"}
    for S in ("S1", "S2"):
        sel = strata == S
        assert cert.thresholds[S] == ltt_threshold(s[sel], e[sel], 0.1, n_strata=2)
        assert cert.n[S] == sel.sum() and cert.errors[S] == e[sel].sum()
    assert cert.thresholds["S1"] is not None
    assert len(cert.pvalues) == 40 and set(cert.pvalues["stratum"]) == {"S1", "S2"}
    ans = cert.decide(s, strata)
    assert not ans[strata == "S3"].any()
    sel = strata == "S1"
    np.testing.assert_array_equal(ans[sel], s[sel] > cert.thresholds["S1"])
    # one certified stratum: Bonferroni over the grid only
    c1 = stratified_certify(s, e, strata, alpha=0.1, certified=("S1",))
    assert c1.thresholds == {"S1": ltt_threshold(s[sel], e[sel], 0.1, n_strata=1)}
    bad = s.copy()
    bad[np.flatnonzero(sel)[0]] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cert.decide(bad, strata)
    with pytest.raises(ValueError, match="S1"):
        stratified_certify(bad, e, strata, alpha=0.1)


def test_global_ltt_is_one_stream():
    s, e, _ = _three_strata()
    s = np.nan_to_num(s)
    assert global_ltt(s, e, 0.1) == ltt_threshold(s, e, 0.1, n_strata=1)


# ----------------------------------------------------------------------------- naive foil
def test_naive_quantile_hand_example():
    s = [0.9, 0.8, 0.8, 0.7, 0.1]
    e = [False, True, False, False, True]
    # tie-aware curve: {.9} risk 0, {.8,.8} risk 1/3, {.7} risk 1/4, {.1} risk 2/5
    assert naive_quantile_threshold(s, e, 0.25) == 0.1        # answers the four >= .7
    assert naive_quantile_threshold(s, e, 0.3) == 0.1
    assert naive_quantile_threshold(s, e, 0.2) == 0.8         # only {.9}
    assert naive_quantile_threshold(s, e, 0.45) == float("-inf")  # everything
    assert naive_quantile_threshold([0.9, 0.5], [True, True], 0.45) is None
    assert naive_quantile_threshold([], [], 0.1) is None


# ----------------------------------------------------------------------------- repeated splits
COLS = ["split", "alpha", "stratum", "threshold", "certified", "n_cal", "n_test", "coverage", "risk",
        "violated"]


def test_repeated_splits_matches_loop_reference():
    s, e, strata = _three_strata(n=700, seed=3)
    s = np.where(np.isnan(s), np.nan, np.round(s * 20) / 20)  # ties
    df = repeated_splits(s, e, strata, n_splits=12)
    ref = C._repeated_splits_loop(s, e, strata, n_splits=12)
    got = df[df.stratum.isin(["S1", "S2"])][COLS].reset_index(drop=True)
    ref = ref[COLS].sort_values(["split", "alpha", "stratum"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, ref, check_dtype=False)
    assert df.certified.any() and (~df.certified).any()


def test_repeated_splits_split_construction_and_rows():
    s, e, strata = _three_strata(n=501, seed=4)
    df = repeated_splits(s, e, strata, alphas=[0.1, 0.2], n_splits=3, seed=42)
    assert len(df) == 3 * 2 * 4 and set(df.stratum) == {"S1", "S2", "S3", "all"}
    assert (df.method == "stratified").all()
    for j in range(3):
        perm = np.random.default_rng(42 + j).permutation(501)
        cal = np.zeros(501, dtype=bool)
        cal[perm[:250]] = True
        for S in ("S1", "S2", "S3"):
            row = df[(df.split == j) & (df.stratum == S)].iloc[0]
            assert row.n_cal == (cal & (strata == S)).sum()
            assert row.n_test == (~cal & (strata == S)).sum()
        a = df[(df.split == j) & (df.stratum == "all")]
        assert (a.n_cal == 250).all() and (a.n_test == 251).all()
    s3 = df[df.stratum == "S3"]
    assert (s3.coverage == 0).all() and s3.risk.isna().all() and not s3.certified.any()
    # the pooled row counts S3 as abstaining
    for (j, a), g in df.groupby(["split", "alpha"]):
        parts = g[g.stratum != "all"]
        allrow = g[g.stratum == "all"].iloc[0]
        answered = (parts.coverage * parts.n_test).sum()
        assert allrow.coverage == pytest.approx(answered / allrow.n_test)
        errs = np.nansum(parts.risk * parts.coverage * parts.n_test)
        if answered:
            assert allrow.risk == pytest.approx(errs / answered)
            assert allrow.violated == (allrow.risk > a)
    pd.testing.assert_frame_equal(df, repeated_splits(s, e, strata, alphas=[0.1, 0.2], n_splits=3))


def test_repeated_splits_pooled_methods_match_direct_calls():
    s, e, strata = _three_strata(n=400, seed=5)
    s = np.nan_to_num(s, nan=0.2)
    perm = np.random.default_rng(42).permutation(400)
    cal, test = perm[:200], perm[200:]
    for method, fn in (("global", lambda a: global_ltt(s[cal], e[cal], a)),
                       ("naive", lambda a: naive_quantile_threshold(s[cal], e[cal], a))):
        df = repeated_splits(s, e, strata, alphas=[0.1, 0.2], n_splits=2, method=method)
        for a in (0.1, 0.2):
            rows = df[(df.split == 0) & (df.alpha == a)]
            thr = fn(a)
            exp = np.nan if thr is None else thr
            np.testing.assert_array_equal(rows.threshold.to_numpy(), np.full(len(rows), exp))
            allrow = rows[rows.stratum == "all"].iloc[0]
            ans = s[test] > thr if thr is not None else np.zeros(200, dtype=bool)
            assert allrow.coverage == pytest.approx(ans.mean())
            if ans.any():
                assert allrow.risk == pytest.approx(e[test][ans].mean())
    with pytest.raises(ValueError, match="NaN"):
        repeated_splits(np.where(strata == "S3", np.nan, s), e, strata, method="global")


def test_extra_cal_goes_to_calibration_only():
    s, e, strata = _three_strata(n=400, seed=6)
    rng = np.random.default_rng(9)
    xs = rng.uniform(0.5, 1.0, size=300)
    xe = np.zeros(300, dtype=bool)
    xst = np.array(["S1"] * 300)
    base = repeated_splits(s, e, strata, alphas=[0.1], n_splits=4)
    aug = repeated_splits(s, e, strata, alphas=[0.1], n_splits=4, extra_cal=(xs, xe, xst))
    b1, a1 = base[base.stratum == "S1"], aug[aug.stratum == "S1"]
    np.testing.assert_array_equal(a1.n_cal.to_numpy(), b1.n_cal.to_numpy() + 300)
    np.testing.assert_array_equal(a1.n_test.to_numpy(), b1.n_test.to_numpy())
    # threshold of split 0 = LTT on the calibration half plus the extra questions
    perm = np.random.default_rng(42).permutation(400)
    cal = perm[:200][strata[perm[:200]] == "S1"]
    exp = ltt_threshold(np.r_[s[cal], xs], np.r_[e[cal], xe], 0.1, n_strata=2)
    got = a1[a1.split == 0].threshold.iloc[0]
    assert (exp is None and np.isnan(got)) or got == exp
    b2, a2 = base[base.stratum == "S2"], aug[aug.stratum == "S2"]
    pd.testing.assert_frame_equal(a2.reset_index(drop=True), b2.reset_index(drop=True))


def test_repeated_splits_validation():
    s, e, strata = _three_strata(n=100)
    with pytest.raises(ValueError, match="method"):
        repeated_splits(s, e, strata, method="bogus")
    with pytest.raises(ValueError, match="n_splits"):
        repeated_splits(s, e, strata, n_splits=0)
    with pytest.raises(ValueError, match="alpha"):
        repeated_splits(s, e, strata, alphas=[0.1, 1.0])
    bad = s.copy()
    bad[np.flatnonzero(strata == "S2")[:3]] = np.nan
    with pytest.raises(ValueError, match="3 NaN"):
        repeated_splits(bad, e, strata)


# ----------------------------------------------------------------------------- summaries
def test_summarize_hand_example():
    df = pd.DataFrame({
        "split": [0, 1, 2], "alpha": 0.1, "method": "stratified", "stratum": "S1",
        "certified": [True, True, False], "coverage": [0.5, 0.7, 0.0], "risk": [0.05, 0.12, np.nan],
        "violated": [False, True, False],
    })
    out = summarize(df).iloc[0]
    assert out.n_splits == 3 and out.n_certified == 2 and out.violations == 1 and out.n_risk == 2
    assert out.coverage_mean == pytest.approx(0.4)
    assert out.coverage_sd == pytest.approx(np.std([0.5, 0.7, 0.0], ddof=1))
    assert out.risk_mean == pytest.approx(0.085)
    assert out.risk_sd == pytest.approx(np.std([0.05, 0.12], ddof=1))
    with pytest.raises(ValueError, match="lacks"):
        summarize(df.drop(columns="risk"))


def test_alpha_sweep_defaults():
    s, e, strata = _three_strata(n=300)
    df, summ = alpha_sweep(s, e, strata, n_splits=3)
    assert sorted(df.alpha.unique()) == [0.05, 0.1, 0.15, 0.2]
    assert len(summ) == 4 * 4
    pd.testing.assert_frame_equal(summ, summarize(df))


@pytest.mark.parametrize("ties", [False, True])
def test_resampled_thresholds_equal_the_loop_row_by_row(ties):
    """The block path of resampled_thresholds (all draws at once) equals Algorithm 2 one draw at a time."""
    rng = np.random.default_rng(11 + ties)
    for _ in range(40):
        d, n, m = int(rng.integers(1, 12)), int(rng.integers(1, 250)), int(rng.integers(1, 3))
        s = rng.integers(0, 6, size=(d, n)).astype(float) if ties else rng.random((d, n))
        e = rng.random((d, n)) < rng.uniform(0, 0.4)
        alpha = float(rng.choice([0.05, 0.1, 0.2, 0.35]))
        got = C.resampled_thresholds(s, e, alpha, n_strata=m)
        want = [C._ltt_threshold_loop(s[i], e[i], alpha, n_strata=m) for i in range(d)]
        assert [None if np.isnan(x) else float(x) for x in got] == want
    assert np.isnan(C.resampled_thresholds(np.zeros((3, 0)), np.zeros((3, 0), bool), 0.1)).all()
