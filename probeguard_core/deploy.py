"""Certify a deployer's own logs and apply the certificate to new logs (§3.3, §4.4, §5.3, App. I).

A hospital calibrates ProbeGuard on its own case mix (§5.3): :func:`certify_logs` takes the
calibration logs (plus probe and NLI records when present), scores every question with the
score of its stratum (:func:`probeguard_core.scoring.stratum_scores`: S1 by z(kappa)+z(RSE),
S2 by the trajectory-averaged agreement, S3 abstains), runs the stratified Learn-then-Test of
Algorithm 2 (:func:`probeguard_core.certify.stratified_certify`) on *all* of it, and returns
the certificate as a JSON-ready dict.  :func:`apply_certificate` scores new logs on the
calibration scale (the z constants are frozen in the certificate) and decides answer / abstain
per question with the deployment rule of Algorithm 2 (:meth:`certify.Certificate.decide`).

This module holds no arithmetic of its own: features, scores, standardization, LTT and the
decision rule are those of :mod:`features`, :mod:`scoring` and :mod:`certify`.

Certified strata and the Bonferroni ``m``: the strata on which a Learn-then-Test is run, i.e.
S1 and S2 (or, with ``stratify_by="specialty"``, every (S1|S2) x specialty cell) that hold at
least one scored calibration question.  A stratum that is not tested cannot produce a false
rejection, so it does not enter the union bound; with probe and NLI records and both strata
present, ``m = 2`` as in the paper (Appendix E).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import __version__, scoring
from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core.deploy_certificate import (
    CERTIFICATE_FORMAT,
    CERTIFICATE_VERSION,
    STRATIFY_CHOICES,
    CertificateError,
    DeploymentCertificate,
    GridPoint,
    StratumCertificate,
    jsonable,
)
from probeguard_core.deploy_io import (
    DeployError,
    atomic_write_text,
    remove_stale_temporaries,
    write_files_atomically,
)
from probeguard_core.features import final_answer, is_correct
from probeguard_core.release import check_records_join, sha256_file

__all__ = [
    "ASSUMPTION",
    "CERTIFICATE_FORMAT",
    "CERTIFICATE_VERSION",
    "SCORE_DEFINITIONS",
    "UNSPECIFIED",
    "DeployError",
    "DeploymentCertificate",
    "Inputs",
    "apply_certificate",
    "atomic_write_text",
    "calibration_table",
    "certify_logs",
    "load_certificate",
    "load_inputs",
    "remove_stale_temporaries",
    "validate_certificate",
    "write_decisions",
    "write_files_atomically",
]

#: Group of questions whose specialty is null under ``stratify_by="specialty"`` (never dropped).
UNSPECIFIED = "unspecified"

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
_DECISION_COLUMNS = [
    "qid", "dataset", "stratum", "base_stratum", "specialty", "score", "threshold", "decision", "reason",
    "final_answer", "system_answer",
]


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------

@dataclass
class Inputs:
    """Validated logs, probe and NLI records read from one or more files each."""

    logs: list[L.QuestionLog]
    probe: list[L.ProbeRecord] | None = None
    nli: list[L.NLIRecord] | None = None
    files: list[dict[str, str]] = field(default_factory=list)  # role, path, sha256
    log_sources: list[int] = field(default_factory=list)  # index of the logs file each log came from


def _paths(p: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if p is None:
        return []
    if isinstance(p, (str, os.PathLike)):
        return [Path(p)]
    return [Path(x) for x in p]


def _read_unique(paths: list[Path], read: Any, logs: list[L.QuestionLog], files: list[dict[str, str]],
                 role: str, key: Any, describe: Any) -> list[Any] | None:
    """Read ``paths`` with ``read(path, logs=logs)``; each record must join its log
    (:func:`probeguard_core.release.check_records_join`); a key seen in an earlier file is an error."""
    if not paths:
        return None
    out: list[Any] = []
    seen: dict[Any, Path] = {}
    for p in paths:
        recs = read(p, logs=logs)
        check_records_join(recs, logs, p, "probe" if role == "probe" else "NLI")
        for line, rec in enumerate(recs, start=1):
            k = key(rec)
            if k in seen:
                raise L.LogFormatError(p, line, "qid", f"duplicate {describe(rec)} across files (also in {seen[k]})")
            seen[k] = p
        out += recs
        files.append({"role": role, "path": str(p), "sha256": sha256_file(p)})
    return out


def load_inputs(
    logs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    probe: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    nli: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
) -> Inputs:
    """Read every file strictly (:mod:`probeguard_core.logs`) and record its sha256.

    qids must be unique across all logs files (a duplicate names both files); probe and NLI
    records are checked against the logs (consensus, rounds) by the readers, must join a
    logged question of the same dataset and backbone (one rule,
    :func:`probeguard_core.release.check_records_join`) and must be unique across files.
    """
    log_paths = _paths(logs)
    if not log_paths:
        raise DeployError("no logs file given")
    all_logs: list[L.QuestionLog] = []
    first_file: dict[str, Path] = {}
    files: list[dict[str, str]] = []
    sources: list[int] = []
    for i, p in enumerate(log_paths):
        recs = L.read_logs(p)
        sources += [i] * len(recs)
        for line, rec in enumerate(recs, start=1):
            if rec.qid in first_file:
                raise L.LogFormatError(
                    p, line, "qid", f"duplicate qid {rec.qid!r} across files (also in {first_file[rec.qid]}); "
                    "qids must be unique over all --logs files"
                )
            first_file[rec.qid] = p
        all_logs.extend(recs)
        files.append({"role": "logs", "path": str(p), "sha256": sha256_file(p)})
    probe_recs = _read_unique(_paths(probe), L.read_probe, all_logs, files, "probe",
                              lambda r: (r.qid, r.arm), lambda r: f"probe record qid={r.qid!r}, arm={r.arm!r}")
    nli_recs = _read_unique(_paths(nli), L.read_nli, all_logs, files, "nli",
                            lambda r: (r.qid, r.round), lambda r: f"NLI record qid={r.qid!r}, round={r.round}")
    return Inputs(all_logs, probe_recs, nli_recs, files, sources)


# --------------------------------------------------------------------------------------------
# Shared scoring
# --------------------------------------------------------------------------------------------

def _check_level(name: str, v: Any) -> float:
    """Deprecated private name: :func:`probeguard_core.certify.check_level` raising DeployError."""
    return C.check_level(name, v, DeployError)


def _base_table(
    logs: Sequence[L.QuestionLog], probe: Iterable[L.ProbeRecord] | None, nli: Iterable[L.NLIRecord] | None
) -> pd.DataFrame:
    """stratum_scores plus specialty and answers; index qid in log order."""
    try:
        df = scoring.stratum_scores(logs, probe, nli)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    df["specialty"] = pd.Series([log.specialty for log in logs], index=df.index, dtype=object)
    df["system_answer"] = [final_answer(log) for log in logs]
    return df


def _stratum_name(base: str, specialty: Any, stratify_by: str | None) -> str:
    if stratify_by is None or base == "S3":
        return base
    if specialty is None or (isinstance(specialty, float) and math.isnan(specialty)):
        return f"{base}|{UNSPECIFIED}"
    return f"{base}|{specialty}"


def _frozen_s1_scores(df: pd.DataFrame, standardization: Mapping[str, Mapping[str, Mapping[str, float]]]) -> pd.Series:
    """S1 scores on the calibration scale: unanimous_layer_score_frozen per dataset."""
    out = pd.Series(np.nan, index=df.index, dtype=float)
    s1 = df[df["stratum"] == "S1"]
    for ds, part in s1.groupby("dataset", sort=True):
        consts = standardization.get(ds)
        if consts is None:
            continue
        out.loc[part.index] = scoring.unanimous_layer_score_frozen(
            part["kappa"].to_numpy(), part["rse"].to_numpy(), consts
        )
    return out


# --------------------------------------------------------------------------------------------
# Certification: validate -> score -> certify -> serialize
# --------------------------------------------------------------------------------------------

_jsonable = jsonable  # old private name


@dataclass(frozen=True)
class _Request:
    """A validated certification request (the output of :func:`_validate_request`)."""

    logs: list[L.QuestionLog]
    probe: Sequence[L.ProbeRecord] | None
    nli: Sequence[L.NLIRecord] | None
    alpha: float
    delta: float
    grid_desc: np.ndarray
    stratify_by: str | None
    allow_mixed_datasets: bool
    allow_empty_strata: bool
    files: tuple[Mapping[str, str], ...]
    created_by: str
    datasets: list[str]


@dataclass
class _Scored:
    """Per-question scores on the calibration scale, the frozen z constants and the notes."""

    table: pd.DataFrame  # stratum_scores + specialty, system_answer, stratum_name
    standardization: dict[str, dict[str, dict[str, float]]]
    notes: list[str]


def _validate_request(logs: Sequence[L.QuestionLog], probe: Sequence[L.ProbeRecord] | None,
                      nli: Sequence[L.NLIRecord] | None, *, alpha: float, delta: float, stratify_by: str | None,
                      allow_mixed_datasets: bool, allow_empty_strata: bool, grid: Sequence[float] | None,
                      files: Sequence[Mapping[str, str]] | None, created_by: str | None) -> _Request:
    """Step 1: levels, grid, stratification, one dataset (§4.4); nothing is read or scored."""
    logs = list(logs)
    alpha = C.check_level("alpha", alpha, DeployError)
    delta = C.check_level("delta", delta, DeployError)
    if stratify_by not in STRATIFY_CHOICES:
        raise DeployError(f"stratify_by must be None or 'specialty', got {stratify_by!r}")
    try:
        grid_desc = C._check_grid(grid)
    except ValueError as exc:
        raise DeployError(f"grid: {exc}") from None
    if not logs:
        raise DeployError("no calibration questions: the logs are empty")
    datasets = sorted({log.dataset for log in logs})
    if len(datasets) > 1 and not allow_mixed_datasets:
        counts = {d: sum(1 for log in logs if log.dataset == d) for d in datasets}
        raise DeployError(
            f"the calibration logs mix {len(datasets)} datasets {counts}; calibration is per domain, "
            "pooling breaks the certificate (§4.4: pooled MedQA + MMLU-Pro medicine certifies nothing) "
            "and Assumption 1 asks for one distribution per stratum. Certify each dataset separately, "
            "or pass --allow-mixed-datasets if the pooled mix really is your deployment distribution"
        )
    if stratify_by == "specialty" and any(log.specialty == UNSPECIFIED for log in logs):
        raise DeployError(
            f"a question's specialty is literally {UNSPECIFIED!r}, the name of the group of questions "
            "with a null specialty; rename that specialty"
        )
    return _Request(logs, probe, nli, alpha, delta, grid_desc, stratify_by, bool(allow_mixed_datasets),
                    bool(allow_empty_strata), tuple(files or ()), created_by or "probeguard_core.deploy.certify_logs",
                    datasets)


def _score(req: _Request) -> _Scored:
    """Step 2: stratum scores (§3.2, Eq. 7), S1 on frozen per-dataset z constants; coverage checks."""
    df = _base_table(req.logs, req.probe, req.nli)
    n_s1 = int((df["stratum"] == "S1").sum())
    have_probe, have_nli = req.probe is not None, req.nli is not None
    notes: list[str] = []
    if n_s1:
        if have_probe != have_nli:
            given, missing = ("probe", "NLI") if have_probe else ("NLI", "probe")
            raise DeployError(
                f"the S1 score z(kappa) + z(RSE) needs both probe and NLI records; only {given} records "
                f"were given (pass --{missing.lower()} too, or neither to let S1 abstain as a whole)"
            )
        if have_probe:
            s1 = df[df["stratum"] == "S1"]
            for col, what in (("kappa", "counter_evidence probe record"), ("rse", "round-1 NLI record")):
                miss = s1.index[s1[col].isna()].tolist()
                if miss:
                    raise DeployError(
                        f"{len(miss)} of {n_s1} S1 (unanimous) calibration questions have no {what}, "
                        f"e.g. qid {miss[0]!r}; the certificate would silently drop them. "
                        "Provide complete probe/NLI files for the calibration logs"
                    )
        else:
            notes.append(
                f"No probe and NLI records were given: the {n_s1} S1 (unanimous-layer) questions have no "
                "score and S1 abstains as a whole (refers every unanimous question)."
            )
    for base in ("S1", "S2"):
        if not (df["stratum"] == base).any():
            msg = (f"stratum {base} has no calibration questions: Algorithm 2 cannot certify it and every "
                   f"{base} question would be referred")
            if not req.allow_empty_strata:
                raise DeployError(msg + "; add calibration data, or pass --allow-empty-strata to let it abstain")
            notes.append(msg + " (allowed by --allow-empty-strata).")
    # standardization constants: each dataset's calibration unanimous layer (label-free)
    standardization: dict[str, dict[str, dict[str, float]]] = {}
    if have_probe and have_nli:
        for ds, part in df[df["stratum"] == "S1"].groupby("dataset", sort=True):
            standardization[str(ds)] = {
                "kappa": scoring.zscore_constants(part["kappa"].to_numpy()),
                "rse": scoring.zscore_constants(part["rse"].to_numpy()),
            }
    s1_mask = df["stratum"] == "S1"
    got = _frozen_s1_scores(df, standardization)[s1_mask].to_numpy()
    if not np.array_equal(df.loc[s1_mask, "score"].to_numpy(), got, equal_nan=True):  # same arithmetic, two paths
        raise AssertionError("frozen S1 standardization disagrees with scoring.stratum_scores")
    df.loc[s1_mask, "score"] = got
    df["stratum_name"] = [_stratum_name(b, s, req.stratify_by) for b, s in zip(df["stratum"], df["specialty"])]
    return _Scored(df, standardization, notes)


def _certify(req: _Request, sc: _Scored) -> tuple[list[str], pd.DataFrame, dict[str, float | None], float | None]:
    """Step 3: Algorithm 2 on every scored (S1|S2)[x specialty] stratum: (tested, p-values, thresholds, level)."""
    df = sc.table
    scored = df["score"].notna() & (df["stratum"] != "S3")
    tested = sorted(df.loc[scored, "stratum_name"].unique().tolist(), key=_stratum_sort_key)
    if not tested:
        return [], pd.DataFrame(columns=["stratum"]), {}, None
    errors = ~df["correct"].to_numpy(dtype=bool)
    sel = df["stratum_name"].isin(tested).to_numpy()
    try:
        res = C.stratified_certify(df.loc[sel, "score"].to_numpy(), errors[sel], df.loc[sel, "stratum_name"].to_numpy(),
                                   req.alpha, req.delta, req.grid_desc, certified=tested)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    level = C.bonferroni_level(req.delta, req.grid_desc.size, len(tested))  # Algorithm 2, line 7
    if not np.array_equal(res.pvalues["rejected"].to_numpy(dtype=bool), res.pvalues["p_value"].to_numpy() <= level):
        raise AssertionError("certify.stratified_certify used a different Bonferroni level")
    return tested, res.pvalues, dict(res.thresholds), level


def _stratum_entry(name: str, rows: pd.DataFrame, tested: list[str], pv: pd.DataFrame,
                   thresholds: Mapping[str, float | None], alpha: float, level: float | None) -> StratumCertificate:
    base, _, spec = name.partition("|")
    n = len(rows)
    n_err = int((~rows["correct"].astype(bool)).sum())
    grid: tuple[GridPoint, ...] = ()
    lam = thresholds.get(name)
    chosen = None
    if name in tested:
        grid = tuple(GridPoint(float(r["coverage"]), float(r["lambda"]), int(r["n_c"]), int(r["E_c"]),
                               float(r["p_value"]), bool(r["rejected"]), bool(r["chosen"]))
                     for _, r in pv[pv["stratum"] == name].iterrows())
        chosen = next((g for g in grid if g.selected), None)
    if chosen is not None and lam is not None:
        status = "certified"
        note = (f"Certified at α = {alpha:g}: answers {chosen.n_c} of {n} calibration questions "
                f"(score > λ̂); the largest rejected grid coverage is {chosen.coverage:g}.")
    elif name in tested:
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
        name=name, base_stratum=base, specialty=spec or None, certified=lam is not None, tested=name in tested,
        scored=bool(rows["score"].notna().any()) and base != "S3", n=n,
        n_scored=int(rows["score"].notna().sum()) if base != "S3" else 0, n_errors=n_err,
        error_rate=(n_err / n) if n else None, threshold=None if lam is None else float(lam), status=status,
        coverage=(chosen.n_c / n if chosen is not None and lam is not None else 0.0) if n else None,
        n_answered=chosen.n_c if chosen is not None and lam is not None else 0,
        n_answered_errors=chosen.errors if chosen is not None and lam is not None else 0,
        grid=grid, note=note,
        certified_grid_coverage=chosen.coverage if chosen is not None and lam is not None else None,
    )


def _serialize(req: _Request, sc: _Scored, tested: list[str], pv: pd.DataFrame,
               thresholds: Mapping[str, float | None], level: float | None,
               recalibration: Mapping[str, Any] | None = None) -> DeploymentCertificate:
    """Step 4: the typed certificate (every stratum, S1 and S2 listed even when empty)."""
    df = sc.table
    names = sorted(set(df["stratum_name"]) | ({"S1", "S2"} if req.stratify_by is None else set()),
                   key=_stratum_sort_key)
    strata = tuple(_stratum_entry(nm, df[df["stratum_name"] == nm], tested, pv, thresholds, req.alpha, level)
                   for nm in names)
    n_total = len(df)
    n_answer = sum(s.n_answered for s in strata)
    return DeploymentCertificate(
        package="probeguard_core", package_version=__version__, created_by=req.created_by,
        alpha=req.alpha, delta=req.delta, grid=tuple(sorted(float(c) for c in req.grid_desc)),
        stratify_by=req.stratify_by, allow_mixed_datasets=req.allow_mixed_datasets,
        datasets=tuple(req.datasets), backbones=tuple(sorted({log.backbone for log in req.logs})),
        tested_strata=tuple(tested), bonferroni_level=level, assumption=ASSUMPTION,
        score_definitions=dict(SCORE_DEFINITIONS), standardization=jsonable(sc.standardization),
        n=n_total, n_answered=n_answer, coverage=n_answer / n_total, notes=tuple(sc.notes),
        inputs=tuple(dict(f) for f in req.files), strata=strata,
        recalibration=None if recalibration is None else jsonable(dict(recalibration)),
    )


def certify_logs(
    logs: Sequence[L.QuestionLog] | Inputs,
    probe: Sequence[L.ProbeRecord] | None = None,
    nli: Sequence[L.NLIRecord] | None = None,
    *,
    alpha: float,
    delta: float = 0.05,
    stratify_by: str | None = None,
    allow_mixed_datasets: bool = False,
    allow_empty_strata: bool = False,
    grid: Sequence[float] | None = None,
    files: Sequence[Mapping[str, str]] | None = None,
    created_by: str | None = None,
    recalibration: Mapping[str, Any] | None = None,
) -> DeploymentCertificate:
    """Certify the calibration logs (Algorithm 2 on all of them); return the certificate.

    Four steps: validate the request, score every question (S1 by z(kappa) + z(RSE) with
    frozen constants, S2 by a-bar, S3 none), run the stratified Learn-then-Test, serialize into a
    :class:`~probeguard_core.deploy_certificate.DeploymentCertificate` (``to_json()`` is the
    ``certificate.json`` object: alpha, delta, grid, per stratum n, errors, threshold,
    calibration coverage and every grid p-value, the score definitions, the frozen z constants,
    the inputs' sha256, the package version and the content hashes).  ``files`` (role, path,
    sha256), ``created_by`` and ``recalibration`` (the data window a recalibration used) are
    recorded as given.

    Raises :class:`DeployError` when the logs mix datasets (§4.4) without
    ``allow_mixed_datasets``, when S1 or S2 has no calibration question without
    ``allow_empty_strata``, when probe and NLI records are given but do not cover every S1
    question (or only one of the two is given), or for alpha / delta outside (0, 1).
    """
    if isinstance(logs, Inputs):
        probe = logs.probe if probe is None else probe
        nli = logs.nli if nli is None else nli
        files = logs.files if files is None else files
        logs = logs.logs
    req = _validate_request(logs, probe, nli, alpha=alpha, delta=delta, stratify_by=stratify_by,
                            allow_mixed_datasets=allow_mixed_datasets, allow_empty_strata=allow_empty_strata,
                            grid=grid, files=files, created_by=created_by)
    sc = _score(req)
    tested, pv, thresholds, level = _certify(req, sc)
    cert = _serialize(req, sc, tested, pv, thresholds, level, recalibration)
    DeploymentCertificate.from_json(cert.to_json(), "certify_logs")  # the self-check holds by construction
    return cert


def calibration_table(
    cert: Mapping[str, Any],
    logs: Sequence[L.QuestionLog] | Inputs,
    probe: Sequence[L.ProbeRecord] | None = None,
    nli: Sequence[L.NLIRecord] | None = None,
) -> pd.DataFrame:
    """:func:`apply_certificate` on labelled (calibration) logs plus ``correct``
    (:func:`probeguard_core.features.is_correct`); the report's per-question table."""
    if isinstance(logs, Inputs):
        probe = logs.probe if probe is None else probe
        nli = logs.nli if nli is None else nli
        logs = logs.logs
    table = apply_certificate(cert, logs, probe, nli)
    table["correct"] = [is_correct(log) for log in logs]
    return table


