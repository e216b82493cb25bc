"""§5.1's difficulty-proxy correlations and §5.2's probe-pilot sensitivity check.

* :func:`difficulty_correlations` (§5.1): each feature family alone, as an out-of-fold process
  score (:func:`scoring.process_score` on that family's registry columns), and its Spearman
  correlation with the two difficulty proxies the paper names, retrieval volume (documents
  retrieved over the run, 0 when no retrieval happened) and the stopping round T_stop.  The
  paper: every trajectory family tracks them at |rho| >= 0.93, rationale entropy at |rho| <= 0.39.
* :func:`pilot_shift` (§5.2): the unanimous layer's combined AUROC (z(kappa) + z(RSE)) with and
  without the probe-pilot questions (DESIGN 2.1 ``probe_pilot``); the paper's shift is 0.007.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.tables.protocols import CellLike

__all__ = ["TRAJECTORY_FAMILIES", "difficulty_correlations", "difficulty_summary", "pilot_page", "pilot_shift"]

#: The families §5.1 calls the trajectory families (all but the rationale family).
TRAJECTORY_FAMILIES: tuple[str, ...] = ("agreement", "distribution", "minority", "retrieval")


def _proxies(logs: Any) -> pd.DataFrame:
    """Retrieval volume (distinct documents retrieved over all rounds; 0 without retrieval) and T_stop."""
    vol = [float(sum(len(set(r.retrieval.doc_ids)) for r in g.rounds if r.retrieval is not None)) for g in logs]
    return pd.DataFrame({"retrieval_volume": vol, "stopping_round": [float(len(g.rounds)) for g in logs]},
                        index=pd.Index([g.qid for g in logs], name="qid"))


def difficulty_correlations(cell: CellLike, n_folds: int = 5, seed: int = SEED) -> pd.DataFrame:
    """§5.1 on one cell, over its full question stream: one row per (family, proxy) with
    ``auroc`` (the family-alone out-of-fold score), ``rho`` (Spearman, ``scipy.stats.spearmanr``
    over the questions where the score is defined), ``abs_rho``, ``n``, and ``trajectory`` (a
    trajectory family). The rationale family is also scored by RSE itself (round 1, ``rse``),
    the quantity §5.1 calls rationale entropy; it is defined on fewer questions (``n``)."""
    from probeguard_core.features import load_registry
    from probeguard_core.scoring import process_score
    from probeguard_core.tables.scores import cell_correct, cell_features

    logs = cell.logs
    X = cell_features(cell)
    y = cell_correct(cell, X.index)
    family_of = {s.name: s.family for s in load_registry()}
    prox = _proxies(logs).loc[X.index]
    scores: dict[str, pd.Series] = {}
    for fam in (*TRAJECTORY_FAMILIES, "rationale"):
        cols = [c for c in X.columns if family_of.get(c) == fam]
        if cols and X[cols].notna().any().any():
            scores[fam] = process_score(X[cols], y, n_splits=n_folds, seed=seed)  # single-threaded fits
    if "rse_first" in X:
        scores["rse"] = X["rse_first"]
    rows = []
    for name, s in scores.items():
        ok = s.notna().to_numpy()
        auc = M.auroc(s.to_numpy()[ok], y[ok]) if ok.sum() > 1 and len(set(y[ok])) == 2 else math.nan
        for proxy in prox.columns:
            rho = float(spearmanr(s.to_numpy()[ok], prox[proxy].to_numpy()[ok]).statistic) if ok.sum() > 2 else math.nan
            rows.append({"backbone": cell.backbone, "dataset": cell.dataset, "family": name, "proxy": proxy,
                         "trajectory": name in TRAJECTORY_FAMILIES, "auroc": auc, "rho": rho, "abs_rho": abs(rho),
                         "n": int(ok.sum())})
    return pd.DataFrame(rows)


def difficulty_summary(corr: pd.DataFrame) -> pd.DataFrame:
    """The two numbers §5.1 prints, per (backbone, dataset): ``difficulty_abs_rho_min`` = the
    smallest |rho| of a trajectory family with either proxy (paper: >= 0.93) and
    ``difficulty_abs_rho_max`` = the largest |rho| of rationale entropy (signal ``rse``; paper:
    <= 0.39), in ``data/paper/reported.csv``'s long keys."""
    rows = []
    for (bb, ds), part in corr.groupby(["backbone", "dataset"], sort=False):
        traj = part[part["trajectory"]]
        rse = part[part["family"] == "rse"]
        rows.append({"backbone": bb, "dataset": ds, "quantity": "difficulty_abs_rho_min", "signal": None,
                     "value": float(traj["abs_rho"].min()) if len(traj) else math.nan, "unit": "correlation"})
        rows.append({"backbone": bb, "dataset": ds, "quantity": "difficulty_abs_rho_max", "signal": "rse",
                     "value": float(rse["abs_rho"].max()) if len(rse) else math.nan, "unit": "correlation"})
    return pd.DataFrame(rows)


