"""Foreign releases for the book tests: folders written to DESIGN 2.7 alone, the way another
team's tools would write them (a manifest with name, provenance "real", pipeline_command,
seed and the sha256 of every file, and NO ``cells`` list), built from the shipped
``data/simulated-v1`` files by rewriting their records with :mod:`probeguard_core.logs`.

* :func:`mistral_medqa` -- one cell, MedQA with the backbone renamed to a model the paper never
  ran, logs + probe (counter-evidence arm only) + NLI, ~300 questions, no specialty, no cost;
* :func:`pubmedqa_logs_only` -- one cell of a benchmark the paper does not have, logs only;
* :func:`two_datasets` -- two benchmarks x one backbone with every artifact, no augment cell.

Questions are a seeded random subset of the shipped cell, so every number differs from the
shipped release's while the records stay valid (the probe and NLI records of the kept
questions are kept with them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from probeguard_core import logs as L
from probeguard_core.release import backbone_slug

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "data" / "simulated-v1"

__all__ = ["SHIPPED", "FOREIGN", "REFERENCE_CELLS", "mistral_medqa", "pubmedqa_logs_only", "shipped_reference", "two_datasets",
           "write_cell", "write_design_manifest"]


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def write_design_manifest(root: Path, name: str, seed: int = 7) -> Path:
    """``manifest.json`` with only what DESIGN 2.7 names: no ``cells`` list (discovered by the loader)."""
    files = {p.relative_to(root).as_posix(): _sha256(p) for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != "manifest.json"}
    manifest = {"name": name, "provenance": "real",
                "pipeline_command": f"other-lab-pipeline run --config {name}.toml", "seed": seed, "files": files}
    out = root / "manifest.json"
    out.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return out


def _source(dataset: str, backbone_dir: str) -> Path:
    return SHIPPED / dataset / backbone_dir


def write_cell(root: Path, src: Path, *, dataset: str, backbone: str, n: int, seed: int,
               artifacts: Sequence[str] = ("logs",), arms: Sequence[str] | None = None,
               keep_specialty: bool = True, keep_cost: bool = True) -> Path:
    """Rewrite a shipped cell into ``root/<dataset>/<backbone-slug>/``: ``n`` questions drawn
    with ``default_rng(seed)``, ``dataset`` / ``backbone`` renamed on every record, the probe
    restricted to ``arms`` (all when None), ``specialty`` / ``cost`` dropped when asked."""
    logs = L.read_logs(src / "logs.jsonl.gz")
    rng = np.random.default_rng(seed)
    keep_idx = sorted(rng.choice(len(logs), size=min(n, len(logs)), replace=False).tolist())
    kept = [logs[i] for i in keep_idx]
    qids = {g.qid for g in kept}
    rename: dict[str, Any] = {"dataset": dataset, "backbone": backbone}
    out = root / dataset / backbone_slug(backbone)
    out.mkdir(parents=True, exist_ok=True)
    new_logs = [g.model_copy(update={**rename, **({} if keep_specialty else {"specialty": None}),
                                     **({} if keep_cost else {"cost": None})}) for g in kept]
    L.write_jsonl(out / "logs.jsonl.gz", new_logs)
    readers: dict[str, Callable[[Path], list[Any]]] = {"probe": L.read_probe, "nli": L.read_nli,
                                                        "self_report": L.read_self_report}
    for kind in artifacts:
        if kind == "logs":
            continue
        recs = [r for r in readers[kind](src / f"{kind}.jsonl.gz") if r.qid in qids]
        if kind == "probe" and arms is not None:
            recs = [r for r in recs if r.arm in arms]
        upd = dict(rename)
        if kind == "probe" and not keep_cost:
            upd["cost"] = None
        L.write_jsonl(out / f"{kind}.jsonl.gz", [r.model_copy(update=upd) for r in recs])
    return out


def mistral_medqa(base: Path) -> Path:
    """(1) MedQA x ``mistralai/Mistral-7B-Instruct-v0.3``: logs, probe (counter-evidence only),
    NLI; 300 questions; no specialty labels, no cost."""
    root = base / "foreign-mistral-medqa"
    if not (root / "manifest.json").is_file():
        write_cell(root, _source("medqa", "qwen3-8b"), dataset="medqa", backbone="mistralai/Mistral-7B-Instruct-v0.3",
                   n=300, seed=11, artifacts=("logs", "probe", "nli"), arms=("counter_evidence",),
                   keep_specialty=False, keep_cost=False)
        write_design_manifest(root, "lab-x-mistral-medqa-2025")
    return root


def pubmedqa_logs_only(base: Path) -> Path:
    """(2) ``pubmedqa`` (a benchmark the paper does not have) x Qwen3-8B: logs only, 200 questions."""
    root = base / "foreign-pubmedqa"
    if not (root / "manifest.json").is_file():
        write_cell(root, _source("mmlu_pro_med", "qwen3-8b"), dataset="pubmedqa", backbone="Qwen/Qwen3-8B",
                   n=200, seed=12)
        write_design_manifest(root, "lab-y-pubmedqa")
    return root


def two_datasets(base: Path) -> Path:
    """(3) MedQA and MMLU-Pro medicine x HuatuoGPT-o1-8B (renamed from the shipped Qwen3-8B cells, which
    carry self-reports): logs, every probe arm, NLI, self-reports, specialty, cost; no augment cell."""
    root = base / "foreign-two-datasets"
    if not (root / "manifest.json").is_file():
        for ds, seed in (("medqa", 13), ("mmlu_pro_med", 14)):
            write_cell(root, _source(ds, "qwen3-8b"), dataset=ds, backbone="FreedomIntelligence/HuatuoGPT-o1-8B",
                       n=250, seed=seed, artifacts=("logs", "probe", "nli", "self_report"))
        write_design_manifest(root, "lab-z-two-benchmarks")
    return root


#: The shipped cells the foreign releases resemble: the reference run's release.
REFERENCE_CELLS: tuple[str, ...] = ("medqa/qwen3-8b", "mmlu_pro_med/qwen3-8b", "medqa-augment/qwen3-8b")


def shipped_reference(base: Path) -> Path:
    """The shipped release restricted to :data:`REFERENCE_CELLS`: those cells' files (and the
    datasheet) copied byte for byte, the manifest's other fields kept and its ``cells`` and
    ``files`` lists restricted to them.  Its pages compute from the shipped records; those that
    read every main cell read these two, not the other six."""
    import shutil

    root = base / "shipped-reference"
    if not (root / "manifest.json").is_file():
        m = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))
        cells = [c for c in m["cells"] if c["path"] in REFERENCE_CELLS]
        assert len(cells) == len(REFERENCE_CELLS), "a reference cell is not in the shipped release"
        files = {f: h for f, h in m["files"].items()
                 if f == "DATASHEET.md" or any(f.startswith(c + "/") for c in REFERENCE_CELLS)}
        for f in files:
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SHIPPED / f, root / f)
        (root / "manifest.json").write_text(json.dumps(m | {"cells": cells, "files": files}, indent=1) + "\n",
                                            encoding="utf-8")
    return root


#: name -> builder, for parametrized tests.
FOREIGN: dict[str, Callable[[Path], Path]] = {
    "mistral_medqa": mistral_medqa,
    "pubmedqa_logs_only": pubmedqa_logs_only,
    "two_datasets": two_datasets,
}


if __name__ == "__main__":  # build them for a manual look: python tests/foreign_release.py /tmp/foreign
    import sys

    dest = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/foreign-releases")
    for name, fn in FOREIGN.items():
        print(name, fn(dest))
