"""Stratified Learn-then-Test certification (§3.3, Eqs. 5-6, Algorithm 2, Appendix E).

The arithmetic is fixed by DESIGN 3 ("LTT"):

- coverage grid ``C = 0.05, 0.10, ..., 1.00`` (:data:`DEFAULT_GRID`), tested from the largest
  coverage to the smallest;
- for a stratum with calibration scores ``s_1..s_n`` (higher = more confident) and error
  indicators: ``k = ceil(c*n - 1e-9)``, ``lambda_c`` = the k-th largest score,
  ``n_c = #{s_i > lambda_c}``, ``E_c`` = errors among those ``n_c``,
  ``p_c = BinomCDF(E_c; n_c, alpha)`` (Eq. 6; 1 when ``n_c = 0``);
- reject ``H0: risk(lambda_c) > alpha`` when ``p_c <= delta / (|C| * m)`` with ``m`` the number of
  certified strata (Bonferroni over grid points and strata, Appendix E);
- the threshold is ``lambda_c`` of the first (largest) rejected ``c``; none rejected = abstain;
- deployment: answer ``x`` of stratum ``S`` iff ``score(x) > lambda_S`` (strictly); S3 abstains.

Repeated splits (Appendix E): split ``j`` (0-based) uses
``numpy.random.default_rng(seed + j).permutation(n)``; the first ``floor(n/2)`` permuted
questions are the calibration half, the rest the test half.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from probeguard_core import SEED
from probeguard_core.metrics import as_binary, as_scores

__all__ = [
    "DEFAULT_ALPHAS",
    "DEFAULT_GRID",
    "Certificate",
    "LTTResult",
    "alpha_sweep",
    "binomial_pvalue",
    "bonferroni_level",
    "even_splits",
    "global_ltt",
    "check_level",
    "ltt_test",
    "ltt_threshold",
    "naive_quantile_threshold",
    "repeated_splits",
    "resampled_thresholds",
    "stratified_certify",
    "summarize",
]

#: Coverage grid of Appendix E: 0.05, 0.10, ..., 1.00 (20 points), built exactly.
DEFAULT_GRID: NDArray[np.float64] = np.round(np.arange(1, 21) * 0.05, 2)
#: Risk levels swept in §4.4 / Appendix E.
DEFAULT_ALPHAS: tuple[float, ...] = (0.05, 0.10, 0.15, 0.20)
_K_EPS = 1e-9  # k = ceil(c*n - 1e-9), DESIGN 3


# =========================================================================== the three shared protocols
def bonferroni_level(delta: float, n_grid: int, n_strata: int) -> float:
    """The level each grid point of each certified stratum is tested at (Algorithm 2, line 7):
    ``delta / (|grid| * m)``. The one place this Bonferroni split is written.

    >>> bonferroni_level(0.05, 20, 2)
    0.00125
    """
    return delta / (n_grid * n_strata)


def even_splits(n: int, n_splits: int, seed: int = SEED) -> NDArray[np.bool_]:
    """Calibration masks of the repeated even splits (Appendix E), shape ``(n_splits, n)``:
    split ``j`` permutes with ``default_rng(seed + j)`` and takes the first ``n // 2`` permuted
    questions as calibration (the rest is the test half). The one place the split is written.

    >>> even_splits(5, 3, seed=0).sum(axis=1).tolist()
    [2, 2, 2]
    """
    cal = np.zeros((n_splits, n), dtype=bool)
    for j in range(n_splits):
        perm = np.random.default_rng(seed + j).permutation(n)
        cal[j, perm[: n // 2]] = True
    return cal


def resampled_thresholds(scores: ArrayLike, errors: ArrayLike, alpha: float, delta: float = 0.05,
                         n_strata: int = 2, grid: ArrayLike | None = None) -> NDArray[np.float64]:
    """Resampled certification: :func:`ltt_threshold` on each row of ``scores`` / ``errors``
    (shape ``(n_draws, n_cal)``: one calibration draw per row), NaN where the draw certifies
    nothing. The Theorem 1 audits and the what-if chapter certify their draws through it.

    >>> rng = np.random.default_rng(0)
    >>> s = rng.random((3, 400)); e = rng.random((3, 400)) < 0.02
    >>> resampled_thresholds(s, e, alpha=0.15).shape
    (3,)
    """
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(errors)
    if s.ndim != 2 or s.shape != e.shape:
        raise ValueError(f"scores and errors must be 2-D of one shape (n_draws, n_cal), got {s.shape} and {e.shape}")
    # the checks of ltt_test, once for all rows; then every row's grid at once (_grid_stats)
    s_flat, e_flat = _check_pair(s.reshape(-1), e.reshape(-1))
    s, e = s_flat.reshape(s.shape), e_flat.reshape(s.shape)
    alpha, delta = check_level("alpha", alpha), check_level("delta", delta)
    g = _check_grid(grid)
    level = bonferroni_level(delta, g.size, _check_n_strata(n_strata))
    out = np.full(s.shape[0], np.nan)
    if s.shape[1] == 0 or s.shape[0] == 0:
        return out  # no calibration question: every draw abstains
    lam, _, _, p = _grid_stats(s, e, g, alpha)
    rej = p <= level
    first = np.argmax(rej, axis=1)  # the largest rejected coverage (testing order)
    hit = rej.any(axis=1)
    out[hit] = lam[np.flatnonzero(hit), first[hit]]
    return out


# =========================================================================== validation
def check_level(name: str, v: object, error: type[ValueError] = ValueError) -> float:
    """The one validator of a risk level or error budget: a finite number in (0, 1), exclusive.

    ``alpha`` (target selective risk, Eq. 5) and ``delta`` (error budget) of Algorithm 2 must
    both lie in the open interval; NaN, infinities, booleans and non-numbers are refused with
    ``error`` (a :class:`ValueError` subclass) naming ``name``.

    >>> check_level("alpha", "0.1")
    0.1
    """
    if isinstance(v, bool):
        raise error(f"{name} must be a number in (0, 1), got {v!r}")
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise error(f"{name} must be a number in (0, 1), got {v!r}") from None
    if not (0.0 < f < 1.0):  # also false for NaN
        raise error(f"{name} must be in (0, 1) (exclusive), got {v!r}")
    return f


def _check_grid(grid: ArrayLike | None) -> NDArray[np.float64]:
    """Return the grid sorted in descending order (the testing order); validate it."""
    g = DEFAULT_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if g.ndim != 1 or g.size == 0:
        raise ValueError(f"grid must be a non-empty 1-D sequence of coverages, got shape {g.shape}")
    if np.isnan(g).any() or (g < 1e-6).any() or (g > 1).any():
        raise ValueError(f"grid coverages must lie in [1e-6, 1], got {g.tolist()}")
    if np.unique(g).size != g.size:
        raise ValueError(f"grid coverages must be distinct, got {g.tolist()}")
    return np.sort(g)[::-1].copy()


def _check_n_strata(n_strata: int) -> int:
    if isinstance(n_strata, (bool, np.bool_)) or int(n_strata) != n_strata or n_strata < 1:
        raise ValueError(f"n_strata must be a positive integer, got {n_strata!r}")
    return int(n_strata)


def _check_pair(scores: ArrayLike, errors: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    s = as_scores(scores)
    e = as_binary(errors, "errors")
    if s.size != e.size:
        raise ValueError(f"scores and errors differ in length: {s.size} != {e.size}")
    return s, e


def _check_strata(strata: ArrayLike, n: int, name: str = "strata") -> NDArray[np.str_]:
    st = np.asarray(strata)
    if st.ndim != 1 or st.size != n:
        raise ValueError(f"{name} must be 1-D with one label per question ({n}), got shape {st.shape}")
    return st.astype(str)


# =========================================================================== p-values
def binom_cdf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> NDArray[np.float64]:
    """``scipy.stats.binom.cdf(k, n, p)`` for integers ``0 <= k`` and ``n >= 1``, bit for bit.

    ``binom.cdf`` floors ``k``, returns 1 for ``k >= n`` and otherwise calls scipy.special's
    Boost binomial CDF; this calls that same ufunc directly, so a kernel that certifies does not
    import ``scipy.stats`` (about 1.4 s).  ``scipy.special.bdtr`` is *not* used: it is the Cephes
    incomplete-beta routine, which differs from ``binom.cdf`` in the last bits on most arguments
    (and by far more in the far tail), see ``tests/test_certify.py`` and ``benchmarks/README.md``.
    """
    try:
        from scipy.special._ufuncs import _binom_cdf
    except ImportError:  # pragma: no cover - a SciPy without the private ufunc
        from scipy.stats import binom

        return binom.cdf(k, n, p)
    k_ = np.floor(np.asarray(k, dtype=np.float64))
    n_ = np.asarray(n)
    return np.where(k_ >= n_, 1.0, _binom_cdf(k_, n_, p))


def binomial_pvalue(E: ArrayLike, n: ArrayLike, alpha: ArrayLike) -> NDArray[np.float64] | float:
    """Exact binomial-tail p-value of Eq. (6): ``Pr[Bin(n, alpha) <= E]``; 1 when ``n = 0``.

    Valid for ``H0: risk > alpha`` (Theorem 1). Broadcasts over its arguments
    (:func:`binom_cdf`, i.e. ``scipy.stats.binom.cdf``); returns a float for scalar input.
    """
    E_ = np.asarray(E)
    n_ = np.asarray(n)
    a_ = np.asarray(alpha, dtype=np.float64)
    if (E_ < 0).any() or (E_ > n_).any():
        raise ValueError("binomial_pvalue needs 0 <= E <= n")
    if ((a_ <= 0) | (a_ >= 1)).any():
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    p = np.where(n_ == 0, 1.0, binom_cdf(E_, n_, a_))
    return float(p) if p.ndim == 0 else p


# =========================================================================== single-stratum LTT
@dataclass(frozen=True)
class LTTResult:
    """Per-grid detail of one Learn-then-Test run (Algorithm 2 lines 3-11), in testing order
    (descending coverage)."""

    coverage: NDArray[np.float64]   # grid points c, descending
    lambdas: NDArray[np.float64]    # lambda_c (NaN when n = 0)
    n_c: NDArray[np.int64]          # #{s > lambda_c}
    E_c: NDArray[np.int64]          # errors among them
    p_values: NDArray[np.float64]   # Eq. (6)
    rejected: NDArray[np.bool_]     # p_c <= level
    chosen: int | None              # index (into these arrays) of the first rejected c
    level: float                    # delta / (|grid| * n_strata)
    alpha: float
    delta: float
    n: int
    n_strata: int

    @property
    def threshold(self) -> float | None:
        """lambda of the largest rejected coverage; ``None`` = abstain."""
        return None if self.chosen is None else float(self.lambdas[self.chosen])

    def table(self) -> pd.DataFrame:
        """The grid as a DataFrame (one row per coverage level)."""
        return pd.DataFrame({"coverage": self.coverage, "lambda": self.lambdas, "n_c": self.n_c,
                             "E_c": self.E_c, "p_value": self.p_values, "rejected": self.rejected,
                             "chosen": np.arange(self.coverage.size) == (
                                 -1 if self.chosen is None else self.chosen)})


def _grid_stats(s: NDArray[np.float64], e: NDArray[np.bool_], grid_desc: NDArray[np.float64], alpha: float
                ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """lambda_c, n_c, E_c and p_c (Eq. 6) for every grid point of every row of ``s`` / ``e``
    (shape ``(d, n)``, ``n >= 1``; one calibration set per row), each of shape ``(d, |grid|)``.

    One stable sort per row and cumulative error counts give every ``(lambda_c, n_c, E_c)``; one
    :func:`binomial_pvalue` call gives every ``p_c`` (elementwise: a row's values do not depend on
    the other rows).
    """
    d, n = s.shape
    order = np.argsort(-s, axis=1, kind="stable")
    s_desc = np.take_along_axis(s, order, axis=1)
    # err_cum[:, j] = errors among the first j sorted questions (err_cum[:, 0] = 0)
    err_cum = np.zeros((d, n + 1), dtype=np.int64)
    np.cumsum(np.take_along_axis(e, order, axis=1), axis=1, out=err_cum[:, 1:])
    k = np.ceil(grid_desc * n - _K_EPS).astype(np.int64)  # 1 <= k <= n for n >= 1
    lam = s_desc[:, k - 1]
    # n_c = #{s > lambda}: each row of s_desc is descending, so its negation is ascending
    n_c = np.empty(lam.shape, dtype=np.int64)
    for r in range(d):
        n_c[r] = np.searchsorted(-s_desc[r], -lam[r], side="left")
    E_c = np.take_along_axis(err_cum, n_c, axis=1)
    p = np.asarray(binomial_pvalue(E_c, n_c, alpha), dtype=np.float64).reshape(lam.shape)
    return lam, n_c, E_c, p


def ltt_test(scores: ArrayLike, errors: ArrayLike, alpha: float, delta: float = 0.05,
             grid: ArrayLike | None = None, n_strata: int = 2) -> LTTResult:
    """Learn-then-Test on one stratum with all per-grid details (Algorithm 2, Eq. 6).

    Vectorized: one sort, cumulative error counts and ``searchsorted`` give every
    ``(lambda_c, n_c, E_c)``; one :func:`binomial_pvalue` call gives every ``p_c``.
    """
    s, e = _check_pair(scores, errors)
    alpha = check_level("alpha", alpha)
    delta = check_level("delta", delta)
    g = _check_grid(grid)
    m = _check_n_strata(n_strata)
    level = bonferroni_level(delta, g.size, m)
    n = s.size
    if n == 0:
        z = np.zeros(g.size, dtype=np.int64)
        return LTTResult(g, np.full(g.size, np.nan), z, z.copy(), np.ones(g.size),
                         np.zeros(g.size, dtype=bool), None, level, alpha, delta, 0, m)
    lam, n_c, E_c, p = (a[0] for a in _grid_stats(s[None, :], e[None, :], g, alpha))
    rej = p <= level
    chosen = int(np.argmax(rej)) if rej.any() else None
    return LTTResult(g, lam, n_c, E_c, p, rej, chosen, level, alpha, delta, n, m)


def ltt_threshold(scores: ArrayLike, errors: ArrayLike, alpha: float, delta: float = 0.05,
                  grid: ArrayLike | None = None, n_strata: int = 2) -> float | None:
    """Certified threshold of one stratum (Algorithm 2): answer iff ``score > threshold``.

    ``None`` when no grid point is rejected (the stratum abstains), including ``n = 0``.
    ``errors`` is boolean (or 0/1), True = the answer is wrong. See :func:`ltt_test`.
    """
    return ltt_test(scores, errors, alpha, delta, grid, n_strata).threshold


def _ltt_threshold_loop(scores: ArrayLike, errors: ArrayLike, alpha: float, delta: float = 0.05,
                        grid: ArrayLike | None = None, n_strata: int = 2) -> float | None:
    """Plain reference implementation of Algorithm 2 (one grid point at a time), used only by the
    tests and benchmarks to cross-check the vectorized :func:`ltt_threshold`."""
    s, e = _check_pair(scores, errors)
    alpha = check_level("alpha", alpha)
    delta = check_level("delta", delta)
    g = _check_grid(grid)
    m = _check_n_strata(n_strata)
    n = len(s)
    if n == 0:
        return None
    s_desc = sorted(s.tolist(), reverse=True)
    for c in g:  # descending
        k = math.ceil(float(c) * n - _K_EPS)
        lam = s_desc[k - 1]
        above = s > lam
        n_c = int(above.sum())
        E_c = int(e[above].sum())
        p = 1.0 if n_c == 0 else float(binom_cdf(E_c, n_c, alpha))
        if p <= bonferroni_level(delta, len(g), m):
            return float(lam)
    return None


def global_ltt(scores: ArrayLike, errors: ArrayLike, alpha: float, delta: float = 0.05,
               grid: ArrayLike | None = None) -> float | None:
    """Learn-then-Test on one pooled stream (the §4.4 "global" control): the scores as given,
    no stratification, Bonferroni over the grid only (``n_strata = 1``)."""
    return ltt_threshold(scores, errors, alpha, delta, grid, n_strata=1)


def naive_quantile_threshold(scores: ArrayLike, errors: ArrayLike, alpha: float) -> float | None:
    """Naive quantile calibration, the §4.4 foil: no test, no confidence level.

    Rule: on the calibration data's tie-aware risk-coverage curve (one point per distinct score,
    :func:`probeguard_core.metrics.risk_coverage`) take the point of largest coverage whose
    empirical selective risk is ``<= alpha``. That point answers the calibration questions with
    ``score >= v``; the returned threshold, used with the common strict rule
    ``answer iff score > threshold``, is the largest calibration score *below* ``v``
    (``-inf`` when the point is the full set). ``None`` when no point has risk ``<= alpha``
    (or there is no data).
    """
    s, e = _check_pair(scores, errors)
    alpha = check_level("alpha", alpha)
    if s.size == 0:
        return None
    order = np.argsort(-s, kind="stable")
    s_desc = s[order]
    ends = np.flatnonzero(np.r_[s_desc[1:] != s_desc[:-1], True])  # last index of each tie block
    n_ans = ends + 1
    risk = np.cumsum(e[order])[ends] / n_ans
    ok = np.flatnonzero(risk <= alpha)
    if ok.size == 0:
        return None
    j = ends[ok[-1]]
    return float(s_desc[j + 1]) if j + 1 < s.size else float("-inf")


# =========================================================================== stratified certification
@dataclass(frozen=True)
class Certificate:
    """Result of :func:`stratified_certify` (Algorithm 2 over the certified strata)."""

    thresholds: dict[str, float | None]  # certified stratum -> lambda_S or None (abstain)
    n: dict[str, int]                    # calibration questions per certified stratum
    errors: dict[str, int]               # calibration errors per certified stratum
    pvalues: pd.DataFrame                # stratum, coverage, lambda, n_c, E_c, p_value, rejected, chosen
    alpha: float
    delta: float
    grid: NDArray[np.float64]
    certified: tuple[str, ...] = field(default=("S1", "S2"))

    def decide(self, scores: ArrayLike, strata: ArrayLike) -> NDArray[np.bool_]:
        """Deployment rule: answer ``x`` in stratum ``S`` iff ``score(x) > lambda_S``; strata
        without a threshold (S3, uncertified, unknown) abstain. A NaN score in a stratum that
        has a threshold raises ``ValueError`` (it would otherwise abstain silently)."""
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 1:
            raise ValueError(f"scores must be 1-D, got shape {s.shape}")
        st = _check_strata(strata, s.size)
        out = np.zeros(s.size, dtype=bool)
        for S, lam in self.thresholds.items():
            if lam is None:
                continue
            sel = st == S
            n_nan = int(np.isnan(s[sel]).sum())
            if n_nan:
                raise ValueError(f"scores contain {n_nan} NaN value(s) in certified stratum {S}")
            out[sel] = s[sel] > lam
        return out


def stratified_certify(scores: ArrayLike, errors: ArrayLike, strata: ArrayLike, alpha: float,
                       delta: float = 0.05, grid: ArrayLike | None = None,
                       certified: Sequence[str] = ("S1", "S2")) -> Certificate:
    """Stratified Learn-then-Test (§3.3, Algorithm 2): one LTT per certified stratum at level
    ``delta / (|grid| * m)``, ``m = len(certified)``. Strata not in ``certified`` (S3) abstain;
    their scores are ignored and may be NaN. A certified stratum with no calibration question
    abstains."""
    e_all = as_binary(errors, "errors")
    s_raw = np.asarray(scores, dtype=np.float64)
    if s_raw.ndim != 1 or s_raw.size != e_all.size:
        raise ValueError(f"scores must be 1-D with the length of errors ({e_all.size}), "
                         f"got shape {s_raw.shape}")
    st = _check_strata(strata, e_all.size)
    cert = tuple(str(c) for c in certified)
    if not cert or len(set(cert)) != len(cert):
        raise ValueError(f"certified must list distinct strata, got {certified!r}")
    g = _check_grid(grid)
    thresholds: dict[str, float | None] = {}
    n: dict[str, int] = {}
    errs: dict[str, int] = {}
    tables = []
    for S in cert:
        sel = st == S
        try:
            res = ltt_test(s_raw[sel], e_all[sel], alpha, delta, g, n_strata=len(cert))
        except ValueError as exc:
            raise ValueError(f"stratum {S}: {exc}") from exc
        thresholds[S] = res.threshold
        n[S] = int(sel.sum())
        errs[S] = int(e_all[sel].sum())
        t = res.table()
        t.insert(0, "stratum", S)
        tables.append(t)
    return Certificate(thresholds, n, errs, pd.concat(tables, ignore_index=True), float(alpha),
                       float(delta), g, cert)


# =========================================================================== repeated splits
_METHODS = ("stratified", "global", "naive")


def _prepare(scores: ArrayLike, errors: ArrayLike, strata: ArrayLike, method: str,
             certified: tuple[str, ...], name: str = ""):
    e = as_binary(errors, f"{name}errors")
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size != e.size:
        raise ValueError(f"{name}scores must be 1-D with the length of {name}errors ({e.size}), "
                         f"got shape {s.shape}")
    st = _check_strata(strata, e.size, f"{name}strata")
    need = np.isin(st, certified) if method == "stratified" else np.ones(e.size, dtype=bool)
    n_nan = int(np.isnan(s[need]).sum())
    if n_nan:
        where = f"certified strata {certified}" if method == "stratified" else "the pooled stream"
        raise ValueError(f"{name}scores contain {n_nan} NaN value(s) in {where}")
    return s, e, st


def _row_take(a: NDArray, idx: NDArray[np.int64]) -> NDArray:
    """``a[r, idx[r, j]]`` for a 2-D ``a`` and a 2-D index array."""
    return np.take_along_axis(a, idx, axis=1)


def _padded_cumsum(x: NDArray[np.bool_]) -> NDArray[np.int64]:
    """Row-wise cumulative count with a leading zero column: out[r, j] = x[r, :j].sum()."""
    out = np.zeros((x.shape[0], x.shape[1] + 1), dtype=np.int64)
    np.cumsum(x, axis=1, out=out[:, 1:])
    return out


def _stream_ltt(s: NDArray[np.float64], e: NDArray[np.bool_], cal: NDArray[np.bool_],
                extra_s: NDArray[np.float64], extra_e: NDArray[np.bool_], g: NDArray[np.float64]
                ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """(lambda_c, n_c, E_c), each of shape (n_splits, |grid|), for one stream in every split.

    The stream (its questions plus ``extra``) is sorted once; a split is a row of the boolean
    calibration mask in that order. Row-wise cumulative counts give, for every split and grid
    point, the position of the k-th largest calibration score (a ``searchsorted`` on the rows
    laid end to end), and the counts above lambda_c. Splits without calibration data get
    lambda = NaN, n_c = 0 (p = 1, never rejected).
    """
    R = cal.shape[0]
    S = np.concatenate([s, extra_s])
    E = np.concatenate([e, extra_e])
    M = S.size
    if M == 0:
        return (np.full((R, g.size), np.nan), np.zeros((R, g.size), dtype=np.int64),
                np.zeros((R, g.size), dtype=np.int64))
    order = np.argsort(-S, kind="stable")
    S_d, E_d = S[order], E[order]
    cm = np.concatenate([cal, np.ones((R, extra_s.size), dtype=bool)], axis=1)[:, order]
    cc = _padded_cumsum(cm)                       # calibration items among the first j
    ce = _padded_cumsum(cm & E_d)                 # calibration errors among the first j
    n_cal = cc[:, -1]
    k = np.ceil(g[None, :] * n_cal[:, None] - _K_EPS).astype(np.int64)   # (R, G)
    has = n_cal > 0
    k[~has] = 1
    # position of the k-th calibration item: first j with cc[r, j+1] >= k; rows laid end to end
    off = np.arange(R, dtype=np.int64) * (M + 1)
    flat = (cc[:, 1:] + off[:, None]).ravel()
    j = np.searchsorted(flat, k + off[:, None], side="left") - np.arange(R)[:, None] * M
    j = np.clip(j, 0, M - 1)
    lam = S_d[j]
    above = np.searchsorted(-S_d, -lam, side="left")   # stream items with score > lambda
    n_c = _row_take(cc, above)
    E_c = _row_take(ce, above)
    lam[~has] = np.nan
    n_c[~has] = 0
    E_c[~has] = 0
    return lam, n_c, E_c


def _test_counts(s: NDArray[np.float64], e: NDArray[np.bool_], test: NDArray[np.bool_],
                 thr: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Answered and wrong test questions (score > thr) for thresholds of shape (R, A), with
    the stream sorted once; NaN threshold = abstain."""
    R, A = thr.shape
    n_ans = np.zeros((R, A), dtype=np.int64)
    n_err = np.zeros((R, A), dtype=np.int64)
    ok = ~np.isnan(thr)
    if s.size == 0 or not ok.any():
        return n_ans, n_err
    order = np.argsort(-s, kind="stable")
    s_d = s[order]
    tm = test[:, order]
    tc = _padded_cumsum(tm)
    te = _padded_cumsum(tm & e[order])
    pos = np.zeros((R, A), dtype=np.int64)
    pos[ok] = np.searchsorted(-s_d, -thr[ok], side="left")   # items with score > thr
    n_ans = np.where(ok, _row_take(tc, pos), 0)
    n_err = np.where(ok, _row_take(te, pos), 0)
    return n_ans, n_err


