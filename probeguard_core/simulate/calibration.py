"""Calibration of a cell: the free parameters solved from the rate inputs of ``params.yaml``
(inputs are rates; free parameters are solved, never tuned to an output metric).

:func:`calibrate_cell` solves the state mixture (exact linear solve on Monte-Carlo round-1
rates, :func:`solve_mixture`), the evidence strength (bisection on the overall accuracy, on
common random numbers: :class:`_ContestedPanel`) and the probe collapse probabilities (linear
solve on Monte-Carlo flip rates).  No output metric (AUROC, AURC, coverage) enters anywhere.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from probeguard_core.simulate.dynamics import (
    Dynamics,
    doc_pool,
    draw_difficulty,
    draw_votes,
    final_index,
    final_indices,
    is_unanimous,
    reanswer_matrix,
    round1_probs,
    round_draws,
)
from probeguard_core.simulate.params import ARMS, STATES, Sections, cell_spec, load_params, load_yaml, rng_for, v

__all__ = ["Calibration", "calibrate_cell", "probe_targets", "solve_mixture"]

#: Table 6's control-arm rates relative to the probe (MedQA / Qwen3-8B), used where a cell has no control arms.
_TABLE6_RATIO_KEYS = ("instruction_only", "irrelevant_docs", "neutral_instruction")
#: The modules whose source the calibration computes with (part of its on-disk cache key).
CALIBRATION_CODE = ("probeguard_core.simulate.calibration", "probeguard_core.simulate.draws",
                    "probeguard_core.simulate.dynamics", "probeguard_core.simulate.params")


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
    same numbers whatever the votes (:func:`round_draws`), so its draws are taken once, up to the
    last possible round.  eta only decides, round by round, whether the evidence points to gold
    (:meth:`Dynamics.found`); the votes after a round are a function of those decisions so far,
    memoized in a tree per question, so an eta whose decisions were seen before costs no vote update.
    The result equals :func:`run_dynamics` on the question's stream, bit for bit.
    """

    def __init__(self, state: str, k: int, bb: dict[str, Any], mech: dict[str, Any], panel: dict[str, Any], n: int):
        N, T, D, pn = (int(v(panel["n_candidates"])), int(v(panel["max_rounds"])), int(v(panel["docs_per_round"])),
                       float(v(panel["parse_failure_rate"])))
        self.n, self.k, self.max_rounds = n, k, T
        self.dyn = Dynamics.of(state, k, 0, 1, mech, N, pn)
        self.questions: list[tuple[list[tuple[int, int, float, np.ndarray]], dict[Any, Any]]] = []
        for j in range(n):
            rng = rng_for("calibrate-dyn", state, k, j)
            d = draw_difficulty(rng, state, bb)
            v1 = draw_votes(rng, round1_probs(rng, state, d, k, 0, 1, bb), N, pn)
            if is_unanimous(v1):
                continue
            pool, rank_p = doc_pool(rng, state, mech)
            seen: set[int] = set()
            rounds = []
            for _ in range(T - 1):
                _, docs, u_found, u = round_draws(rng, pool, rank_p, D, N)
                rounds.append((sum(1 for x in docs if x not in seen), len(docs), u_found, u))
                seen.update(docs)
            self.questions.append((rounds, {(): self._node(v1, 0)}))

    def _node(self, votes: np.ndarray, depth: int) -> tuple[np.ndarray, bool, bool]:
        """A memo entry: the votes after ``depth`` contested rounds, whether the question stops
        there, and whether its final answer is then gold (index 0)."""
        done = is_unanimous(votes) or depth + 1 >= self.max_rounds
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
    return _panels(k, n, Sections((bb, mech, panel)))[state].rates(eta)


@functools.lru_cache(maxsize=16)
def _panels(k: int, n: int, inputs: Sections) -> dict[str, _ContestedPanel]:
    """Every state's contested panel for (backbone, mechanism, panel) sections ``inputs``.

    The panels do not depend on the cell's rates, so the calibrations of one process that differ
    only there (the what-if error rates, the drift levels) share them, memo trees included."""
    bb, mech, panel = inputs.sections
    return {s: _ContestedPanel(s, k, bb, mech, panel, n) for s in STATES}


@functools.lru_cache(maxsize=16)
def _round1_table(k: int, p_null: float, n_cand: int, inputs: Sections) -> dict[str, tuple[float, float]]:
    """:func:`_round1_rates` of every state for backbone section ``inputs`` (shared like :func:`_panels`)."""
    (bb,) = inputs.sections
    return {s: _round1_rates(s, k, bb, p_null, n_cand) for s in STATES}


@functools.lru_cache(maxsize=32)
def _calibrate_cached(cell: str, params_text: str) -> Calibration:
    params = load_yaml(params_text)
    path, dataset, backbone, role = cell_spec(cell)
    base = v(params["cells"][cell]["like"]) if "like" in params["cells"][cell] else cell
    cp = params["cells"][base]
    bb = params["backbones"][backbone]
    mech, panel = params["mechanism"], params["panel"]
    k = int(v(params["datasets"][dataset]["n_options"]))
    N, pn = int(v(panel["n_candidates"])), float(v(panel["parse_failure_rate"]))
    U, e, acc = float(v(cp["first_round_unanimity"])), float(v(cp["unanimous_error"])), float(v(cp["overall_accuracy"]))
    rates = dict(_round1_table(k, pn, N, Sections((bb,))))
    pi = solve_mixture(U, e, rates, f"cell {base}")
    # evidence strength eta: bisection so that overall accuracy matches (accuracy is monotone in eta)
    target_contested_right = acc - U * (1 - e)
    n_dyn = 240

    panels = {s: p for s, p in _panels(k, n_dyn, Sections((bb, mech, panel))).items() if pi[s] > 0}

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
    flips = probe_targets(cp, params["cells"]["medqa/qwen3-8b"])
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


def probe_targets(cp: dict[str, Any], ref: dict[str, Any]) -> dict[str, tuple[float, float]]:
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
        ans = reanswer_matrix(rng, kp, n, N, k, m=0, lead=1, p_lead=lead, pn=pn)
        out.append(float(np.mean(final_indices(ans, k) != 0)))  # = the mean of _flipped_row over the rows
    return out[0], out[1]


def _flip_given(arm: str, wrong: bool, k: int, mech: dict[str, Any], N: int, pn: float) -> tuple[float, float]:
    return _flip_given_cached(arm, wrong, k, tuple(v(mech["probe_collapse_keep_beta"])), float(v(mech["probe_hold_keep"])[arm]),
                              float(v(mech["probe_switch_to_lead"])), N, pn)


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

    code = cache.code_fingerprint(*CALIBRATION_CODE)
    key = {"cell": cell, "params": params_text, "numpy": np.__version__, "code": code}
    return cache.cached_json("simulator-calibration", key, lambda: _calibrate_cached(cell, params_text),
                             _calibration_to_json, _calibration_from_json)
