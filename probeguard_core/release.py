"""A release folder (DESIGN 2.7): manifest, cells and their artifacts.

A release is ``data/<release>/`` holding ``manifest.json`` and one sub-folder per
``<dataset>/<backbone-slug>/`` with ``logs.jsonl[.gz]`` and, when present, ``probe``,
``nli`` and ``self_report`` files.  Notebooks take the release folder as a parameter and read
everything through :func:`load_release`, so a real release replaces the simulated one with no
code change.

``manifest.json``::

    {"name": str, "provenance": "simulated" | "real",
     "generator": str, "generator_version": str     # simulated releases
     "pipeline_command": str                         # real releases
     "seed": int,
     "cells": [{"dataset", "backbone", "path", "role": "main" | "augment"}],   # optional
     "files": {relative_path: sha256}}

``cells`` is optional: a release written by other tools to DESIGN 2.7 alone has its cells
discovered from the folder tree (dataset and backbone read from the logs).  The hashes may
also be given as ``"sha256"`` and as a list of ``{"path", "sha256"}`` objects.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from probeguard_core import logs as L
from probeguard_core.jsonl import gc_paused, iter_jsonl
from probeguard_core.fileio import sha256_file

ARTIFACTS = ("logs", "probe", "nli", "self_report")
#: The modules whose source defines a cell's feature table (part of every derived table's cache key).
FEATURE_CODE = ("probeguard_core.logs", "probeguard_core.features", "probeguard_core.rse")
ROLES = ("main", "augment")

#: Display names for the paper's backbones (others display as given).
BACKBONE_NAMES = {
    "Qwen/Qwen3-8B": "Qwen3-8B",
    "FreedomIntelligence/HuatuoGPT-o1-8B": "HuatuoGPT-o1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B",
}
#: Display names for the paper's datasets.
DATASET_NAMES = {
    "medqa": "MedQA",
    "mmlu_pro_med": "MMLU-Pro medicine",
    "medmcqa": "MedMCQA",
    "medxpertqa": "MedXpertQA",
}

__all__ = [
    "ARTIFACTS",
    "BACKBONE_NAMES",
    "DATASET_NAMES",
    "Cell",
    "Release",
    "ReleaseError",
    "backbone_slug",
    "check_records_join",
    "load_release",
    "sha256_file",
    "write_manifest",
]


class ReleaseError(ValueError):
    """A release folder that does not match its manifest (names the file and the problem)."""


def backbone_slug(backbone: str) -> str:
    """Folder name of a backbone: the model id's last path part, lower-cased (``Qwen/Qwen3-8B`` -> ``qwen3-8b``)."""
    slug = backbone.rsplit("/", 1)[-1].lower()
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", slug):
        raise ValueError(f"backbone {backbone!r} gives an unusable folder name {slug!r}")
    return slug


def check_records_join(
    records: Sequence[L.ProbeRecord | L.NLIRecord | L.SelfReport],
    logs: Iterable[L.QuestionLog],
    path: str | os.PathLike[str],
    kind: str,
) -> None:
    """The one join rule for probe, NLI and self-report records (DESIGN 2.2-2.4).

    Every record's qid must be a question of ``logs``, and its ``dataset`` and ``backbone``
    must be that question's: a record of another run (same qid, other model or benchmark) is
    an error, never silently joined, and a record for a question absent from the logs is an
    error, never silently dropped.  Raises :class:`~probeguard_core.logs.LogFormatError` naming
    ``path``, the record's position (its line) and the field.
    """
    by_qid = {log.qid: log for log in logs}
    for line, rec in enumerate(records, start=1):
        log = by_qid.get(rec.qid)
        if log is None:
            raise L.LogFormatError(path, line, "qid", f"{kind} record for qid {rec.qid!r}, which is not in the "
                                   "execution logs (records must describe the logged questions)")
        for fld in ("dataset", "backbone"):
            if getattr(rec, fld) != getattr(log, fld):
                raise L.LogFormatError(path, line, fld, f"{kind} record of {fld} {getattr(rec, fld)!r} but the log of "
                                       f"qid {rec.qid!r} has {fld} {getattr(log, fld)!r}")


