"""Rationale semantic entropy (paper Eq. 3, section 3.2) and its hard-clustering ablation (section 5.1).

Both functions take an ``n x n`` entailment matrix ``E`` with
``E[i][j] = P(entailment | premise = claim i, hypothesis = claim j)`` (DESIGN 2.4).

Sign conventions differ, and this is deliberate:

* :func:`rationale_semantic_entropy` (RSE, Eq. 3) is the mean *mutual support* among the
  claims: **higher = more coherent** rationales, hence already a confidence score.
* :func:`hard_semantic_entropy` (Kuhn et al. 2023; Farquhar et al. 2024) is an entropy of
  the entailment-cluster distribution: **higher = more dispersed** rationales.  Use
  :func:`hard_se_score` (its negation) where the project's "higher = more confident"
  convention is needed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from probeguard_core.logs import NLIRecord

__all__ = [
    "entailment_clusters",
    "first_round_rse",
    "hard_se_score",
    "hard_semantic_entropy",
    "nli_scores",
    "rationale_semantic_entropy",
]


def _as_matrix(E: Sequence[Sequence[float]] | np.ndarray, name: str = "E") -> np.ndarray:
    """Validate a square matrix of probabilities in [0, 1] (ValueError naming the problem)."""
    try:
        M = np.asarray(E, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not a numeric matrix ({exc})") from None
    if M.size == 0:
        return M.reshape(0, 0)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name}: entailment matrix must be square, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name}: entailment matrix has non-finite entries")
    if M.min() < 0.0 or M.max() > 1.0:
        i, j = np.argwhere((M < 0.0) | (M > 1.0))[0]
        raise ValueError(f"{name}[{i}][{j}] = {float(M[i, j])!r} is not a probability in [0, 1]")
    return M


def rationale_semantic_entropy(E: Sequence[Sequence[float]] | np.ndarray) -> float:
    """RSE = mean over unordered pairs i < j of min(E[i][j], E[j][i])  (Eq. 3).

    The minimum asks each pair of concluding claims to support each other in both
    directions; the mean runs over all n(n-1)/2 pairs.  Higher = more coherent.
    Returns NaN for n < 2 (no pair).  Raises ValueError for a non-square matrix or an
    entry outside [0, 1].
    """
    M = _as_matrix(E)
    n = M.shape[0]
    if n < 2:
        return math.nan
    iu = _upper_pairs(n)
    return float(np.minimum(M[iu], M.T[iu]).mean())


@functools.lru_cache(maxsize=64)
def _upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, k=1)``, built once per size (read-only: shared between calls)."""
    iu = np.triu_indices(n, k=1)
    for a in iu:
        a.flags.writeable = False
    return iu


def entailment_clusters(E: Sequence[Sequence[float]] | np.ndarray, threshold: float = 0.5) -> list[list[int]]:
    """Greedy bidirectional-entailment clustering (Kuhn et al. 2023, Algorithm 1).

    Claims are visited in order; claim i joins the first existing cluster whose
    representative (its first member) r satisfies E[i][r] > threshold and E[r][i] > threshold,
    otherwise it opens a new cluster.
    """
    if not (0.0 <= threshold <= 1.0) or math.isnan(threshold):
        raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
    M = _as_matrix(E)
    clusters: list[list[int]] = []
    for i in range(M.shape[0]):
        for members in clusters:
            r = members[0]
            if M[i, r] > threshold and M[r, i] > threshold:
                members.append(i)
                break
        else:
            clusters.append([i])
    return clusters


