"""Audits beyond the paper: Theorem 1 checked empirically (a known risk function, and resampling a
release's stratum) and the what-if of certified coverage against calibration size and base
error rate. Every draw is certified by :func:`certify.resampled_thresholds`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from probeguard_core import SEED
from probeguard_core import certify as C
from probeguard_core.scoring import (
    unanimous_layer_score,
)
from probeguard_core.tables.certification import certification_inputs
from probeguard_core.tables.protocols import CellLike, ReleaseLike

ArrayLikeF = Sequence[float] | NDArray[Any] | pd.Series

__all__ = [
    "WhatIf", "layer_certification_means", "theorem1_audit",
    "theorem1_resampled", "theorem1_synthetic", "violation_upper_bound", "whatif",
    "whatif_above_alpha", "whatif_coverage", "whatif_summary",
]


def violation_upper_bound(k: int, n: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a violation probability from ``k`` of ``n`` draws
    (``scipy.stats.beta``); 1.0 when ``k = n``."""
    from scipy.stats import beta

    if n <= 0:
        return math.nan
    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def _audit_rows(lams: NDArray[np.float64], risk_of: Any, alpha: float, source: str) -> dict[str, Any]:
    cert = ~np.isnan(lams)
    risks = np.array([risk_of(l) if c else np.nan for l, c in zip(lams, cert)])
    viol = cert & (risks > alpha + 1e-12)
    k, n = int(viol.sum()), int(lams.size)
    return {"source": source, "alpha": float(alpha), "n_draws": n, "n_certified": int(cert.sum()),
            "violations": k, "violation_fraction": k / n, "upper_95": violation_upper_bound(k, n),
            "mean_true_risk_certified": float(np.nanmean(risks)) if cert.any() else math.nan}


def theorem1_synthetic(alphas: Iterable[float], n_draws: int = 2000, n_cal: int = 400, base_error: float = 0.05,
                       slope: float = 0.40, delta: float = 0.05, seed: int = SEED) -> pd.DataFrame:
    """Empirical audit of Theorem 1 with a known risk function (beyond the paper).

    Scores ``s ~ U(0, 1)``, ``P(error | s) = base_error + slope * (1 - s)``, so the true selective
    risk of ``answer iff s > lambda`` is ``base_error + slope * (1 - lambda) / 2`` exactly. Each
    draw: ``n_cal`` calibration questions, :func:`certify.ltt_threshold` (m = 2 strata, as in the
    paper's Bonferroni split); a violation is a certified threshold whose true risk exceeds alpha.
    One row per alpha: ``violations`` of ``n_draws``, their fraction and its one-sided 95 %
    Clopper-Pearson upper bound, to compare with ``delta``."""
    rng = np.random.default_rng(seed)
    S = rng.random((n_draws, n_cal))
    E = rng.random((n_draws, n_cal)) < (base_error + slope * (1 - S))

    def risk_of(lam: float) -> float:
        lam = min(max(lam, 0.0), 1.0)
        return base_error + slope * (1.0 - lam) / 2.0 if lam < 1 else math.nan

    rows = [_audit_rows(C.resampled_thresholds(S, E, a, delta), risk_of, a, "synthetic") for a in alphas]
    return pd.DataFrame(rows)


def theorem1_resampled(scores: ArrayLikeF, errors: ArrayLikeF, alphas: Iterable[float], n_draws: int = 2000,
                       n_cal: int | None = None, delta: float = 0.05, seed: int = SEED) -> pd.DataFrame:
    """Theorem 1 audit by resampling a release's stratum (beyond the paper): the stratum's
    questions are the population, each draw takes ``n_cal`` of them with replacement (default half
    the stratum, as one calibration split), and the true risk of a threshold is its selective risk
    over the whole stratum."""
    s = np.asarray(scores, dtype=float)
    e = np.asarray(errors, dtype=bool)
    if s.size == 0 or np.isnan(s).any():
        raise ValueError("theorem1_resampled: scores must be non-empty and free of NaN")
    n_cal = n_cal or s.size // 2
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s.size, size=(n_draws, n_cal))

    def risk_of(lam: float) -> float:
        ans = s > lam
        return float(e[ans].mean()) if ans.any() else math.nan

    rows = [_audit_rows(C.resampled_thresholds(s[idx], e[idx], a, delta), risk_of, a, "resampled") for a in alphas]
    return pd.DataFrame(rows)


