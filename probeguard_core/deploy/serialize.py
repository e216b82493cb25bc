"""Step 4 of certifying a deployer's logs, *serialize*: the typed certificate
(:class:`~probeguard_core.deploy.certificate.DeploymentCertificate`, §3.3, Algorithm 2) with
every stratum, its grid, threshold and calibration coverage, the score definitions, the frozen
z constants, the assumption the guarantee rests on (Assumption 1) and the inputs' sha256.

:func:`build_certificate` turns :class:`~probeguard_core.deploy.ltt.Tested` into the certificate.
"""

from __future__ import annotations

import pandas as pd

from probeguard_core import __version__
from probeguard_core.deploy.certificate import DeploymentCertificate, GridPoint, StratumCertificate
from probeguard_core.deploy.ltt import Tested
from probeguard_core.deploy.scores import stratum_sort_key
from probeguard_core.fileio import jsonable

__all__ = ["ASSUMPTION", "SCORE_DEFINITIONS", "build_certificate"]

ASSUMPTION = (
    "Within each stratum, calibration and deployment questions are drawn i.i.d. from the same "
    "distribution (Assumption 1, §3.3). The guarantee of Eq. 5 is marginal over the calibration "
    "draw and holds per certified stratum and per domain."
)
SCORE_DEFINITIONS = {
    "S1": (
        "unanimous first round (a1 = 1): z(kappa) + z(RSE) (§3.2); kappa = keep rate of the "
        "counter_evidence probe (Eq. 4), RSE = mean over i<j of min(e_ij, e_ji) of the round-1 "
        "NLI matrix (Eq. 3); z standardizes with the mean and population sd of each signal over "
        "the calibration unanimous layer of the dataset (frozen in 'standardization')"
    ),
    "S2": "contested but converged: trajectory-averaged agreement a-bar = (1/T_stop) sum_t s_t(m_t) (Eq. 7)",
    "S3": "never converged: no score; the stratum abstains as a whole (Algorithm 2, line 13)",
}


def _stratum_entry(name: str, rows: pd.DataFrame, t: Tested) -> StratumCertificate:
    alpha, level = t.scored.request.alpha, t.level
    base, _, spec = name.partition("|")
    n = len(rows)
    n_err = int((~rows["correct"].astype(bool)).sum())
    grid: tuple[GridPoint, ...] = ()
    lam = t.thresholds.get(name)
    chosen = None
    if name in t.tested:
        pv = t.pvalues
        grid = tuple(GridPoint(float(r["coverage"]), float(r["lambda"]), int(r["n_c"]), int(r["E_c"]),
                               float(r["p_value"]), bool(r["rejected"]), bool(r["chosen"]))
                     for _, r in pv[pv["stratum"] == name].iterrows())
        chosen = next((g for g in grid if g.selected), None)
    if chosen is not None and lam is not None:
        status = "certified"
        note = (f"Certified at α = {alpha:g}: answers {chosen.n_c} of {n} calibration questions "
                f"(score > λ̂); the largest rejected grid coverage is {chosen.coverage:g}.")
    elif name in t.tested:
        status = "not certified"
        note = (f"No grid point rejects H0: risk > {alpha:g} at level {level:.3g}; the stratum "
                "certifies nothing at this α and every question in it is referred.")
    else:
        status = "abstains"
        if base == "S3":
            note = "Never converged: abstains as a whole; every question is referred (Algorithm 2)."
        elif n == 0:
            note = "No calibration questions: nothing can be certified; every question is referred."
        else:
            note = "No score (no probe and NLI records): abstains as a whole; every question is referred."
    return StratumCertificate(
        name=name, base_stratum=base, specialty=spec or None, certified=lam is not None, tested=name in t.tested,
        scored=bool(rows["score"].notna().any()) and base != "S3", n=n,
        n_scored=int(rows["score"].notna().sum()) if base != "S3" else 0, n_errors=n_err,
        error_rate=(n_err / n) if n else None, threshold=None if lam is None else float(lam), status=status,
        coverage=(chosen.n_c / n if chosen is not None and lam is not None else 0.0) if n else None,
        n_answered=chosen.n_c if chosen is not None and lam is not None else 0,
        n_answered_errors=chosen.errors if chosen is not None and lam is not None else 0,
        grid=grid, note=note,
        certified_grid_coverage=chosen.coverage if chosen is not None and lam is not None else None,
    )


def build_certificate(t: Tested) -> DeploymentCertificate:
    """The typed certificate (every stratum, S1 and S2 listed even when empty)."""
    sc = t.scored
    req, df = sc.request, sc.table
    names = sorted(set(df["stratum_name"]) | ({"S1", "S2"} if req.stratify_by is None else set()),
                   key=stratum_sort_key)
    strata = tuple(_stratum_entry(nm, df[df["stratum_name"] == nm], t) for nm in names)
    n_total = len(df)
    n_answer = sum(s.n_answered for s in strata)
    return DeploymentCertificate(
        package="probeguard_core", package_version=__version__, created_by=req.created_by,
        alpha=req.alpha, delta=req.delta, grid=tuple(sorted(float(c) for c in req.grid_desc)),
        stratify_by=req.stratify_by, allow_mixed_datasets=req.allow_mixed_datasets,
        datasets=tuple(req.datasets), backbones=tuple(sorted({log.backbone for log in req.logs})),
        tested_strata=tuple(t.tested), bonferroni_level=t.level, assumption=ASSUMPTION,
        score_definitions=dict(SCORE_DEFINITIONS), standardization=jsonable(sc.standardization),
        n=n_total, n_answered=n_answer, coverage=n_answer / n_total, notes=tuple(sc.notes),
        inputs=tuple(dict(f) for f in req.files), strata=strata,
        recalibration=None if req.recalibration is None else jsonable(dict(req.recalibration)),
    )
