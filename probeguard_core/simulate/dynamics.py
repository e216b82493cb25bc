"""The numeric part of a consensus (steps 2-3 of :mod:`probeguard_core.simulate.model`): round-1
votes, the contested rounds under instructed convergence with evidence retrieved after each
disagreement (Eq. 10, App. A), the final answer (DESIGN 3) and the probe's re-answers (Eq. 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from probeguard_core.simulate.draws import Draws, weighted_sample
from probeguard_core.simulate.params import v

__all__ = [
    "Dynamics", "Trajectory", "doc_pool", "draw_difficulty", "draw_votes", "final_index", "final_indices",
    "is_unanimous", "reanswer_matrix", "round1_probs", "round_draws", "run_dynamics", "sample_cat",
]


def sample_cat(rng: np.random.Generator, p: np.ndarray, size: int) -> np.ndarray:
    return _cat_from_uniforms(p, rng.random(size))


def _cat_from_uniforms(p: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Categories of weights ``p`` (unnormalized) by inverse CDF of the uniforms ``u``."""
    c = np.cumsum(p)
    c /= c[-1]
    return np.minimum(np.searchsorted(c, u, side="right"), len(p) - 1)


def draw_difficulty(rng: np.random.Generator, state: str, bb: dict[str, Any]) -> float:
    if state == "knowledge":
        a, b = v(bb["knowledge_difficulty_beta"])
    elif state == "misconception":
        a, b = v(bb["misconception_difficulty_beta"])
    else:
        return float(0.5 + 0.5 * rng.random())
    return float(rng.beta(a, b))


def round1_probs(rng: np.random.Generator, state: str, d: float, k: int, g: int, w: int, bb: dict[str, Any]) -> np.ndarray:
    """Round-1 vote distribution over the k options."""
    p = np.zeros(k)
    if state == "knowledge":
        p[:] = d / (k - 1)
        p[g] = 1 - d
    elif state == "misconception":
        rest = [i for i in range(k) if i not in (g, w)]
        p[g] = d / 2 if rest else d
        if rest:
            p[rest] = d / 2 / len(rest)
        p[w] = 1 - d
    else:
        alpha = np.full(k, float(v(bb["uncertain_dirichlet"])))
        alpha[g] += float(v(bb["uncertain_gold_boost"]))
        p = rng.dirichlet(alpha)
    return p


def draw_votes(rng: np.random.Generator, p: np.ndarray, n: int, p_null: float) -> np.ndarray:
    out = sample_cat(rng, p, n)
    out[rng.random(n) < p_null] = -1
    return out


def is_unanimous(votes: np.ndarray) -> bool:
    return bool(votes[0] >= 0 and np.all(votes == votes[0]))


@dataclass
class Trajectory:
    state: str
    d: float
    votes: list[np.ndarray]  # per round, option indices (-1 = null)
    retrieval: list[tuple[list[int], int] | None]  # per round: (doc indices into pool, n_queries) or None
    found_by_round: list[bool]  # evidence found gold after round t
    pool_size: int


@dataclass(frozen=True)
class Dynamics:
    """The per-question constants of :func:`run_dynamics` (``mech``'s values for the state)."""

    k: int
    g: int
    attractor: int  # gold (knowledge), the distractor (misconception) or -1 (uncertain)
    gamma: float
    persist: float
    pull: float
    epull: float
    h: float
    n_cand: int
    p_null: float

    @classmethod
    def of(cls, state: str, k: int, g: int, w: int, mech: dict[str, Any], n_cand: int, p_null: float) -> Dynamics:
        attractor = g if state == "knowledge" else (w if state == "misconception" else -1)
        return cls(k, g, attractor, float(v(mech["convergence_gamma"])), float(v(mech["own_vote_persistence"])),
                   float(v(mech["attractor_pull"])), float(v(mech["evidence_pull"])),
                   float(v(mech["evidence_found"])[state]), n_cand, p_null)

    def found(self, eta: float, u: float, new: int, nd: int) -> bool:
        """Whether the round's evidence points to gold: ``u < min(1, eta * h * new / nd)``."""
        return bool(u < min(1.0, eta * self.h * new / nd))

    def next_votes(self, cur: np.ndarray, found: bool, u: np.ndarray) -> np.ndarray:
        """Next-round votes from ``cur`` under instructed convergence, from the round's ``3 * n_cand``
        uniforms ``u`` (category, own-vote persistence, parse failure)."""
        n = self.n_cand
        counts = np.bincount(cur[cur >= 0], minlength=self.k).astype(float)
        wgt = (counts + 0.5) ** self.gamma
        if self.attractor >= 0:
            wgt[self.attractor] *= 1.0 + self.pull
        if found:
            wgt[self.g] *= 1.0 + self.epull
        nxt = _cat_from_uniforms(wgt, u[:n])
        keep = (u[n : 2 * n] < self.persist) & (cur >= 0)
        nxt[keep] = cur[keep]
        nxt[u[2 * n :] < self.p_null] = -1
        return nxt


