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
    stratum,
)
from probeguard_core.scoring import (
    drop_family_ablation,
    process_score,
)
from probeguard_core.tables.protocols import CellLike, ReleaseLike
from probeguard_core.tables.scores import cell_correct, cell_features, cell_records, per_cell

__all__ = [
    "Table7", "ablation_table", "claim_examples", "claim_rule_summary", "claims_page", "cost_frame", "cost_page",
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
    X = cell_features(cell)
    y = cell_correct(cell, X.index)
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


def cost_frame(cell: CellLike, arm: str = "counter_evidence") -> pd.DataFrame:
    """The per-question costs behind Appendix J, one row per logged question (index ``qid``, log
    order): ``substrate_cost`` (the log has a ``cost``), ``substrate_wall_s`` and
    ``substrate_tokens`` (its ``wall_s`` and ``completion_tokens``; NaN without a cost, never
    imputed), ``stratum``, ``probed`` (an ``arm`` probe record exists), ``probe_cost``,
    ``probe_wall_s`` and ``probe_tokens`` (that record's, NaN without one).  Through
    :func:`tables.scores.per_cell` (a release cell reads its logs and probe records once)."""
    def build() -> pd.DataFrame:
        logs = cell_records(cell)[0]
        pr = {r.qid: r for r in cell.probe_by_arm(arm)}
        sub = [log.cost for log in logs]
        prc = [pr[log.qid].cost if log.qid in pr else None for log in logs]
        nan = math.nan
        return pd.DataFrame({
            "substrate_cost": np.array([c is not None for c in sub], dtype=bool),
            "substrate_wall_s": np.array([nan if c is None else c.wall_s for c in sub], dtype=float),
            "substrate_tokens": np.array([nan if c is None else c.completion_tokens for c in sub], dtype=float),
            "stratum": [stratum(log) for log in logs],
            "probed": np.array([log.qid in pr for log in logs], dtype=bool),
            "probe_cost": np.array([c is not None for c in prc], dtype=bool),
            "probe_wall_s": np.array([nan if c is None else c.wall_s for c in prc], dtype=float),
            "probe_tokens": np.array([nan if c is None else c.completion_tokens for c in prc], dtype=float),
        }, index=pd.Index([log.qid for log in logs], name="qid", dtype=object))

    return per_cell(cell, "cost_frame", build, ("logs", "probe"), params={"arm": arm})


def cost_table(cells: Iterable[CellLike], arm: str = "counter_evidence") -> pd.DataFrame:
    """Appendix J: median cost per question of the substrate and of the probe, per cell.

    From the release's ``cost`` fields (DESIGN 2.1 / 2.2, :func:`cost_frame`): medians of
    ``wall_s`` and ``completion_tokens`` over the substrate logs, and over the ``arm`` probe
    records (the probe fires on S1 only).  ``probe_share_wall`` = total probe wall time / (probe +
    substrate wall time) over the probed questions (the probe's share of a unanimous question's
    cost); ``probe_to_substrate_ratio`` = ratio of the two medians.  Long format ``backbone,
    dataset, quantity, stratum, value, n`` (``n`` = records with a cost; records without one are
    counted in ``n_missing``, never imputed).
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        f = cost_frame(cell, arm)
        sub_ok, pr_ok, probed = (f[c].to_numpy() for c in ("substrate_cost", "probe_cost", "probed"))
        n_sub, n_sub_ok, n_pr, n_pr_ok = len(f), int(sub_ok.sum()), int(probed.sum()), int(pr_ok.sum())
        base = {"backbone": cell.backbone, "dataset": cell.dataset}

        def add(quantity: str, value: float, n: int, n_missing: int, stratum_: str = "") -> None:
            unit = ("seconds" if "wall_s" in quantity else "tokens" if "tokens" in quantity
                    else "ratio" if quantity.endswith("ratio") else "fraction")
            rows.append({**base, "quantity": quantity, "stratum": stratum_, "value": value, "n": n,
                         "n_missing": n_missing, "unit": unit})

        med = lambda xs: float(np.median(xs)) if len(xs) else math.nan
        sub_wall, pr_wall = f["substrate_wall_s"].to_numpy()[sub_ok], f["probe_wall_s"].to_numpy()[pr_ok]
        add("substrate_wall_s", med(sub_wall), n_sub_ok, n_sub - n_sub_ok)
        add("substrate_completion_tokens_median", med(f["substrate_tokens"].to_numpy()[sub_ok]), n_sub_ok,
            n_sub - n_sub_ok)
        add("probe_wall_s_median", med(pr_wall), n_pr_ok, n_pr - n_pr_ok, "S1")
        add("probe_completion_tokens_median", med(f["probe_tokens"].to_numpy()[pr_ok]), n_pr_ok, n_pr - n_pr_ok, "S1")
        both = f[pr_ok & sub_ok].sort_index()  # summed in qid order
        pw, sw = sum(both["probe_wall_s"].tolist()), sum(both["substrate_wall_s"].tolist())
        add("probe_share_wall", pw / (pw + sw) if (pw + sw) > 0 else math.nan, len(both), n_pr - len(both), "S1")
        add("probe_to_substrate_ratio", med(pr_wall) / med(sub_wall) if n_sub_ok and n_pr_ok else math.nan,
            n_pr_ok, 0, "S1")
        n1 = int((f["stratum"] == "S1").sum())
        add("unanimous_share", n1 / n_sub if n_sub else math.nan, n_sub, 0, "S1")
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
    no_cost = [c.label for c in rel.main_cells() if not cost_frame(c, arm)["substrate_cost"].any()]
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
