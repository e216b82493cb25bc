"""``probeguard validate``: check artifact files against DESIGN section 2, or a whole release
folder (its manifest's sha256 of every file, DESIGN 2.7, then every artifact in it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from probeguard_core import logs as L

_READERS = {
    "logs": L.read_logs,
    "probe": L.read_probe,
    "nli": L.read_nli,
    "self_report": L.read_self_report,
}


def _kind(path: Path) -> str:
    stem = path.name.removesuffix(".gz").removesuffix(".jsonl")
    if stem not in _READERS:
        raise L.LogFormatError(path, None, None, f"unknown artifact name {stem!r}; expected one of {sorted(_READERS)}")
    return stem


def _files(path: Path) -> list[Path]:
    """``path`` itself, or for a release folder every artifact file in it (after its manifest
    verified the sha256 of every listed file)."""
    if not path.is_dir():
        return [path]
    from probeguard_core.release import load_release

    rel = load_release(path, verify=True)
    print(f"{path}: manifest OK ({rel.provenance}; every listed file's sha256 matches)")
    return sorted(f for f in path.rglob("*.jsonl*") if f.name.removesuffix(".gz").removesuffix(".jsonl") in _READERS)


def _run(args: argparse.Namespace) -> int:
    for p in args.paths:
        for path in _files(Path(p)):
            records = _READERS[_kind(path)](path)
            print(f"{path}: {len(records)} records OK")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate logs/probe/nli/self_report .jsonl[.gz] files or release folders")
    p.add_argument("paths", nargs="+", help="files named logs.jsonl[.gz], probe.jsonl[.gz], nli.jsonl[.gz] or "
                   "self_report.jsonl[.gz], or release folders (manifest.json verified, then every artifact)")
    p.set_defaults(handler=_run)