def repeated_splits(scores: ArrayLike, errors: ArrayLike, strata: ArrayLike,
                    alphas: Iterable[float] = DEFAULT_ALPHAS, n_splits: int = 50, seed: int = SEED,
                    method: str = "stratified", delta: float = 0.05, grid: ArrayLike | None = None,
                    extra_cal: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
                    certified: Sequence[str] = ("S1", "S2")) -> pd.DataFrame:
    """Certification over repeated even calibration/test splits (Appendix E, §4.4, Figure 4).

    Split ``j`` (``0 <= j < n_splits``): ``perm = numpy.random.default_rng(seed + j).permutation(n)``;
    calibration = ``perm[:n // 2]``, test = ``perm[n // 2:]``. ``extra_cal = (scores, errors,
    strata)`` is appended to the calibration side of every split and never tested (the §4.4
    in-domain augmentation, n = 875).

    Methods:

    - ``"stratified"``: :func:`stratified_certify` per split (certified strata, ``m = len(certified)``);
      other strata abstain, and their scores may be NaN;
    - ``"global"``: :func:`global_ltt` on the pooled stream of all questions (scores as given);
    - ``"naive"``: :func:`naive_quantile_threshold` on the pooled stream.

    Returns a tidy DataFrame, one row per (split, alpha, stratum) for every stratum label present,
    plus ``stratum = "all"`` pooling all test questions (abstaining strata count as unanswered).
    Columns: ``split, alpha, method, stratum, threshold`` (NaN = abstain; for pooled methods the
    pooled threshold on every row; NaN on the stratified ``"all"`` row, which has no single
    threshold), ``certified`` (a threshold exists; on the stratified ``"all"`` row: some certified
    stratum has one), ``n_cal`` (incl. extra),
    ``n_test``, ``coverage`` (answered / n_test; NaN when n_test = 0), ``risk`` (errors / answered;
    NaN when nothing is answered), ``violated`` (``risk > alpha``; False when nothing answered).

    Vectorized: each stream is sorted once for all splits (row-wise cumulative counts over the
    split masks), and the p-values of all strata, splits, grid points and alphas come from one
    ``binom.cdf`` call.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    alist = [check_level("alpha", a) for a in alphas]
    if not alist:
        raise ValueError("alphas is empty")
    delta = check_level("delta", delta)
    if isinstance(n_splits, (bool, np.bool_)) or int(n_splits) != n_splits or n_splits < 1:
        raise ValueError(f"n_splits must be a positive integer, got {n_splits!r}")
    n_splits = int(n_splits)
    cert = tuple(str(c) for c in certified)
    if not cert or len(set(cert)) != len(cert):
        raise ValueError(f"certified must list distinct strata, got {certified!r}")
    g = _check_grid(grid)
    s, e, st = _prepare(scores, errors, strata, method, cert)
    if extra_cal is not None:
        if len(extra_cal) != 3:
            raise ValueError("extra_cal must be a (scores, errors, strata) triple")
        xs, xe, xst = _prepare(*extra_cal, method, cert, name="extra_cal ")
    else:
        xs, xe, xst = np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=str)
    n = e.size
    A = len(alist)
    alpha_arr = np.asarray(alist)
    cal = even_splits(n, n_splits, int(seed))
    test = ~cal
    labels = sorted(set(st.tolist()) | (set(xst.tolist()) if method == "stratified" else set()))

    # streams: (name, member mask over questions, member mask over extra_cal, bonferroni m)
    if method == "stratified":
        streams = [(S, st == S, xst == S) for S in cert]
        m = len(cert)
    else:
        streams = [("all", np.ones(n, dtype=bool), np.ones(xs.size, dtype=bool))]
        m = 1

    # thresholds per stream: shape (R, A), NaN = abstain
    thr: dict[str, NDArray[np.float64]] = {}
    if method == "naive":
        th = np.full((n_splits, A), np.nan)
        for r in range(n_splits):
            cs = np.concatenate([s[cal[r]], xs])
            ce = np.concatenate([e[cal[r]], xe])
            for a, al in enumerate(alist):
                t = naive_quantile_threshold(cs, ce, al)
                th[r, a] = np.nan if t is None else t
        thr["all"] = th
    else:
        level = bonferroni_level(delta, g.size, m)
        stats = [_stream_ltt(s[mk], e[mk], cal[:, mk], xs[xmk], xe[xmk], g) for _, mk, xmk in streams]
        lam = np.stack([x[0] for x in stats])            # (K, R, G)
        n_c = np.stack([x[1] for x in stats])
        E_c = np.stack([x[2] for x in stats])
        # one binom_cdf call for every stream, split, grid point and alpha: (K, R, G, A)
        p = np.where(n_c[..., None] == 0, 1.0, binom_cdf(E_c[..., None], n_c[..., None], alpha_arr))
        rej = p <= level
        any_rej = rej.any(axis=2)                        # (K, R, A)
        first = np.argmax(rej, axis=2)                   # first rejected = largest coverage
        chosen = np.take_along_axis(lam[..., None].repeat(A, axis=-1), first[:, :, None, :],
                                    axis=2)[:, :, 0, :]
        chosen = np.where(any_rej, chosen, np.nan)
        for i, (name, _, _) in enumerate(streams):
            thr[name] = chosen[i]

    # test evaluation per stratum label (and "all")
    n_cal_x = {S: int((xst == S).sum()) for S in labels}
    per: dict[str, tuple] = {}
    tot_ans = np.zeros((n_splits, A), dtype=np.int64)
    tot_err = np.zeros((n_splits, A), dtype=np.int64)
    for S in labels:
        mk = st == S
        if method == "stratified":
            t = thr.get(S, np.full((n_splits, A), np.nan))
        else:
            t = thr["all"]
        if mk.any():
            n_ans, n_err = _test_counts(s[mk], e[mk], test[:, mk], t)
        else:
            n_ans = np.zeros((n_splits, A), dtype=np.int64)
            n_err = n_ans.copy()
        tot_ans += n_ans
        tot_err += n_err
        per[S] = (t, (cal[:, mk].sum(1) + n_cal_x[S]), test[:, mk].sum(1), n_ans, n_err)
    if method == "stratified":
        any_thr = np.zeros((n_splits, A), dtype=bool)
        for S in cert:
            any_thr |= ~np.isnan(thr[S])
        all_thr = np.full((n_splits, A), np.nan)  # no single threshold for the pooled row
    else:
        all_thr = thr["all"]
        any_thr = ~np.isnan(all_thr)
    per["all"] = (all_thr, cal.sum(1) + xs.size, test.sum(1), tot_ans, tot_err, any_thr)

    frames = []
    split_idx = np.repeat(np.arange(n_splits), A)
    alpha_col = np.tile(alpha_arr, n_splits)
    for S in labels + ["all"]:
        t, ncal, ntest, n_ans, n_err = per[S][:5]
        certified_col = (per[S][5] if S == "all" else ~np.isnan(t)).ravel()
        ntest_rep = np.repeat(ntest, A)
        ans = n_ans.ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            cov = np.where(ntest_rep > 0, ans / np.maximum(ntest_rep, 1), np.nan)
            risk = np.where(ans > 0, n_err.ravel() / np.maximum(ans, 1), np.nan)
            violated = np.where(ans > 0, risk > alpha_col, False)
        frames.append(pd.DataFrame({
            "split": split_idx, "alpha": alpha_col, "method": method, "stratum": S,
            "threshold": t.ravel(), "certified": certified_col,
            "n_cal": np.repeat(ncal, A).astype(np.int64), "n_test": ntest_rep.astype(np.int64),
            "coverage": cov, "risk": risk,
            "violated": violated,
        }))
    df = pd.concat(frames, ignore_index=True)
    return df.sort_values(["split", "alpha", "stratum"], kind="stable", ignore_index=True)


def _repeated_splits_loop(scores: ArrayLike, errors: ArrayLike, strata: ArrayLike,
                          alphas: Iterable[float] = DEFAULT_ALPHAS, n_splits: int = 50, seed: int = SEED,
                          delta: float = 0.05, grid: ArrayLike | None = None,
                          certified: Sequence[str] = ("S1", "S2")) -> pd.DataFrame:
    """Straightforward reference for ``repeated_splits(method="stratified")`` built on
    :func:`_ltt_threshold_loop` (tests and benchmarks only). Same columns, stratum rows for the
    certified strata only."""
    s = np.asarray(scores, dtype=np.float64)
    e = np.asarray(errors).astype(bool)
    st = np.asarray(strata).astype(str)
    n = s.size
    rows = []
    for j in range(n_splits):
        perm = np.random.default_rng(seed + j).permutation(n)
        cal = np.zeros(n, dtype=bool)
        cal[perm[: n // 2]] = True
        for a in alphas:
            for S in certified:
                c = cal & (st == S)
                test_m = (~cal) & (st == S)
                lam = _ltt_threshold_loop(s[c], e[c], a, delta, grid, n_strata=len(certified))
                ans = test_m & (s > lam) if lam is not None else np.zeros(n, dtype=bool)
                k = int(ans.sum())
                risk = e[ans].sum() / k if k else np.nan
                nt = int(test_m.sum())
                rows.append({"split": j, "alpha": float(a), "stratum": S,
                             "threshold": np.nan if lam is None else lam,
                             "certified": lam is not None, "n_cal": int(c.sum()), "n_test": nt,
                             "coverage": k / nt if nt else np.nan, "risk": risk,
                             "violated": bool(k and risk > a)})
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over splits (ddof = 1) per (method, alpha, stratum), as the
    paper reports certification numbers (§4.4, Appendix E).

    Columns: ``n_splits``, ``n_certified`` (splits with a threshold), ``coverage_mean``,
    ``coverage_sd``, ``risk_mean`` and ``risk_sd`` (over the splits that answered something; a
    split answering nothing has no realized risk), ``n_risk`` (that number of splits),
    ``violations`` (splits whose realized risk exceeds alpha).
    """
    need = {"method", "alpha", "stratum", "split", "certified", "coverage", "risk", "violated"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"summarize: data frame lacks column(s) {sorted(missing)}")
    gb = df.groupby(["method", "alpha", "stratum"], sort=True)
    out = gb.agg(
        n_splits=("split", "nunique"),
        n_certified=("certified", "sum"),
        coverage_mean=("coverage", "mean"),
        coverage_sd=("coverage", "std"),
        risk_mean=("risk", "mean"),
        risk_sd=("risk", "std"),
        n_risk=("risk", "count"),
        violations=("violated", "sum"),
    ).reset_index()
    out["n_certified"] = out["n_certified"].astype(np.int64)
    out["violations"] = out["violations"].astype(np.int64)
    return out


def alpha_sweep(scores: ArrayLike, errors: ArrayLike, strata: ArrayLike,
                alphas: Iterable[float] = DEFAULT_ALPHAS, **kwargs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The §4.4 / Figure 4 sweep: :func:`repeated_splits` over ``alphas`` (default
    0.05, 0.10, 0.15, 0.20) and its :func:`summarize` (mean, sd, violation counts over splits).
    Returns ``(per_split, summary)``; keyword arguments go to :func:`repeated_splits`."""
    df = repeated_splits(scores, errors, strata, alphas=alphas, **kwargs)
    return df, summarize(df)