def _artifact_path(folder: Path, kind: str) -> Path | None:
    found = [p for p in (folder / f"{kind}.jsonl", folder / f"{kind}.jsonl.gz") if p.exists()]
    if len(found) > 1:
        raise ReleaseError(f"{folder}: both {found[0].name} and {found[1].name} exist; keep one")
    return found[0] if found else None


@dataclass
class Cell:
    """One ``<dataset>/<backbone>`` cell of a release; artifacts are read lazily and cached."""

    release: Release = field(repr=False)
    dataset: str
    backbone: str
    path: Path
    role: str = "main"

    @property
    def label(self) -> str:
        return f"{DATASET_NAMES.get(self.dataset, self.dataset)} / {BACKBONE_NAMES.get(self.backbone, self.backbone)}"

    def file(self, kind: str) -> Path | None:
        if kind not in ARTIFACTS:
            raise ValueError(f"unknown artifact kind {kind!r}; expected one of {ARTIFACTS}")
        return _artifact_path(self.path, kind)

    def has(self, kind: str) -> bool:
        return self.file(kind) is not None

    @cached_property
    def logs(self) -> list[L.QuestionLog]:
        p = self.file("logs")
        if p is None:
            raise ReleaseError(f"{self.path}: no logs.jsonl[.gz] in this cell")
        return L.read_logs(p)

    @cached_property
    def probe(self) -> list[L.ProbeRecord] | None:
        p = self.file("probe")
        if p is None:
            return None
        logs = self.logs
        recs = L.read_probe(p, logs=logs)
        check_records_join(recs, logs, p, "probe")
        return recs

    @cached_property
    def nli(self) -> list[L.NLIRecord] | None:
        p = self.file("nli")
        if p is None:
            return None
        logs = self.logs
        recs = L.read_nli(p, logs=logs)
        check_records_join(recs, logs, p, "NLI")
        return recs

    @cached_property
    def self_report(self) -> list[L.SelfReport] | None:
        p = self.file("self_report")
        if p is None:
            return None
        recs = L.read_self_report(p)
        check_records_join(recs, self.logs, p, "self-report")
        return recs

    def sha256(self, kind: str) -> str | None:
        """sha256 of this cell's ``kind`` file (the manifest's digest once verified; else hashed now)."""
        p = self.file(kind)
        if p is None:
            return None
        rel = p.relative_to(self.release.path).as_posix() if p.is_relative_to(self.release.path) else None
        if rel is not None and rel in self.release.verified:
            return self.release.verified[rel]
        return sha256_file(p)

    def sources(self, kinds: Sequence[str], *, registry: bool = False) -> dict[str, str]:
        """``{kind: sha256}`` of this cell's ``kinds`` files (``"absent"`` for a kind it lacks) and,
        with ``registry``, of the feature registry: what a table derived from them is keyed by."""
        from probeguard_core import cache

        sources = {kind: self.sha256(kind) or "absent" for kind in kinds}
        if registry:
            from probeguard_core import features as F

            sources["registry"] = cache.file_sha256(F._default_registry_path())
        return sources

    def features(self) -> Any:
        """The cell's feature table (Appendix B; :func:`probeguard_core.features.feature_table` of
        its logs and NLI records), computed once per content of those files.

        Served from the artifact cache (:mod:`probeguard_core.cache`) when the logs and NLI
        files, the feature registry and the code that reads and computes them are unchanged;
        otherwise the files are read and validated strictly and the table is computed (and
        stored).  The table is identical either way.
        """
        from probeguard_core import cache

        return cache.cached_frame("feature_table", self.sources(("logs", "nli"), registry=True), self._feature_table,
                                  code=FEATURE_CODE)

    def _feature_table(self) -> Any:
        """Read and compute, from :attr:`logs` and :attr:`nli` (the strict readers' records: the
        table and every error are theirs)."""
        from probeguard_core import features as F

        with gc_paused():
            return F.feature_table(self.logs, self.nli)

    def probe_by_arm(self, arm: str = "counter_evidence") -> list[L.ProbeRecord]:
        if arm not in L.ARMS:
            raise ValueError(f"unknown probe arm {arm!r}; expected one of {L.ARMS}")
        return [r for r in (self.probe or []) if r.arm == arm]


