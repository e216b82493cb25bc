"""The deployment certificate as a typed, self-checking object (§3.3, Algorithm 2, §5.3).

:class:`DeploymentCertificate` is what :func:`probeguard_core.deploy.certify.certify_logs`
returns and what ``certificate.json`` holds (:meth:`DeploymentCertificate.to_json`,
:func:`certificate_bytes`).  It reads back with :meth:`DeploymentCertificate.from_json`
(:func:`load_certificate` from a file, :func:`validate_certificate` from a loaded object), which
refuses a certificate whose parts disagree:

* everything that can be recomputed from the certificate itself is recomputed -- every grid
  p-value (Eq. 6, :func:`probeguard_core.certify.binomial_pvalue`), the rejections at the
  Bonferroni level delta / (|grid| m) (Algorithm 2, line 7), the selected grid point and its
  threshold, the answered counts and coverages, the totals, the standardization counts;
* a content hash: ``field_sha256`` holds the sha256 of every certified field (one per stratum
  for ``strata``) and ``content_sha256`` the hash of that table, so an edit is refused with the
  name of the field that changed.

The hash is an integrity check, not a signature: someone who edits a field *and* recomputes
every dependent number and hash consistently is not detected.  The recomputations make any
partial edit (a threshold, a p-value, a count) fail on its own.

Format history: version 2 adds ``tested_strata`` / ``n_tested_strata`` (the Bonferroni m),
makes ``certified_strata`` the strata that hold a threshold, and adds the hashes and the optional
``recalibration`` record.  Version 2 is the only version read (issue 25: one self-check for every
accepted version).  Version 1 (``certified_strata`` = the strata on which an LTT ran) carried no
per-field hashes, and what it does record (the calibration files' sha256) cannot be checked
without those files, which ``apply`` and ``monitor`` do not have: an edited version-1 certificate
whose numbers were recomputed consistently could not be told from an honest one.  It is refused
with a message to re-certify (``probeguard certify``); any other version is refused as unknown.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from probeguard_core import certify as C
from probeguard_core.deploy.errors import DeployError
from probeguard_core.fileio import check_output_set, jsonable  # the one JSON conversion

__all__ = [
    "CERTIFICATE_FORMAT",
    "CERTIFICATE_VERSION",
    "STRATIFY_CHOICES",
    "CertificateError",
    "DeploymentCertificate",
    "GridPoint",
    "StratumCertificate",
    "certificate_bytes",
    "load_certificate",
    "validate_certificate",
]

CERTIFICATE_FORMAT = "probeguard-certificate"
CERTIFICATE_VERSION = 2
#: The format versions this reader accepts, each with its full self-check (only 2: see above).
READABLE_VERSIONS = (2,)
STRATIFY_CHOICES = (None, "specialty")
#: Fields outside the content hash (the hashes themselves).
_UNHASHED = ("field_sha256", "content_sha256")
_REL = 1e-9  # relative tolerance of a recomputed p-value / level / rate (JSON round-trips floats exactly)


class CertificateError(ValueError):
    """A certificate that is malformed or whose fields disagree (names the field)."""


def _canonical(v: Any) -> bytes:
    return json.dumps(jsonable(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _sha(v: Any) -> str:
    return hashlib.sha256(_canonical(v)).hexdigest()


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=_REL, abs_tol=1e-300)


@dataclass(frozen=True)
class GridPoint:
    """One tested coverage level c of a stratum's LTT (Eq. 6): lambda_c, n_c, E_c, p_c."""

    coverage: float
    threshold: float
    n_c: int
    errors: int
    p_value: float
    rejected: bool
    selected: bool

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class StratumCertificate:
    """One stratum's entry: its calibration counts, LTT grid and threshold (None = abstain)."""

    name: str
    base_stratum: str
    specialty: str | None
    certified: bool  # holds a threshold (v2); v1 wrote "an LTT ran"
    tested: bool     # an LTT ran on it (counts in the Bonferroni m)
    scored: bool
    n: int
    n_scored: int
    n_errors: int
    error_rate: float | None
    threshold: float | None
    status: str
    coverage: float | None
    n_answered: int
    n_answered_errors: int
    grid: tuple[GridPoint, ...]
    note: str
    certified_grid_coverage: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "base_stratum": self.base_stratum, "specialty": self.specialty,
            "certified": self.certified, "tested": self.tested, "scored": self.scored, "n": self.n,
            "n_scored": self.n_scored, "n_errors": self.n_errors, "error_rate": self.error_rate,
            "threshold": self.threshold, "status": self.status, "coverage": self.coverage,
            "n_answered": self.n_answered, "n_answered_errors": self.n_answered_errors,
            "grid": [g.to_json() for g in self.grid],
        }
        if self.certified_grid_coverage is not None:
            out["certified_grid_coverage"] = self.certified_grid_coverage
        out["note"] = self.note
        return out