def pilot_shift(cell: CellLike) -> pd.DataFrame:
    """§5.2: AUROC of the combined unanimous-layer score z(kappa) + z(RSE) over the cell's layer
    S1 with every question, and with the probe-pilot questions (``QuestionLog.probe_pilot``)
    removed from the evaluation (the score re-standardized over the remaining layer, as a release
    without them would be scored: :func:`tables.unanimous.layer_scores`). Rows ``quantity`` =
    ``auroc_all``, ``auroc_pilot_excluded``, ``auroc_shift_pilot_excluded`` (excluded - all) with
    ``n`` and ``n_pilot``; NaN values and ``marked`` False when the release marks no question."""
    from probeguard_core.tables.unanimous import layer_scores

    logs = list(cell.logs)
    marks = [g.probe_pilot for g in logs]
    marked = any(m is not None for m in marks)
    pilot = {g.qid for g in logs if g.probe_pilot}

    def auc(c: Any) -> tuple[float, int]:
        sc = layer_scores(c)
        s1 = sc[sc["stratum"] == "S1"]
        x = s1["rse_keep"].to_numpy(float)
        ok = ~np.isnan(x)
        return (M.auroc(x[ok], s1["correct"].to_numpy(bool)[ok]) if ok.any() else math.nan), int(ok.sum())

    base = {"backbone": cell.backbone, "dataset": cell.dataset, "signal": "rse_keep", "stratum": "S1",
            "unit": "auroc", "n_pilot": len(pilot), "marked": marked}
    if not marked or not pilot:
        return pd.DataFrame([{**base, "quantity": q, "value": math.nan, "n": 0}
                             for q in ("auroc_all", "auroc_pilot_excluded", "auroc_shift_pilot_excluded")])
    a_all, n_all = auc(cell)
    keep = [g for g in logs if g.qid not in pilot]
    kq = {g.qid for g in keep}
    sub = _Subset(cell, keep, [r for r in (cell.probe or []) if r.qid in kq], [r for r in (cell.nli or []) if r.qid in kq])
    a_ex, n_ex = auc(sub)
    return pd.DataFrame([{**base, "quantity": "auroc_all", "value": a_all, "n": n_all},
                         {**base, "quantity": "auroc_pilot_excluded", "value": a_ex, "n": n_ex},
                         {**base, "quantity": "auroc_shift_pilot_excluded", "value": a_ex - a_all, "n": n_ex}])


class _Subset:
    """A cell restricted to some of its questions (the attributes the builders read)."""

    def __init__(self, cell: CellLike, logs: list[Any], probe: list[Any], nli: list[Any]) -> None:
        self._cell, self.logs, self.probe, self.nli = cell, logs, probe or None, nli or None
        self.self_report = [r for r in (cell.self_report or []) if r.qid in {g.qid for g in logs}] or None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cell, name)

    def probe_by_arm(self, arm: str = "counter_evidence") -> list[Any]:
        return [r for r in (self.probe or []) if r.arm == arm]

    def has(self, what: str) -> bool:
        return bool(getattr(self, what, None))


def pilot_page(cells: list[CellLike]) -> tuple[pd.DataFrame, Any, pd.DataFrame]:
    """The §5.2 part of the difficulty page: ``(pilot, view, shift)``.

    ``pilot`` is :func:`pilot_shift` of every cell (the CSV); ``view`` what the page shows: the
    marked cells' rows with the shift's magnitude beside the paper's 0.007 (the paper gives no
    sign), or a note when no question of these cells carries the DESIGN 2.1 ``probe_pilot``
    marker; ``shift`` the signed ``auroc_shift_pilot_excluded`` rows (the headline numbers).
    """
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.display import long_beside, note

    pilot = pd.concat([pilot_shift(c) for c in cells], ignore_index=True)
    marked = pilot[pilot["marked"]]
    is_shift = marked["quantity"] == "auroc_shift_pilot_excluded"
    shift = marked[is_shift]
    if marked.empty:
        return pilot, note("no question of these cells carries the DESIGN 2.1 probe_pilot marker, so the §5.2 "
                           "sensitivity check cannot run."), shift
    shift_b = beside_paper(shift.assign(value=shift["value"].abs()), on=["backbone", "quantity", "signal", "stratum"],
                           source="§5.2", dataset=None)
    view = long_beside(pd.concat([marked[~is_shift], shift_b], ignore_index=True), keys=["dataset", "quantity"],
                       extra=["n", "n_pilot"])
    return pilot, view, shift
