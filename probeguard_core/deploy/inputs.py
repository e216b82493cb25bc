"""A deployer's files, read strictly (§5.3; DESIGN 2.1-2.3): the logs, probe and NLI records that
``probeguard certify``, ``apply`` and ``monitor`` take, with each file's sha256.

Every record goes through the strict readers of :mod:`probeguard_core.logs`; on top of them this
module adds the rules that span files: qids unique over all logs files, probe and NLI records
that join a logged question (:func:`probeguard_core.release.check_records_join`) and are unique
across files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probeguard_core import logs as L
from probeguard_core.deploy.errors import DeployError
from probeguard_core.fileio import sha256_file
from probeguard_core.release import check_records_join

__all__ = ["Inputs", "load_inputs", "unpack"]

PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


@dataclass
class Inputs:
    """Validated logs, probe and NLI records read from one or more files each."""

    logs: list[L.QuestionLog]
    probe: list[L.ProbeRecord] | None = None
    nli: list[L.NLIRecord] | None = None
    files: list[dict[str, str]] = field(default_factory=list)  # role, path, sha256
    log_sources: list[int] = field(default_factory=list)  # index of the logs file each log came from


def unpack(logs: Sequence[L.QuestionLog] | Inputs, probe: Sequence[L.ProbeRecord] | None,
           nli: Sequence[L.NLIRecord] | None
           ) -> tuple[Sequence[L.QuestionLog], Sequence[L.ProbeRecord] | None, Sequence[L.NLIRecord] | None]:
    """``(logs, probe, nli)`` of either an :class:`Inputs` (records given explicitly win) or the
    three sequences as given: the one way the deployment functions accept both."""
    if isinstance(logs, Inputs):
        return logs.logs, logs.probe if probe is None else probe, logs.nli if nli is None else nli
    return logs, probe, nli


def _paths(p: PathsLike | None) -> list[Path]:
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


def load_inputs(logs: PathsLike, probe: PathsLike | None = None, nli: PathsLike | None = None) -> Inputs:
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
