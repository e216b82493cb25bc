"""Evaluation metrics of §4.1: AUROC, tie-aware risk-coverage curves, AURC, Wilson intervals,
and a paired percentile bootstrap.

Conventions (CONTRIBUTING): ``scores`` are higher = more confident the answer is correct;
``correct`` is a boolean array (0/1 integers are accepted), an *error* is ``~correct``.

Tie handling (risk-coverage, AURC). A selective rule that thresholds a score cannot separate
questions with equal scores, so questions with equal scores enter the answered set together:
the risk-coverage curve has one point per *distinct* score (Figure 5, Table 2's AURC column).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from probeguard_core import SEED

__all__ = ["as_binary", "as_scores", "auroc", "auroc_rows", "aurc", "aurc_rows", "paired_bootstrap", "risk_coverage", "wilson_interval"]


# --------------------------------------------------------------------------- validation
def as_scores(scores: ArrayLike, name: str = "scores") -> NDArray[np.float64]:
    """A 1-D float array with no NaN (``ValueError`` naming ``name`` otherwise)."""
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {s.shape}")
    try:
        s = s.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from exc
    n_nan = int(np.isnan(s).sum())
    if n_nan:
        raise ValueError(f"{name} contain {n_nan} NaN value(s) out of {s.size}; "
                         "drop or impute them explicitly before calling")
    return s


def as_binary(values: ArrayLike, name: str) -> NDArray[np.bool_]:
    """A 1-D boolean array from booleans or 0/1 (``ValueError`` naming ``name`` otherwise)."""
    v = np.asarray(values)
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {v.shape}")
    if v.dtype == np.bool_:
        return v
    if v.size and v.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be boolean or 0/1, got dtype {v.dtype}")
    bad = ~np.isin(v, (0, 1))
    if bad.any():
        raise ValueError(f"{name} must be boolean or 0/1; {int(bad.sum())} value(s) are not, "
                         f"e.g. {v[bad][0]!r}")
    return v.astype(bool)


def _as_scores_correct(scores: ArrayLike, correct: ArrayLike, *, allow_empty: bool = False
                       ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Validate and convert ``(scores, correct)``; raise ``ValueError`` naming the bad input."""
    s = as_scores(scores)
    c = as_binary(correct, "correct")
    if s.shape[0] != c.shape[0]:
        raise ValueError(f"scores and correct differ in length: {s.shape[0]} != {c.shape[0]}")
    if s.shape[0] == 0 and not allow_empty:
        raise ValueError("scores is empty: no questions to evaluate")
    return s, c