def hard_semantic_entropy(E: Sequence[Sequence[float]] | np.ndarray, threshold: float = 0.5) -> float:
    """Semantic entropy over hard entailment clusters (section 5.1 ablation; Farquhar et al. 2024).

    ``-sum_c (|c|/n) ln(|c|/n)`` over the clusters of :func:`entailment_clusters`, natural
    log: 0 when every claim lands in one cluster, ``ln n`` when all are singletons.
    Higher = less coherent (the opposite of RSE).  NaN for n < 2, mirroring RSE (one claim
    carries no information about agreement).
    """
    M = _as_matrix(E)
    n = M.shape[0]
    if n < 2:
        # still validate the threshold so bad parameters are never silently accepted
        entailment_clusters(M, threshold)
        return math.nan
    sizes = np.array([len(c) for c in entailment_clusters(M, threshold)], dtype=float)
    p = sizes / n
    return float(-(p * np.log(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


def hard_se_score(E: Sequence[Sequence[float]] | np.ndarray, threshold: float = 0.5) -> float:
    """``-hard_semantic_entropy(E)``: the hard-clustering signal as a confidence score (higher = more confident)."""
    return -hard_semantic_entropy(E, threshold) + 0.0


def first_round_rse(nli: Iterable[NLIRecord] | None, qids: Iterable[str]) -> dict[str, float]:
    """RSE (Eq. 3) of each question's round-1 NLI record, for the given ``qids``.

    The unanimous-layer score uses round 1 (the layer stops there).  Records of other qids or
    rounds are ignored; two round-1 records for one qid raise ``ValueError``.
    """
    known = set(qids)
    rse: dict[str, float] = {}
    for r in nli or ():
        if r.round == 1 and r.qid in known:
            if r.qid in rse:
                raise ValueError(f"nli: duplicate record for qid={r.qid!r} round=1")
            rse[r.qid] = rationale_semantic_entropy(r.entailment)
    return rse


def nli_scores(matrices: Sequence[Sequence[Sequence[float]]], threshold: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """RSE (Eq. 3) and hard semantic entropy of many entailment matrices at once.

    Equal, bit for bit, to ``[rationale_semantic_entropy(E) for E in matrices]`` and
    ``[hard_semantic_entropy(E, threshold) for E in matrices]`` (the same reductions in the same
    order, batched over matrices of one size).  Raises ValueError when any matrix would make
    the scalar functions raise; callers wanting the scalar message re-run those on failure.
    """
    if not (0.0 <= threshold <= 1.0) or math.isnan(threshold):
        raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
    m = len(matrices)
    rse = np.full(m, np.nan)
    hse = np.full(m, np.nan)
    sizes = np.fromiter((len(E) for E in matrices), dtype=np.int64, count=m)
    for n in np.unique(sizes).tolist():
        idx = np.flatnonzero(sizes == n)
        M = np.asarray([matrices[i] for i in idx.tolist()], dtype=float)  # (k, n, n); ragged -> ValueError
        if M.shape[1:] != (n, n) and n > 0:
            raise ValueError("entailment matrix must be square")
        if M.size and (not np.all(np.isfinite(M)) or M.min() < 0.0 or M.max() > 1.0):
            raise ValueError("entailment matrix has an entry that is not a probability in [0, 1]")
        if n < 2:
            continue
        iu, ju = np.triu_indices(n, k=1)
        pairs = np.minimum(M[:, iu, ju], M[:, ju, iu])  # (k, n(n-1)/2)
        rse[idx] = _row_sums(pairs) / pairs.shape[1]
        hse[idx] = _hard_se_batch(M, threshold)
    return rse, hse


def _hard_se_batch(M: np.ndarray, threshold: float) -> np.ndarray:
    """:func:`hard_semantic_entropy` of a stack ``M`` (k, n, n): the greedy clustering of
    :func:`entailment_clusters` run over all k matrices claim by claim."""
    k, n, _ = M.shape
    rows = np.arange(k)
    reps = np.full((k, n), -1, dtype=np.int64)  # representative claim of cluster c
    sizes = np.zeros((k, n), dtype=np.int64)
    n_clusters = np.zeros(k, dtype=np.int64)
    for i in range(n):
        joined = np.full(k, -1, dtype=np.int64)
        for c in range(i):
            r = reps[:, c]
            rr = np.where(r >= 0, r, 0)
            ok = (joined < 0) & (r >= 0) & (M[rows, i, rr] > threshold) & (M[rows, rr, i] > threshold)
            joined[ok] = c
        new = joined < 0
        joined[new] = n_clusters[new]
        reps[new, n_clusters[new]] = i
        n_clusters[new] += 1
        sizes[rows, joined] += 1
    out = np.empty(k)
    for c in np.unique(n_clusters).tolist():
        g = np.flatnonzero(n_clusters == c)
        p = sizes[g, :c].astype(float) / n
        out[g] = -_row_sums(p * np.log(p)) + 0.0
    return out


def _row_sums(a: np.ndarray) -> np.ndarray:
    """Each row's sum by the 1-D reduction the scalar functions use (``sum(axis=1)`` may add in
    another order, so it can differ in the last bit)."""
    add = np.add.reduce
    return np.fromiter((add(row) for row in a), dtype=float, count=a.shape[0])
