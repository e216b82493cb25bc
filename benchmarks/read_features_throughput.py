"""Reading + features on a real release cell with NLI, against the parse floor (issue 15).

One run, side by side, on one cell of a release (default: MedXpertQA / Qwen3-8B of
``data/simulated-v1``, 2,450 questions, 4,175 NLI records):

* ``floor``: gunzip + ``orjson.loads`` of every line of the cell's logs and NLI files (no
  validation, no objects, no features): the speed of parsing alone.
* ``cold``: what a first read costs: ``read_logs`` + ``read_nli`` (strict: every field
  validated, duplicate keys refused, the NLI records checked against the logs) +
  ``feature_table`` (Appendix B, RSE per NLI record included).
* ``cold, stdlib JSON``: the same with the orjson fast path switched off (the reader as it
  was: ``json.loads`` with the duplicate-key hook and a recursive scan of every value).
* ``warm``: ``Cell.features()`` when the artifact cache holds the table: both files are
  hashed (sha256), the key checked, and the columnar entry loaded.  This is what every read
  after the first costs (each notebook, each re-run).

The script checks that the cold and warm tables are identical (CSV bytes) and prints the
ratios to the floor.  Medians of ``--repeats`` runs; the cache lives in a temporary folder.

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

from _timing import timed  # noqa: E402 (after the sys.path set-up)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default=str(ROOT / "data" / "simulated-v1"))
    ap.add_argument("--dataset", default="medxpertqa")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ["PROBEGUARD_CACHE_DIR"] = tempfile.mkdtemp(prefix="probeguard-bench-cache-")
    os.environ.pop("PROBEGUARD_CACHE", None)

    import orjson

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
        logs = L.read_logs(logs_p)
        return F.feature_table(logs, L.read_nli(nli_p, logs=logs))

    def cold_stdlib() -> Any:
        saved, L._orjson = L._orjson, None
        try:
            return cold()
        finally:
            L._orjson = saved

    def warm() -> Any:
        return load_release(args.release, verify=False).cell(args.dataset).features()

    n_q = len(L.read_logs(logs_p))
    t_floor, _ = timed(floor, args.repeats)
    t_cold, x_cold = timed(cold, args.repeats)
    t_std, x_std = timed(cold_stdlib, args.repeats)
    cell.features()  # fill the cache (not timed)
    t_warm, x_warm = timed(warm, args.repeats)
    same = x_cold.to_csv().encode() == x_warm.to_csv().encode() == x_std.to_csv().encode()
    print(f"cell: {cell.label}, {n_q} questions, files {logs_p.name} + {nli_p.name}; medians of {args.repeats}")
    print(f"{'route':<44}{'time':>10}{'questions/s':>14}{'vs floor':>10}")
    for name, t in [("floor: gunzip + orjson (parse only)", t_floor),
                    ("cold: strict read + feature_table", t_cold),
                    ("cold, stdlib JSON path (the reader before)", t_std),
                    ("warm: Cell.features() from the cache", t_warm)]:
        print(f"{name:<44}{t * 1e3:>8.0f} ms{n_q / t:>14,.0f}{t / t_floor:>9.2f}x")
    print(f"tables identical (CSV bytes) across cold, stdlib and warm: {same}")
    print(f"RATIO warm/floor = {t_warm / t_floor:.2f} (acceptance: <= 1.5); cold/floor = {t_cold / t_floor:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
