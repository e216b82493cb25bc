"""``probeguard claims RELEASE --out DIR``: which of the paper's claims hold on a release
(issue 22): ``claims.csv`` and ``claims.json`` (:mod:`probeguard_core.ledger`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from probeguard_core.cli import refuse_overwriting_inputs
    from probeguard_core.fileio import write_files_atomically
    from probeguard_core.ledger.evaluate import evaluate_release
    from probeguard_core.ledger.report import ledger_files, scorecard, scorecard_sentence
    from probeguard_core.release import load_release

    release, out = Path(args.release), Path(args.out)
    if not release.is_dir():
        raise ValueError(f"{release}: not a release folder (expected a folder with manifest.json)")
    refuse_overwriting_inputs([release], [out], folders=[release])
    rel = load_release(release, verify=True)
    table = evaluate_release(rel)
    write_files_atomically(ledger_files(table, rel.name, out))
    print(f"{out / 'claims.csv'}: {len(table)} rows; {scorecard_sentence(scorecard(table))}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("claims", help="evaluate the paper's claims on a release folder: claims.csv, claims.json")
    p.add_argument("release", help="release folder (manifest.json and its cells)")
    p.add_argument("--out", required=True, help="output folder (not inside the release)")
    p.set_defaults(handler=_run)
