"""False-alarm rate and detection delay of ``probeguard monitor`` on simulated streams (issue 12 §2).

Calibrate on the shipped MedQA / Qwen3-8B cell (alpha = 0.10), then monitor independent streams
drawn from the release's simulator (:mod:`probeguard_core.simulate.drift`): ``--streams``
streams without drift (false alarms; the rate must be at most the nominal level, shown with its
exact one-sided 95% binomial upper bound) and ``--drift-streams`` streams whose unanimous-layer
base error rises by ``--shift`` at question ``--change-at`` (detection delay).  Also a pure check
of the e-process on i.i.d. Bernoulli(alpha) errors (the boundary of H0), which needs no simulator.
Prints everything and writes ``benchmarks/results/monitor_drift.json``.

    flock /tmp/heavy.lock python benchmarks/monitor_drift.py            # 500 + 10 streams
    python benchmarks/monitor_drift.py --streams 20 --drift-streams 2   # a quick look
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probeguard_core import deploy  # noqa: E402 (after the sys.path set-up)
from probeguard_core.deploy import monitor  # noqa: E402

CELL = ROOT / "data" / "simulated-v1" / "medqa" / "qwen3-8b"


def bernoulli_boundary(alpha: float, level: float, n_streams: int, length: int, seed: int) -> dict:
    """False alarms of the e-process on i.i.d. Bernoulli(alpha) errors, checked after every step."""
    rng = np.random.default_rng(seed)
    e = rng.random((n_streams, length)) < alpha
    S = np.cumsum(e, axis=1)
    n = np.arange(1, length + 1)
    hit = (monitor.log_evalue(S, n[None, :], alpha) >= np.log(1 / level)).any(axis=1)
    return {"streams": n_streams, "length": length, "alarms": int(hit.sum()), "rate": float(hit.mean()), "nominal": level}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--length", type=int, default=100, help="questions per no-drift stream")
    ap.add_argument("--drift-streams", type=int, default=10)
    ap.add_argument("--drift-length", type=int, default=1500)
    ap.add_argument("--shift", type=float, default=0.30)
    ap.add_argument("--change-at", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.10)
    ap.add_argument("--level", type=float, default=monitor.DEFAULT_LEVEL)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "monitor_drift.json"))
    a = ap.parse_args()
    t0 = time.perf_counter()
    inputs = deploy.load_inputs(CELL / "logs.jsonl.gz", CELL / "probe.jsonl.gz", CELL / "nli.jsonl.gz")
    cert = deploy.certify_logs(inputs, alpha=a.alpha)
    null = monitor.stream_experiment(cert, n_streams=a.streams, length=a.length, seed=a.seed, level=a.level)
    t1 = time.perf_counter()
    drift = monitor.stream_experiment(cert, n_streams=a.drift_streams, length=a.drift_length, shift=a.shift,
                                      change_at=a.change_at, seed=a.seed + 100_000, level=a.level)
    t2 = time.perf_counter()
    boundary = bernoulli_boundary(a.alpha, a.level, 4_000, 1_000, a.seed)
    fa, dl = null.false_alarm(), drift.delay()
    result = {
        "command": "python benchmarks/monitor_drift.py " + " ".join(sys.argv[1:]),
        "cell": "data/simulated-v1/medqa/qwen3-8b (simulated)", "alpha": a.alpha, "level": a.level, "seed": a.seed,
        "method": monitor.METHOD, "certificate_sha256": cert["content_sha256"],
        "no_drift": {**fa, "length": a.length},
        "drift": {**dl, "shift": a.shift, "change_at": a.change_at, "length": a.drift_length,
                  "delays": drift.alarms["delay"].tolist()},
        "bernoulli_at_alpha": boundary,
        "seconds": {"no_drift": round(t1 - t0, 1), "drift": round(t2 - t1, 1)}, "python": platform.python_version(),
    }
    print(f"no-drift streams: {fa['alarms']} alarms in {fa['streams']} streams of {a.length} questions: "
          f"false-alarm rate {fa['rate']:.4f} (exact one-sided 95% upper bound {fa['upper_95']:.4f}) "
          f"vs nominal {a.level:g}; ratio bound/nominal {fa['upper_95'] / a.level:.3f}")
    print(f"drift streams (base error +{a.shift:g} at question {a.change_at}): detected {dl['detected']} of "
          f"{dl['streams']}; median delay {dl['median_delay']} questions after the change "
          f"(quartiles {dl['q25']}-{dl['q75']}), median {dl['median_answered_at_alarm']} answered S1 questions at alarm")
    print(f"e-process on Bernoulli(alpha) errors, {boundary['streams']} streams x {boundary['length']} looks: "
          f"false-alarm rate {boundary['rate']:.4f} vs nominal {a.level:g}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
