"""The one timing helper of the benchmarks: the median wall time of repeated calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """``(median seconds over repeats, last result)`` of calling ``fn`` ``repeats`` times (at least once)."""
    times, out = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def timed_side_by_side(fns: dict[str, Callable[[], Any]], repeats: int,
                       stat: Callable[[list[float]], float] = statistics.median) -> dict[str, tuple[float, Any]]:
    """``{name: (median seconds, last result)}``, the routes run in turn within each repeat
    (``stat=min``: the best time of each route instead of the median).

    Interleaving puts every route under the same load (the shared machine's load drifts
    within a run, which otherwise lands on whichever route ran during a busy stretch).
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    out: dict[str, Any] = {}
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (stat(v), out[k]) for k, v in times.items()}
