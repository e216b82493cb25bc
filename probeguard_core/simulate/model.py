"""Generative model of multi-round consensus (the simulated substrate of §3 and the probe of §3.2).

Per question (``simulate_question``):

1. **Latent state** -- knowledge-backed (K), shared misconception (M) or genuinely uncertain (U) --
   drawn from a mixture ``pi`` that depends on the cell and (MedQA) on the question's
   specialty (Appendix I), and a **difficulty** ``d``.
2. **Round 1**: N = 8 votes.  K: each candidate holds gold with probability ``1 - d``;
   M: each holds the question's tempting distractor with probability ``1 - d``; U: vote shares
   ~ Dirichlet with a weak pull of gold.  A parse failure (null answer) happens rarely.
3. **Rounds 2..T** after a disagreement: retrieval of <= 8 documents from the question's
   relevant pool (repeats rise as the pool saturates, Eq. 10); the new evidence points to
   gold with a probability depending on the state, scaled by the share of *new* documents;
   next-round votes follow instructed convergence (weights ~ (count + 0.5)^gamma, App. A),
   the attractor's pull and the evidence; each candidate may also keep its own vote.
   Stop at unanimity or T = 8 (DESIGN 3).
4. Rationales (``text.py``): a knowledge-backed vote cites the question's one mechanism; a
   misconception vote draws a justification from a pool of distinct reasons.
5. Token counts, sequence log-probabilities and mean token entropies from a length x per-token
   likelihood mechanism (harder questions and later rounds write longer completions; votes off
   the attractor and uncertain questions have higher per-token NLL).
6. Probe (all four arms of DESIGN 2.2) on a unanimous first round: the challenge *collapses*
   the consensus with a probability that depends on whether it is right or wrong, and on the arm.

:func:`calibrate_cell` solves the free parameters from the rate inputs of ``params.yaml``:
the state mixture (exact linear solve on Monte-Carlo round-1 rates), the evidence strength
(bisection on the overall accuracy) and the probe collapse probabilities (linear solve on
Monte-Carlo flip rates).  No output metric (AUROC, AURC, coverage) enters anywhere.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from probeguard_core import SEED
from probeguard_core.simulate import text as TX
from probeguard_core.simulate.draws import Draws, weighted_sample

STATES = ("knowledge", "misconception", "uncertain")
ARMS = ("counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction")
PARAMS_PATH = Path(__file__).with_name("params.yaml")
NLI_MODEL = "simulated/deberta-large-mnli-standin"
#: Table 6's control-arm rates relative to the probe (MedQA / Qwen3-8B), used where a cell has no control arms.
_TABLE6_RATIO_KEYS = ("instruction_only", "irrelevant_docs", "neutral_instruction")


# ------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------

def _check_leaves(node: Any, where: str) -> None:
    """Every input is ``{value, source}`` or ``{value, assumed}`` (specialty rows: ``{n, error, source}``)."""
    if not isinstance(node, dict):
        raise ValueError(f"params: {where} must be a mapping with value and source/assumed, got {node!r}")
    if "value" in node or "n" in node:
        has = [k for k in ("source", "assumed") if k in node]
        if len(has) != 1 or not str(node[has[0]]).strip():
            raise ValueError(f"params: {where} needs exactly one non-empty 'source' or 'assumed'")
        return
    for k, v in node.items():
        _check_leaves(v, f"{where}.{k}" if where else str(k))


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    """Read and check ``params.yaml``; raises ValueError naming a leaf without a source/assumption."""
    p = Path(path) if path is not None else PARAMS_PATH
    return copy.deepcopy(_parse_params(p.read_text(encoding="utf-8"), str(p)))  # callers may edit their copy


#: libyaml's parser where PyYAML has it (the same SafeConstructor, so the same values), else PyYAML's own.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _safe_load(text: str) -> Any:
    return yaml.load(text, Loader=_SafeLoader)


@functools.lru_cache(maxsize=8)
def _parse_params(text: str, where: str) -> dict[str, Any]:
    """The checked parameters of one file's text (parsed once per text; :func:`load_params` copies)."""
    raw = _safe_load(text)
    if not isinstance(raw, dict) or "cells" not in raw:
        raise ValueError(f"{where}: not a simulator parameter file (no 'cells')")
    for key in ("panel", "datasets", "backbones", "mechanism", "specialties", "cells"):
        _check_leaves(raw[key], key)
    return raw


def v(node: dict[str, Any]) -> Any:
    return node["value"]


#: (path, dataset, backbone, role); the augmentation pool is a MedQA cell with role "augment".
CELLS: tuple[tuple[str, str, str, str], ...] = (
    ("medqa/qwen3-8b", "medqa", "Qwen/Qwen3-8B", "main"),
    ("mmlu_pro_med/qwen3-8b", "mmlu_pro_med", "Qwen/Qwen3-8B", "main"),
    ("medmcqa/qwen3-8b", "medmcqa", "Qwen/Qwen3-8B", "main"),
    ("medxpertqa/qwen3-8b", "medxpertqa", "Qwen/Qwen3-8B", "main"),
    ("medqa/huatuogpt-o1-8b", "medqa", "FreedomIntelligence/HuatuoGPT-o1-8B", "main"),
    ("mmlu_pro_med/huatuogpt-o1-8b", "mmlu_pro_med", "FreedomIntelligence/HuatuoGPT-o1-8B", "main"),
    ("medqa/llama-3.1-8b-instruct", "medqa", "meta-llama/Llama-3.1-8B-Instruct", "main"),
    ("mmlu_pro_med/llama-3.1-8b-instruct", "mmlu_pro_med", "meta-llama/Llama-3.1-8B-Instruct", "main"),
    ("medqa-augment/qwen3-8b", "medqa", "Qwen/Qwen3-8B", "augment"),
)
CELL_INDEX = {c[0]: c for c in CELLS}