def whatif_coverage(error_rates: Sequence[float], cal_sizes: Sequence[int], alpha: float = 0.15,
                    n_population: int = 800, n_draws: int = 50, seed: int = SEED,
                    backbone: str = "Qwen/Qwen3-8B", delta: float = 0.05) -> pd.DataFrame:
    """Certified coverage of one stratum against its calibration size and base error rate
    (beyond the paper; §3.3, §5.3 "a stratum above alpha receives no certified region").

    For each target error rate, :func:`probeguard_core.simulate.whatif.unanimous_layer_table`
    draws a MedQA-like unanimous layer of ``n_population`` questions from this project's
    simulator (``probeguard_core.simulate``, its MedQA parameters for ``backbone``), whatever
    release the book renders; its score is ``z(kappa) + z(RSE)`` (:func:`scoring.unanimous_layer_score`).
    That layer is the population: each of ``n_draws`` calibration sets of size ``n_cal`` is
    drawn from it with replacement (``default_rng(seed)``), :func:`certify.ltt_threshold` picks
    the threshold (m = 2 certified strata, as in the paper), and coverage and risk are those of
    the whole population above it.  Columns ``error_rate`` (target), ``base_error`` (realized in
    the population), ``n_cal``, ``certified_share`` (draws with a certificate),
    ``coverage_mean``, ``coverage_sd`` (0 for uncertified draws), ``risk_mean`` (over draws that
    answer something), ``violations`` (draws whose population risk exceeds alpha).
    """
    from probeguard_core.simulate.whatif import unanimous_layer_table as simulate_layer

    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if any(int(n) != n or n < 1 for n in cal_sizes):
        raise ValueError(f"cal_sizes must be positive integers, got {list(cal_sizes)!r}")
    rows = []
    for rate in error_rates:
        tab = simulate_layer(int(n_population), float(rate), seed=seed, backbone=backbone)
        if tab["rse"].isna().any():
            raise ValueError(f"simulated layer at error rate {rate}: {int(tab['rse'].isna().sum())} question(s) without RSE")
        s = np.asarray(unanimous_layer_score(tab["kappa"].to_numpy(), tab["rse"].to_numpy()), dtype=float)
        e = ~tab["correct"].to_numpy(dtype=bool)
        rng = np.random.default_rng(seed)
        for n_cal in cal_sizes:
            idx = rng.integers(0, len(s), size=(int(n_draws), int(n_cal)))
            lams = C.resampled_thresholds(s[idx], e[idx], alpha, delta, n_strata=2)
            cov, risk = np.zeros(int(n_draws)), np.full(int(n_draws), np.nan)
            cert = ~np.isnan(lams)
            for d in np.flatnonzero(cert):
                ans = s > lams[d]
                cov[d] = ans.mean()
                risk[d] = e[ans].mean() if ans.any() else np.nan
            rows.append({"error_rate": float(rate), "base_error": float(e.mean()), "n_cal": int(n_cal),
                         "alpha": float(alpha), "n_population": int(len(s)), "n_draws": int(n_draws),
                         "certified_share": float(cert.mean()), "coverage_mean": float(cov.mean()),
                         "coverage_sd": float(cov.std(ddof=1)) if n_draws > 1 else math.nan,
                         "risk_mean": float(np.nanmean(risk)) if (~np.isnan(risk)).any() else math.nan,
                         "violations": int((risk > alpha).sum())})
    return pd.DataFrame(rows)


def layer_certification_means(cell: CellLike, alpha: float = 0.15, n_splits: int = 50, seed: int = SEED) -> dict[str, float]:
    """The release's own unanimous layer certified as in §4.4 (for comparison with the what-if):
    ``base_error``, ``n_layer``, ``n_cal`` (the layer's calibration half, mean over splits),
    ``coverage_mean``, ``risk_mean`` of stratum S1 from :func:`certify.repeated_splits`: means over
    the splits, not one certificate (hence the name)."""
    df = certification_inputs([cell])
    rs = C.repeated_splits(df["score"].to_numpy(float), df["error"].to_numpy(bool), df["stratum"].to_numpy(str),
                           alphas=[alpha], n_splits=n_splits, seed=seed)
    s1 = rs[rs["stratum"] == "S1"]
    summ = C.summarize(rs)
    row = summ[summ["stratum"] == "S1"].iloc[0]
    layer = df["stratum"] == "S1"
    return {"base_error": float(df.loc[layer, "error"].mean()), "n_layer": int(layer.sum()),
            "n_cal": float(s1["n_cal"].mean()), "coverage_mean": float(row["coverage_mean"]),
            "risk_mean": float(row["risk_mean"]), "alpha": float(alpha)}



# --------------------------------------------------------------------------- the what-if page
@dataclass
class WhatIf:
    """The what-if page (:func:`whatif`): the simulated coverage table ``coverage``, the release's
    own certified layer ``observed`` (NaN where the release cannot certify it) and notes."""

    cell: CellLike
    backbone: str
    dataset: str
    why: str | None
    observed: dict[str, float]
    simulated_backbone: str
    coverage: pd.DataFrame
    notes: list[tuple[str, str]]


