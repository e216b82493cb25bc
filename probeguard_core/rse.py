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

import math
from collections.abc import Iterable, Sequence

import numpy as np

from probeguard_core.logs import NLIRecord

__all__ = [
    "entailment_clusters",
    "first_round_rse",
    "hard_se_score",
    "hard_semantic_entropy",
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
    iu = np.triu_indices(n, k=1)
    return float(np.minimum(M[iu], M.T[iu]).mean())


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