@dataclass
class Release:
    """A loaded release folder: its manifest and cells."""

    path: Path
    manifest: dict[str, Any]
    cells: list[Cell] = field(default_factory=list)
    #: ``{relative path: sha256}`` of the files whose digest :func:`load_release` checked.
    verified: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def provenance(self) -> str:
        return str(self.manifest["provenance"])

    @property
    def is_simulated(self) -> bool:
        return self.provenance == "simulated"

    def cell(self, dataset: str, backbone: str | None = None, role: str = "main") -> Cell:
        """The cell for ``dataset`` (and ``backbone``; default: the release's first backbone for it)."""
        hits = [c for c in self.cells if c.dataset == dataset and c.role == role and backbone in (None, c.backbone)]
        if not hits:
            have = sorted({(c.dataset, c.backbone, c.role) for c in self.cells})
            raise KeyError(f"release {self.name!r} has no {role} cell for dataset={dataset!r}, backbone={backbone!r}; it has {have}")
        return hits[0]

    def has_cell(self, dataset: str, backbone: str | None = None, role: str = "main") -> bool:
        return any(c.dataset == dataset and c.role == role and backbone in (None, c.backbone) for c in self.cells)

    def main_cells(self) -> list[Cell]:
        return [c for c in self.cells if c.role == "main"]

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(c.dataset for c in self.main_cells()))

    @property
    def backbones(self) -> list[str]:
        return list(dict.fromkeys(c.backbone for c in self.main_cells()))

    def describe(self, shows: str = "numbers") -> str:
        """The provenance banner's text for a page, from the manifest's provenance (simulated or
        real) and what the page ``shows`` (:data:`BANNER_SHOWS`): ``numbers`` computed from the
        release beside the paper's; ``paper``, the paper's own text or tables with no number of the
        release; ``cases``, numbers and the release's questions, rationales, queries or document
        ids (on a simulated release: template text from the simulator)."""
        if shows not in BANNER_SHOWS:
            raise ValueError(f"describe: shows={shows!r} is not one of {list(BANNER_SHOWS)}")
        m = self.manifest
        if shows == "paper":
            kind = (f"Simulated release '{self.name}'" if self.is_simulated else
                    f"Release '{self.name}' ({self.provenance}; produced by `{m.get('pipeline_command', 'unknown command')}`)")
            return (f"{kind}: this page reproduces the paper's own text, prompts or tables; no "
                    "number on it is computed from the release.")
        if self.is_simulated:
            return (
                f"Simulated release '{self.name}' (generator {m.get('generator')} "
                f"{m.get('generator_version')}, seed {m.get('seed')}): every number on this page is computed "
                "from simulated execution logs, not from the paper's runs. The paper's reported value is shown beside ours."
                + (" The questions, rationales, search queries and document ids shown here are template text "
                   "generated by the simulator, not real clinical cases or documents." if shows == "cases" else "")
            )
        stand_ins = m.get("stand_ins") or []  # components that stand in for the paper's models (real releases)
        return (
            f"Release '{self.name}' ({self.provenance}; produced by `{m.get('pipeline_command', 'unknown command')}`, "
            f"seed {m.get('seed')}). The paper's reported value is shown beside ours."
            + (f" Stand-ins: {'; '.join(stand_ins)}." if stand_ins else "")
        )

    def summary(self) -> str:
        """One sentence on what this release is, for the landing page (``{{ release_summary }}``),
        read from the manifest's provenance, generator, seed and cells, never from the release's
        name: a simulated release's numbers measure how close the simulator comes to the paper
        (issue 23, point 1)."""
        m = self.manifest
        cells = self.main_cells()
        what = (f"{len(cells)} benchmark × backbone cell{'s' if len(cells) != 1 else ''} "
                f"({', '.join(self.datasets) or 'none'}; {', '.join(self.backbones) or 'none'})")
        if self.is_simulated:
            return (f"This book was built on '{self.name}', a simulated release (generator {m.get('generator')} "
                    f"{m.get('generator_version')}, seed {m.get('seed')}, {what}): its logs are shaped like the "
                    "paper's substrate, so its numbers say how close the simulator comes to the paper, not what "
                    "the paper's models did.")
        stand_ins = m.get("stand_ins") or []
        return (f"This book was built on '{self.name}', a {self.provenance} release produced by "
                f"`{m.get('pipeline_command', 'unknown command')}` (seed {m.get('seed')}, {what})"
                + (f", with {len(stand_ins)} component{'s' if len(stand_ins) != 1 else ''} standing in for the "
                   "paper's models (named in the banner below)." if stand_ins else ".")
                )