def whatif(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None, alpha: float = 0.15,
           error_rates: Sequence[float] = (0.05, 0.10, 0.15, 0.25), cal_sizes: Sequence[int] = (50, 100, 200, 400),
           n_population: int = 600, n_splits: int = 50, n_draws: int = 50, seed: int = SEED) -> WhatIf:
    """The what-if chapter from any release: :func:`whatif_coverage` on layers simulated by this
    project's simulator (never drawn from the release; the primary backbone's parameters when the
    simulator has none for this one),
    beside the release's own layer certified as in §4.4 (:func:`layer_certification_means`; NaN
    and a note when :func:`tables.certification.uncertifiable`)."""
    from probeguard_core.paper import BACKBONES
    from probeguard_core.tables.certification import uncertifiable
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    table = certification_inputs([cell])
    why = (uncertifiable(table) or
           (None if (table["stratum"] == "S1").any() else "no question is unanimous in round 1 (S1 is empty)"))
    notes = []
    if why:
        notes.append(("Not in this release",
                      f"{cell.label}: {why}; the release's own certified layer (the red star) needs them."))
        obs = {k: float("nan") for k in ("base_error", "n_layer", "n_cal", "coverage_mean", "risk_mean")} | {"alpha": alpha}
    else:
        obs = layer_certification_means(cell, alpha=alpha, n_splits=n_splits, seed=seed)
    # The simulator's generative model covers the paper's three backbones; another backbone's what-if
    # uses the primary one's (the release's own layer is still this backbone's).
    sim_backbone = backbone if backbone in BACKBONES else BACKBONES[0]
    if sim_backbone != backbone:
        notes.append(("Simulated backbone", f"the simulator has no generative model for {backbone}; the simulated "
                                            f"layers below use {sim_backbone}'s."))
    wi = whatif_coverage(error_rates, cal_sizes, alpha=alpha, n_population=n_population, n_draws=n_draws, seed=seed,
                         backbone=sim_backbone)
    return WhatIf(cell, backbone, dataset, why, obs, sim_backbone, wi, notes)


def whatif_summary(coverage: pd.DataFrame, alpha: float) -> list[str]:
    """One sentence per base error rate of a :func:`whatif_coverage` table: from which
    calibration size half the draws certify, the best mean coverage and the violating draws."""
    lines = []
    for rate, part in coverage.groupby("base_error"):
        best = part.loc[part["coverage_mean"].idxmax()]
        first = part[part["certified_share"] >= 0.5]
        side = "above" if rate > alpha else "at or below"
        lines.append(f"base error {rate:.3f} ({side} α = {alpha}): certified in half the draws from n_cal = "
                     f"{int(first['n_cal'].iloc[0]) if len(first) else 'none of the sizes tried'}; "
                     f"best mean coverage {best['coverage_mean']:.3f} at n_cal = {int(best['n_cal'])}, "
                     f"population risk {best['risk_mean']:.3f}; draws violating α: {int(part['violations'].sum())}")
    return lines


def whatif_above_alpha(coverage: pd.DataFrame, alpha: float) -> str:
    """One sentence on §5.3's "a stratum above it receives no certified region" from a
    :func:`whatif_coverage` table: the largest mean coverage certified in a simulated stratum whose
    base error is above ``alpha``, or that none above ``alpha`` was certified."""
    above = coverage[(coverage["base_error"] > alpha) & (coverage["coverage_mean"] > 0)]
    if not len(above):
        return (f"On this page no simulated stratum with a base error above α = {alpha:.2f} is certified, as §5.3 "
                "says.")
    best = above.loc[above["coverage_mean"].idxmax()]
    return (f"On this page a simulated stratum with base error {best['base_error']:.3f}, above α = {alpha:.2f}, is "
            f"certified at {best['coverage_mean']:.1%} mean coverage (calibration size {int(best['n_cal'])}): "
            "a score that discriminates certifies the stratum's top, so §5.3's sentence holds for the whole "
            "stratum (coverage 1 needs a base error at or below α), not for its top.")


def theorem1_audit(rel: ReleaseLike, alphas: Sequence[float], dataset: str | None = None,
                   backbone: str | None = None, n_draws: int = 2000, n_cal: int = 400, base_error: float = 0.05,
                   slope: float = 0.40, delta: float = 0.05,
                   seed: int = SEED) -> tuple[pd.DataFrame, list[str], int, str, str]:
    """The Theorem 1 audit page from any release: :func:`theorem1_synthetic` and, when the
    release's unanimous layer has certification scores, :func:`theorem1_resampled` of it; with
    ``below_delta`` (the 95 % upper bound at or below delta). Returns the table, its notes, the
    size of the resampled layer (its S1 questions with a certification score), the backbone and
    the benchmark."""
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    layer = certification_inputs([cell])
    layer = layer[(layer.stratum == "S1") & layer.score.notna()]
    parts = [theorem1_synthetic(alphas, n_draws=n_draws, n_cal=n_cal, base_error=base_error, slope=slope, delta=delta,
                                seed=seed)]
    notes = []
    if len(layer):
        parts.append(theorem1_resampled(layer.score, layer.error, alphas, n_draws=n_draws, delta=delta, seed=seed))
    else:
        notes.append(f"{cell.label}: no unanimous question has a certification score (this release has no probe "
                     "or NLI records for its unanimous layer); the resampled audit needs them, so only the "
                     "synthetic audit is shown.")
    audit = pd.concat(parts, ignore_index=True)
    audit["below_delta"] = audit.upper_95 <= delta
    return audit, notes, len(layer), backbone, dataset
