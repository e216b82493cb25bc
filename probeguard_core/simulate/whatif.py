"""What-if helpers for the book: a simulated unanimous layer at a chosen size and base error rate.

The certification chapter (§4.4, Appendix E) asks how certified coverage moves with the
calibration size and the layer's base error rate.  :func:`simulate_unanimous_layer` draws a
MedQA-like unanimous layer from this project's simulator (the MedQA parameters of
``params.yaml``, which generated ``data/simulated-v1``; never from a loaded release), with the
layer's error rate replaced by ``error_rate`` (the state mixture is re-solved, the
first-round unanimity kept); :func:`unanimous_layer_table` turns it into per-question
(kappa, rse, correct) through the real core functions (Eq. 4, Eq. 3, DESIGN 3).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import logs as L
from probeguard_core.simulate import bank as B
from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import model as M
from probeguard_core.simulate import params as P

_BASE_CELL = {
    "Qwen/Qwen3-8B": "medqa/qwen3-8b",
    "FreedomIntelligence/HuatuoGPT-o1-8B": "medqa/huatuogpt-o1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "medqa/llama-3.1-8b-instruct",
}


def simulate_unanimous_layer(n: int, error_rate: float, seed: int = SEED, backbone: str = "Qwen/Qwen3-8B",
                             arms: tuple[str, ...] = P.ARMS,
                             ) -> tuple[list[L.QuestionLog], list[L.ProbeRecord], list[L.NLIRecord]]:
    """``n`` MedQA-like questions with a unanimous first round whose consensus is wrong at rate ``error_rate``.

    ``arms``: the probe arms simulated and returned (:func:`model.simulate_question`; all four by
    default).  The counter-evidence arm is drawn first, so its records are the same whichever
    arms are asked for (a later arm's records depend on the arms drawn before it)."""
    if backbone not in _BASE_CELL:
        raise ValueError(f"backbone must be one of {sorted(_BASE_CELL)}, got {backbone!r}")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not (0.0 <= error_rate < 1.0):
        raise ValueError(f"error_rate must be in [0, 1), got {error_rate!r}")
    cell = _BASE_CELL[backbone]
    params = P.load_params()  # a fresh copy: edited below
    cp = params["cells"][cell]
    base_e = float(P.v(cp["unanimous_error"]))
    cp["unanimous_error"] = {"value": float(error_rate), "assumed": "what-if input"}
    # keep the contested part's accuracy as in the cell (only the layer changes)
    u = float(P.v(cp["first_round_unanimity"]))
    acc = float(P.v(cp["overall_accuracy"])) + u * (base_e - error_rate)
    cp["overall_accuracy"] = {"value": acc, "assumed": "what-if input"}
    cal = CA.calibrate_cell(cell, params)
    bank = {key: params[key] for key in ("datasets", "mechanism")}  # all make_question reads of unlabelled questions
    logs, probe, nli = [], [], []
    for i, q in enumerate(_layer_questions(n, seed, P.Sections((bank,)))):
        sim = M.simulate_question(q, cell, params, cal, rng=P.rng_for("whatif", seed, cell, i), with_self_report=False,
                                  dataset="medqa", backbone=backbone, arms=arms, condition_unanimous=True)
        logs.append(L.QuestionLog.model_validate(sim.log))
        probe.extend(L.ProbeRecord.model_validate(r) for r in sim.probe)
        nli.extend(L.NLIRecord.model_validate(r) for r in sim.nli)
    return logs, probe, nli


@functools.lru_cache(maxsize=4)
def _layer_questions(n: int, seed: int, bank: P.Sections) -> tuple[B.Question, ...]:
    """The first ``n`` questions of the what-if bank: they depend on the question-bank sections of
    the parameters only, not on the layer's error rate, so the error rates of one page share them."""
    (params,) = bank.sections
    return tuple(B.make_question("medqa", i, params, labelled=False, pool=f"-whatif{seed}") for i in range(n))


def unanimous_layer_table(n: int, error_rate: float, seed: int = SEED, backbone: str = "Qwen/Qwen3-8B") -> pd.DataFrame:
    """Per question: ``kappa`` (Eq. 4, counter-evidence arm), ``rse`` (Eq. 3, round 1), ``correct``; index qid."""
    from probeguard_core.features import is_correct
    from probeguard_core.probe import keep_rate
    from probeguard_core.rse import rationale_semantic_entropy

    logs, probe, nli = simulate_unanimous_layer(n, error_rate, seed, backbone, arms=("counter_evidence",))
    kappa = {r.qid: keep_rate(r.reanswers, r.consensus) for r in probe if r.arm == "counter_evidence"}
    rse = {r.qid: rationale_semantic_entropy(r.entailment) for r in nli if r.round == 1}
    return pd.DataFrame(
        {"kappa": [kappa[g.qid] for g in logs], "rse": [rse.get(g.qid, np.nan) for g in logs],
         "correct": [is_correct(g) for g in logs]},
        index=pd.Index([g.qid for g in logs], name="qid"),
    )