#: What a page shows, for its banner (:meth:`Release.describe`).
BANNER_SHOWS: tuple[str, ...] = ("numbers", "paper", "cases")


def _require(manifest: dict[str, Any], key: str, path: Path, kind: type | tuple[type, ...]) -> Any:
    if key not in manifest:
        raise ReleaseError(f"{path}: missing field {key!r}")
    if not isinstance(manifest[key], kind):
        raise ReleaseError(f"{path}: field {key!r} has the wrong type ({type(manifest[key]).__name__})")
    return manifest[key]


def _file_hashes(manifest: dict[str, Any], mpath: Path) -> dict[str, str]:
    """The manifest's sha256 list: ``files`` (or ``sha256``) as ``{path: digest}`` or ``[{path, sha256}]``."""
    key = "files" if "files" in manifest else "sha256" if "sha256" in manifest else None
    if key is None:
        raise ReleaseError(f"{mpath}: missing field 'files' (the sha256 of every file, DESIGN 2.7)")
    raw = manifest[key]
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = []
        for i, entry in enumerate(raw):
            if not (isinstance(entry, dict) and isinstance(entry.get("path"), str) and isinstance(entry.get("sha256"), str)):
                raise ReleaseError(f"{mpath}: {key}[{i}] needs string fields 'path' and 'sha256'")
            items.append((entry["path"], entry["sha256"]))
    else:
        raise ReleaseError(f"{mpath}: field {key!r} must map file paths to sha256 digests")
    out: dict[str, str] = {}
    for relpath, digest in items:
        if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-fA-F]{64}", digest)):
            raise ReleaseError(f"{mpath}: {key}[{relpath!r}] is not a sha256 hex digest")
        out[Path(relpath).as_posix()] = digest.lower()
    return out


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _read_manifest(mpath: Path) -> dict[str, Any]:
    """``manifest.json`` parsed strictly (issue 25): UTF-8, no repeated key, bounded nesting;
    every fault names the manifest."""
    try:
        text = mpath.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReleaseError(f"{mpath}: <file>: not valid UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise ReleaseError(f"{mpath}: <file>: cannot read: {exc.strerror or exc}") from None
    try:
        manifest = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise ReleaseError(f"{mpath}: {exc.args[0]}: duplicate key (a JSON object names it twice)") from None
    except json.JSONDecodeError as exc:
        raise ReleaseError(f"{mpath}:{exc.lineno}: <record>: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ReleaseError(f"{mpath}: <record>: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise ReleaseError(f"{mpath}: <record>: invalid JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise ReleaseError(f"{mpath}: expected a JSON object")
    return manifest


def _resolves_inside(root: Path, p: Path) -> bool:
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(p)]) == real_root


def _inside(root: Path, relpath: Any, mpath: Path, field: str) -> str:
    """``relpath`` if it names a place inside the release: relative, no ``..``, no symlink out."""
    if not isinstance(relpath, str) or not relpath:
        raise ReleaseError(f"{mpath}: {field}: must be a non-empty relative path, got {relpath!r}")
    pure = Path(relpath)
    if pure.is_absolute() or ".." in pure.parts:
        raise ReleaseError(f"{mpath}: {field}: {relpath!r} leaves the release (absolute path or '..')")
    if not _resolves_inside(root, root / pure):
        raise ReleaseError(f"{mpath}: {field}: {relpath!r} resolves outside the release (a symlink)")
    return relpath


def _discover_cells(root: Path) -> list[dict[str, str]]:
    """Cells of a manifest without a ``cells`` list: every ``<dataset>/<backbone-slug>/`` folder with logs.

    Dataset and backbone are read from the first log record (DESIGN 2.1 fields), so the folder
    names need not follow :func:`backbone_slug`.  Such releases have only ``main`` cells.
    """
    specs = []
    for folder in sorted({p.parent for p in root.rglob("logs.jsonl*")}):
        logs_file = _artifact_path(folder, "logs")
        if logs_file is None:
            continue
        _, first = next(iter_jsonl(logs_file))
        dataset, backbone = first.get("dataset"), first.get("backbone")
        if not (isinstance(dataset, str) and isinstance(backbone, str)):
            raise ReleaseError(f"{logs_file}:1: dataset/backbone: missing or not strings")
        specs.append({"dataset": dataset, "backbone": backbone, "path": folder.relative_to(root).as_posix(), "role": "main"})
    if not specs:
        raise ReleaseError(f"{root}: no <dataset>/<backbone>/logs.jsonl[.gz] found")
    return specs


def load_release(folder: str | os.PathLike[str], verify: bool = True) -> Release:
    """Load a release folder (DESIGN 2.7).

    Reads ``manifest.json`` (``name``, ``provenance``, ``seed``, the sha256 of every file, and
    optionally ``cells``; without it the cells are discovered from the folder tree).  With
    ``verify``, every listed file's sha256 is checked and an artifact missing from the list is
    an error.
    """
    root = Path(folder)
    mpath = root / "manifest.json"
    if not mpath.exists():
        raise ReleaseError(f"{mpath}: no manifest.json; is {root} a release folder?")
    manifest = _read_manifest(mpath)
    _require(manifest, "name", mpath, str)
    prov = _require(manifest, "provenance", mpath, str)
    if prov not in ("simulated", "real"):
        raise ReleaseError(f"{mpath}: provenance must be 'simulated' or 'real', got {prov!r}")
    generator = manifest.get("generator")
    if prov == "real" and isinstance(generator, str) and generator.split(".")[:2] == ["probeguard_core", "simulate"]:
        raise ReleaseError(f"{mpath}: provenance: 'real' contradicts generator {generator!r} (the simulator); "
                           "a simulated release must say provenance 'simulated'")
    _require(manifest, "seed", mpath, int)
    files = _file_hashes(manifest, mpath)
    cells_spec = _require(manifest, "cells", mpath, list) if "cells" in manifest else _discover_cells(root)
    rel = Release(path=root, manifest=manifest)
    for i, spec in enumerate(cells_spec):
        if not isinstance(spec, dict) or not {"dataset", "backbone", "path"} <= set(spec):
            raise ReleaseError(f"{mpath}: cells[{i}] needs dataset, backbone and path")
        role = spec.get("role", "main")
        if role not in ROLES:
            raise ReleaseError(f"{mpath}: cells[{i}].role must be one of {ROLES}, got {role!r}")
        cpath = root / _inside(root, spec["path"], mpath, f"cells[{i}].path")
        if _artifact_path(cpath, "logs") is None:
            raise ReleaseError(f"{mpath}: cells[{i}] ({spec['path']}) has no logs.jsonl[.gz]")
        rel.cells.append(Cell(rel, spec["dataset"], spec["backbone"], cpath, role))
    for relpath in files:
        _inside(root, relpath, mpath, f"files[{relpath!r}]")
    if verify:
        for p in sorted(root.rglob("*")):
            if p.is_symlink() and not _resolves_inside(root, p):
                raise ReleaseError(f"{p}: <file>: a symlink pointing outside the release {root}")
            rel_p = p.relative_to(root).as_posix()
            if p.is_file() and rel_p != "manifest.json" and rel_p not in files:
                raise ReleaseError(f"{p}: <file>: artifact not listed in {mpath} (DESIGN 2.7: the sha256 of every file)")
        for relpath, digest in files.items():
            p = root / relpath
            if not p.exists():
                raise ReleaseError(f"{mpath}: listed file {relpath} is missing")
            if sha256_file(p) != digest:
                raise ReleaseError(f"{p}: sha256 differs from the manifest (file changed or corrupted)")
            rel.verified[relpath] = digest
        for p in sorted(root.rglob("*.jsonl*")):
            if p.relative_to(root).as_posix() not in files:
                raise ReleaseError(f"{p}: artifact not listed in {mpath}")
    return rel


def write_manifest(
    folder: str | os.PathLike[str],
    *,
    name: str,
    provenance: str,
    seed: int,
    cells: Iterable[dict[str, str]],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``manifest.json`` listing the sha256 of every file under ``folder`` (sorted, reproducible)."""
    root = Path(folder)
    files = {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    manifest: dict[str, Any] = {"name": name, "provenance": provenance, "seed": seed, **(extra or {})}
    manifest["cells"] = list(cells)
    manifest["files"] = files
    from probeguard_core.fileio import write_text_atomic

    return write_text_atomic(root / "manifest.json", json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n")
