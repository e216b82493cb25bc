"""Streams of newly labelled questions whose case mix drifts (§5.3: recalibrate when it drifts).

A deployed system keeps answering; clinicians label what it answered.  :func:`drift_stream`
draws such a stream from the same generative model as the simulated release
(:mod:`probeguard_core.simulate.model`), in batches, with the **base error rate of the unanimous
layer** (``unanimous_error``, the share of wrong unanimous first rounds) raised by ``shift``
from question ``change_at`` on -- as a step, or as a ramp over ``ramp`` questions in ``levels``
steps.  The contested part's accuracy is kept as in the cell (the cell's overall accuracy moves
with the layer, as :mod:`probeguard_core.simulate.whatif` does).  The state mixture, evidence
strength and probe collapse rates are re-solved by :func:`calibration.calibrate_cell` for each level,
so every metric downstream (the monitor's risk among answered questions, coverage) emerges from
raw simulated logs; none is set.

Question ``i`` of stream ``seed`` depends only on (cell, seed, i) and the base error at ``i``;
qids are ``<dataset>-stream<seed>-<i>``, unique across the stream.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from probeguard_core import SEED
from probeguard_core import logs as L
from probeguard_core.simulate import bank as B
from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import model as M
from probeguard_core.simulate import params as P

__all__ = ["Batch", "DriftSchedule", "base_error_at", "drift_stream", "drifted_params"]


@dataclass(frozen=True)
class DriftSchedule:
    """Base error of the unanimous layer over the stream: the cell's value, then + ``shift``.

    ``shift = 0`` is a stream without drift.  From question ``change_at`` (0-based) the shift
    ramps linearly over ``ramp`` questions in ``levels`` equal steps (``ramp = 0``: a step).
    """

    shift: float = 0.0
    change_at: int = 0
    ramp: int = 0
    levels: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.shift < 1.0:
            raise ValueError(f"shift must be in [0, 1), got {self.shift!r}")
        if self.change_at < 0 or self.ramp < 0 or self.levels < 1:
            raise ValueError("change_at and ramp must be >= 0 and levels >= 1")

    def shift_at(self, i: int) -> float:
        """The shift applied to question ``i`` (0-based), quantized to ``levels`` steps."""
        if self.shift == 0.0 or i < self.change_at:
            return 0.0
        if self.ramp == 0:
            return self.shift
        frac = min(1.0, (i - self.change_at + 1) / self.ramp)
        step = max(1, int(-(-frac * self.levels // 1)))  # ceil, at least the first step
        return self.shift * min(step, self.levels) / self.levels


@dataclass
class Batch:
    """One batch of newly labelled questions: logs, counter-evidence probe and NLI records."""

    index: int
    logs: list[L.QuestionLog]
    probe: list[L.ProbeRecord]
    nli: list[L.NLIRecord]
    base_error: list[float]  # the unanimous layer's base error each question was drawn at


def drifted_params(cell: str, shift: float, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """``params`` with the cell's unanimous-layer base error raised by ``shift``.

    The contested part keeps its accuracy: overall accuracy drops by ``unanimity * shift``.
    """
    params = copy.deepcopy(params if params is not None else P.load_params())
    cp = params["cells"][cell]
    e = float(P.v(cp["unanimous_error"]))
    if shift == 0.0:
        return params
    if not 0.0 <= e + shift < 1.0:
        raise ValueError(f"{cell}: base error {e} + shift {shift} is outside [0, 1)")
    u = float(P.v(cp["first_round_unanimity"]))
    cp["unanimous_error"] = {"value": e + shift, "assumed": f"drift stream: {e} + {shift}"}
    cp["overall_accuracy"] = {"value": float(P.v(cp["overall_accuracy"])) - u * shift,
                              "assumed": f"drift stream: contested accuracy kept, layer error + {shift}"}
    return params


def base_error_at(cell: str, schedule: DriftSchedule, i: int) -> float:
    """The unanimous layer's base error at question ``i`` of a stream (the simulator's input)."""
    return float(P.v(P.load_params()["cells"][cell]["unanimous_error"])) + schedule.shift_at(i)


def drift_stream(
    n: int,
    schedule: DriftSchedule | None = None,
    *,
    batch_size: int = 100,
    seed: int = SEED,
    cell: str = "medqa/qwen3-8b",
) -> list[Batch]:
    """``n`` simulated questions of ``cell`` in batches of ``batch_size``, drifting per ``schedule``.

    Each question carries its gold label (the clinician's), its counter-evidence probe record
    when the first round is unanimous, and its NLI records (DESIGN 2.1, 2.2, 2.4).
    """
    if not (isinstance(n, int) and n >= 1 and isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"n and batch_size must be positive integers, got {n!r}, {batch_size!r}")
    schedule = schedule or DriftSchedule()
    _, dataset, backbone, _ = P.cell_spec(cell)
    base = P.load_params()
    by_shift: dict[float, tuple[dict[str, Any], CA.Calibration]] = {}
    batches: list[Batch] = []
    e0 = float(P.v(base["cells"][cell]["unanimous_error"]))
    for start in range(0, n, batch_size):
        logs, probe, nli, errs = [], [], [], []
        for i in range(start, min(n, start + batch_size)):
            s = schedule.shift_at(i)
            if s not in by_shift:
                p = drifted_params(cell, s, base)
                by_shift[s] = (p, CA.calibrate_cell(cell, p))
            params, cal = by_shift[s]
            q = B.make_question(dataset, i, params, labelled=False, pool=f"-stream{seed}")
            sim = M.simulate_question(q, cell, params, cal, rng=P.rng_for("drift", seed, cell, i),
                                      with_self_report=False, dataset=dataset, backbone=backbone,
                                      arms=("counter_evidence",))
            logs.append(L.QuestionLog.model_validate(sim.log))
            probe.extend(L.ProbeRecord.model_validate(r) for r in sim.probe)
            nli.extend(L.NLIRecord.model_validate(r) for r in sim.nli)
            errs.append(e0 + s)
        batches.append(Batch(len(batches), logs, probe, nli, errs))
    return batches
