"""Assemble pipeline outputs into a release (DESIGN 2.7) that the book renders unchanged.

Each stage writes plain, append-only ``.jsonl`` while running; a finished run is copied into
``<release>/<dataset>/<backbone-slug>/{logs,probe,nli,self_report}.jsonl.gz`` (validated with
the DESIGN 2 readers, compressed reproducibly by :func:`probeguard_core.logs.write_jsonl`) and
``manifest.json`` is written with provenance ``"real"``, the seed, the pipeline command and
the sha256 of every file; each cell names the ``substrate_profile`` and ``prompt_version`` its
logs were made with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probeguard_core import SEED
from probeguard_core.logs import read_logs, read_nli, read_probe, read_self_report, write_jsonl
from probeguard_core.release import backbone_slug, write_manifest

__all__ = ["assemble_release"]

_READERS = {"probe": read_probe, "nli": read_nli, "self_report": read_self_report}


def _provenance(path: Any, logs: Sequence[Any]) -> dict[str, str]:
    """The cell's ``substrate_profile`` and ``prompt_version`` (one each; logs without them: none)."""
    out: dict[str, str] = {}
    for key in ("substrate_profile", "prompt_version"):
        values = {(log.model_extra or {}).get(key) for log in logs} - {None}
        if len(values) > 1:
            raise ValueError(f"{path}: records mix {key} values {sorted(values)}; a cell holds one")
        if values:
            out[key] = values.pop()
    return out


def assemble_release(folder: str | Path, cells: Sequence[Mapping[str, Any]], *, name: str | None = None,
                     seed: int = SEED, command: str = "", compress: bool = True) -> Path:
    """``cells``: mappings with ``dataset``, ``backbone``, ``logs`` and optional ``probe``, ``nli``,
    ``self_report`` paths.  Every record must belong to its cell (dataset, backbone, qid)."""
    root = Path(folder)
    if (root / "manifest.json").exists():
        raise ValueError(f"{root}: already a release (manifest.json exists); choose a new folder")
    specs = []
    ext = ".jsonl.gz" if compress else ".jsonl"
    for c in cells:
        dataset, backbone = str(c["dataset"]), str(c["backbone"])
        rel = f"{dataset}/{backbone_slug(backbone)}"
        logs = read_logs(c["logs"])
        qids = {log.qid for log in logs}
        for log in logs:
            if (log.dataset, log.backbone) != (dataset, backbone):
                raise ValueError(f"{c['logs']}: qid {log.qid!r} is {log.dataset}/{log.backbone}, cell is {dataset}/{backbone}")
        write_jsonl(root / rel / f"logs{ext}", logs)
        for kind, reader in _READERS.items():
            if not c.get(kind):
                continue
            recs = reader(c[kind], logs) if kind != "self_report" else reader(c[kind])
            for r in recs:
                if r.qid not in qids or (r.dataset, r.backbone) != (dataset, backbone):
                    raise ValueError(f"{c[kind]}: record for qid {r.qid!r} ({r.dataset}/{r.backbone}) is not in cell {rel}")
            write_jsonl(root / rel / f"{kind}{ext}", recs)
        specs.append({"dataset": dataset, "backbone": backbone, "path": rel, "role": "main",
                      **_provenance(c["logs"], logs)})
    return write_manifest(root, name=name or root.name, provenance="real", seed=seed, cells=specs,
                          extra={"generator": "probeguard_core.pipeline", "command": command})
