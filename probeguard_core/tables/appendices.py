"""Appendix tables: the feature-family ablation (Table 7, Appendix H), the cost of the probe
(Appendix J) and the concluding-claim rule walked through on real rationales (Appendix C).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.claims import CUES, MAX_CLAIMS, TAIL, extract_claims, split_sentences, strip_answer_tags
from probeguard_core.features import (
    feature_table,
    is_correct,
    stratum,
)
from probeguard_core.scoring import (
    drop_family_ablation,
    process_score,
)
from probeguard_core.tables.protocols import CellLike, ReleaseLike

__all__ = [
    "Table7", "ablation_table", "claim_examples", "claim_rule_summary", "claims_page", "cost_page",
    "cost_table", "explain_claims", "rule_summary_units", "table7",
]


def ablation_table(cell: CellLike, n_folds: int = 5, seed: int = SEED, gbt: bool = True,
                   scaled: bool = True) -> pd.DataFrame:
    """Table 7: AUROC of the out-of-fold process score with each feature family dropped, and
    the GBT swap (Appendix H; :func:`scoring.drop_family_ablation`, :func:`scoring.process_score`).

    Long format: ``backbone, dataset, signal (process_score), quantity (auroc), variant (``full``,
    ``without <family>``, ``scaled logistic (ours)``, ``gbt``), arm ('' for the paper's default
    l2 logistic regression, ``scaled_logistic`` for this project's earlier StandardScaler +
    ``max_iter=1000`` variant (not in the paper), ``gbt_classifier`` for the swap),
    dropped_family ('' = full score), n_features, value, not_converged_folds`` (folds whose
    lbfgs stopped at ``max_iter``; 0 for GBT).
    """
    logs = cell.logs
    X = feature_table(logs, nli=cell.nli)
    y = np.array([is_correct(log) for log in logs], dtype=bool)
    ab = drop_family_ablation(X, y, n_splits=n_folds, seed=seed)  # each fit single-threaded (process_score)
    swaps = [(v, a, process_score(X, y, model=m, n_splits=n_folds, seed=seed))
             for v, a, m, on in (("scaled logistic (ours)", "scaled_logistic", "logistic_scaled", scaled),
                                 ("gbt", "gbt_classifier", "gbt", gbt)) if on]
    base = {"backbone": cell.backbone, "dataset": cell.dataset, "signal": "process_score", "quantity": "auroc"}
    rows = [{**base, "variant": "full" if fam == "none" else f"without {fam}", "arm": "",
             "dropped_family": "" if fam == "none" else fam,
             "n_features": int(r.n_features), "value": float(r.auroc),
             "not_converged_folds": int(r.not_converged_folds)} for fam, r in ab.iterrows()]
    for variant, arm, p in swaps:
        rows.append({**base, "variant": variant, "arm": arm, "dropped_family": "", "n_features": X.shape[1],
                     "value": M.auroc(p.to_numpy(), y), "not_converged_folds": int(p.attrs["not_converged_folds"])})
    return pd.DataFrame(rows)


def cost_table(cells: Iterable[CellLike], arm: str = "counter_evidence") -> pd.DataFrame:
    """Appendix J: median cost per question of the substrate and of the probe, per cell.

    From the release's ``cost`` fields (DESIGN 2.1 / 2.2): medians of ``wall_s`` and
    ``completion_tokens`` over the substrate logs, and over the ``arm`` probe records (the
    probe fires on S1 only).  ``probe_share_wall`` = total probe wall time / (probe + substrate
    wall time) over the probed questions (the probe's share of a unanimous question's cost);
    ``probe_to_substrate_ratio`` = ratio of the two medians.  Long format ``backbone, dataset,
    quantity, stratum, value, n`` (``n`` = records with a cost; records without one are counted
    in ``n_missing``, never imputed).
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        logs = cell.logs
        sub = {log.qid: log.cost for log in logs}
        sub_ok = [c for c in sub.values() if c is not None]
        recs = cell.probe_by_arm(arm)
        pr = {r.qid: r.cost for r in recs}
        pr_ok = [c for c in pr.values() if c is not None]
        base = {"backbone": cell.backbone, "dataset": cell.dataset}

        def add(quantity: str, value: float, n: int, n_missing: int, stratum_: str = "") -> None:
            unit = ("seconds" if "wall_s" in quantity else "tokens" if "tokens" in quantity
                    else "ratio" if quantity.endswith("ratio") else "fraction")
            rows.append({**base, "quantity": quantity, "stratum": stratum_, "value": value, "n": n,
                         "n_missing": n_missing, "unit": unit})

        med = lambda xs: float(np.median(xs)) if len(xs) else math.nan
        add("substrate_wall_s", med([c.wall_s for c in sub_ok]), len(sub_ok), len(sub) - len(sub_ok))
        add("substrate_completion_tokens_median", med([c.completion_tokens for c in sub_ok]), len(sub_ok),
            len(sub) - len(sub_ok))
        add("probe_wall_s_median", med([c.wall_s for c in pr_ok]), len(pr_ok), len(pr) - len(pr_ok), "S1")
        add("probe_completion_tokens_median", med([c.completion_tokens for c in pr_ok]), len(pr_ok),
            len(pr) - len(pr_ok), "S1")
        both = [q for q in sorted(pr) if pr[q] is not None and sub.get(q) is not None]
        pw = sum(pr[q].wall_s for q in both)
        sw = sum(sub[q].wall_s for q in both)
        add("probe_share_wall", pw / (pw + sw) if (pw + sw) > 0 else math.nan, len(both), len(pr) - len(both), "S1")
        add("probe_to_substrate_ratio", med([c.wall_s for c in pr_ok]) / med([c.wall_s for c in sub_ok])
            if sub_ok and pr_ok else math.nan, len(pr_ok), 0, "S1")
        n1 = sum(stratum(log) == "S1" for log in logs)
        add("unanimous_share", n1 / len(logs) if logs else math.nan, len(logs), 0, "S1")
    return pd.DataFrame(rows)