def doc_pool(rng: np.random.Generator, state: str, mech: dict[str, Any]) -> tuple[int, np.ndarray]:
    """The question's relevant pool size and its rank-biased draw weights (top documents recur: saturation)."""
    lo, hi = v(mech["doc_pool_size"])[state]
    pool = Draws(rng).between(lo, hi + 1)
    wts = 1.0 / (1.0 + np.arange(pool)) ** 0.7
    return pool, wts / wts.sum()


def round_draws(rng: np.random.Generator, pool: int, rank_p: np.ndarray, docs_per_round: int,
                 n_cand: int) -> tuple[int, list[int], float, np.ndarray]:
    """One contested round's random draws, in stream order: the number of queries, the retrieved
    documents, the evidence uniform and the ``3 * n_cand`` vote uniforms (none depends on the votes)."""
    nq = Draws(rng).between(1, 5)
    nd = min(docs_per_round, 2 * nq, pool)
    docs = weighted_sample(rng, rank_p, nd)  # rng.choice(pool, nd, replace=False, p=rank_p)
    u = rng.random(1 + 3 * n_cand)
    return nq, docs, float(u[0]), u[1:]


def run_dynamics(rng: np.random.Generator, state: str, d: float, k: int, g: int, w: int, v1: np.ndarray,
                 mech: dict[str, Any], eta: float, n_cand: int, max_rounds: int, docs_per_round: int,
                 p_null: float) -> Trajectory:
    """Rounds 2..T under instructed convergence with evidence retrieved after each disagreement."""
    pool, rank_p = doc_pool(rng, state, mech)
    dyn = Dynamics.of(state, k, g, w, mech, n_cand, p_null)
    votes = [v1]
    retrieval: list[tuple[list[int], int] | None] = []
    found_by_round: list[bool] = []
    seen: set[int] = set()
    while not is_unanimous(votes[-1]) and len(votes) < max_rounds:
        nq, docs, u_found, u = round_draws(rng, pool, rank_p, docs_per_round, n_cand)
        new = sum(1 for x in docs if x not in seen)
        seen.update(docs)
        found = dyn.found(eta, u_found, new, len(docs))
        retrieval.append((docs, nq))
        found_by_round.append(found)
        votes.append(dyn.next_votes(votes[-1], found, u))
    retrieval.append(None)
    found_by_round.append(False)
    return Trajectory(state, d, votes, retrieval, found_by_round, pool)


def final_index(votes: np.ndarray, k: int) -> int:
    """Unique plurality of the last round (DESIGN 3), -1 when tied or all null."""
    counts = np.bincount(votes[votes >= 0], minlength=k)
    if counts.max() == 0:
        return -1
    top = np.flatnonzero(counts == counts.max())
    return int(top[0]) if len(top) == 1 else -1


def final_indices(votes: np.ndarray, k: int) -> np.ndarray:
    """:func:`final_index` of every row of an ``(n, N)`` vote matrix (votes in -1..k-1), at once."""
    n = votes.shape[0]
    rows = np.broadcast_to(np.arange(n)[:, None], votes.shape)
    valid = votes >= 0
    counts = np.bincount((rows * k + votes)[valid], minlength=n * k).reshape(n, k)
    top = counts.max(axis=1)
    unique = (counts == top[:, None]).sum(axis=1) == 1
    return np.where((top > 0) & unique, counts.argmax(axis=1), -1)


def reanswer_matrix(rng: np.random.Generator, kp: np.ndarray, n: int, N: int, k: int, m: int, lead: int, p_lead: float, pn: float) -> np.ndarray:
    """Re-answers: keep m with prob kp (per row), else the lead alternative with prob p_lead, else another option."""
    keep = rng.random((n, N)) < kp[:, None]
    to_lead = rng.random((n, N)) < p_lead
    others = [i for i in range(k) if i != m]
    rnd = np.array(others)[rng.integers(len(others), size=(n, N))]
    ans = np.where(keep, m, np.where(to_lead, lead, rnd))
    ans[rng.random((n, N)) < pn] = -1
    return ans