def _stratum_sort_key(name: str) -> tuple[str, int, str]:
    base, _, spec = name.partition("|")
    return (base, 1 if spec == UNSPECIFIED else 0, spec)


# --------------------------------------------------------------------------------------------
# Application
# --------------------------------------------------------------------------------------------

def validate_certificate(cert: Any, where: str = "certificate") -> DeploymentCertificate:
    """Check a loaded certificate (structure, recomputation, content hash); :class:`DeployError`
    names the first field that is missing, mistyped or disagrees."""
    try:
        return DeploymentCertificate.from_json(cert, where)
    except CertificateError as exc:
        raise DeployError(str(exc)) from None


def load_certificate(path: str | os.PathLike[str]) -> DeploymentCertificate:
    """Read and validate ``certificate.json``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeployError(f"{p}: certificate file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeployError(f"{p}: cannot read the certificate: {exc}") from None
    if not text.strip():
        raise DeployError(f"{p}: certificate file is empty")
    try:
        obj = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-standard JSON number {c}")))
    except (ValueError, RecursionError) as exc:
        raise DeployError(f"{p}: certificate is not valid JSON: {exc}") from None
    return validate_certificate(obj, str(p))

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
    if isinstance(logs, Inputs):
        probe = logs.probe if probe is None else probe
        nli = logs.nli if nli is None else nli
        logs = logs.logs
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
    df = _base_table(logs, probe, nli)
    df.loc[df["stratum"] == "S1", "score"] = _frozen_s1_scores(df, cert["standardization"])[df["stratum"] == "S1"]
    df.loc[df["stratum"] == "S3", "score"] = np.nan
    stratify_by = cert["stratify_by"]
    df["stratum_name"] = [_stratum_name(b, s, stratify_by) for b, s in zip(df["stratum"], df["specialty"])]
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
            reasons.append("score above the certified threshold")
        elif base == "S3":
            reasons.append("S3 (never converged): abstains as a whole")
        elif name not in known:
            reasons.append("stratum not present at calibration: no certificate")
        elif name not in with_thr:
            reasons.append("stratum not certified at this alpha")
        elif math.isnan(sc):
            reasons.append("no score: probe or NLI record missing")
        else:
            reasons.append("score at or below the certified threshold")
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
    return out[_DECISION_COLUMNS]


# --------------------------------------------------------------------------------------------
# Atomic output
# --------------------------------------------------------------------------------------------

def certificate_bytes(cert: Mapping[str, Any]) -> bytes:
    """The canonical ``certificate.json`` bytes (stable key order, no NaN)."""
    if isinstance(cert, DeploymentCertificate):
        return cert.to_bytes()
    return (json.dumps(_jsonable(cert), indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def decisions_bytes(table: pd.DataFrame, path: str | os.PathLike[str]) -> bytes:
    """Serialize a decision table as CSV (``.csv``) or JSON Lines (``.jsonl``)."""
    name = Path(path).name
    cols = [c for c in _DECISION_COLUMNS if c in table.columns]
    if name.endswith(".csv"):
        return table[cols].to_csv(index=False, lineterminator="\n").encode("utf-8")
    if name.endswith(".jsonl"):
        lines = []
        for rec in table[cols].to_dict("records"):
            lines.append(json.dumps(_jsonable(rec), ensure_ascii=False, allow_nan=False, separators=(",", ":")))
        return ("\n".join(lines) + "\n").encode("utf-8")
    raise DeployError(f"decisions output {path} must end in .csv or .jsonl")


def write_decisions(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write the decision table atomically (``.csv`` or ``.jsonl``)."""
    p = Path(path)
    write_files_atomically({p: decisions_bytes(table, p)})
    return p
