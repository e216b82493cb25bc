"""CPU seconds of the heaviest notebooks' builder calls, for one or two checkouts side by side
(issue 15: the compute inside the notebooks, without kernel start, imports or reading).

    .venv/bin/python benchmarks/notebook_compute.py [--base /path/to/other/checkout] [--only NAME ...] [--routes]

Each builder runs in a fresh process with a cold artifact cache (a new ``PROBEGUARD_CACHE_DIR``),
one thread per numerical library (as in the book's kernels), the release loaded and the heavy
libraries imported before the clock starts, and the notebook's default parameters on
``data/simulated-v1``.  Each prints its CPU seconds and a hash of every table it returns; with
``--base`` the same builder runs from that checkout right after this one's (``PYTHONPATH``), and
the script prints the ratio and whether the hashes agree (they must: speed, not numbers).

``--routes`` times, in this process and side by side, the simulator's inner routes before and after
issue 15's second pass (the scalar draws of numpy's Generator against ``simulate.draws``; numpy's
weighted ``choice`` against ``draws.weighted_sample``; the what-if calibrations each with cold
panels against calibrations sharing them; a drift stream on numpy's draws against ``Draws``), with
whether their outputs are equal.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RELEASE = "data/simulated-v1"


def _hash(*parts: Any) -> str:
    import pandas as pd

    h = hashlib.sha256()
    for p in parts:
        h.update(p.to_csv().encode() if isinstance(p, pd.DataFrame) else json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def _builders(rel: Any) -> dict[str, Callable[[], str]]:
    """Notebook name -> its builder call with the notebook's defaults, returning a hash of the outputs."""
    import pandas as pd

    from probeguard_core import alpha_explorer, tables

    def whatif() -> str:
        w = tables.whatif(rel, alpha=0.15, error_rates=[0.05, 0.10, 0.15, 0.25], cal_sizes=[50, 100, 200, 400, 800, 1600],
                          n_population=600, n_splits=50, n_draws=50, seed=42)
        return _hash(w.coverage, w.observed)

    def drift() -> str:
        d = tables.drift_demo(rel, dataset="medqa", backbone="Qwen/Qwen3-8B", alpha=0.10, shift=0.30, change_at=200,
                       length=1200, window=600, seed=42)
        return _hash(d.summary(), d.recalibration(), d.headline())

    def fig4() -> str:
        r = tables.figure4(rel, alphas=[0.05, 0.10, 0.15, 0.20], alpha=0.15, n_splits=50, seed=42)
        return _hash(*[r.tables[k] for k in sorted(r.tables)], alpha_explorer.precompute(r.main, n_splits=50, seed=42))

    def difficulty() -> str:
        bb = tables.pick_backbone(rel, None)
        cells = [rel.cell(d, bb) for d in tables.pick_datasets(rel, None, bb, design=["medqa", "mmlu_pro_med", "medmcqa"])]
        corr = pd.concat([tables.difficulty_correlations(c, n_folds=5, seed=42) for c in cells], ignore_index=True)
        pilot, _, shift = tables.pilot_page(cells)
        return _hash(corr, pilot, shift)

    return {
        "whatif_simulator": whatif,
        "deploying_drift": drift,
        "table7_ablation": lambda: _hash(tables.table7(rel, n_folds=5, seed=42).table7),
        "certification_fig4": fig4,
        "difficulty_pilot": difficulty,
        "table5_fig5_all_signals": lambda: _hash(tables.table5(rel, seed=42).table5),
        "table2_3_discrimination": lambda: (lambda r: _hash(r.table2, r.table3))(tables.tables_2_3(rel, seed=42)),
        "theorem1_audit": lambda: _hash(tables.theorem1_audit(rel, [0.05, 0.10, 0.15, 0.20], n_draws=2000, n_cal=1000,
                                                              base_error=0.03, slope=0.30, delta=0.05, seed=42)[0]),
    }


NAMES = ("whatif_simulator", "deploying_drift", "table7_ablation", "certification_fig4", "difficulty_pilot",
         "table5_fig5_all_signals", "table2_3_discrimination", "theorem1_audit")


def _child(name: str) -> None:
    """Run one builder in this process and print ``{"cpu_s", "hash"}`` as JSON."""
    import scipy.stats  # noqa: F401  - imports are not compute
    import sklearn.ensemble  # noqa: F401
    import sklearn.linear_model  # noqa: F401

    from probeguard_core.release import load_release

    rel = load_release(ROOT / RELEASE)
    for c in rel.cells:  # reading is not compute
        c.logs, c.probe, c.nli
    fn = _builders(rel)[name]
    t0 = time.process_time()
    digest = fn()
    print(json.dumps({"cpu_s": time.process_time() - t0, "hash": digest}))


