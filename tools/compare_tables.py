"""Compare the tables two book builds wrote, byte for byte.

    python tools/compare_tables.py BEFORE AFTER

``BEFORE`` and ``AFTER`` are ``book/_generated`` folders (or copies of them). Every CSV table
and ``results.json`` under either is compared; the script prints one line per file that is
missing on one side or differs, then a summary, and exits 1 when anything differs. A refactor
that must not change a number (issue 10) passes with ``0 differ, 0 missing``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def tables_of(folder: Path) -> dict[str, bytes]:
    """``{relative path: bytes}`` of every ``*.csv`` and ``results.json`` under ``folder``."""
    files = [*folder.rglob("*.csv"), *folder.rglob("results.json")]
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(files)}


def compare(before: Path, after: Path) -> list[str]:
    """One line per difference (missing on a side, or different bytes); empty when identical."""
    a, b = tables_of(before), tables_of(after)
    lines = [f"only in {before}: {k}" for k in sorted(set(a) - set(b))]
    lines += [f"only in {after}: {k}" for k in sorted(set(b) - set(a))]
    lines += [f"differs: {k}" for k in sorted(set(a) & set(b)) if a[k] != b[k]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            print(f"compare_tables: {folder} is not a folder", file=sys.stderr)
            return 2
    diff = compare(args.before, args.after)
    n = len(set(tables_of(args.before)) | set(tables_of(args.after)))
    for line in diff:
        print(line)
    print(f"{n} tables compared: {n - sum(x.startswith('differs') for x in diff) - sum(x.startswith('only') for x in diff)} "
          f"identical, {sum(x.startswith('differs') for x in diff)} differ, {sum(x.startswith('only') for x in diff)} missing")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
