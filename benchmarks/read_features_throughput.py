"""Reading + features on a real release cell with NLI, against the parse floor (issue 15).

One run, side by side, on one cell of a release (default: MedXpertQA / Qwen3-8B of
``data/simulated-v1``, 2,450 questions, 4,175 NLI records):

* ``floor``: gunzip + ``orjson.loads`` of every line of the cell's logs and NLI files (no
  validation, no objects, no features): the speed of parsing alone.
* ``cold``: what a first read costs: ``Cell.features()`` with the artifact cache off, i.e.
  the strict read of the logs and NLI files (every field validated, duplicate keys refused,
  the NLI records checked against the logs; :mod:`probeguard_core.fastread` when it accepts
  the files, which it does for files ``write_jsonl`` wrote) + ``feature_table`` (Appendix B,
  RSE per NLI record included), hashing the files for the cache key included.
* ``pydantic objects``: ``read_logs`` + ``read_nli`` + ``feature_table``, the route that
  builds the pydantic records (what ``Cell.logs`` / ``Cell.nli`` return).
* ``stdlib JSON``: the same with the orjson fast path switched off (the reader as it
  was: ``json.loads`` with the duplicate-key hook and a recursive scan of every value).
* ``warm``: ``Cell.features()`` when the artifact cache holds the table: both files are
  hashed (sha256), the key checked, and the columnar entry loaded.  This is what every read
  after the first costs (each notebook, each re-run).

The script checks that all four tables are identical (CSV bytes) and prints the
ratios to the floor.  Medians of ``--repeats`` runs, the cold routes taking turns within each
repeat (so they share the machine's load); the cache lives in a temporary folder.

    .venv/bin/python benchmarks/read_features_throughput.py [--release data/simulated-v1]
        [--dataset medxpertqa] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import timed, timed_side_by_side  # noqa: E402 (after the sys.path set-up)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default=str(ROOT / "data" / "simulated-v1"))
    ap.add_argument("--dataset", default="medxpertqa")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ["PROBEGUARD_CACHE_DIR"] = tempfile.mkdtemp(prefix="probeguard-bench-cache-")
    os.environ.pop("PROBEGUARD_CACHE", None)

    import orjson

    from probeguard_core import fastread
    from probeguard_core import features as F
    from probeguard_core import logs as L
    from probeguard_core.release import load_release

    cell = load_release(args.release, verify=False).cell(args.dataset)
    logs_p, nli_p = cell.file("logs"), cell.file("nli")
    if nli_p is None:
        raise SystemExit(f"{cell.label} has no NLI file; pick a cell with NLI")

    def floor() -> int:
        n = 0
        for p in (logs_p, nli_p):
            with gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb") as fh:
                n += len([orjson.loads(line) for line in fh])
        return n

    def cold() -> Any:
        os.environ["PROBEGUARD_CACHE"] = "0"
        try:
            return load_release(args.release, verify=False).cell(args.dataset).features()
        finally:
            os.environ.pop("PROBEGUARD_CACHE", None)

    def pydantic_objects() -> Any:
        logs = L.read_logs(logs_p)
        return F.feature_table(logs, L.read_nli(nli_p, logs=logs))

    def cold_stdlib() -> Any:
        saved, L._orjson = L._orjson, None
        try:
            return pydantic_objects()
        finally:
            L._orjson = saved

    def warm() -> Any:
        return load_release(args.release, verify=False).cell(args.dataset).features()

    n_q = len(L.read_logs(logs_p))
    accepted = fastread.read_cell(logs_p, nli_p) is not None
    cold()  # warm the imports and the page cache of both files (not timed)
    r = timed_side_by_side({"floor": floor, "cold": cold, "obj": pydantic_objects, "std": cold_stdlib}, args.repeats)
    (t_floor, _), (t_cold, x_cold), (t_obj, x_obj), (t_std, x_std) = r["floor"], r["cold"], r["obj"], r["std"]
    cell.features()  # fill the cache (not timed)
    t_warm, x_warm = timed(warm, args.repeats)
    tables = [x.to_csv().encode() for x in (x_cold, x_obj, x_std, x_warm)]
    same = all(t == tables[0] for t in tables)
    print(f"cell: {cell.label}, {n_q} questions, files {logs_p.name} + {nli_p.name}; medians of {args.repeats}")
    print(f"fast strict read (probeguard_core.fastread) accepts these files: {accepted}")
    print(f"{'route':<52}{'time':>10}{'questions/s':>14}{'vs floor':>10}")
    for name, t in [("floor: gunzip + orjson (parse only)", t_floor),
                    ("cold: Cell.features(), cache off (first read)", t_cold),
                    ("pydantic objects: read_logs/read_nli + features", t_obj),
                    ("same, stdlib JSON path (the reader before)", t_std),
                    ("warm: Cell.features() from the cache", t_warm)]:
        print(f"{name:<52}{t * 1e3:>8.0f} ms{n_q / t:>14,.0f}{t / t_floor:>9.2f}x")
    print(f"tables identical (CSV bytes) across cold, pydantic objects, stdlib and warm: {same}")
    print(f"RATIO cold/floor = {t_cold / t_floor:.2f} (acceptance: <= 1.5); warm/floor = {t_warm / t_floor:.2f}; "
          f"pydantic objects/floor = {t_obj / t_floor:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