def cell_spec(path: str) -> tuple[str, str, str, str]:
    if path not in CELL_INDEX:
        raise ValueError(f"unknown cell {path!r}; expected one of {sorted(CELL_INDEX)}")
    return CELL_INDEX[path]


def rng_for(*parts: str | int) -> np.random.Generator:
    """A Generator seeded from SEED and the given names/indices (stable across runs and platforms)."""
    key = [SEED] + [p if isinstance(p, int) else zlib.crc32(str(p).encode("utf-8")) for p in parts]
    return np.random.default_rng(key)


# ------------------------------------------------------------------------------------------
# Question bank (shared by the backbones of a dataset)
# ------------------------------------------------------------------------------------------

@dataclass
class Question:
    qid: str
    index: int
    question: str
    options: dict[str, str]
    gold: str
    distractor: str  # the tempting wrong option (the misconception's attractor)
    specialty: str | None
    findings: list[str]
    gold_mech: tuple[int, int]
    side_mechs: list[tuple[int, int]]
    reason_pool: list[tuple[int, int]]  # misconception reasons; [0] is the shared quick prior
    uncertain_pool: list[tuple[int, int]]

    @functools.cached_property
    def keys(self) -> list[str]:
        return list(self.options)

    @functools.cached_property
    def registry(self) -> list[tuple[int, int]]:
        return [self.gold_mech, *self.side_mechs, *self.reason_pool, *self.uncertain_pool]

    @functools.cached_property
    def distractors_of(self) -> dict[str, list[str]]:
        """Per letter, the first two other options' texts (a rationale's differential)."""
        return {x: [self.options[y] for y in self.options if y != x][:2] for x in self.options}