def explain_claims(rationale: str) -> pd.DataFrame:
    """Appendix C walked through on one rationale, for display.

    One row per sentence after :func:`claims.strip_answer_tags` and :func:`claims.split_sentences`:
    ``position`` (1-based), ``sentence``, ``in_tail`` (among the last :data:`claims.TAIL`),
    ``cues`` (the :data:`claims.CUES` it contains, case-insensitive substrings) and ``kept``
    (it is one of :func:`claims.extract_claims`'s claims; the rule itself is only ever applied
    by ``extract_claims``).  Empty frame for an empty rationale.
    """
    sentences = split_sentences(strip_answer_tags(rationale))
    kept = extract_claims(rationale)
    n = len(sentences)
    # place the claims on the sentences: a suffix-first subsequence match within the tail
    marks = [False] * n
    j = len(kept) - 1
    for i in range(n - 1, max(n - TAIL, 0) - 1, -1):
        if j >= 0 and sentences[i] == kept[j]:
            marks[i] = True
            j -= 1
    if j >= 0:
        raise ValueError(f"explain_claims: extract_claims returned {kept!r}, not found among the last {TAIL} sentences")
    rows = [{"position": i + 1, "sentence": s, "in_tail": i >= n - TAIL,
             "cues": ", ".join(c for c in CUES if c in s.lower()), "kept": marks[i]} for i, s in enumerate(sentences)]
    out = pd.DataFrame(rows, columns=["position", "sentence", "in_tail", "cues", "kept"])
    return out


def _case_of(rationale: str) -> str:
    """Which branch of the Appendix C rule a rationale takes (display only; the claims
    themselves always come from :func:`claims.extract_claims`)."""
    sentences = split_sentences(strip_answer_tags(rationale))
    if not sentences:
        return "empty rationale"
    n_cued = sum(any(c in t.lower() for c in CUES) for t in sentences[-TAIL:])
    if n_cued == 0:
        return "no cue: last sentence"
    if n_cued > MAX_CLAIMS:
        return "more than three cued: last three"
    return "one to three cued"


def claim_examples(cell: CellLike, per_case: int = 1) -> pd.DataFrame:
    """Real rationales of the release that exercise each branch of the Appendix C rule.

    Round-1 rationales of the cell in (qid, candidate) order; for each branch (``one to three
    cued``, ``more than three cued: last three``, ``no cue: last sentence``, ``empty
    rationale``) the first ``per_case`` rationales that take it, plus the first one whose
    ``<answer>`` tag was stripped.  Columns ``case, qid, candidate, rationale, claims``.
    """
    want = ("one to three cued", "more than three cued: last three", "no cue: last sentence", "empty rationale")
    found: dict[str, list[dict[str, Any]]] = {w: [] for w in want}
    for log in sorted(cell.logs, key=lambda lg: lg.qid):
        for i, cand in enumerate(log.rounds[0].candidates):
            case = _case_of(cand.rationale)
            if len(found[case]) < per_case:
                found[case].append({"case": case, "qid": log.qid, "candidate": i + 1, "rationale": cand.rationale,
                                    "claims": " | ".join(extract_claims(cand.rationale))})
        if all(len(v) >= per_case for v in found.values()):
            break
    return pd.DataFrame([r for w in want for r in found[w]], columns=["case", "qid", "candidate", "rationale", "claims"])


def claim_rule_summary(cell: CellLike) -> pd.DataFrame:
    """How the Appendix C rule behaves over all round-1 rationales of a cell, and whether the
    release's NLI cache used it (DESIGN 2.4: each claim string = the candidate's extracted
    claims joined by a space).  Rows ``quantity, value, n``."""
    branch: list[str] = []
    n_claims: list[int] = []
    for log in cell.logs:
        for cand in log.rounds[0].candidates:
            branch.append(_case_of(cand.rationale))
            n_claims.append(len(extract_claims(cand.rationale)))
    b = pd.Series(branch)
    rows = [{"quantity": "rationales", "value": float(len(b)), "n": len(b)}]
    for w in ("one to three cued", "more than three cued: last three", "no cue: last sentence", "empty rationale"):
        rows.append({"quantity": f"share: {w}", "value": float((b == w).mean()) if len(b) else math.nan, "n": len(b)})
    nc = pd.Series(n_claims)
    for k in range(4):
        rows.append({"quantity": f"share with {k} claims", "value": float((nc == k).mean()) if len(nc) else math.nan,
                     "n": len(nc)})
    if cell.nli:
        logs = {log.qid: log for log in cell.logs}
        match = total = 0
        for r in cell.nli:
            if r.round != 1 or r.qid not in logs:
                continue
            cands = logs[r.qid].rounds[0].candidates
            for idx, claim in zip(r.candidates, r.claims):
                total += 1
                match += claim == " ".join(extract_claims(cands[idx].rationale))
        rows.append({"quantity": "NLI cache claims reproduced by extract_claims",
                     "value": match / total if total else math.nan, "n": total})
    return pd.DataFrame(rows)