# --------------------------------------------------------------------------- AUROC
def auroc(scores: ArrayLike, correct: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for separating correct from incorrect answers (§4.1).

    Computed by :func:`sklearn.metrics.roc_auc_score` ``(correct, scores)``; ties count one half.

    NaN scores raise ``ValueError`` stating how many (the caller decides whether to drop or impute).
    When ``correct`` holds a single class (all correct or all wrong) AUROC is undefined and
    ``nan`` is returned without raising, so a table of many cells does not crash on one
    degenerate cell.
    """
    from sklearn.metrics import roc_auc_score

    s, c = _as_scores_correct(scores, correct)
    if c.all() or not c.any():
        return float("nan")
    return float(roc_auc_score(c, s))


# --------------------------------------------------------------------------- risk-coverage
def _tie_blocks(s: NDArray[np.float64], c: NDArray[np.bool_]
                ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Distinct scores in descending order, with cumulative answered counts and error counts."""
    order = np.argsort(-s, kind="stable")
    s_sorted = s[order]
    err_cum = np.cumsum(~c[order])
    # last index of each block of equal scores
    ends = np.flatnonzero(np.r_[s_sorted[1:] != s_sorted[:-1], True])
    return s_sorted[ends], ends + 1, err_cum[ends]


def risk_coverage(scores: ArrayLike, correct: ArrayLike) -> pd.DataFrame:
    """Tie-aware risk-coverage curve (§4.1, Figure 5).

    Questions are sorted by descending score; all questions sharing a score enter together, so
    there is one row per distinct score value ``v`` (descending), describing the rule
    "answer iff score >= v":

    - ``threshold``: ``v``;
    - ``n_answered``: #{score >= v};
    - ``coverage``: ``n_answered / n``;
    - ``risk``: selective risk, the error rate among the answered questions.

    The last row always has coverage 1 and risk equal to the overall error rate.
    """
    s, c = _as_scores_correct(scores, correct)
    thr, n_ans, n_err = _tie_blocks(s, c)
    n = s.shape[0]
    return pd.DataFrame({
        "coverage": n_ans / n,
        "risk": n_err / n_ans,
        "threshold": thr,
        "n_answered": n_ans.astype(np.int64),
    })


def aurc(scores: ArrayLike, correct: ArrayLike) -> float:
    """Area under the tie-aware risk-coverage curve (Table 2, Figure 5), lower is better.

    Defined as ``AURC = (1/n) * sum_i risk(b(i))``, where ``b(i)`` is the block of questions tied
    with question ``i``'s score and ``risk(b)`` is the selective risk once that whole block has
    been admitted (the :func:`risk_coverage` row of that score). Equivalently, a block of size
    ``m`` contributes ``m/n`` times its risk. Without ties this is the usual
    ``(1/n) * sum_{k=1..n} risk@k`` with ``risk@k`` the error rate among the top-k scores.

    Worked example: scores (0.9, 0.8, 0.8, 0.1), correct (T, F, T, F). The blocks are {0.9}
    (risk 0/1), {0.8, 0.8} (risk 1/3 at coverage 3/4) and {0.1} (risk 2/4), so
    AURC = (1*0 + 2*(1/3) + 1*(1/2)) / 4 = 7/24.
    """
    s, c = _as_scores_correct(scores, correct)
    _, n_ans, n_err = _tie_blocks(s, c)
    sizes = np.diff(np.r_[0, n_ans])
    return float(np.sum(sizes * (n_err / n_ans)) / s.shape[0])


# --------------------------------------------------------------------------- many rows at once
def auroc_rows(s: NDArray[np.float64], y: NDArray[np.bool_]) -> NDArray[np.float64]:
    """AUROC of every row of ``s`` against the same row of ``y`` (Mann-Whitney, ties one half, as
    :func:`auroc`); NaN for a row with a single class. One row per bootstrap replicate (the
    claims ledger)."""
    from scipy.stats import rankdata  # on use: certify imports this module and must stay light

    r = rankdata(s, axis=1)
    n1 = y.sum(1).astype(float)
    n0 = y.shape[1] - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (r * y).sum(1) - n1 * (n1 + 1) / 2
        return np.where((n1 > 0) & (n0 > 0), u / (n1 * n0), np.nan)


def aurc_rows(s: NDArray[np.float64], y: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Tie-aware AURC of every row (one bootstrap replicate per row) (:func:`aurc`: each question counts the selective risk
    once its whole block of tied scores is admitted)."""
    order = np.argsort(-s, axis=1, kind="stable")
    ss = np.take_along_axis(s, order, 1)
    err = ~np.take_along_axis(y, order, 1)
    n = s.shape[1]
    ce = np.cumsum(err, axis=1)
    pos = np.broadcast_to(np.arange(n), s.shape)
    is_end = np.concatenate([ss[:, 1:] != ss[:, :-1], np.ones((s.shape[0], 1), bool)], axis=1)
    end = np.flip(np.minimum.accumulate(np.flip(np.where(is_end, pos, n), axis=1), axis=1), axis=1)
    risk = np.take_along_axis(ce, end, 1) / (end + 1)
    return risk.mean(1)


# --------------------------------------------------------------------------- Wilson
def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion ``k/n`` (flip rates, §4.1 and Table 6).

    Uses :func:`statsmodels.stats.proportion.proportion_confint` with ``method="wilson"``.
    ``n = 0`` gives ``(nan, nan)``: no observations, no interval.
    """
    from statsmodels.stats.proportion import proportion_confint

    if not (0.0 < level < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    for name, v in (("k", k), ("n", n)):
        if isinstance(v, (bool, np.bool_)) or not float(v).is_integer():
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (float("nan"), float("nan"))
    lo, hi = proportion_confint(k, n, alpha=1.0 - level, method="wilson")
    return (float(lo), float(hi))


# --------------------------------------------------------------------------- bootstrap
def paired_bootstrap(
    stat_fn: Callable[..., Any],
    *arrays: ArrayLike,
    n_boot: int = 2000,
    seed: int = SEED,
    level: float = 0.95,
    vectorized: bool | None = None,
    nan_policy: str = "raise",
) -> tuple[float, float, float]:
    """Paired percentile bootstrap of ``stat_fn(*arrays)`` (Appendix G, Table 6 differences).

    Every replicate draws one vector of ``n`` question indices with replacement
    (``numpy.random.default_rng(seed).integers(0, n, size=(n_boot, n))``) and applies the *same*
    indices to every array, so paired measurements of a question stay together (e.g. its flip
    under the probe arm and under a control arm). Returns ``(estimate, lo, hi)``: the statistic
    on the original data and the ``(1-level)/2`` and ``(1+level)/2`` quantiles
    (``numpy.quantile``, linear interpolation) of the replicates.

    Vectorization: with ``vectorized=True`` ``stat_fn`` is called once with arrays of shape
    ``(n_boot, n, ...)`` and must reduce the question axis (axis 1 counted from the arrays'
    leading axis, i.e. ``axis=1`` for 1-D inputs, returning shape ``(n_boot,)``). With ``False``
    it is called once per replicate on 1-D resamples. ``None`` (default) tries the batched call
    and uses it only if it returns shape ``(n_boot,)`` and its first two replicates equal the
    per-replicate calls; otherwise it falls back to the loop.

    ``nan_policy``: a NaN replicate (e.g. a resample with no wrong consensus) raises
    ``ValueError`` with ``"raise"``; with ``"omit"`` NaN replicates are left out of the quantiles
    and a ``RuntimeWarning`` states how many.

    Example (difference in flip asymmetry, probe arm minus a control arm)::

        def asym(flip_probe, flip_ctrl, wrong):
            def gap(f):
                return ((f * wrong).sum(-1) / wrong.sum(-1)
                        - (f * ~wrong).sum(-1) / (~wrong).sum(-1))
            return gap(flip_probe) - gap(flip_ctrl)
        paired_bootstrap(asym, flip_probe, flip_ctrl, wrong)
    """
    if not arrays:
        raise ValueError("paired_bootstrap needs at least one array")
    if not (0.0 < level < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if int(n_boot) != n_boot or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if nan_policy not in ("raise", "omit"):
        raise ValueError(f"nan_policy must be 'raise' or 'omit', got {nan_policy!r}")
    arrs = [np.asarray(a) for a in arrays]
    n = arrs[0].shape[0] if arrs[0].ndim else 0
    for i, a in enumerate(arrs):
        if a.ndim == 0 or a.shape[0] != n:
            raise ValueError(f"array {i} has leading length {a.shape[0] if a.ndim else 'scalar'}, "
                             f"expected {n} (paired arrays must have equal length)")
    if n == 0:
        raise ValueError("paired_bootstrap needs at least one observation")

    estimate = float(stat_fn(*arrs))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(int(n_boot), n))

    def loop() -> NDArray[np.float64]:
        return np.array([float(stat_fn(*[a[row] for a in arrs])) for row in idx])

    boot: NDArray[np.float64] | None = None
    if vectorized is None or vectorized:
        try:
            batched = np.asarray(stat_fn(*[a[idx] for a in arrs]), dtype=np.float64)
        except Exception:
            if vectorized:
                raise
            batched = None
        if batched is not None:
            if batched.shape != (int(n_boot),):
                if vectorized:
                    raise ValueError(f"vectorized stat_fn returned shape {batched.shape}, "
                                     f"expected ({int(n_boot)},)")
            else:
                check = [float(stat_fn(*[a[idx[j]] for a in arrs])) for j in range(min(2, n_boot))]
                if vectorized or np.allclose(batched[: len(check)], check, equal_nan=True,
                                             rtol=1e-10, atol=1e-12):
                    boot = batched
    if boot is None:
        boot = loop()

    n_nan = int(np.isnan(boot).sum())
    if n_nan:
        if nan_policy == "raise":
            raise ValueError(f"{n_nan} of {int(n_boot)} bootstrap replicates are NaN; "
                             "pass nan_policy='omit' to leave them out")
        warnings.warn(f"{n_nan} of {int(n_boot)} bootstrap replicates are NaN and were omitted",
                      RuntimeWarning, stacklevel=2)
        boot = boot[~np.isnan(boot)]
        if boot.size == 0:
            return (estimate, float("nan"), float("nan"))
    lo, hi = np.quantile(boot, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return (estimate, float(lo), float(hi))
