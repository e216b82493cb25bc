"""Reading + features on a release cell with NLI, through the public functions, against the
parse floor (issues 15 and 24).

One run, side by side, on one cell of a release (default: MedXpertQA / Qwen3-8B of
``data/simulated-v1``, 2,450 questions, 4,175 NLI records):

* ``floor``: gunzip + ``orjson.loads`` of every line of the cell's logs and NLI files (no
  validation, no objects, no features): the speed of parsing alone, as issues 15 and 24 measured
  it.  ``floor, collector paused`` is the same loop with the cyclic garbage collector paused, as
  the readers pause it while they build records: a stricter floor, also printed.
* ``public``: what ``probeguard certify`` / ``apply`` / ``monitor``, the public API and the book
  run: ``logs.read_logs`` + ``logs.read_nli(..., logs=...)`` (every field and rule checked,
  duplicate keys and NaN refused, the NLI records checked against the logs) +
  ``features.feature_table`` (Appendix B, RSE per NLI record included).  Files that
  ``write_jsonl`` wrote are read by the fast path (the derived msgspec structs, every rule
  checked, then built into the models without re-validation).
* ``pydantic``: the same, every line validated by the pydantic models (the path the readers take
  when the fast read declines: an error to name, extra fields, another spelling).
* ``cold``: ``Cell.features()`` with the artifact cache off (the public route plus hashing the
  files for the cache key).
* ``warm``: ``Cell.features()`` when the artifact cache holds the table (both files hashed, the
  key checked, the columnar entry loaded): every read after the first.

The routes take turns within each repeat (so they share the machine's load); each route's best
time of ``--repeats`` counts.  The script checks that all tables are identical (CSV bytes) and
prints, as its last line, the ratio of the public route to the floor (acceptance: <= 1.5).

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

    def floor_paused() -> int:
        with L.gc_paused():
            return floor()

    def public() -> Any:
        logs = L.read_logs(logs_p)
        return F.feature_table(logs, L.read_nli(nli_p, logs=logs))

    def pydantic() -> Any:
        logs: list[Any] = []
        nli: list[Any] = []
        with L.gc_paused():
            L._read_into(logs, {}, L.QuestionLog, logs_p, ("qid",))
            L._read_into(nli, {}, L.NLIRecord, nli_p, ("qid", "round"))
        L.check_nli_against_logs(nli, logs, nli_p)
        return F.feature_table(logs, nli)

    def cold() -> Any:
        os.environ["PROBEGUARD_CACHE"] = "0"
        try:
            return load_release(args.release, verify=False).cell(args.dataset).features()
        finally:
            os.environ.pop("PROBEGUARD_CACHE", None)

    def warm() -> Any:
        return load_release(args.release, verify=False).cell(args.dataset).features()

    logs = L.read_logs(logs_p)
    fast = (L._read_fast(L.QuestionLog, logs_p, ("qid",)) is not None
            and L._read_fast(L.NLIRecord, nli_p, ("qid", "round")) is not None)
    n_q = len(logs)
    del logs  # nothing of a route stays alive while others run (a live cell slows every collection)
    public()  # warm the imports and the page cache of both files (not timed)
    routes = {"floor": floor, "floor_paused": floor_paused, "public": public, "pydantic": pydantic, "cold": cold}
    r = timed_side_by_side(routes, args.repeats, stat=min)
    (t_floor, _), (t_paused, _) = r["floor"], r["floor_paused"]
    (t_pub, x_pub), (t_pyd, x_pyd), (t_cold, x_cold) = r["public"], r["pydantic"], r["cold"]
    cell.features()  # fill the cache (not timed)
    t_warm, x_warm = timed(warm, args.repeats)
    tables = [x.to_csv().encode() for x in (x_pub, x_pyd, x_cold, x_warm)]
    same = all(t == tables[0] for t in tables)
    print(f"cell: {cell.label}, {n_q} questions, files {logs_p.name} + {nli_p.name}; best of {args.repeats}, interleaved")
    print(f"the readers' fast path (derived msgspec structs, built into the models) accepts these files: {fast}")
    print(f"{'route':<60}{'time':>10}{'questions/s':>14}{'vs floor':>10}")
    for name, t in [("floor: gunzip + orjson (parse only)", t_floor),
                    ("floor, collector paused", t_paused),
                    ("public: read_logs + read_nli + feature_table", t_pub),
                    ("pydantic path: every line validated by the models", t_pyd),
                    ("cold: Cell.features(), cache off (+ sha256 of the files)", t_cold),
                    ("warm: Cell.features() from the cache", t_warm)]:
        print(f"{name:<60}{t * 1e3:>8.0f} ms{n_q / t:>14,.0f}{t / t_floor:>9.2f}x")
    print(f"tables identical (CSV bytes) across public, pydantic, cold and warm: {same}")
    print(f"public / floor with the collector paused = {t_pub / t_paused:.2f} (the stricter floor)")
    print(f"RATIO public (read_logs + read_nli + feature_table) / floor (gunzip + JSON parse) = {t_pub / t_floor:.2f} "
          "(acceptance: <= 1.5)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