@dataclass
class Table7:
    """The Table 7 page (:func:`table7`): the ablation beside the paper and its notes."""

    backbone: str
    datasets: list[str]
    cells: list[CellLike]
    table7: pd.DataFrame
    notes: list[str]


def table7(rel: ReleaseLike, datasets: Sequence[str] | None = None, backbone: str | None = None,
           n_folds: int = 5, seed: int = SEED) -> Table7:
    """Table 7 (Appendix H) from any release: :func:`ablation_table` on each benchmark of the
    primary backbone, beside the paper; a note where the release has no NLI records (the
    rationale family is then missing, imputed inside the folds with an indicator)."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.display import absent_text
    from probeguard_core.tables.picking import pick_backbone, pick_datasets

    backbone = pick_backbone(rel, backbone)
    datasets = pick_datasets(rel, datasets, backbone, design=["medqa", "mmlu_pro_med", "medmcqa"])
    cells = [rel.cell(d, backbone) for d in datasets]
    why = absent_text(cells, {"nli": "the rationale family; its features are missing here, imputed inside the "
                                     "folds with an indicator"})
    t7 = pd.concat([ablation_table(c, n_folds=n_folds, seed=seed) for c in cells], ignore_index=True)
    t7 = beside_paper(t7, on=["backbone", "dataset", "dropped_family", "arm"], source="Table 7")
    return Table7(backbone, list(datasets), cells, t7, [why] if why else [])


# --------------------------------------------------------------------------- page builders
def cost_page(rel: ReleaseLike, backbone: str | None = None, arm: str = "counter_evidence") -> tuple[pd.DataFrame,
                                                                                                      str, list[str]]:
    """Appendix J from any release: :func:`cost_table` of every main cell, the primary backbone's
    rows beside the paper (its Appendix J numbers are the primary backbone's; §4.3's unanimous
    share beside every backbone). Returns the table, the backbone shown and the notes (cells
    without cost fields or probe records)."""
    from probeguard_core.paper import BACKBONES
    from probeguard_core.tables.beside import beside_sources
    from probeguard_core.tables.display import absent_text
    from probeguard_core.tables.picking import pick_backbone

    backbone = pick_backbone(rel, backbone)
    cost = cost_table(rel.main_cells(), arm=arm)
    notes = []
    no_cost = [c.label for c in rel.main_cells() if all(g.cost is None for g in c.logs)]
    if no_cost:
        notes.append(f"this release has no cost fields for {', '.join(no_cost)}; Appendix J needs them "
                     "(DESIGN 2.1 / 2.2 `cost`), so their rows are dashes.")
    why = absent_text([c for c in rel.main_cells() if c.backbone == backbone], {"probe": "the probe's cost"})
    notes += [why] if why else []
    prim = cost["backbone"] == backbone
    sources = [{"source": "Appendix J"}] if backbone == BACKBONES[0] else []
    beside = beside_sources(cost[prim], on=["dataset", "quantity"],
                            sources=[*sources, {"source": "§4.3", "quantity": "unanimous_share", "backbone": backbone}])
    return pd.concat([beside, cost[~prim]], ignore_index=True), backbone, notes


def claims_page(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None,
                per_case: int = 1) -> tuple[CellLike, pd.DataFrame, pd.DataFrame, list[str]]:
    """Appendix C from any release: real rationales taking each branch of the rule
    (:func:`claim_examples`) and their sentence-by-sentence walk-through (:func:`explain_claims`).
    Returns the cell, the examples, the walk-through and the notes."""
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    notes = [] if cell.has("nli") else [
        f"this release has no NLI records for {cell.label}; the RSE AUROC below and the check of the NLI cache's "
        "claims need them (the rule itself runs on the logged rationales)."]
    examples = claim_examples(cell, per_case=per_case)
    walk = pd.concat([explain_claims(r.rationale).assign(case=r.case, qid=r.qid, candidate=r.candidate)
                      for r in examples.itertuples()], ignore_index=True)
    walk = walk[["case", "qid", "candidate", "position", "sentence", "in_tail", "cues", "kept"]]
    return cell, examples, walk, notes


def rule_summary_units(summary: pd.DataFrame) -> list[str]:
    """The unit of each row of :func:`claim_rule_summary` (a count of rationales, else a share)."""
    return ["count" if q == "rationales" else "fraction" for q in summary["quantity"]]
