"""Discrimination (§4.1-§4.2; Tables 2, 3, 5; Figures 2 and 5): AUROC / AURC of every signal per
cell, inside the unanimous layer, the risk-coverage curves, and the consensus dynamics of
Figure 2 (agreement per round, error rate by concluding round).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.features import (
    converged,
    is_correct,
    round_agreements,
)

if TYPE_CHECKING:
    from probeguard_core.logs import QuestionLog

from probeguard_core.tables.protocols import ReleaseLike
from probeguard_core.tables.scores import defined_metric

__all__ = [
    "ALWAYS_AVAILABLE", "LAYER_SIGNALS", "TABLE2_SIGNALS", "Table5", "Tables23",
    "agreement_by_round", "concluding_round_table", "discrimination", "layer_discrimination",
    "risk_coverage_curves", "table5", "tables_2_3",
]


#: The signals of Table 2 / Table 5, in the paper's row order.
TABLE2_SIGNALS: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "sequence_logprob", "answer_entropy",
    "verbalized_confidence", "p_true", "process_score",
)


#: Signals defined for every question (Figure 5).
ALWAYS_AVAILABLE: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "sequence_logprob", "answer_entropy", "process_score",
)


#: Signals evaluated inside the unanimous layer (Figure 2 right, §4.3).
LAYER_SIGNALS: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "answer_entropy", "sequence_logprob",
    "verbalized_confidence", "p_true", "rse", "keep_rate", "rse_keep",
)


def discrimination(scores: Mapping[tuple[str, str], pd.DataFrame], signals: Sequence[str] = TABLE2_SIGNALS,
                   subset: str | None = None) -> pd.DataFrame:
    """AUROC and AURC of each signal per (backbone, dataset) cell (Tables 2, 3, 5; §4.1).

    ``scores`` maps ``(backbone, dataset)`` to :func:`cell_scores`. ``subset="S1"`` restricts
    to the unanimous layer. A signal not defined for every question of the cell gets NaN
    (the paper's dash), with ``n_defined`` saying for how many it is. Long format: columns
    ``backbone, dataset, signal, quantity (auroc|aurc), value, n, n_defined``.
    """
    rows = []
    for (backbone, dataset), df in scores.items():
        part = df if subset is None else df[df["stratum"] == subset]
        for sig in signals:
            for quantity, fn in (("auroc", M.auroc), ("aurc", M.aurc)):
                v, n_def = defined_metric(fn, part[sig], part["correct"]) if len(part) else (math.nan, 0)
                rows.append({"backbone": backbone, "dataset": dataset, "signal": sig, "quantity": quantity,
                             "value": v, "n": int(len(part)), "n_defined": n_def})
    return pd.DataFrame(rows)


def layer_discrimination(scores: pd.DataFrame, signals: Sequence[str] = LAYER_SIGNALS) -> pd.DataFrame:
    """AUROC of each signal inside the unanimous layer S1 (Figure 2 right, §4.3): columns
    ``signal, value, n, n_defined, constant`` (a constant signal has AUROC 0.5 by definition)."""
    part = scores[scores["stratum"] == "S1"]
    rows = []
    for sig in signals:
        v, n_def = defined_metric(M.auroc, part[sig], part["correct"]) if len(part) else (math.nan, 0)
        const = bool(part[sig].dropna().nunique() <= 1)
        rows.append({"signal": sig, "value": v, "n": int(len(part)), "n_defined": n_def, "constant": const})
    return pd.DataFrame(rows)


def risk_coverage_curves(scores: pd.DataFrame, signals: Sequence[str] = ALWAYS_AVAILABLE,
                         min_coverage: float = 0.05) -> pd.DataFrame:
    """Tie-aware risk-coverage curves (Figure 5; :func:`metrics.risk_coverage`), coverage below
    ``min_coverage`` omitted: columns ``signal, coverage, risk, threshold, n_answered``."""
    frames = []
    for sig in signals:
        if scores[sig].isna().any():
            continue
        rc = M.risk_coverage(scores[sig].to_numpy(), scores["correct"].to_numpy())
        rc = rc[rc["coverage"] >= min_coverage]
        frames.append(rc.assign(signal=sig)[["signal", "coverage", "risk", "threshold", "n_answered"]])
    return pd.concat(frames, ignore_index=True)


def agreement_by_round(logs: Sequence[QuestionLog], max_rounds: int | None = None) -> pd.DataFrame:
    """Mean agreement ``s_t(m_t)`` per round for correct vs wrong final answers, with standard
    errors (Figure 2 left). A question that stopped before round ``t`` keeps its last round's
    agreement (the consensus it concluded with), so every question counts in every round.
    Columns ``group (correct|wrong), round, mean, se, n``."""
    T = max_rounds or max(log.max_rounds for log in logs)
    A = np.full((len(logs), T), np.nan)
    for i, log in enumerate(logs):
        ag = round_agreements(log)
        A[i, : len(ag)] = ag
        A[i, len(ag):] = ag[-1]
    ok = np.asarray([is_correct(log) for log in logs])
    rows = []
    for group, mask in (("correct", ok), ("wrong", ~ok)):
        sub = A[mask]
        n = sub.shape[0]
        for t in range(T):
            m = float(sub[:, t].mean()) if n else math.nan
            se = float(sub[:, t].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
            rows.append({"group": group, "round": t + 1, "mean": m, "se": se, "n": n})
    return pd.DataFrame(rows)


def concluding_round_table(logs: Sequence[QuestionLog]) -> pd.DataFrame:
    """Questions and error rate by the round at which consensus concludes (Figure 2 middle).

    Rows ``round = 1..T`` over converged questions (``T_stop`` = number of logged rounds), plus
    a row ``round = 0`` labelled ``no consensus`` for questions that never converged (S3).
    Columns ``round, label, n, n_errors, error_rate``."""
    T = max(log.max_rounds for log in logs)
    conv = np.asarray([converged(log) for log in logs])
    t_stop = np.asarray([len(log.rounds) for log in logs])
    err = ~np.asarray([is_correct(log) for log in logs])
    rows = []
    for t in range(1, T + 1):
        m = conv & (t_stop == t)
        rows.append({"round": t, "label": str(t), "n": int(m.sum()), "n_errors": int(err[m].sum())})
    rows.append({"round": 0, "label": "no consensus", "n": int((~conv).sum()), "n_errors": int(err[~conv].sum())})
    df = pd.DataFrame(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        df["error_rate"] = np.where(df["n"] > 0, df["n_errors"] / df["n"].clip(lower=1), np.nan)
    return df


# --------------------------------------------------------------------------- the Tables 2 and 3 page
@dataclass
class Tables23:
    """The Tables 2 and 3 page (:func:`tables_2_3`): both tables beside the paper, the cells the
    design asks for that the release lacks, and notes."""

    backbone: str
    datasets: list[str]
    backbones: list[str]
    table2: pd.DataFrame
    table3: pd.DataFrame
    missing: list[tuple[str, str]]
    notes: list[str]


def tables_2_3(rel: ReleaseLike, datasets: Sequence[str] | None = None, backbone: str | None = None,
               backbones: Sequence[str] | None = None, table3_datasets: Sequence[str] | None = None,
               seed: int = SEED) -> Tables23:
    """Tables 2 and 3 (§4.2) from any release: :func:`discrimination` of every signal on the
    primary backbone's benchmarks (Table 2) and of the process score against terminal agreement
    on every backbone (Table 3), each beside the paper (:func:`paper.beside_paper`)."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.picking import pick_backbone, pick_backbones, pick_datasets
    from probeguard_core.tables.scores import cell_scores

    backbone = pick_backbone(rel, backbone)
    datasets = pick_datasets(rel, datasets, backbone, design=["medqa", "mmlu_pro_med", "medmcqa"])
    backbones = pick_backbones(rel, backbones)
    table3_datasets = pick_datasets(rel, table3_datasets, design=["medqa", "mmlu_pro_med"])
    wanted = list(dict.fromkeys([(backbone, d) for d in datasets] + [(b, d) for b in backbones for d in table3_datasets]))
    scores = {(b, d): cell_scores(rel.cell(d, b), seed=seed) for b, d in wanted if rel.has_cell(d, b)}
    missing = [k for k in wanted if k not in scores]
    notes = [f"this release has no cell for {', '.join(f'{b} / {d}' for b, d in missing)}"] if missing else []
    if len(backbones) < 2:
        notes.append(f"this release has a single backbone ({backbones[0]}); Table 3 compares the process score "
                     "with terminal agreement across backbones, so it shows only that one.")
    t2 = discrimination({k: v for k, v in scores.items() if k[0] == backbone and k[1] in datasets})
    t2 = beside_paper(t2, on=["backbone", "dataset", "signal", "quantity"], source="Table 2")
    t3 = discrimination({k: v for k, v in scores.items() if k[1] in table3_datasets},
                        signals=["process_score", "terminal_agreement"])
    t3 = beside_paper(t3, on=["backbone", "dataset", "signal", "quantity"], source="Table 3")
    return Tables23(backbone, list(datasets), list(backbones), t2, t3, missing, notes)


@dataclass
class Table5:
    """The Table 5 / Figure 5 page (:func:`table5`): per-cell scores and Table 5 beside the paper."""

    backbone: str
    backbones: list[str]
    datasets: list[str]
    scores: dict[tuple[str, str], pd.DataFrame]
    table5: pd.DataFrame


def table5(rel: ReleaseLike, datasets: Sequence[str] | None = None, backbone: str | None = None,
           backbones: Sequence[str] | None = None, seed: int = SEED) -> Table5:
    """Table 5 (Appendix F) from any release: :func:`discrimination` of every signal on every
    (backbone, benchmark) cell the release has, beside the paper; cells it lacks are left out."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.picking import pick_backbone, pick_backbones, pick_datasets
    from probeguard_core.tables.scores import cell_scores

    backbone = pick_backbone(rel, backbone)
    backbones = pick_backbones(rel, backbones)
    datasets = pick_datasets(rel, datasets, design=["medqa", "mmlu_pro_med", "medmcqa"])
    scores = {(b, d): cell_scores(rel.cell(d, b), seed=seed)
              for b in backbones for d in datasets if rel.has_cell(d, b)}
    t5 = beside_paper(discrimination(scores), on=["backbone", "dataset", "signal", "quantity"], source="Table 5")
    return Table5(backbone, list(backbones), list(datasets), scores, t5)
