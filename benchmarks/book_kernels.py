"""Warm forked kernels against fresh kernels, side by side (issue 15).

    .venv/bin/python benchmarks/book_kernels.py [--release data/simulated-v1] [--repeats 3]
        [--notebooks appendix_a_prompts table8_specialty]

Runs each notebook with ``probeguard_core.book.build.execute_notebook`` (what ``make book``
runs) ``--repeats`` times with forked kernels (``probeguard_core.book.kernels``) and with
fresh ones (``PROBEGUARD_FORK_KERNELS=0``), taking turns so both share the machine's load,
one notebook at a time. The zygote's own start (once per build process) is timed apart.
Prints the median wall time per notebook and route, the ratio, and checks that both routes
wrote the same tables (CSV bytes) and the same cell outputs.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import nbformat

from probeguard_core.book import build as bb
from probeguard_core.book import kernels


def _outputs(path: Path, route: str) -> list[str]:
    """The cells' outputs, with the route's own output folder and object addresses masked."""
    nb = nbformat.read(path, as_version=4)
    text = [repr(c.get("outputs")) for c in nb.cells if c.cell_type == "code"]
    return [re.sub(r"0x[0-9a-f]+", "0x", t.replace(f"/{route}/", "/ROUTE/")) for t in text]


def _tables(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.csv"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="data/simulated-v1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--notebooks", nargs="*", default=["appendix_a_prompts", "table8_specialty", "fig2_dynamics"])
    args = ap.parse_args()
    root = bb.repo_root()
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    release = bb.repo_relative(bb.resolve(args.release), root)
    scratch = Path(tempfile.mkdtemp(prefix="probeguard-kernels-bench-"))
    os.environ["PROBEGUARD_CACHE_DIR"] = str(scratch / "cache")  # both routes share one warm cache

    def run(name: str, route: str, i: int) -> float:
        os.environ["PROBEGUARD_FORK_KERNELS"] = "1" if route == "forked" else "0"
        out = scratch / route / str(i)
        params = {"release": release, "output_dir": str(out / name)}
        t = time.perf_counter()
        res = bb.execute_notebook(root / "notebooks" / f"{name}.md", out / f"{name}.ipynb", params, cwd=root)
        wall = time.perf_counter() - t
        if not res.ok:
            raise SystemExit(f"{name} ({route}) failed: {res.error}")
        return wall

    # the zygote's start (imports once per build process), and a warm-up of the artifact cache
    t = time.perf_counter()
    run(args.notebooks[0], "forked", -1)
    first = time.perf_counter() - t
    for name in args.notebooks[1:]:
        run(name, "fresh", -1)
    times: dict[tuple[str, str], list[float]] = {}
    for i in range(args.repeats):
        for name in args.notebooks:
            for route in (("forked", "fresh") if i % 2 == 0 else ("fresh", "forked")):
                times.setdefault((name, route), []).append(run(name, route, i))
    print(f"{'notebook':<24s} {'forked s':>9s} {'fresh s':>9s} {'ratio':>7s}  same outputs")
    tot = {"forked": 0.0, "fresh": 0.0}
    for name in args.notebooks:
        f, g = (statistics.median(times[(name, r)]) for r in ("forked", "fresh"))
        tot["forked"] += f
        tot["fresh"] += g
        a, b = scratch / "forked" / "0", scratch / "fresh" / "0"
        same = _tables(a / name) == _tables(b / name) and _outputs(a / f"{name}.ipynb", "forked") == _outputs(b / f"{name}.ipynb", "fresh")
        print(f"{name:<24s} {f:9.2f} {g:9.2f} {g / f:6.2f}x  {'yes' if same else 'NO'}")
    print(f"{'sum':<24s} {tot['forked']:9.2f} {tot['fresh']:9.2f} {tot['fresh'] / tot['forked']:6.2f}x")
    print(f"first forked notebook, zygote start included: {first:.2f} s (once per build process)")
    kernels._close_current()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