def _specialty_table(params: dict[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Specialty names, label frequencies (∝ unanimous counts, App. I) and relative misconception odds."""
    t8 = params["specialties"]["table8"]
    others = v(params["specialties"]["others"])
    names = list(t8) + list(others)
    n = np.array([t8[s]["n"] for s in t8] + [others[s] for s in others], dtype=float)
    err = np.array([t8[s]["error"] for s in t8] + [np.nan] * len(others))
    layer = float(np.nansum(n[: len(t8)] * err[: len(t8)]) / n[: len(t8)].sum())
    rel = np.where(np.isnan(err), 1.0, err / layer)
    return names, n / n.sum(), rel


def _distinct_mechs(rng: np.random.Generator, k: int) -> list[tuple[int, int]]:
    procs = rng.choice(len(TX.PROCESSES), size=k, replace=False)
    structs = rng.choice(len(TX.STRUCTURES), size=k, replace=False)
    return [(int(p), int(s)) for p, s in zip(procs, structs)]


def make_question(dataset: str, index: int, params: dict[str, Any], *, labelled: bool, pool: str = "") -> Question:
    """Question ``index`` of ``dataset`` (``pool`` separates the augmentation pool's bank)."""
    rng = rng_for("question", dataset + pool, index)
    dr = Draws(rng)
    n_opt = int(v(params["datasets"][dataset]["n_options"]))
    keys = [chr(ord("A") + i) for i in range(n_opt)]
    specialty = None
    spec_for_text = None
    if labelled:
        names, freq, _ = _specialty_table(params)
        specialty = names[int(rng.choice(len(names), p=freq))]
        spec_for_text = specialty
    else:
        spec_for_text = list(TX.ALL_TERMS)[dr.below(len(TX.ALL_TERMS))]
    stem, findings = TX.question_text(dr, spec_for_text, dataset)
    opts = TX.option_texts(dr, spec_for_text, n_opt)
    gold_i = dr.below(n_opt)
    dis_i = (gold_i + 1 + dr.below(n_opt - 1)) % n_opt
    mechs = _distinct_mechs(rng, 3 + 8 + 4)
    n_reason = dr.between(v(params["mechanism"]["misconception_reason_pool"])[0], v(params["mechanism"]["misconception_reason_pool"])[1] + 1)
    n_unc = dr.between(v(params["mechanism"]["uncertain_reason_pool"])[0], v(params["mechanism"]["uncertain_reason_pool"])[1] + 1)
    qid = f"{dataset}{pool}-{index:05d}"
    return Question(
        qid=qid, index=index, question=stem, options=dict(zip(keys, opts)), gold=keys[gold_i],
        distractor=keys[dis_i], specialty=specialty, findings=findings, gold_mech=mechs[0],
        side_mechs=mechs[1:3], reason_pool=mechs[3 : 3 + n_reason], uncertain_pool=mechs[11 : 11 + n_unc],
    )


@functools.lru_cache(maxsize=8)
def labelled_indices(dataset: str, n_questions: int, n_labelled: int) -> frozenset[int]:
    """Which questions of the full bank carry a specialty label (a fixed random subset, App. I)."""
    perm = rng_for("labelled", dataset).permutation(n_questions)
    return frozenset(int(i) for i in perm[:n_labelled])


# ------------------------------------------------------------------------------------------
# Round-1 votes and contested dynamics (numeric part)
# ------------------------------------------------------------------------------------------

def _sample_cat(rng: np.random.Generator, p: np.ndarray, size: int) -> np.ndarray:
    return _cat_from_uniforms(p, rng.random(size))


def _cat_from_uniforms(p: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Categories of weights ``p`` (unnormalized) by inverse CDF of the uniforms ``u``."""
    c = np.cumsum(p)
    c /= c[-1]
    return np.minimum(np.searchsorted(c, u, side="right"), len(p) - 1)


def _difficulty(rng: np.random.Generator, state: str, bb: dict[str, Any]) -> float:
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


def _votes(rng: np.random.Generator, p: np.ndarray, n: int, p_null: float) -> np.ndarray:
    out = _sample_cat(rng, p, n)
    out[rng.random(n) < p_null] = -1
    return out


def _unanimous(votes: np.ndarray) -> bool:
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
class _Dynamics:
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
    def of(cls, state: str, k: int, g: int, w: int, mech: dict[str, Any], n_cand: int, p_null: float) -> _Dynamics:
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


def _doc_pool(rng: np.random.Generator, state: str, mech: dict[str, Any]) -> tuple[int, np.ndarray]:
    """The question's relevant pool size and its rank-biased draw weights (top documents recur: saturation)."""
    lo, hi = v(mech["doc_pool_size"])[state]
    pool = Draws(rng).between(lo, hi + 1)
    wts = 1.0 / (1.0 + np.arange(pool)) ** 0.7
    return pool, wts / wts.sum()


def _round_draws(rng: np.random.Generator, pool: int, rank_p: np.ndarray, docs_per_round: int,
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
    pool, rank_p = _doc_pool(rng, state, mech)
    dyn = _Dynamics.of(state, k, g, w, mech, n_cand, p_null)
    votes = [v1]
    retrieval: list[tuple[list[int], int] | None] = []
    found_by_round: list[bool] = []
    seen: set[int] = set()
    while not _unanimous(votes[-1]) and len(votes) < max_rounds:
        nq, docs, u_found, u = _round_draws(rng, pool, rank_p, docs_per_round, n_cand)
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


# ------------------------------------------------------------------------------------------
# Calibration (inputs are rates; free parameters are solved, never tuned to an output metric)
# ------------------------------------------------------------------------------------------

@dataclass
class Calibration:
    pi: dict[str, float]
    eta: float
    collapse: dict[str, tuple[float, float]]  # arm -> (P(collapse | wrong), P(collapse | right))
    reanswer_tokens_median: float
    round1: dict[str, tuple[float, float]] = field(default_factory=dict)  # state -> (P(unan), P(unan & right))
    targets: dict[str, Any] = field(default_factory=dict)


def _round1_rates(state: str, k: int, bb: dict[str, Any], p_null: float, n_cand: int, n: int = 40_000) -> tuple[float, float]:
    """Monte-Carlo P(unanimous) and P(unanimous on gold) in round 1 for one state (gold = 0, distractor = 1)."""
    rng = rng_for("calibrate-round1", state, k, str(sorted((a, str(b["value"])) for a, b in bb.items())))
    hits = right = 0
    for _ in range(n // 2000):
        m = 2000
        if state == "uncertain":
            alpha = np.full(k, float(v(bb["uncertain_dirichlet"])))
            alpha[0] += float(v(bb["uncertain_gold_boost"]))
            P = rng.dirichlet(alpha, size=m)
        else:
            a, b = v(bb[f"{state}_difficulty_beta"])
            d = rng.beta(a, b, size=m)
            P = np.empty((m, k))
            att = 0 if state == "knowledge" else 1
            if state == "knowledge":
                P[:] = (d / (k - 1))[:, None]
            else:
                P[:] = (d / 2 / max(k - 2, 1))[:, None]
                P[:, 0] = d / 2 if k > 2 else d
            P[:, att] = 1 - d
        C = np.cumsum(P, axis=1)
        U = rng.random((m, n_cand))
        V = (U[:, :, None] > C[:, None, :]).sum(-1)
        V[rng.random((m, n_cand)) < p_null] = -1
        un = (V[:, 0] >= 0) & np.all(V == V[:, :1], axis=1)
        hits += int(un.sum())
        right += int((un & (V[:, 0] == 0)).sum())
    return hits / n, right / n


def solve_mixture(U: float, e: float, rates: dict[str, tuple[float, float]], where: str) -> dict[str, float]:
    """Solve pi_K, pi_M, pi_U from P(unanimous) = U and P(wrong | unanimous) = e (exact 3x3 linear system)."""
    A = np.array([[rates[s][0] for s in STATES], [rates[s][1] for s in STATES], [1.0, 1.0, 1.0]])
    b = np.array([U, U * (1 - e), 1.0])
    pi = np.linalg.solve(A, b)
    if np.any(pi < -1e-9):
        raise ValueError(f"{where}: first_round_unanimity={U} with unanimous_error={e} is infeasible for the backbone's "
                         f"state shapes (solved mixture {dict(zip(STATES, pi.round(3)))})")
    pi = np.clip(pi, 0, None)
    return dict(zip(STATES, (pi / pi.sum()).tolist()))


class _ContestedPanel:
    """The contested questions of one state's calibration panel (:func:`_contested_accuracy`), drawn
    once and replayed for every evidence strength eta of the bisection.

    A question's random stream does not depend on eta (common random numbers): every round draws the
    same numbers whatever the votes (:func:`_round_draws`), so its draws are taken once, up to the
    last possible round.  eta only decides, round by round, whether the evidence points to gold
    (:meth:`_Dynamics.found`); the votes after a round are a function of those decisions so far,
    memoized in a tree per question, so an eta whose decisions were seen before costs no vote update.
    The result equals :func:`run_dynamics` on the question's stream, bit for bit.
    """

    def __init__(self, state: str, k: int, bb: dict[str, Any], mech: dict[str, Any], panel: dict[str, Any], n: int):
        N, T, D, pn = (int(v(panel["n_candidates"])), int(v(panel["max_rounds"])), int(v(panel["docs_per_round"])),
                       float(v(panel["parse_failure_rate"])))
        self.n, self.k, self.max_rounds = n, k, T
        self.dyn = _Dynamics.of(state, k, 0, 1, mech, N, pn)
        self.questions: list[tuple[list[tuple[int, int, float, np.ndarray]], dict[Any, Any]]] = []
        for j in range(n):
            rng = rng_for("calibrate-dyn", state, k, j)
            d = _difficulty(rng, state, bb)
            v1 = _votes(rng, round1_probs(rng, state, d, k, 0, 1, bb), N, pn)
            if _unanimous(v1):
                continue
            pool, rank_p = _doc_pool(rng, state, mech)
            seen: set[int] = set()
            rounds = []
            for _ in range(T - 1):
                _, docs, u_found, u = _round_draws(rng, pool, rank_p, D, N)
                rounds.append((sum(1 for x in docs if x not in seen), len(docs), u_found, u))
                seen.update(docs)
            self.questions.append((rounds, {(): self._node(v1, 0)}))

    def _node(self, votes: np.ndarray, depth: int) -> tuple[np.ndarray, bool, bool]:
        """A memo entry: the votes after ``depth`` contested rounds, whether the question stops
        there, and whether its final answer is then gold (index 0)."""
        done = _unanimous(votes) or depth + 1 >= self.max_rounds
        return votes, done, done and final_index(votes, self.k) == 0

    def rates(self, eta: float) -> tuple[float, float]:
        """P(not unanimous) and P(not unanimous and final correct) at evidence strength ``eta``."""
        right = 0
        for rounds, memo in self.questions:
            path: tuple[bool, ...] = ()
            votes, done, correct = memo[path]
            while not done:
                new, nd, u_found, u = rounds[len(path)]
                found = self.dyn.found(eta, u_found, new, nd)
                path = path + (found,)
                if path not in memo:
                    memo[path] = self._node(self.dyn.next_votes(votes, found, u), len(path))
                votes, done, correct = memo[path]
            right += correct
        return len(self.questions) / self.n, right / self.n


def _contested_accuracy(state: str, eta: float, k: int, bb: dict[str, Any], mech: dict[str, Any], panel: dict[str, Any],
                        n: int) -> tuple[float, float]:
    """P(not unanimous) and P(not unanimous and final correct) for one state (common random numbers per eta)."""
    return _panels(k, n, _Inputs((bb, mech, panel)))[state].rates(eta)


class _Inputs:
    """Parameter sections as an ``lru_cache`` key: equal when their canonical JSON texts are."""

    def __init__(self, sections: tuple[dict[str, Any], ...]):
        self.sections = sections
        self.key = json.dumps(sections, sort_keys=True)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Inputs) and other.key == self.key


@functools.lru_cache(maxsize=16)
def _panels(k: int, n: int, inputs: _Inputs) -> dict[str, _ContestedPanel]:
    """Every state's contested panel for (backbone, mechanism, panel) sections ``inputs``.

    The panels do not depend on the cell's rates, so the calibrations of one process that differ
    only there (the what-if error rates, the drift levels) share them, memo trees included."""
    bb, mech, panel = inputs.sections
    return {s: _ContestedPanel(s, k, bb, mech, panel, n) for s in STATES}


@functools.lru_cache(maxsize=16)
def _round1_table(k: int, p_null: float, n_cand: int, inputs: _Inputs) -> dict[str, tuple[float, float]]:
    """:func:`_round1_rates` of every state for backbone section ``inputs`` (shared like :func:`_panels`)."""
    (bb,) = inputs.sections
    return {s: _round1_rates(s, k, bb, p_null, n_cand) for s in STATES}


@functools.lru_cache(maxsize=32)
def _calibrate_cached(cell: str, params_text: str) -> Calibration:
    params = _safe_load(params_text)
    path, dataset, backbone, role = cell_spec(cell)
    base = v(params["cells"][cell]["like"]) if "like" in params["cells"][cell] else cell
    cp = params["cells"][base]
    bb = params["backbones"][backbone]
    mech, panel = params["mechanism"], params["panel"]
    k = int(v(params["datasets"][dataset]["n_options"]))
    N, pn = int(v(panel["n_candidates"])), float(v(panel["parse_failure_rate"]))
    U, e, acc = float(v(cp["first_round_unanimity"])), float(v(cp["unanimous_error"])), float(v(cp["overall_accuracy"]))
    rates = dict(_round1_table(k, pn, N, _Inputs((bb,))))
    pi = solve_mixture(U, e, rates, f"cell {base}")
    # evidence strength eta: bisection so that overall accuracy matches (accuracy is monotone in eta)
    target_contested_right = acc - U * (1 - e)
    n_dyn = 240

    panels = {s: p for s, p in _panels(k, n_dyn, _Inputs((bb, mech, panel))).items() if pi[s] > 0}

    def contested_right(eta: float) -> float:
        return sum(pi[s] * panels[s].rates(eta)[1] for s in panels)

    lo, hi = 0.0, 8.0
    if contested_right(hi) < target_contested_right or contested_right(lo) > target_contested_right:
        # out of the mechanism's range: use the nearest end (reported by the measurement test)
        eta = hi if contested_right(hi) < target_contested_right else lo
    else:
        for _ in range(14):
            mid = (lo + hi) / 2
            if contested_right(mid) < target_contested_right:
                lo = mid
            else:
                hi = mid
        eta = (lo + hi) / 2
    # probe collapse probabilities per arm: flip = f * P(flip | collapse) + (1 - f) * P(flip | hold)
    flips = _probe_targets(cp, params["cells"]["medqa/qwen3-8b"])
    collapse = {}
    for arm in ARMS:
        p1w, p0w = _flip_given(arm, True, k, mech, N, pn)
        p1r, p0r = _flip_given(arm, False, k, mech, N, pn)
        fw = float(np.clip((flips[arm][0] - p0w) / (p1w - p0w), 0, 1))
        fr = float(np.clip((flips[arm][1] - p0r) / (p1r - p0r), 0, 1))
        collapse[arm] = (fw, fr)
    ref = params["cells"]["medqa/qwen3-8b"]
    qwen_tok = float(v(params["backbones"]["Qwen/Qwen3-8B"]["tokens_median"]))
    sd = float(v(mech["reanswer_token_sd"]))
    med = (float(v(ref["probe_tokens_median"])) - float(v(mech["query_tokens_median"]))) / N / math.exp(sd * sd / 2)
    med *= float(v(bb["tokens_median"])) / qwen_tok
    return Calibration(pi=pi, eta=eta, collapse=collapse, reanswer_tokens_median=med, round1=rates,
                       targets={"first_round_unanimity": U, "unanimous_error": e, "overall_accuracy": acc,
                                "flips": flips})


def _probe_targets(cp: dict[str, Any], ref: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per arm (flip_wrong, flip_right): the cell's own Table 6 rows or the probe rates scaled by Table 6's ratios."""
    fw, fr = float(v(cp["flip_wrong"])), float(v(cp["flip_right"]))
    out = {"counter_evidence": (fw, fr)}
    rw, rr = float(v(ref["flip_wrong"])), float(v(ref["flip_right"]))
    for arm in _TABLE6_RATIO_KEYS:
        if arm in cp:
            a, b = v(cp[arm])
        else:
            a0, b0 = v(ref[arm])
            a, b = fw * a0 / rw, fr * b0 / rr
        out[arm] = (float(a), float(b))
    return out


@functools.lru_cache(maxsize=64)
def _flip_given_cached(arm: str, wrong: bool, k: int, keep_beta: tuple[float, float], hold: float, lead: float, N: int, pn: float) -> tuple[float, float]:
    rng = rng_for("calibrate-probe", arm, int(wrong), k)
    n = 40_000
    out = []
    for collapsed in (True, False):
        kp = rng.beta(*keep_beta, size=n) if collapsed else np.full(n, hold)
        ans = _reanswer_matrix(rng, kp, n, N, k, m=0, lead=1, p_lead=lead, pn=pn)
        out.append(float(np.mean(final_indices(ans, k) != 0)))  # = the mean of _flipped_row over the rows
    return out[0], out[1]


def _flip_given(arm: str, wrong: bool, k: int, mech: dict[str, Any], N: int, pn: float) -> tuple[float, float]:
    return _flip_given_cached(arm, wrong, k, tuple(v(mech["probe_collapse_keep_beta"])), float(v(mech["probe_hold_keep"])[arm]),
                              float(v(mech["probe_switch_to_lead"])), N, pn)


def _reanswer_matrix(rng: np.random.Generator, kp: np.ndarray, n: int, N: int, k: int, m: int, lead: int, p_lead: float, pn: float) -> np.ndarray:
    """Re-answers: keep m with prob kp (per row), else the lead alternative with prob p_lead, else another option."""
    keep = rng.random((n, N)) < kp[:, None]
    to_lead = rng.random((n, N)) < p_lead
    others = [i for i in range(k) if i != m]
    rnd = np.array(others)[rng.integers(len(others), size=(n, N))]
    ans = np.where(keep, m, np.where(to_lead, lead, rnd))
    ans[rng.random((n, N)) < pn] = -1
    return ans


def _flipped_row(ans: np.ndarray, k: int, m: int) -> bool:
    return final_index(ans, k) != m


def calibrate_cell(cell: str, params: dict[str, Any] | None = None) -> Calibration:
    """Solve the cell's free parameters from its rate inputs.

    Cached per parameter text in memory and on disk (:func:`probeguard_core.cache.cached_json`,
    keyed by the cell, the parameter text, numpy's version and the simulator's source), so the
    Monte-Carlo calibration runs once per input, not once per process.
    """
    params = params or load_params()
    return _calibrate_on_disk(cell, yaml.safe_dump(params, sort_keys=True))


def _calibration_to_json(cal: Calibration) -> dict[str, Any]:
    return {"pi": cal.pi, "eta": cal.eta, "collapse": {a: list(t) for a, t in cal.collapse.items()},
            "reanswer_tokens_median": cal.reanswer_tokens_median, "round1": {s: list(t) for s, t in cal.round1.items()},
            "targets": {**cal.targets, "flips": {a: list(t) for a, t in cal.targets.get("flips", {}).items()}}}


def _calibration_from_json(d: dict[str, Any]) -> Calibration:
    targets = dict(d["targets"])
    if "flips" in targets:
        targets["flips"] = {a: tuple(t) for a, t in targets["flips"].items()}
    return Calibration(pi=dict(d["pi"]), eta=d["eta"], collapse={a: tuple(t) for a, t in d["collapse"].items()},
                       reanswer_tokens_median=d["reanswer_tokens_median"],
                       round1={s: tuple(t) for s, t in d["round1"].items()}, targets=targets)


@functools.lru_cache(maxsize=32)
def _calibrate_on_disk(cell: str, params_text: str) -> Calibration:
    from probeguard_core import cache

    code = cache.code_fingerprint("probeguard_core.simulate.model", "probeguard_core.simulate.text")
    key = {"cell": cell, "params": params_text, "numpy": np.__version__, "code": code}
    return cache.cached_json("simulator-calibration", key, lambda: _calibrate_cached(cell, params_text),
                             _calibration_to_json, _calibration_from_json)


# ------------------------------------------------------------------------------------------
# One question: log, probe, NLI, self-report (JSON-ready dicts)
# ------------------------------------------------------------------------------------------

@dataclass
class Simulated:
    log: dict[str, Any]
    probe: list[dict[str, Any]]
    nli: list[dict[str, Any]]
    self_report: dict[str, Any] | None
    latent: dict[str, Any]


def _state_for(rng: np.random.Generator, q: Question, cal: Calibration, params: dict[str, Any], dataset: str) -> str:
    pi = dict(cal.pi)
    if q.specialty is not None:
        names, _, rel = _specialty_table(params)
        r = float(rel[names.index(q.specialty)])
        pm = min(pi["misconception"] * r, 0.95)
        rest = pi["knowledge"] + pi["uncertain"]
        scale = (1 - pm) / rest if rest > 0 else 0.0
        pi = {"knowledge": pi["knowledge"] * scale, "misconception": pm, "uncertain": pi["uncertain"] * scale}
    p = np.array([pi[s] for s in STATES])
    return STATES[int(_sample_cat(rng, p, 1)[0])]


@dataclass(frozen=True)
class _Writing:
    """The backbone's completion-length and likelihood constants of step 5 (read once per question)."""

    tokens_median: float
    per_difficulty: float
    per_round: float
    token_sd: float
    nll: float
    nll_uncertain: float

    @classmethod
    def of(cls, bb: dict[str, Any], mech: dict[str, Any]) -> _Writing:
        return cls(float(v(bb["tokens_median"])), float(v(bb["tokens_per_difficulty"])), float(v(bb["tokens_per_round"])),
                   float(v(mech["reanswer_token_sd"])), float(v(bb["nll_per_token"])), float(v(bb["nll_uncertain_factor"])))


def _candidate(rng: np.random.Generator, dr: Draws, q: Question, *, letter: str | None, state: str, knowledge_backed: bool,
               c_mech: float, prior_rate: float, d: float, t: int, wr: _Writing, on_attractor: bool) -> dict[str, Any]:
    z_tok, z_nll, z_ent = rng.standard_normal(3).tolist()  # the same three draws as three scalar calls
    n_tok = wr.tokens_median * (1 + wr.per_difficulty * d) * (1 + wr.per_round * (t - 1))
    n_tok = max(16, int(round(n_tok * math.exp(wr.token_sd * z_tok))))
    nll = wr.nll * (wr.nll_uncertain if (state == "uncertain" or not on_attractor) else 1.0)
    nll *= math.exp(0.15 * z_nll)
    ent = nll * 1.25 * math.exp(0.1 * z_ent)
    if letter is None:
        rat = "The findings are conflicting and I cannot commit to a single letter here."
    else:
        if knowledge_backed:
            m = q.gold_mech if dr.uniform() < c_mech else q.side_mechs[dr.below(len(q.side_mechs))]
        elif state == "misconception" and letter == q.distractor:
            m = q.reason_pool[0] if dr.uniform() < prior_rate else q.reason_pool[dr.below(len(q.reason_pool))]
        else:
            m = q.uncertain_pool[dr.below(len(q.uncertain_pool))]
        rat = TX.rationale(dr, letter=letter, dx=q.options[letter], mech=m, knowledge=knowledge_backed,
                           n_sentences=int(round(n_tok / 110)), findings=q.findings, distractors=q.distractors_of[letter])
    return {"answer": letter, "rationale": rat, "logprob": round(-n_tok * nll, 2), "n_tokens": n_tok,
            "mean_token_entropy": round(ent, 4)}


def _modal(answers: list[str | None], keys: list[str]) -> str | None:
    counts = {k: 0 for k in keys}
    for a in answers:
        if a is not None:
            counts[a] += 1
    best = max(counts.values())
    if best == 0:
        return None
    return min(k for k, c in counts.items() if c == best)


@functools.lru_cache(maxsize=16)
def _offdiagonal(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the ordered pairs i != j of ``n`` items, row by row."""
    rows, cols = np.nonzero(~np.eye(n, dtype=bool))
    return rows, cols


def nli_record(rng: np.random.Generator, q: Question, rnd: dict[str, Any], head: dict[str, Any], mech: dict[str, Any]) -> dict[str, Any] | None:
    """The NLI stand-in for one round (DESIGN 2.4): entailment high when two claims cite a common mechanism."""
    from probeguard_core.claims import extract_claims

    answers = [c["answer"] for c in rnd["candidates"]]
    m = _modal(answers, q.keys)
    if m is None:
        return None
    idx = [i for i, a in enumerate(answers) if a == m]
    claims = [" ".join(extract_claims(rnd["candidates"][i]["rationale"])) for i in idx]
    cites = TX.citations(claims, q.registry)
    hs, ds = v(mech["nli_shared_beta"]), v(mech["nli_distinct_beta"])
    n = len(idx)
    # DeBERTa's entailment scale drifts with the phrasing and length the claims of one question
    # share, so its errors are correlated within a question: one logit shift per (question, round).
    shift = float(rng.normal(0.0, float(v(mech["nli_question_logit_sd"]))))
    # One beta draw per ordered pair i != j, row by row (one call draws them in that order).
    E = np.ones((n, n))
    if n > 1:
        rows, cols = _offdiagonal(n)
        c = cites.astype(np.int64)
        shared = (c @ c.T)[rows, cols] > 0  # the two claims cite a common mechanism
        p = np.clip(rng.beta(np.where(shared, hs[0], ds[0]), np.where(shared, hs[1], ds[1])), 1e-6, 1 - 1e-6)
        E[rows, cols] = np.round(1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + shift))), 4)
    return {**head, "round": rnd["round"], "model": NLI_MODEL, "candidates": idx, "claims": claims, "entailment": E.tolist()}


def simulate_question(q: Question, cell: str, params: dict[str, Any], cal: Calibration, *,
                      rng: np.random.Generator, with_self_report: bool, dataset: str, backbone: str,
                      arms: tuple[str, ...] = ARMS, condition_unanimous: bool = False) -> Simulated:
    """Simulate one question of ``cell``: execution log, probe arms (unanimous round 1), NLI cache, self-report."""
    bb, mech, panel = params["backbones"][backbone], params["mechanism"], params["panel"]
    N, T, D, pn = (int(v(panel["n_candidates"])), int(v(panel["max_rounds"])), int(v(panel["docs_per_round"])), float(v(panel["parse_failure_rate"])))
    keys = q.keys
    k, g, w = len(keys), keys.index(q.gold), keys.index(q.distractor)
    for _attempt in range(10_000):
        state = _state_for(rng, q, cal, params, dataset)
        d = _difficulty(rng, state, bb)
        v1 = _votes(rng, round1_probs(rng, state, d, k, g, w, bb), N, pn)
        if not condition_unanimous or _unanimous(v1):
            break
    else:  # pragma: no cover - unanimity has probability > 0.1 in every cell
        raise RuntimeError(f"{cell}: could not draw a unanimous first round for {q.qid}")
    tr = run_dynamics(rng, state, d, k, g, w, v1, mech, cal.eta, N, T, D, pn)
    a_, b_ = v(mech["knowledge_mechanism_rate"])
    c_mech = float(rng.beta(a_, b_))
    a_, b_ = v(mech["misconception_prior_rate"])
    prior_rate = float(rng.beta(a_, b_))
    attractor = g if state == "knowledge" else (w if state == "misconception" else -2)
    wr = _Writing.of(bb, mech)
    # document pool ids (simulated corpus id space)
    dr = Draws(rng)
    pool_ids = [TX.doc_id(dr) for _ in range(tr.pool_size)]
    rounds = []
    found_so_far = False
    for t, votes in enumerate(tr.votes, start=1):
        cands = []
        for x in votes.tolist():
            letter = None if x < 0 else keys[x]
            kb = letter == q.gold and (state == "knowledge" or found_so_far)
            cands.append(_candidate(rng, dr, q, letter=letter, state=state, knowledge_backed=kb, c_mech=c_mech,
                                    prior_rate=prior_rate, d=d, t=t, wr=wr, on_attractor=int(x) == attractor))
        ret = tr.retrieval[t - 1]
        retrieval = None
        if ret is not None:
            docs, nq = ret
            retrieval = {"queries": TX.queries(dr, q.findings, list(q.options.values()), nq),
                         "doc_ids": [pool_ids[i] for i in docs]}
        found_so_far = found_so_far or tr.found_by_round[t - 1]
        rounds.append({"round": t, "candidates": cands, "retrieval": retrieval})
    R = float(v(bb["decode_tokens_per_s"]))
    wall = sum(max(c["n_tokens"] for c in r["candidates"]) / R + (float(v(mech["round_overhead_s"])) if r["retrieval"] else 0.0) for r in rounds)
    toks = sum(c["n_tokens"] for r in rounds for c in r["candidates"])
    head = {"schema_version": 1, "qid": q.qid, "dataset": dataset, "backbone": backbone}
    log = {**head, "question": q.question, "options": q.options, "gold": q.gold, "specialty": q.specialty,
           "n_candidates": N, "max_rounds": T, "rounds": rounds, "cost": {"wall_s": round(wall, 1), "completion_tokens": int(toks)}}
    # NLI cache: round 1 and the last round
    nli = []
    for rnd in {id(rounds[0]): rounds[0], id(rounds[-1]): rounds[-1]}.values():
        rec = nli_record(rng, q, rnd, head, mech)
        if rec is not None:
            nli.append(rec)
    probe = []
    fin = final_index(tr.votes[-1], k)
    if _unanimous(v1):
        probe = _probe(rng, q, int(v1[0]), state, cal, params, bb, head, arms, pool_ids)
    sr = None
    if with_self_report:
        vm, vs = float(v(mech["verbalized_mean"])), float(v(mech["verbalized_sd"]))
        vc = vm + float(v(mech["verbalized_state_shift"])[state]) + vs * rng.standard_normal()
        vc = float(min(100, max(0, 5 * round(vc / 5))))
        lt = float(v(mech["p_true_logit"])[state]) + float(v(mech["p_true_sd"])) * rng.standard_normal()
        sr = {**head, "verbalized_confidence": vc, "p_true": round(1 / (1 + math.exp(-lt)), 4)}
    latent = {"state": state, "difficulty": d, "unanimous": _unanimous(v1), "correct": fin == g,
              "found_any": any(tr.found_by_round)}
    return Simulated(log, probe, nli, sr, latent)


def _probe(rng: np.random.Generator, q: Question, m: int, state: str, cal: Calibration, params: dict[str, Any],
           bb: dict[str, Any], head: dict[str, Any], arms: tuple[str, ...], pool_ids: list[str]) -> list[dict[str, Any]]:
    """Algorithm 1 and its control arms (App. G) for a unanimous first round on option index ``m``."""
    mech, panel = params["mechanism"], params["panel"]
    N, pn = int(v(panel["n_candidates"])), float(v(panel["parse_failure_rate"]))
    keys = q.keys
    k, g, w = len(keys), keys.index(q.gold), keys.index(q.distractor)
    wrong = m != g
    lead = g if wrong else (w if w != m else (m + 1) % k)
    dr = Draws(rng)
    u_content = dr.uniform()  # shared by the two arms that carry this question's counter-evidence (nested collapses)
    nq = dr.between(1, int(v(panel["max_counter_queries"])) + 1)
    counter_docs = [TX.doc_id(dr) for _ in range(min(8, 2 * nq))]
    counter_q = TX.queries(dr, q.findings, list(q.options.values()), nq, counter=q.options[keys[m]])
    sd = float(v(mech["reanswer_token_sd"]))
    nll_tok, nll_unc = float(v(bb["nll_per_token"])), float(v(bb["nll_uncertain_factor"]))
    challenge = q.gold_mech if wrong else q.uncertain_pool[0]
    out = []
    for arm in ARMS:
        u = u_content if arm in ("counter_evidence", "neutral_instruction") else dr.uniform()
        fw, fr = cal.collapse[arm]
        collapsed = u < (fw if wrong else fr)
        kp = float(rng.beta(*v(mech["probe_collapse_keep_beta"]))) if collapsed else float(v(mech["probe_hold_keep"])[arm])
        ans = _reanswer_matrix(rng, np.array([kp]), 1, N, k, m=m, lead=lead, p_lead=float(v(mech["probe_switch_to_lead"])), pn=pn)[0]
        if arm not in arms:
            continue
        reans = []
        for x in ans.tolist():
            z_tok, z_nll = rng.standard_normal(2).tolist()  # the same two draws as two scalar calls
            n_tok = max(16, int(round(cal.reanswer_tokens_median * math.exp(sd * z_tok))))
            nll = nll_tok * (1.0 if x == m else nll_unc) * math.exp(0.15 * z_nll)
            if x < 0:
                rat = "The challenge leaves me unable to settle on one letter."
                letter = None
            else:
                letter = keys[x]
                kb = (x == g) and (state == "knowledge" or wrong)
                mm = q.gold_mech if kb else (q.reason_pool[0] if state == "misconception" else q.uncertain_pool[-1])
                rat = TX.probe_rationale(dr, letter=letter, kept=x == m, mech=mm, challenge=challenge)
            reans.append({"answer": letter, "rationale": rat, "logprob": round(-n_tok * nll, 2), "n_tokens": n_tok,
                          "mean_token_entropy": round(nll * 1.25 * math.exp(0.1 * rng.standard_normal()), 4)})
        if arm == "instruction_only":
            qs, docs = [], []
        elif arm == "irrelevant_docs":
            qs = counter_q
            docs = [TX.doc_id(dr) for _ in range(len(counter_docs))]
        else:
            qs, docs = counter_q, counter_docs
        R = float(v(bb["decode_tokens_per_s"]))
        qt = int(round(float(v(mech["query_tokens_median"])) * math.exp(0.2 * rng.standard_normal())))
        wall = float(v(mech["probe_overhead_s"])) * (0.4 if arm == "instruction_only" else 1.0) + max(r["n_tokens"] for r in reans) / R
        cost = {"wall_s": round(wall, 1), "completion_tokens": int(qt + sum(r["n_tokens"] for r in reans))}
        out.append({**head, "arm": arm, "consensus": keys[m], "queries": qs, "doc_ids": docs, "reanswers": reans, "cost": cost})
    return out
