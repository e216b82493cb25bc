"""The two unanimous cases of Figure 1 and everything logged about them (Appendix K).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from probeguard_core.claims import extract_claims
from probeguard_core.tables.protocols import CellLike, ReleaseLike
from probeguard_core.tables.scores import cell_signals

if TYPE_CHECKING:
    from probeguard_core.logs import ProbeRecord

__all__ = [
    "CASE_DETAIL_COLUMNS", "FIGURE1_COLUMNS", "Figure1", "appendix_k", "case_details", "figure1",
    "figure1_cases",
]


#: Columns of :func:`figure1_cases` (its empty table when the release cannot give the cases).
FIGURE1_COLUMNS: tuple[str, ...] = ("case", "qid", "question", "gold", "consensus", "correct", "kappa", "n_kept",
                                     "rse", "reanswers", "claim")


def figure1_cases(cell: CellLike, arm: str = "counter_evidence") -> pd.DataFrame:
    """The two unanimous cases of Figure 1, chosen deterministically from the probe records.

    *kept*: a correct unanimous consensus with the largest keep rate (kappa = 1 when any),
    ties broken by the highest RSE, then qid; *collapsed*: a wrong unanimous consensus with
    the smallest keep rate (kappa = 0 when any), ties by the lowest RSE, then qid. The keep rate
    shown is the case's actual kappa (Eq. 4). Columns: ``case, qid, question, gold, consensus,
    correct, kappa, n_kept, rse, reanswers, claim``. Raises ``ValueError`` when the release has no
    probed correct or wrong unanimous question.
    """
    sig = cell_signals(cell)
    s1 = sig[(sig["stratum"] == "S1") & sig["keep_rate"].notna()].copy()
    s1["rse_f"] = s1["rse"].fillna(-np.inf)
    s1["qid_"] = s1.index.astype(str)
    probe = {r.qid: r for r in cell.probe_by_arm(arm)}
    logs = {log.qid: log for log in cell.logs}
    rows = []
    for case, want_correct, order in (("kept", True, [False, False, True]), ("collapsed", False, [True, True, True])):
        pool = s1[s1["correct"] == want_correct]
        if pool.empty:
            raise ValueError(f"{cell.label}: no probed {'correct' if want_correct else 'wrong'} unanimous question "
                             f"for the '{case}' case of Figure 1")
        pick = pool.sort_values(["keep_rate", "rse_f", "qid_"], ascending=order, kind="stable").index[0]
        rec, log = probe[pick], logs[pick]
        answers = [c.answer for c in rec.reanswers]
        claims = extract_claims(log.rounds[0].candidates[0].rationale)
        rows.append({
            "case": case, "qid": pick, "question": log.question, "gold": log.gold, "consensus": rec.consensus,
            "correct": bool(want_correct), "kappa": float(s1.at[pick, "keep_rate"]),
            "n_kept": int(sum(a == rec.consensus for a in answers)), "rse": float(s1.at[pick, "rse"]),
            "reanswers": "".join(a if a is not None else "-" for a in answers),
            "claim": " ".join(claims),
        })
    return pd.DataFrame(rows)


def case_details(cell: CellLike, arm: str = "counter_evidence") -> dict[str, pd.DataFrame]:
    """Appendix K: the two cases of Figure 1 (:func:`figure1_cases`) with everything
    logged about them.

    Returns ``{"cases", "options", "panel", "probe", "queries"}``: the case summary; the options
    (gold and consensus marked); the 8 first-round candidates (answer, each rationale's
    extracted claims, :func:`claims.extract_claims`); the re-answers under ``arm`` (answer,
    kept); the counter-queries and retrieved document ids.
    """
    cases = figure1_cases(cell, arm=arm)
    logs = {log.qid: log for log in cell.logs}
    probe = {r.qid: r for r in cell.probe_by_arm(arm)}
    opts, panel, pr, qs = [], [], [], []
    for c in cases.itertuples(index=False):
        log, rec = logs[c.qid], probe[c.qid]
        for key in sorted(log.options):
            opts.append({"case": c.case, "qid": c.qid, "option": key, "text": log.options[key],
                         "gold": key == log.gold, "consensus": key == rec.consensus})
        for i, cand in enumerate(log.rounds[0].candidates):
            panel.append({"case": c.case, "qid": c.qid, "candidate": i + 1, "answer": cand.answer,
                          "claims": " | ".join(extract_claims(cand.rationale))})
        for i, ra in enumerate(rec.reanswers):
            pr.append({"case": c.case, "qid": c.qid, "reanswer": i + 1, "answer": ra.answer,
                       "kept": ra.answer == rec.consensus, "claims": " | ".join(extract_claims(ra.rationale))})
        for i, q in enumerate(rec.queries):
            qs.append({"case": c.case, "qid": c.qid, "kind": "counter-query", "index": i + 1, "text": q})
        for i, d in enumerate(rec.doc_ids):
            qs.append({"case": c.case, "qid": c.qid, "kind": "document", "index": i + 1, "text": d})
    cases = cases.assign(options=[len(logs[q].options) for q in cases["qid"]],
                         n_queries=[len(probe[q].queries) for q in cases["qid"]],
                         n_docs=[len(probe[q].doc_ids) for q in cases["qid"]],
                         reanswer_plurality_is_gold=[_plurality(probe[q]) == logs[q].gold for q in cases["qid"]])
    return {"cases": cases, "options": pd.DataFrame(opts), "panel": pd.DataFrame(panel),
            "probe": pd.DataFrame(pr), "queries": pd.DataFrame(qs, columns=["case", "qid", "kind", "index", "text"])}


def _plurality(rec: ProbeRecord) -> str | None:
    counts = pd.Series([r.answer for r in rec.reanswers if r.answer is not None]).value_counts()
    if counts.empty or (len(counts) > 1 and counts.iloc[0] == counts.iloc[1]):
        return None
    return str(counts.index[0])


@dataclass
class Figure1:
    """The Table 1 / Figure 1 page (:func:`figure1`): the two cases (empty, with their schema,
    when the release cannot give them) and why they are missing."""

    backbone: str
    dataset: str
    cell: CellLike
    cases: pd.DataFrame
    missing: str | None

    @property
    def notes(self) -> list[str]:
        return [self.missing] if self.missing else []


def figure1(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None) -> Figure1:
    """Figure 1 from any release: :func:`figure1_cases` of the primary cell, or its empty schema
    and the reason (no probe records, or no probed correct / wrong unanimous question)."""
    from probeguard_core.tables.display import empty_table
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    try:
        cases, missing = figure1_cases(cell), None
    except ValueError as exc:  # no probe records, or no probed correct / wrong unanimous question
        cases = empty_table(FIGURE1_COLUMNS, numeric=["kappa", "rse", "n_kept"])
        missing = (f"this release has no probe records for {cell.label}; Figure 1 needs them (DESIGN 2.2)"
                   if not cell.has("probe") else f"{exc}; Figure 1 needs counter-evidence probe records of both kinds")
    return Figure1(backbone, dataset, cell, cases, missing)


#: The tables of :func:`case_details` and their schemas (for a release that cannot give the cases).
CASE_DETAIL_COLUMNS: dict[str, tuple[list[str], list[str]]] = {
    "cases": ([*FIGURE1_COLUMNS, "options", "n_queries", "n_docs", "reanswer_plurality_is_gold"],
              ["kappa", "rse", "n_kept", "options", "n_queries", "n_docs"]),
    "options": (["case", "qid", "option", "text", "gold", "consensus"], []),
    "panel": (["case", "qid", "candidate", "answer", "claims"], ["candidate"]),
    "probe": (["case", "qid", "reanswer", "answer", "kept", "claims"], ["reanswer"]),
    "queries": (["case", "qid", "kind", "index", "text"], ["index"]),
}


def appendix_k(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None,
               arm: str = "counter_evidence") -> tuple[CellLike, dict[str, pd.DataFrame], str | None]:
    """Appendix K from any release: :func:`case_details` of the primary cell, or every table
    empty with its schema and the reason. Returns the cell, the tables and the reason (or None)."""
    from probeguard_core.tables.display import empty_table
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    try:
        return cell, case_details(cell, arm=arm), None
    except ValueError as exc:  # no probe records, or no probed correct / wrong unanimous question
        missing = (f"this release has no probe records for {cell.label}; Appendix K needs them (DESIGN 2.2)"
                   if not cell.has("probe") else f"{exc}; Appendix K needs {arm} probe records of both kinds")
        return cell, {k: empty_table(c, numeric=n) for k, (c, n) in CASE_DETAIL_COLUMNS.items()}, missing
