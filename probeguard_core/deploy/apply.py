"""Apply a certificate to new logs (§3.3, Algorithm 2, §5.3): ``probeguard apply``.

:func:`apply_certificate` scores new logs on the calibration scale (the z constants are frozen
in the certificate, :func:`probeguard_core.deploy.scores.frozen_s1_scores`) and decides answer /
abstain per question with the deployment rule of Algorithm 2
(:meth:`probeguard_core.certify.Certificate.decide`): answer iff the question's stratum holds a
threshold and its score is above it.  :func:`calibration_table` adds the labels of calibration
logs (the report's per-question table); :func:`decisions_bytes` / :func:`write_decisions` write
the decision table.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core.deploy.certificate import validate_certificate
from probeguard_core.deploy.errors import DeployError
from probeguard_core.deploy.inputs import Inputs, unpack
from probeguard_core.deploy.output import write_files_atomically
from probeguard_core.deploy.scores import base_table, frozen_s1_scores, stratum_name
from probeguard_core.features import is_correct
from probeguard_core.fileio import jsonable

__all__ = ["DECISION_COLUMNS", "FORMULA_STARTS", "REASONS", "apply_certificate", "calibration_table", "decisions_bytes",
           "neutralise_formulas", "write_decisions"]

#: The columns of a decision table, in order.
DECISION_COLUMNS = [
    "qid", "dataset", "stratum", "base_stratum", "specialty", "score", "threshold", "decision", "reason",
    "final_answer", "system_answer",
]
#: The ``reason`` of each decision, by the referral code a dossier gives it (``answered``: none).
REASONS = {
    "answered": "score above the certified threshold",
    "s3_not_converged": "S3 (never converged): abstains as a whole",
    "stratum_not_calibrated": "stratum not present at calibration: no certificate",
    "stratum_not_certified": "stratum not certified at this alpha",
    "no_score": "no score: probe or NLI record missing",
    "below_threshold": "score at or below the certified threshold",
}


def apply_certificate(
    cert: Mapping[str, Any],
    logs: Sequence[L.QuestionLog] | Inputs,
    probe: Sequence[L.ProbeRecord] | None = None,
    nli: Sequence[L.NLIRecord] | None = None,
) -> pd.DataFrame:
    """One decision per question: answer iff its stratum has a threshold and score > threshold.

    Columns: ``qid, dataset, stratum, base_stratum, specialty, score, threshold, decision``
    (``"answer"`` | ``"abstain"``), ``reason``, ``final_answer`` (the answer released, null when
    abstaining) and ``system_answer`` (the system's own final answer, for the referring
    clinician).  S1 is scored with the certificate's frozen z constants.  Logs of a dataset or
    backbone the certificate was not calibrated on are refused (Assumption 1).
    """
    logs, probe, nli = unpack(logs, probe, nli)
    cert = validate_certificate(cert)
    logs = list(logs)
    if not logs:
        raise DeployError("no questions to decide: the logs are empty")
    for kind, values, allowed in (("dataset", {g.dataset for g in logs}, cert["datasets"]),
                                  ("backbone", {g.backbone for g in logs}, cert["backbones"])):
        foreign = sorted(values - set(allowed))
        if foreign:
            raise DeployError(
                f"the logs contain {kind} {foreign} but the certificate was calibrated on {allowed}; "
                "a certificate holds only for the distribution it was calibrated on (Assumption 1, §4.4). "
                "Recalibrate with `probeguard certify` on this system's own logs"
            )
    df = base_table(logs, probe, nli)
    df.loc[df["stratum"] == "S1", "score"] = frozen_s1_scores(df, cert["standardization"])[df["stratum"] == "S1"]
    df.loc[df["stratum"] == "S3", "score"] = np.nan
    stratify_by = cert["stratify_by"]
    df["stratum_name"] = [stratum_name(b, s, stratify_by) for b, s in zip(df["stratum"], df["specialty"])]
    thresholds = {st["name"]: st.get("threshold") for st in cert["strata"]}
    known = set(thresholds)
    with_thr = {k: float(v) for k, v in thresholds.items() if v is not None}

    scores = df["score"].to_numpy(dtype=float)
    names = df["stratum_name"].to_numpy(dtype=str)
    finite = ~np.isnan(scores)
    rule = C.Certificate(thresholds=with_thr, n={}, errors={}, pvalues=pd.DataFrame(),
                         alpha=float(cert["alpha"]), delta=float(cert["delta"]),
                         grid=np.asarray(cert["grid"], dtype=float), certified=tuple(with_thr))
    answer = np.zeros(len(df), dtype=bool)
    answer[finite] = rule.decide(scores[finite], names[finite])

    reasons = []
    for name, base, sc, ans in zip(names, df["stratum"], scores, answer):
        if ans:
            reasons.append(REASONS["answered"])
        elif base == "S3":
            reasons.append(REASONS["s3_not_converged"])
        elif name not in known:
            reasons.append(REASONS["stratum_not_calibrated"])
        elif name not in with_thr:
            reasons.append(REASONS["stratum_not_certified"])
        elif math.isnan(sc):
            reasons.append(REASONS["no_score"])
        else:
            reasons.append(REASONS["below_threshold"])
    out = pd.DataFrame({
        "qid": df.index.to_numpy(dtype=object),
        "dataset": df["dataset"].to_numpy(dtype=object),
        "stratum": names.astype(object),
        "base_stratum": df["stratum"].to_numpy(dtype=object),
        "specialty": df["specialty"].to_numpy(dtype=object),
        "score": scores,
        "threshold": [with_thr.get(n, math.nan) for n in names],
        "decision": np.where(answer, "answer", "abstain").astype(object),
        "reason": reasons,
        "final_answer": [a if ok else None for a, ok in zip(df["system_answer"], answer)],
        "system_answer": df["system_answer"].to_numpy(dtype=object),
    })
    return out[DECISION_COLUMNS]


def calibration_table(
    cert: Mapping[str, Any],
    logs: Sequence[L.QuestionLog] | Inputs,
    probe: Sequence[L.ProbeRecord] | None = None,
    nli: Sequence[L.NLIRecord] | None = None,
) -> pd.DataFrame:
    """:func:`apply_certificate` on labelled (calibration) logs plus ``correct``
    (:func:`probeguard_core.features.is_correct`); the report's per-question table."""
    logs, probe, nli = unpack(logs, probe, nli)
    table = apply_certificate(cert, logs, probe, nli)
    table["correct"] = [is_correct(log) for log in logs]
    return table


