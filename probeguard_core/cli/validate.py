"""``probeguard validate``: check artifact files against DESIGN section 2, or a whole release
folder (its manifest's sha256 of every file, DESIGN 2.7, then every artifact in it)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

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


#: A UTF-16 surrogate left alone by a ``\\udXXX`` escape (a valid pair decodes to one code point).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_field(value: Any, at: str = "") -> str | None:
    """The dotted field (``rounds[0].candidates[1].rationale``) of the first lone surrogate in ``value``."""
    if isinstance(value, str):
        return at or "<record>" if _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        if isinstance(k, str) and _SURROGATE.search(k):
            return f"{at}.{k!r}" if at else repr(k)
        sub = f"{at}[{k}]" if isinstance(k, int) else (f"{at}.{k}" if at else str(k))
        found = _surrogate_field(v, sub)
        if found:
            return found
    return None


def check_no_lone_surrogates(path: Path) -> None:
    """Refuse text that cannot be written as UTF-8 (issue 25): a lone surrogate escaped anywhere in
    a record passes JSON and the record schema but makes certify fail later; named here by
    ``file:line: field``."""
    for n, obj in L.iter_jsonl(path):
        field = _surrogate_field(obj)
        if field is not None:
            raise L.LogFormatError(path, n, field, "a lone UTF-16 surrogate (\\ud800-\\udfff escaped alone) "
                                   "is not text and cannot be written as UTF-8")


def _run(args: argparse.Namespace) -> int:
    for p in args.paths:
        for path in _files(Path(p)):
            records = _READERS[_kind(path)](path)
            check_no_lone_surrogates(path)
            print(f"{path}: {len(records)} records OK")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate logs/probe/nli/self_report .jsonl[.gz] files or release folders")
    p.add_argument("paths", nargs="+", help="files named logs.jsonl[.gz], probe.jsonl[.gz], nli.jsonl[.gz] or "
                   "self_report.jsonl[.gz], or release folders (manifest.json verified, then every artifact)")
    p.set_defaults(handler=_run)
