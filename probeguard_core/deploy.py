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

from probeguard_core import __version__
from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core import scoring
from probeguard_core.features import final_answer, is_correct
from probeguard_core.fileio import jsonable
from probeguard_core.fileio import write_files_atomically as _write_files_atomically
from probeguard_core.release import sha256_file

__all__ = [
    "ASSUMPTION",
    "CERTIFICATE_FORMAT",
    "SCORE_DEFINITIONS",
    "UNSPECIFIED",
    "DeployError",
    "Inputs",
    "apply_certificate",
    "atomic_write_text",
    "calibration_table",
    "certify_logs",
    "load_certificate",
    "load_inputs",
    "validate_certificate",
    "write_decisions",
    "write_files_atomically",
]

CERTIFICATE_FORMAT = "probeguard-certificate"
CERTIFICATE_VERSION = 1
#: Group of questions whose specialty is null under ``stratify_by="specialty"`` (never dropped).
UNSPECIFIED = "unspecified"
STRATIFY_CHOICES = (None, "specialty")

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


class DeployError(ValueError):
    """A bad certification / application request (names the input or parameter)."""


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


def _paths(p: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if p is None:
        return []
    if isinstance(p, (str, os.PathLike)):
        return [Path(p)]
    return [Path(x) for x in p]


def _read_unique(paths: list[Path], read: Any, logs: list[L.QuestionLog], files: list[dict[str, str]],
                 role: str, key: Any, describe: Any) -> list[Any] | None:
    """Read ``paths`` with ``read(path, logs=logs)``; a record key seen in an earlier file is an error."""
    if not paths:
        return None
    out: list[Any] = []
    seen: dict[Any, Path] = {}
    for p in paths:
        recs = read(p, logs=logs)
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
    records are checked against the logs (consensus, rounds, known qids) by the readers and
    must be unique across files.
    """
    log_paths = _paths(logs)
    if not log_paths:
        raise DeployError("no logs file given")
    all_logs: list[L.QuestionLog] = []
    first_file: dict[str, Path] = {}
    files: list[dict[str, str]] = []
    for p in log_paths:
        recs = L.read_logs(p)
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
    return Inputs(all_logs, probe_recs, nli_recs, files)


# --------------------------------------------------------------------------------------------
# Shared scoring
# --------------------------------------------------------------------------------------------

def _check_level(name: str, v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise DeployError(f"{name} must be a number in (0, 1), got {v!r}") from None
    if not (0.0 < f < 1.0) or math.isnan(f):
        raise DeployError(f"{name} must be in (0, 1) (exclusive), got {v!r}")
    return f


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
# Certification
# --------------------------------------------------------------------------------------------

_jsonable = jsonable  # the one JSON conversion (probeguard_core.fileio)


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
) -> dict[str, Any]:
    """Certify the calibration logs (Algorithm 2 on all of them); return the certificate.

    The certificate is the JSON-ready dict written as ``certificate.json``: alpha, delta, grid,
    per stratum n, errors, threshold, calibration coverage and the p-value of every grid point,
    the score definitions, the frozen z constants, the inputs' sha256 and the package version.
    ``files`` (role, path, sha256) and ``created_by`` are recorded as given (from
    :func:`load_inputs` when ``logs`` is an :class:`Inputs`).

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
    logs = list(logs)
    alpha = _check_level("alpha", alpha)
    delta = _check_level("delta", delta)
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

    df = _base_table(logs, probe, nli)
    n_s1 = int((df["stratum"] == "S1").sum())
    have_probe, have_nli = probe is not None, nli is not None
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
            if not allow_empty_strata:
                raise DeployError(msg + "; add calibration data, or pass --allow-empty-strata to let it abstain")
            notes.append(msg + " (allowed by --allow-empty-strata).")

    # standardization constants: each dataset's calibration unanimous layer (label-free)
    standardization: dict[str, dict[str, dict[str, float]]] = {}
    for ds, part in df[df["stratum"] == "S1"].groupby("dataset", sort=True):
        if have_probe and have_nli:
            standardization[str(ds)] = {
                "kappa": scoring.zscore_constants(part["kappa"].to_numpy()),
                "rse": scoring.zscore_constants(part["rse"].to_numpy()),
            }
    frozen = _frozen_s1_scores(df, standardization)
    s1_mask = df["stratum"] == "S1"
    ref = df.loc[s1_mask, "score"].to_numpy()
    got = frozen[s1_mask].to_numpy()
    if not np.array_equal(ref, got, equal_nan=True):  # same arithmetic, two code paths
        raise AssertionError("frozen S1 standardization disagrees with scoring.stratum_scores")
    df.loc[s1_mask, "score"] = got

    df["stratum_name"] = [_stratum_name(b, s, stratify_by) for b, s in zip(df["stratum"], df["specialty"])]
    scored = df["score"].notna() & (df["stratum"] != "S3")
    certified = sorted(df.loc[scored, "stratum_name"].unique().tolist(), key=_stratum_sort_key)
    errors = ~df["correct"].to_numpy(dtype=bool)
    if certified:
        sel = df["stratum_name"].isin(certified).to_numpy()
        try:
            cert_obj = C.stratified_certify(
                df.loc[sel, "score"].to_numpy(), errors[sel], df.loc[sel, "stratum_name"].to_numpy(),
                alpha, delta, grid_desc, certified=certified,
            )
        except ValueError as exc:
            raise DeployError(str(exc)) from None
        thresholds = cert_obj.thresholds
        pv = cert_obj.pvalues
        level = delta / (grid_desc.size * len(certified))  # Algorithm 2, line 7
        if not np.array_equal(pv["rejected"].to_numpy(dtype=bool), pv["p_value"].to_numpy() <= level):
            raise AssertionError("certify.stratified_certify used a different Bonferroni level")
    else:
        thresholds, pv = {}, pd.DataFrame(columns=["stratum"])
        level = None

    all_names = sorted(set(df["stratum_name"]) | ({"S1", "S2"} if stratify_by is None else set()),
                       key=_stratum_sort_key)
    strata: list[dict[str, Any]] = []
    for name in all_names:
        rows = df[df["stratum_name"] == name]
        base = name.split("|", 1)[0]
        spec = name.split("|", 1)[1] if "|" in name else None
        n = int(len(rows))
        n_err = int((~rows["correct"].astype(bool)).sum())
        entry: dict[str, Any] = {
            "name": name, "base_stratum": base, "specialty": spec,
            "certified": name in certified, "scored": bool(rows["score"].notna().any()) and base != "S3",
            "n": n, "n_scored": int(rows["score"].notna().sum()) if base != "S3" else 0,
            "n_errors": n_err, "error_rate": (n_err / n) if n else None,
            "threshold": None, "status": "abstains", "coverage": 0.0 if n else None,
            "n_answered": 0, "n_answered_errors": 0, "grid": [],
        }
        if name in certified:
            g = pv[pv["stratum"] == name]
            grid_rows = []
            for _, r in g.iterrows():
                grid_rows.append({
                    "coverage": float(r["coverage"]), "threshold": float(r["lambda"]), "n_c": int(r["n_c"]),
                    "errors": int(r["E_c"]), "p_value": float(r["p_value"]), "rejected": bool(r["rejected"]),
                    "selected": bool(r["chosen"]),
                })
            entry["grid"] = grid_rows
            lam = thresholds[name]
            entry["threshold"] = lam
            if lam is not None:
                chosen = next(r for r in grid_rows if r["selected"])
                entry.update(status="certified", n_answered=chosen["n_c"], n_answered_errors=chosen["errors"],
                             coverage=chosen["n_c"] / n, certified_grid_coverage=chosen["coverage"])
                entry["note"] = (f"Certified at α = {alpha:g}: answers {chosen['n_c']} of {n} calibration questions "
                                 f"(score > λ̂); the largest rejected grid coverage is {chosen['coverage']:g}.")
            else:
                entry["status"] = "not certified"
                entry["note"] = (f"No grid point rejects H0: risk > {alpha:g} at level {level:.3g}; the stratum "
                                 "certifies nothing at this α and every question in it is referred.")
        elif base == "S3":
            entry["note"] = "Never converged: abstains as a whole; every question is referred (Algorithm 2)."
        elif n == 0:
            entry["note"] = "No calibration questions: nothing can be certified; every question is referred."
        else:
            entry["note"] = "No score (no probe and NLI records): abstains as a whole; every question is referred."
        strata.append(entry)

    n_total = int(len(df))
    n_answer = sum(s["n_answered"] for s in strata)
    cert: dict[str, Any] = {
        "format": CERTIFICATE_FORMAT,
        "format_version": CERTIFICATE_VERSION,
        "package": "probeguard_core",
        "package_version": __version__,
        "created_by": created_by or "probeguard_core.deploy.certify_logs",
        "alpha": alpha,
        "delta": delta,
        "grid": sorted(float(c) for c in grid_desc),
        "stratify_by": stratify_by,
        "allow_mixed_datasets": bool(allow_mixed_datasets),
        "datasets": datasets,
        "backbones": sorted({log.backbone for log in logs}),
        "n_certified_strata": len(certified),
        "certified_strata": certified,
        "bonferroni_level": level,
        "assumption": ASSUMPTION,
        "score_definitions": dict(SCORE_DEFINITIONS),
        "standardization": standardization,
        "n": n_total,
        "n_answered": n_answer,
        "coverage": n_answer / n_total,
        "notes": notes,
        "inputs": [dict(f) for f in (files or [])],
        "strata": strata,
    }
    return _jsonable(cert)


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

_REQUIRED = {
    "format": str, "format_version": int, "alpha": float, "delta": float, "grid": list, "stratify_by": (str, type(None)),
    "datasets": list, "backbones": list, "standardization": dict, "strata": list, "certified_strata": list,
}


def validate_certificate(cert: Any, where: str = "certificate") -> dict[str, Any]:
    """Check a loaded certificate's structure; :class:`DeployError` names the first problem."""
    if not isinstance(cert, dict):
        raise DeployError(f"{where}: expected a JSON object, got {type(cert).__name__}")
    if cert.get("format") != CERTIFICATE_FORMAT:
        raise DeployError(f"{where}: field 'format' is {cert.get('format')!r}, not {CERTIFICATE_FORMAT!r}; "
                          "not a probeguard certificate")
    for key, typ in _REQUIRED.items():
        if key not in cert:
            raise DeployError(f"{where}: missing field {key!r}")
        v = cert[key]
        ok = isinstance(v, typ) and not isinstance(v, bool)
        if typ is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok:
            raise DeployError(f"{where}: field {key!r} has the wrong type ({type(v).__name__})")
    if cert["format_version"] != CERTIFICATE_VERSION:
        raise DeployError(f"{where}: unsupported format_version {cert['format_version']!r}")
    _check_level(f"{where}: alpha", cert["alpha"])
    _check_level(f"{where}: delta", cert["delta"])
    if cert["stratify_by"] not in STRATIFY_CHOICES:
        raise DeployError(f"{where}: field 'stratify_by' must be null or 'specialty', got {cert['stratify_by']!r}")
    names = set()
    for i, st in enumerate(cert["strata"]):
        if not isinstance(st, dict) or not isinstance(st.get("name"), str):
            raise DeployError(f"{where}: strata[{i}] must be an object with a string 'name'")
        lam = st.get("threshold")
        if lam is not None and (isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam)):
            raise DeployError(f"{where}: strata[{i}].threshold must be a finite number or null, got {lam!r}")
        if st["name"] in names:
            raise DeployError(f"{where}: strata[{i}]: duplicate stratum {st['name']!r}")
        names.add(st["name"])
    for ds, consts in cert["standardization"].items():
        for sig in ("kappa", "rse"):
            c = consts.get(sig) if isinstance(consts, dict) else None
            if not isinstance(c, dict) or not all(isinstance(c.get(k), (int, float)) for k in ("mean", "sd")):
                raise DeployError(f"{where}: standardization[{ds!r}].{sig} must hold numeric 'mean' and 'sd'")
    s1_certified = [st for st in cert["strata"] if st.get("threshold") is not None
                    and str(st["name"]).startswith("S1")]
    if s1_certified and not cert["standardization"]:
        raise DeployError(f"{where}: an S1 stratum has a threshold but 'standardization' is empty")
    return cert


def load_certificate(path: str | os.PathLike[str]) -> dict[str, Any]:
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
    except ValueError as exc:
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
    cert = validate_certificate(dict(cert))
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

def write_files_atomically(files: Mapping[Path, bytes]) -> None:
    """Write every file atomically, all or nothing (:func:`probeguard_core.fileio.write_files_atomically`);
    failures are :class:`DeployError` naming the path."""
    _write_files_atomically(files, error=DeployError)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) atomically to ``path``."""
    p = Path(path)
    write_files_atomically({p: text.encode("utf-8")})
    return p


def certificate_bytes(cert: Mapping[str, Any]) -> bytes:
    """The canonical ``certificate.json`` bytes (stable key order, no NaN)."""
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