#: What makes a spreadsheet evaluate a cell (OWASP, "CSV Injection"): a text cell starting with
#: one of these is written with a single quote in front.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells a spreadsheet would evaluate start with ``'`` (issue 25).

    The OWASP rule for CSV injection: a qid such as ``=HYPERLINK(...)`` would otherwise run as a
    formula when a clinician opens ``decisions.csv``.  Only text columns are touched;
    numbers (a negative score) are written as numbers.  The JSON Lines output stays raw.
    """
    out = frame.copy()
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_bool_dtype(out[col])):
            out[col] = [f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v for v in out[col]]
    return out


def decisions_bytes(table: pd.DataFrame, path: str | os.PathLike[str]) -> bytes:
    """Serialize a decision table as CSV (``.csv``) or JSON Lines (``.jsonl``)."""
    name = Path(path).name
    cols = [c for c in DECISION_COLUMNS if c in table.columns]
    if name.endswith(".csv"):
        return neutralise_formulas(table[cols]).to_csv(index=False, lineterminator="\n").encode("utf-8")
    if name.endswith(".jsonl"):
        lines = []
        for rec in table[cols].to_dict("records"):
            lines.append(json.dumps(jsonable(rec), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
        return ("\n".join(lines) + "\n").encode("utf-8")
    raise DeployError(f"decisions output {path} must end in .csv or .jsonl")


def write_decisions(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write the decision table atomically (``.csv`` or ``.jsonl``)."""
    p = Path(path)
    write_files_atomically({p: decisions_bytes(table, p)})
    return p
