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

The pieces live beside this module: the parameters and cells (:mod:`~probeguard_core.simulate.params`),
the question bank (:mod:`~probeguard_core.simulate.bank`), the numeric votes and rounds of steps
2, 3 and 6 (:mod:`~probeguard_core.simulate.dynamics`) and the calibration that solves the free
parameters from the rate inputs of ``params.yaml`` (:mod:`~probeguard_core.simulate.calibration`).
This module draws one question's records from them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from probeguard_core.simulate import text as TX
from probeguard_core.simulate.bank import Question, specialty_table
from probeguard_core.simulate.calibration import Calibration
from probeguard_core.simulate.draws import Draws
from probeguard_core.simulate.dynamics import (
    draw_difficulty,
    draw_votes,
    final_index,
    is_unanimous,
    reanswer_matrix,
    round1_probs,
    run_dynamics,
    sample_cat,
)
from probeguard_core.simulate.params import ARMS, STATES, v

__all__ = ["NLI_MODEL", "Simulated", "nli_record", "simulate_question"]

NLI_MODEL = "simulated/deberta-large-mnli-standin"


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
        names, _, rel = specialty_table(params)
        r = float(rel[names.index(q.specialty)])
        pm = min(pi["misconception"] * r, 0.95)
        rest = pi["knowledge"] + pi["uncertain"]
        scale = (1 - pm) / rest if rest > 0 else 0.0
        pi = {"knowledge": pi["knowledge"] * scale, "misconception": pm, "uncertain": pi["uncertain"] * scale}
    p = np.array([pi[s] for s in STATES])
    return STATES[int(sample_cat(rng, p, 1)[0])]


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
        d = draw_difficulty(rng, state, bb)
        v1 = draw_votes(rng, round1_probs(rng, state, d, k, g, w, bb), N, pn)
        if not condition_unanimous or is_unanimous(v1):
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
    if is_unanimous(v1):
        probe = _probe(rng, q, int(v1[0]), state, cal, params, bb, head, arms, pool_ids)
    sr = None
    if with_self_report:
        vm, vs = float(v(mech["verbalized_mean"])), float(v(mech["verbalized_sd"]))
        vc = vm + float(v(mech["verbalized_state_shift"])[state]) + vs * rng.standard_normal()
        vc = float(min(100, max(0, 5 * round(vc / 5))))
        lt = float(v(mech["p_true_logit"])[state]) + float(v(mech["p_true_sd"])) * rng.standard_normal()
        sr = {**head, "verbalized_confidence": vc, "p_true": round(1 / (1 + math.exp(-lt)), 4)}
    latent = {"state": state, "difficulty": d, "unanimous": is_unanimous(v1), "correct": fin == g,
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
        ans = reanswer_matrix(rng, np.array([kp]), 1, N, k, m=m, lead=lead, p_lead=float(v(mech["probe_switch_to_lead"])), pn=pn)[0]
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
