"""``probeguard validate``: check artifact files against DESIGN section 2."""

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


def _run(args: argparse.Namespace) -> int:
    for p in args.paths:
        path = Path(p)
        records = _READERS[_kind(path)](path)
        print(f"{path}: {len(records)} records OK")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate logs/probe/nli/self_report .jsonl[.gz] files")
    p.add_argument("paths", nargs="+", help="files named logs.jsonl[.gz], probe.jsonl[.gz], nli.jsonl[.gz] or self_report.jsonl[.gz]")
    p.set_defaults(handler=_run)
