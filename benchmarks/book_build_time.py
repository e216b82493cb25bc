"""Cold build time of the book, per notebook and in total (issue 4: aim <= 3 min on 2 cores).

    .venv/bin/python benchmarks/book_build_time.py [--release data/simulated-v1] [--jobs 2]

Removes ``book/_generated`` and ``_build`` first (a cold build), runs every registered
notebook with papermill in parallel, then ``jupyter-book build``; prints each notebook's wall
time (slowest first), the notebook phase, the HTML phase and the total.
"""

from __future__ import annotations

import argparse
import shutil
import time

from probeguard_core import book_build as bb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="data/simulated-v1")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--target-s", type=float, default=180.0)
    args = ap.parse_args()
    root = bb.repo_root()
    bb.check_registry(root)
    for d in (root / bb.GENERATED, root / "_build"):
        shutil.rmtree(d, ignore_errors=True)
    release = bb.resolve(args.release)
    t0 = time.perf_counter()
    results = bb.run_notebooks(release, jobs=args.jobs, root=root)
    t_nb = time.perf_counter() - t0
    failed = [r for r in results if not r.ok]
    if failed:
        for r in failed:
            print(f"FAILED {r.name}: {r.error}")
        return 1
    t1 = time.perf_counter()
    bb.build_book(release, root=root)
    t_html = time.perf_counter() - t1
    total = time.perf_counter() - t0
    print(f"\ncold build of {len(results)} notebooks from {release} with --jobs {args.jobs}")
    print(f"{'notebook':<28s} {'wall s':>8s}")
    for r in sorted(results, key=lambda r: -r.wall_s):
        print(f"{r.name:<28s} {r.wall_s:8.1f}")
    print(f"{'sum of notebook times':<28s} {sum(r.wall_s for r in results):8.1f}")
    print(f"{'notebook phase (parallel)':<28s} {t_nb:8.1f}")
    print(f"{'jupyter-book build':<28s} {t_html:8.1f}")
    print(f"{'total':<28s} {total:8.1f}  (target {args.target_s:.0f} s: {'met' if total <= args.target_s else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