@dataclass(frozen=True, eq=False)  # Mapping equality: equal to its JSON dict
class DeploymentCertificate(Mapping[str, Any]):
    """A stratified Learn-then-Test certificate of a deployer's logs (Algorithm 2, Eq. 5).

    Read-only mapping over :meth:`to_json` (``cert["alpha"]``), so code that reads it as a
    dict keeps working.  Build with :func:`probeguard_core.deploy.certify.certify_logs`;
    read with :meth:`from_json`.
    """

    package: str
    package_version: str
    created_by: str
    alpha: float
    delta: float
    grid: tuple[float, ...]
    stratify_by: str | None
    allow_mixed_datasets: bool
    datasets: tuple[str, ...]
    backbones: tuple[str, ...]
    tested_strata: tuple[str, ...]
    bonferroni_level: float | None
    assumption: str
    score_definitions: Mapping[str, str]
    standardization: Mapping[str, Mapping[str, Mapping[str, float]]]
    n: int
    n_answered: int
    coverage: float
    notes: tuple[str, ...]
    inputs: tuple[Mapping[str, str], ...]
    strata: tuple[StratumCertificate, ...]
    recalibration: Mapping[str, Any] | None = None
    format_version: int = CERTIFICATE_VERSION
    _extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ derived
    @property
    def certified_strata(self) -> list[str]:
        """Strata that hold a threshold (answer some questions)."""
        return [s.name for s in self.strata if s.threshold is not None]

    @property
    def thresholds(self) -> dict[str, float | None]:
        return {s.name: s.threshold for s in self.strata}

    def stratum(self, name: str) -> StratumCertificate:
        for s in self.strata:
            if s.name == name:
                return s
        raise KeyError(name)

    # ------------------------------------------------------------------ serialization
    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "format": CERTIFICATE_FORMAT, "format_version": CERTIFICATE_VERSION,
            "package": self.package, "package_version": self.package_version, "created_by": self.created_by,
            "alpha": self.alpha, "delta": self.delta, "grid": list(self.grid), "stratify_by": self.stratify_by,
            "allow_mixed_datasets": self.allow_mixed_datasets, "datasets": list(self.datasets),
            "backbones": list(self.backbones),
            "n_certified_strata": len(self.certified_strata), "certified_strata": self.certified_strata,
            "n_tested_strata": len(self.tested_strata), "tested_strata": list(self.tested_strata),
            "bonferroni_level": self.bonferroni_level, "assumption": self.assumption,
            "score_definitions": dict(self.score_definitions), "standardization": self.standardization,
            "n": self.n, "n_answered": self.n_answered, "coverage": self.coverage, "notes": list(self.notes),
            "inputs": [dict(f) for f in self.inputs], "strata": [s.to_json() for s in self.strata],
        }
        if self.recalibration is not None:
            body["recalibration"] = self.recalibration
        return jsonable(body)

    @cached_property
    def _json(self) -> dict[str, Any]:
        body = self._body()
        hashes = field_hashes(body)
        body["field_sha256"] = hashes
        body["content_sha256"] = _sha(hashes)
        return body

    def to_json(self) -> dict[str, Any]:
        """The ``certificate.json`` object (format version 2, with its content hashes)."""
        return json.loads(json.dumps(self._json))  # a fresh copy the caller may change

    def to_bytes(self) -> bytes:
        """Canonical ``certificate.json`` bytes (stable key order, no NaN)."""
        return _json_bytes(self._json)

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_json(cls, obj: Any, where: str = "certificate") -> DeploymentCertificate:
        """Validate the structure, recompute what can be recomputed, check the hashes.

        Raises :class:`CertificateError` naming ``where`` and the first field that is missing,
        mistyped or disagrees with the rest of the certificate.
        """
        if isinstance(obj, DeploymentCertificate):
            return obj
        _check_structure(obj, where)
        strata = tuple(_stratum_from(st, obj) for st in obj["strata"])
        tested = tuple(obj["tested_strata"])
        cert = cls(
            package=str(obj.get("package", "probeguard_core")), package_version=str(obj.get("package_version", "")),
            created_by=str(obj.get("created_by", "")), alpha=float(obj["alpha"]), delta=float(obj["delta"]),
            grid=tuple(float(g) for g in obj["grid"]), stratify_by=obj["stratify_by"],
            allow_mixed_datasets=bool(obj.get("allow_mixed_datasets", False)),
            datasets=tuple(obj["datasets"]), backbones=tuple(obj["backbones"]), tested_strata=tested,
            bonferroni_level=obj.get("bonferroni_level"), assumption=str(obj.get("assumption", "")),
            score_definitions=dict(obj.get("score_definitions", {})), standardization=obj["standardization"],
            n=obj.get("n"), n_answered=obj.get("n_answered"), coverage=obj.get("coverage"),
            notes=tuple(obj.get("notes", [])), inputs=tuple(obj.get("inputs", [])), strata=strata,
            recalibration=obj.get("recalibration"), format_version=obj["format_version"],
        )
        _self_check(cert, obj, where)
        return cert


