"""Cold build time of the book: per notebook, split into kernel start / imports / reading /
compute, and in total (issue 15: at most 60 s of notebook time on a quiet 2-core machine).

    .venv/bin/python benchmarks/book_time.py [--release data/simulated-v1] [--jobs 2]
        [--only NAME ...] [--no-html]

Removes ``book/_generated`` and ``_build`` first (a cold build) and runs every registered
notebook with papermill in parallel, then ``jupyter-book build``.  Each kernel starts with an
IPython start-up file (in a temporary ``IPYTHONDIR``; notebooks are not changed) that times,
inside the kernel:

* ``imports``: time spent in ``import`` statements (outermost ones; lazy imports inside
  functions count here too),
* ``reading``: time spent in the release readers (``load_release`` with its sha256 checks,
  ``logs.read_records`` behind every ``read_*``), outside imports,
* ``compute``: the rest of the kernel's time up to its last cell;

``start`` is the notebook's wall time minus the kernel's own time (process start, IPython,
papermill's overhead).  The build's first tasks, the main cells' shared tables
(``book.build._warm_tasks``), run on the same workers and are listed, and summed, as one more row.
The target (issue 15: 60 s) is the notebook phase, the wall time ``make book`` spends running
notebooks on 2 cores; the sum of notebook times is printed beside it.  The artifact cache is cold (a fresh ``PROBEGUARD_CACHE_DIR``) unless
``--warm-cache`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from probeguard_core.book import build as bb

STARTUP = r'''
def _pg_install():
    # Everything lives in this closure: IPython clears the user namespace when the kernel shuts
    # down, and an import hook that looked its state up there would fail in the kernel's threads.
    import builtins, json, os, sys, time
    t0 = time.perf_counter()
    acc = {"imports": 0.0, "reading": 0.0}
    state = {"depth": 0, "reading": 0, "patched": set()}
    readers = {"probeguard_core.logs": ("read_records",), "probeguard_core.release": ("load_release",)}
    real_import = builtins.__import__

    def timed_reader(fn):
        def timed(*a, **k):
            if state["reading"] or state["depth"]:
                return fn(*a, **k)
            state["reading"] += 1
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc["reading"] += time.perf_counter() - t
                state["reading"] -= 1
        return timed

    def patch():
        for mod, names in readers.items():
            m = sys.modules.get(mod)
            if m is None or mod in state["patched"] or getattr(m.__spec__, "_initializing", False):
                continue
            if all(hasattr(m, n) for n in names):
                state["patched"].add(mod)
                for n in names:
                    setattr(m, n, timed_reader(getattr(m, n)))

    def timed_import(*a, **k):
        outer = state["depth"] == 0 and not state["reading"]
        state["depth"] += 1
        t = time.perf_counter()
        try:
            return real_import(*a, **k)
        finally:
            state["depth"] -= 1
            if outer:
                acc["imports"] += time.perf_counter() - t
            patch()

    builtins.__import__ = timed_import
    ip = get_ipython()

    def dump(*_):
        ns = ip.user_ns
        name = os.path.basename(str(ns.get("output_dir", ""))) or str(os.getpid())
        rec = dict(acc, name=name, kernel=time.perf_counter() - t0)
        with open(os.path.join(os.environ["PROBEGUARD_TIMING_DIR"], f"{os.getpid()}.json"), "w") as fh:
            json.dump(rec, fh)

    ip.events.register("post_run_cell", dump)


_pg_install()
del _pg_install
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="data/simulated-v1")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--no-html", action="store_true", help="skip the jupyter-book build")
    ap.add_argument("--warm-cache", action="store_true", help="keep the user's artifact cache")
    ap.add_argument("--target-s", type=float, default=60.0, help="target for the notebook phase (wall seconds)")
    args = ap.parse_args()
    root = bb.repo_root()
    bb.check_registry(root)
    for d in (root / bb.GENERATED, root / "_build"):
        shutil.rmtree(d, ignore_errors=True)
    release = bb.resolve(args.release)
    scratch = Path(tempfile.mkdtemp(prefix="probeguard-book-timing-"))
    startup = scratch / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-probeguard-timing.py").write_text(STARTUP, encoding="utf-8")
    (scratch / "timing").mkdir()
    os.environ |= {"IPYTHONDIR": str(scratch / "ipython"), "PROBEGUARD_TIMING_DIR": str(scratch / "timing")}
    if not args.warm_cache:
        os.environ["PROBEGUARD_CACHE_DIR"] = str(scratch / "cache")
    t0 = time.perf_counter()
    warm: list[tuple[str, float, str | None]] = []
    results = bb.run_notebooks(release, jobs=args.jobs, root=root, only=args.only, warm_report=warm)
    t_nb = time.perf_counter() - t0
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"FAILED {r.name}: {r.error}")
    if failed:
        return 1
    t_html = 0.0
    if not args.no_html:
        t1 = time.perf_counter()
        bb.build_book(release, root=root)
        t_html = time.perf_counter() - t1
    timing = {}
    for p in (scratch / "timing").glob("*.json"):
        rec = json.loads(p.read_text())
        timing[rec["name"]] = rec  # a retried notebook: the last kernel's record
    print(f"\ncold build of {len(results)} notebooks from {release} with --jobs {args.jobs}"
          f" ({'warm' if args.warm_cache else 'cold'} artifact cache)")
    print(f"{'notebook':<28s} {'wall s':>7s} {'start':>7s} {'imports':>8s} {'reading':>8s} {'compute':>8s}")
    sums = dict.fromkeys(("wall", "start", "imports", "reading", "compute"), 0.0)
    for r in sorted(results, key=lambda r: -r.wall_s):
        t = timing.get(r.name)
        if t is None:
            print(f"{r.name:<28s} {r.wall_s:7.1f}   (no timing record)")
            continue
        row = {"wall": r.wall_s, "start": max(0.0, r.wall_s - t["kernel"]), "imports": t["imports"],
               "reading": t["reading"], "compute": t["kernel"] - t["imports"] - t["reading"]}
        for k, v in row.items():
            sums[k] += v
        print(f"{r.name:<28s} {row['wall']:7.1f} {row['start']:7.1f} {row['imports']:8.1f} {row['reading']:8.1f} {row['compute']:8.1f}")
    if warm:
        w = sum(t for _, t, _ in warm)
        sums["wall"] += w  # reading each main cell once and its per-question tables (not split further)
        sums["shared tables"] = w
        print(f"{f'shared tables ({len(warm)} cells)':<28s} {w:7.1f}   (in the build's workers, before the pages)")
    print(f"{'sum':<28s} {sums['wall']:7.1f} {sums['start']:7.1f} {sums['imports']:8.1f} {sums['reading']:8.1f} {sums['compute']:8.1f}")
    if sums["wall"]:
        print("shares of notebook time: " + ", ".join(f"{k} {100 * sums[k] / sums['wall']:.0f}%"
                                                      for k in ("start", "imports", "reading", "compute",
                                                                "shared tables") if k in sums))
    print(f"{'notebook phase (parallel)':<28s} {t_nb:7.1f}")
    if not args.no_html:
        print(f"{'jupyter-book build':<28s} {t_html:7.1f}")
    print(f"notebook phase {t_nb:.1f} s on {args.jobs} jobs (target {args.target_s:.0f} s: "
          f"{'met' if t_nb <= args.target_s else 'MISSED'}); sum of notebook times {sums['wall']:.1f} s")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