def _run(name: str, checkout: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(checkout), PROBEGUARD_CACHE_DIR=tempfile.mkdtemp(prefix="pg-bench-"),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", name], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _routes() -> bool:
    """Before/after CPU seconds of the simulator's inner routes (one process, same inputs); True when all agree."""
    import numpy as np
    import yaml

    from probeguard_core.simulate import bank as B
    from probeguard_core.simulate import calibration as CA
    from probeguard_core.simulate import draws as DR
    from probeguard_core.simulate import drift as D
    from probeguard_core.simulate import dynamics as DY
    from probeguard_core.simulate import model as M
    from probeguard_core.simulate import params as P
    from probeguard_core.simulate import text as TX

    class NumpyDraws(DR.Draws):
        """The reference: every draw through numpy's own Generator call."""

        __slots__ = ("_rng",)

        def __init__(self, rng: np.random.Generator):
            self._rng = rng

        def below(self, high: int) -> int:
            return int(self._rng.integers(high))

        def between(self, low: int, high: int) -> int:
            return int(self._rng.integers(low, high))

        def uniform(self) -> float:
            return float(self._rng.random())

        def sample(self, n: int, size: int) -> list[int]:
            return self._rng.choice(n, size=size, replace=False).tolist()

    def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
        t0 = time.process_time()
        out = fn()
        return time.process_time() - t0, out

    def rationales(make: Callable[[np.random.Generator], Any]) -> list[str]:
        rng = np.random.default_rng(42)
        return [TX.rationale(make(rng), letter="B", dx="aortic stenosis", mech=(i % 30, (7 * i) % 30), knowledge=i % 2 == 0,
                             n_sentences=2 + i % 5, findings=["syncope", "a murmur", "67"], distractors=["x", "y"])
                for i in range(5000)]

    def docs(sample: Callable[[np.random.Generator, np.ndarray, int], Any]) -> list[list[int]]:
        rng = np.random.default_rng(42)
        w = 1.0 / (1.0 + np.arange(40)) ** 0.7
        return [list(sample(rng, w / w.sum(), 1 + i % 8)) for i in range(3000)]

    params = P.load_params()
    cell = "medqa/qwen3-8b"
    texts = []
    for rate in (0.05, 0.10, 0.15, 0.25):  # the what-if page's layers (simulate.whatif's edit of the cell)
        p = P.load_params()
        cp = p["cells"][cell]
        e, u = float(P.v(cp["unanimous_error"])), float(P.v(cp["first_round_unanimity"]))
        cp["unanimous_error"] = {"value": rate, "assumed": "benchmark"}
        cp["overall_accuracy"] = {"value": float(P.v(cp["overall_accuracy"])) + u * (e - rate), "assumed": "benchmark"}
        texts.append(yaml.safe_dump(p, sort_keys=True))

    def calibrations(share: bool) -> list[Any]:
        out = []
        for caches in (CA._panels, CA._round1_table, CA._calibrate_cached, CA._flip_given_cached):
            caches.cache_clear()
        for text in texts:
            if not share:
                CA._panels.cache_clear()
                CA._round1_table.cache_clear()
            out.append(CA._calibrate_cached(cell, text))
        return out

    def stream(numpy_draws: bool) -> str:
        numpy_route = {"Draws": NumpyDraws,
                       "weighted_sample": lambda r, p, k: r.choice(len(p), size=k, replace=False, p=p).tolist()}
        saved = [(mod, name, getattr(mod, name)) for mod in (B, DY, M) for name in numpy_route if hasattr(mod, name)]
        if numpy_draws:  # the simulator's scalar and weighted draws through numpy's own calls
            for mod, name, _ in saved:
                setattr(mod, name, numpy_route[name])
        try:
            bs = D.drift_stream(300, D.DriftSchedule(shift=0.3, change_at=100), seed=43)
        finally:
            for mod, name, fn in saved:
                setattr(mod, name, fn)
        return _hash([r.model_dump(mode="json") for b in bs for r in (*b.logs, *b.probe, *b.nli)])

    CA.calibrate_cell(cell, D.drifted_params(cell, 0.3, params))  # calibrations outside the stream's clock
    routes = [
        ("5000 rationales: numpy draws / Draws", lambda: rationales(NumpyDraws), lambda: rationales(DR.Draws)),
        ("3000 weighted doc samples: choice(p) / weighted_sample",
         lambda: docs(lambda r, p, k: r.choice(len(p), size=k, replace=False, p=p).tolist()), lambda: docs(DR.weighted_sample)),
        ("4 what-if calibrations: cold panels / shared", lambda: calibrations(False), lambda: calibrations(True)),
        ("300-question drift stream: numpy draws / Draws", lambda: stream(True), lambda: stream(False)),
    ]
    print(f"{'route':58s} {'before':>7s} {'after':>7s} {'ratio':>6s}  outputs")
    same = True
    for name, before, after in routes:
        (tb, ob), (ta, oa) = timed(before), timed(after)
        same &= ob == oa
        print(f"{name:58s} {tb:7.2f} {ta:7.2f} {tb / ta:6.2f}  {'equal' if ob == oa else 'DIFFER'}", flush=True)
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="another checkout to time side by side (its repository root)")
    ap.add_argument("--only", nargs="+", choices=NAMES, help="these notebooks only")
    ap.add_argument("--routes", action="store_true", help="the simulator's inner routes before/after, in this process")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child)
        return 0
    if a.routes:
        os.environ.setdefault("PROBEGUARD_CACHE_DIR", tempfile.mkdtemp(prefix="pg-bench-"))
        return 0 if _routes() else 1
    names = a.only or list(NAMES)
    print(f"builder CPU seconds, cold artifact cache, one thread (load average {os.getloadavg()[0]:.1f})")
    print(f"{'notebook':26s} {'this':>7s}" + (f" {'base':>7s} {'base/this':>9s}  hashes" if a.base else ""))
    tot = [0.0, 0.0]
    same = True
    for name in names:
        mine = _run(name, ROOT)
        tot[0] += mine["cpu_s"]
        line = f"{name:26s} {mine['cpu_s']:7.2f}"
        if a.base:
            base = _run(name, a.base.resolve())
            tot[1] += base["cpu_s"]
            same &= base["hash"] == mine["hash"]
            line += f" {base['cpu_s']:7.2f} {base['cpu_s'] / mine['cpu_s']:9.2f}  " + (
                "equal" if base["hash"] == mine["hash"] else "DIFFER")
        print(line, flush=True)
    print(f"{'sum':26s} {tot[0]:7.2f}" + (f" {tot[1]:7.2f} {tot[1] / tot[0]:9.2f}" if a.base else ""))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