def field_hashes(body: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of every certified field (``strata[NAME]`` per stratum), in field order."""
    out: dict[str, str] = {}
    for key, value in body.items():
        if key in _UNHASHED:
            continue
        if key == "strata":
            for st in value:
                out[f"strata[{st['name']}]"] = _sha(st)
        else:
            out[key] = _sha(value)
    return out


# ---------------------------------------------------------------------------------- checks
_REQUIRED: dict[str, Any] = {
    "format": str, "format_version": int, "alpha": float, "delta": float, "grid": list,
    "stratify_by": (str, type(None)), "datasets": list, "backbones": list, "standardization": dict,
    "strata": list, "certified_strata": list, "n": int, "n_answered": int, "coverage": float,
    "tested_strata": list, "n_tested_strata": int, "n_certified_strata": int,
    "field_sha256": dict, "content_sha256": str,
}
_STRATUM_FIELDS: dict[str, Any] = {
    "name": str, "base_stratum": str, "n": int, "n_scored": int, "n_errors": int, "status": str,
    "n_answered": int, "n_answered_errors": int, "grid": list,
}
_GRID_FIELDS: dict[str, Any] = {"coverage": float, "threshold": float, "n_c": int, "errors": int,
                                "p_value": float, "rejected": bool, "selected": bool}


def _typed(v: Any, typ: Any) -> bool:
    if typ is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if typ is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if typ is bool:
        return isinstance(v, bool)
    return isinstance(v, typ) and not isinstance(v, bool)


def _fail(where: str, fld: str, reason: str) -> CertificateError:
    return CertificateError(f"{where}: field {fld!r} {reason}")


def _check_structure(obj: Any, where: str) -> None:
    if not isinstance(obj, dict):
        raise CertificateError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if obj.get("format") != CERTIFICATE_FORMAT:
        raise CertificateError(f"{where}: field 'format' is {obj.get('format')!r}, not {CERTIFICATE_FORMAT!r}; "
                               "not a probeguard certificate")
    version = obj.get("format_version")
    if type(version) is int and version == 1:
        raise _fail(where, "format_version", "is 1, a format without per-field hashes that cannot be checked "
                    "(an edit would go unnoticed) and is no longer read: re-certify with `probeguard certify` "
                    "on the calibration logs")
    if "format_version" in obj and (type(version) is not int or version not in READABLE_VERSIONS):
        raise CertificateError(f"{where}: unsupported format_version {version!r} "
                               f"(this reader understands {list(READABLE_VERSIONS)})")
    required = dict(_REQUIRED)
    for key, typ in required.items():
        if key not in obj:
            raise CertificateError(f"{where}: missing field {key!r}")
        if not _typed(obj[key], typ):
            raise CertificateError(f"{where}: field {key!r} has the wrong type ({type(obj[key]).__name__})")
    for name in ("alpha", "delta"):
        C.check_level(f"{where}: {name}", obj[name], CertificateError)
    if obj["stratify_by"] not in STRATIFY_CHOICES:
        raise _fail(where, "stratify_by", f"must be null or 'specialty', got {obj['stratify_by']!r}")
    try:
        C._check_grid(obj["grid"])
    except ValueError as exc:
        raise _fail(where, "grid", str(exc)) from None
    if obj["grid"] != sorted(obj["grid"]):
        raise _fail(where, "grid", "is not in ascending order")
    names: set[str] = set()
    for i, st in enumerate(obj["strata"]):
        if not isinstance(st, dict) or not isinstance(st.get("name"), str):
            raise CertificateError(f"{where}: strata[{i}] must be an object with a string 'name'")
        lam = st.get("threshold")
        if lam is not None and not _typed(lam, float):
            raise CertificateError(f"{where}: strata[{i}].threshold must be a finite number or null, got {lam!r}")
        for key, typ in _STRATUM_FIELDS.items():
            if key not in st or not _typed(st[key], typ):
                raise CertificateError(f"{where}: strata[{i}].{key} is missing or has the wrong type")
        for j, g in enumerate(st["grid"]):
            for key, typ in _GRID_FIELDS.items():
                if not isinstance(g, dict) or key not in g or not _typed(g[key], typ):
                    raise CertificateError(f"{where}: strata[{i}].grid[{j}].{key} is missing or has the wrong type")
        if st["name"] in names:
            raise CertificateError(f"{where}: strata[{i}]: duplicate stratum {st['name']!r}")
        names.add(st["name"])
    for ds, consts in obj["standardization"].items():
        for sig in ("kappa", "rse"):
            c = consts.get(sig) if isinstance(consts, dict) else None
            if not isinstance(c, dict) or not all(_typed(c.get(k), float) for k in ("mean", "sd")):
                raise CertificateError(f"{where}: standardization[{ds!r}].{sig} must hold numeric 'mean' and 'sd'")
            if not c["sd"] >= 0 or not _typed(c.get("n"), int) or c["n"] < 1:
                raise CertificateError(f"{where}: standardization[{ds!r}].{sig} needs sd >= 0 and an integer n >= 1")
    has_s1_threshold = any(st.get("threshold") is not None and str(st["name"]).startswith("S1") for st in obj["strata"])
    if has_s1_threshold and not obj["standardization"]:
        raise CertificateError(f"{where}: an S1 stratum has a threshold but 'standardization' is empty")


def _stratum_from(st: dict[str, Any], obj: dict[str, Any]) -> StratumCertificate:
    tested = bool(st["tested"]) if "tested" in st else st["name"] in obj["tested_strata"]
    return StratumCertificate(
        name=st["name"], base_stratum=st["base_stratum"], specialty=st.get("specialty"),
        certified=bool(st.get("certified", False)), tested=tested, scored=bool(st.get("scored", False)),
        n=st["n"], n_scored=st["n_scored"], n_errors=st["n_errors"], error_rate=st.get("error_rate"),
        threshold=None if st.get("threshold") is None else float(st["threshold"]), status=st["status"],
        coverage=st.get("coverage"), n_answered=st["n_answered"], n_answered_errors=st["n_answered_errors"],
        grid=tuple(GridPoint(**{k: g[k] for k in _GRID_FIELDS}) for g in st["grid"]),
        note=str(st.get("note", "")), certified_grid_coverage=st.get("certified_grid_coverage"),
    )


def _self_check(cert: DeploymentCertificate, obj: dict[str, Any], where: str) -> None:
    """Recompute every dependent number of ``obj``; then compare the content hashes."""
    names = [s.name for s in cert.strata]
    unknown = [t for t in cert.tested_strata if t not in names]
    if unknown:
        raise _fail(where, "tested_strata", f"names {unknown} that are not among the strata")
    m = len(cert.tested_strata)
    level = C.bonferroni_level(cert.delta, len(cert.grid), m) if m else None
    if not _close(cert.bonferroni_level, level):
        raise _fail(where, "bonferroni_level", f"is {cert.bonferroni_level!r} but delta / (|grid| * m) = "
                    f"{cert.delta} / ({len(cert.grid)} * {m}) = {level!r} (Algorithm 2, line 7)")
    grid_desc = sorted(cert.grid, reverse=True)
    for i, st in enumerate(cert.strata):
        _check_stratum(cert, st, f"strata[{i}] ({st.name})", grid_desc, level, where)
    n = sum(s.n for s in cert.strata)
    n_ans = sum(s.n_answered for s in cert.strata)
    for fld, got, want in (("n", cert.n, n), ("n_answered", cert.n_answered, n_ans)):
        if got != want:
            raise _fail(where, fld, f"is {got} but the strata sum to {want}")
    if not _close(cert.coverage, n_ans / n if n else None):
        raise _fail(where, "coverage", f"is {cert.coverage} but n_answered / n = {n_ans} / {n}")
    n_std = sum(int(c["kappa"]["n"]) for c in cert.standardization.values())
    n_s1 = sum(s.n_scored for s in cert.strata if s.base_stratum == "S1")
    if cert.standardization and n_std != n_s1:
        raise _fail(where, "standardization", f"counts {n_std} unanimous calibration questions but the S1 "
                    f"strata score {n_s1}")
    if obj["certified_strata"] != cert.certified_strata or obj["n_certified_strata"] != len(cert.certified_strata):
        raise _fail(where, "certified_strata", f"is {obj['certified_strata']} (n={obj['n_certified_strata']}) "
                    f"but the strata holding a threshold are {cert.certified_strata}")
    if obj["n_tested_strata"] != m:
        raise _fail(where, "n_tested_strata", f"is {obj['n_tested_strata']} but tested_strata lists {m}")
    body = {k: v for k, v in obj.items() if k not in _UNHASHED}
    want_h = field_hashes(body)
    got_h = obj["field_sha256"]
    for key in sorted(set(want_h) | set(got_h), key=lambda k: (k not in want_h, k)):
        if got_h.get(key) != want_h.get(key):
            what = "was added" if key not in got_h else ("was removed" if key not in want_h else "was edited")
            raise CertificateError(f"{where}: field {key!r} {what} after certification "
                                   "(its sha256 disagrees with field_sha256); refusing an altered certificate")
    if obj["content_sha256"] != _sha(got_h):
        raise _fail(where, "content_sha256", "disagrees with field_sha256: the hash table was edited")


def _check_stratum(cert: DeploymentCertificate, st: StratumCertificate, at: str, grid_desc: list[float],
                   level: float | None, where: str) -> None:
    if st.base_stratum != st.name.split("|", 1)[0]:
        raise _fail(where, f"{at}.base_stratum", f"is {st.base_stratum!r} but the name says {st.name!r}")
    if not (0 <= st.n_errors <= st.n and 0 <= st.n_scored <= st.n and 0 <= st.n_answered_errors <= st.n_answered):
        raise _fail(where, f"{at}.n_errors", "counts are inconsistent (errors, scored and answered must fit in n)")
    if not _close(st.error_rate, st.n_errors / st.n if st.n else None):
        raise _fail(where, f"{at}.error_rate", f"is {st.error_rate} but n_errors / n = {st.n_errors} / {st.n}")
    if not st.tested:
        if st.threshold is not None or st.n_answered or st.grid:
            raise _fail(where, f"{at}.threshold", "is set (or answers / grid are) although no LTT ran on this stratum")
        return
    if len(st.grid) != len(grid_desc) or any(not _close(g.coverage, c) for g, c in zip(st.grid, grid_desc)):
        raise _fail(where, f"{at}.grid", "does not list the certificate's grid in testing order (descending)")
    p = np.atleast_1d(C.binomial_pvalue(np.array([g.errors for g in st.grid]), np.array([g.n_c for g in st.grid]),
                                        cert.alpha))
    prev = None
    for j, (g, pj) in enumerate(zip(st.grid, p)):
        gat = f"{at}.grid[{j}]"
        if not 0 <= g.errors <= g.n_c <= st.n_scored:
            raise _fail(where, f"{gat}.n_c", f"n_c={g.n_c}, errors={g.errors} do not fit n_scored={st.n_scored}")
        if g.n_c > math.ceil(g.coverage * st.n_scored - 1e-9):
            raise _fail(where, f"{gat}.n_c", f"{g.n_c} exceeds ceil(c * n_scored) for c = {g.coverage}")
        if prev is not None and (g.n_c > prev.n_c or g.errors > prev.errors or g.threshold < prev.threshold):
            raise _fail(where, f"{gat}.n_c", "is not monotone in the coverage (n_c, errors, lambda_c)")
        if not _close(g.p_value, float(pj)):
            raise _fail(where, f"{gat}.p_value", f"is {g.p_value!r} but Eq. 6 gives P(Bin({g.n_c}, alpha) <= "
                        f"{g.errors}) = {float(pj)!r}")
        if g.rejected != bool(g.p_value <= level):
            raise _fail(where, f"{gat}.rejected", f"is {g.rejected} but p = {g.p_value:.6g} vs level {level:.6g}")
        prev = g
    first = next((j for j, g in enumerate(st.grid) if g.rejected), None)
    sel = [j for j, g in enumerate(st.grid) if g.selected]
    if sel != ([] if first is None else [first]):
        raise _fail(where, f"{at}.grid", f"selects {sel} but the largest rejected coverage is index {first}")
    chosen = None if first is None else st.grid[first]
    want_thr = None if chosen is None else chosen.threshold
    if not _close(st.threshold, want_thr):
        raise _fail(where, f"{at}.threshold", f"is {st.threshold!r} but the selected grid point's lambda is {want_thr!r}")
    want_ans = (0, 0) if chosen is None else (chosen.n_c, chosen.errors)
    if (st.n_answered, st.n_answered_errors) != want_ans:
        raise _fail(where, f"{at}.n_answered", f"({st.n_answered}, {st.n_answered_errors} errors) differs from the "
                    f"selected grid point {want_ans}")
    if not _close(st.coverage, st.n_answered / st.n if st.n else None):
        raise _fail(where, f"{at}.coverage", f"is {st.coverage} but n_answered / n = {st.n_answered} / {st.n}")
    if (st.threshold is not None) != (st.status == "certified"):
        raise _fail(where, f"{at}.status", f"is {st.status!r} but the threshold is {st.threshold!r}")


# --------------------------------------------------------------------------------------------
# Reading and writing certificate.json
# --------------------------------------------------------------------------------------------

def validate_certificate(cert: Any, where: str = "certificate") -> DeploymentCertificate:
    """Check a loaded certificate (structure, recomputation, content hash); :class:`DeployError`
    names the first field that is missing, mistyped or disagrees."""
    try:
        return DeploymentCertificate.from_json(cert, where)
    except CertificateError as exc:
        raise DeployError(str(exc)) from None


def load_certificate(path: str | os.PathLike[str]) -> DeploymentCertificate:
    """Read and validate ``certificate.json``.

    A certificate whose output set (``report.html``, ``dossiers.jsonl``) a killed ``certify`` or
    ``monitor`` left half old, half new is refused first (:func:`probeguard_core.fileio.check_output_set`).
    """
    p = Path(path)
    check_output_set(p, DeployError)
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


def certificate_bytes(cert: Mapping[str, Any]) -> bytes:
    """The canonical ``certificate.json`` bytes (stable key order, no NaN)."""
    if isinstance(cert, DeploymentCertificate):
        return cert.to_bytes()
    return _json_bytes(jsonable(cert))


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
