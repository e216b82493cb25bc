"""The chapter "Deploying: recalibration and drift" (§5.3; notebooks/deploying_drift.md).

:func:`drift_demo` calibrates on a release cell (all of it, as ``probeguard certify`` does),
streams newly labelled questions from the simulator twice -- once from the calibration
distribution, once with the unanimous layer's base error raised at a change point
(:mod:`probeguard_core.simulate.drift`) -- runs :func:`probeguard_core.deploy.monitor.monitor` on both
and recalibrates on the most recent window of the drifted stream.  :func:`measured_rates`
reads what ``benchmarks/monitor_drift.py`` measured over many streams (the false-alarm rate
over >= 500 streams takes minutes, too long for a page build), with the command that made it.
The notebook only calls these and shows their tables and figure.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from probeguard_core.deploy import monitor as MO
from probeguard_core.deploy.certificate import DeploymentCertificate
from probeguard_core.deploy.certify import certify_logs
from probeguard_core.release import Release, backbone_slug

__all__ = ["BENCHMARK_RESULT", "DriftDemo", "drift_demo", "measured_rates"]

BENCHMARK_RESULT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "monitor_drift.json"


@dataclass
class DriftDemo:
    """A calibration certificate, its monitor on a steady and a drifted stream, and the recalibration."""

    certificate: DeploymentCertificate
    steady: MO.MonitorResult
    drifted: MO.MonitorResult
    recalibrated: DeploymentCertificate | None
    settings: dict[str, Any]
    notes: tuple[str, ...] = ()  # what the release lacked, and what the page used instead

    def summary(self) -> pd.DataFrame:
        """One row per (stream, certified stratum): answered, errors, risk, alarm, delay after the change."""
        rows = []
        for name, res in (("no drift", self.steady), (f"drift +{self.settings['shift']:g}", self.drifted)):
            for r in res.summary().to_dict("records"):
                pos = r["alarm_position"]
                delay = None if pos is None or name == "no drift" else pos - self.settings["change_at"]
                rows.append({"stream": name, "stratum": r["stratum"], "questions": res.n_questions,
                             "answered": r["answered"], "errors": r["errors"], "risk among answered": r["risk"],
                             "alarm at question": pos, "questions after the change": delay,
                             "lower bound at alarm − α": r["alarm_excess"]})
        return pd.DataFrame(rows, columns=["stream", "stratum", "questions", "answered", "errors", "risk among answered",
                                           "alarm at question", "questions after the change",
                                           "lower bound at alarm − α"])

    def headline(self) -> dict[str, Any]:
        """The page's headline numbers (``results.json``) and the check that ties one to its CSV."""
        steady = self.steady.summary()
        drift = self.drifted.summary()
        first = drift.iloc[0] if len(drift) else None
        al = min(self.drifted.alarms.values(), key=lambda a: a["position"]) if self.drifted.alarms else None
        stream = f"drift +{self.settings['shift']:g}"
        return {
            **self.settings,
            "steady_alarm": bool(steady["alarm"].any()) if len(steady) else False,
            "drift_alarm_at": None if al is None else al["position"],
            "drift_delay": None if al is None else al["position"] - self.settings["change_at"],
            "drift_risk": None if first is None else float(first["risk"]),
            "checks": [] if first is None else [{"key": "drift_risk", "csv": "drift_summary.csv",
                                                 "row": {"stream": stream, "stratum": first["stratum"]},
                                                 "column": "risk among answered"}],
        }

    def recalibration(self) -> pd.DataFrame:
        """Per stratum: threshold and calibration coverage before and after recalibrating."""
        if self.recalibrated is None:
            return pd.DataFrame(columns=["stratum", "threshold before", "threshold after",
                                         "coverage before", "coverage after"])
        old = {s["name"]: s for s in self.certificate["strata"]}
        rows = []
        for s in self.recalibrated["strata"]:
            o = old.get(s["name"], {})
            rows.append({"stratum": s["name"], "threshold before": o.get("threshold"), "threshold after": s["threshold"],
                         "coverage before": o.get("coverage"), "coverage after": s["coverage"],
                         "n after": s["n"], "base error after": s["error_rate"]})
        return pd.DataFrame(rows)

    def figure(self) -> Any:
        """Two timelines (steady, drifted): lower confidence bound and running risk per stratum against α."""
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 1, figsize=(7.5, 6.4))  # stacked: legible at phone width too
        MO.timeline_figure(self.steady, ax=axes[0], title="stream without drift")
        MO.timeline_figure(self.drifted, ax=axes[1], title=f"base error +{self.settings['shift']:g} "
                           f"from question {self.settings['change_at']}")
        axes[1].axvline(self.settings["change_at"], color="k", lw=0.8, ls=":")
        fig.tight_layout()
        return fig


def drift_demo(release: Release, *, dataset: str = "medqa", backbone: str = "Qwen/Qwen3-8B", alpha: float = 0.1,
               shift: float = 0.3, change_at: int = 200, length: int = 1200, batch_size: int = 100,
               window: int = 600, level: float = MO.DEFAULT_LEVEL, seed: int = 42) -> DriftDemo:
    """Certify ``release``'s (dataset, backbone) cell at ``alpha``; monitor a steady and a drifted stream."""
    from probeguard_core.simulate.drift import DriftSchedule, drift_stream

    sim_cell = f"{dataset}/{backbone_slug(backbone)}"
    notes: tuple[str, ...] = ()
    if release.has_cell(dataset, backbone):
        cell = release.cell(dataset, backbone)
        cal_logs, cal_probe, cal_nli = cell.logs, cell.probe, cell.nli
    else:  # calibrate on a steady stream of the simulator's cell instead, and say so
        cal = drift_stream(window, DriftSchedule(), batch_size=window, seed=seed - 1, cell=sim_cell)
        cal_logs = [lg for b in cal for lg in b.logs]
        cal_probe = [r for b in cal for r in b.probe]
        cal_nli = [r for b in cal for r in b.nli]
        notes = (f"this release has no {dataset} / {backbone} cell, so the page calibrates on {window} questions "
                 f"the simulator draws for that cell (seed {seed - 1}) instead of on the release's own logs.",)
    cert = certify_logs(cal_logs, cal_probe, cal_nli, alpha=alpha, created_by="tables.deploying.drift_demo")

    def stream(sched: DriftSchedule, s: int) -> list[MO.StreamBatch]:
        return [MO.StreamBatch(f"batch {b.index + 1}", b.logs, b.probe, b.nli)
                for b in drift_stream(length, sched, batch_size=batch_size, seed=s, cell=sim_cell)]

    steady_b = stream(DriftSchedule(), seed)
    drift_b = stream(DriftSchedule(shift=shift, change_at=change_at), seed + 1)
    steady = MO.monitor(cert, steady_b, level=level)
    drifted = MO.monitor(cert, drift_b, level=level)
    recal = MO.recalibrate(cert, drift_b, window, reason="alarm" if drifted.alarms else "requested")[0]
    return DriftDemo(cert, steady, drifted, recal, {"alpha": alpha, "shift": shift, "change_at": change_at,
                                                     "length": length, "batch_size": batch_size, "window": window,
                                                     "level": level, "seed": seed, "cell": sim_cell}, notes)


def measured_rates(path: str | os.PathLike[str] | None = None) -> tuple[pd.DataFrame, str]:
    """The benchmark's false-alarm rate (with its exact 95% upper bound) and detection delay, and its command.

    Returns an empty table and a reason when the benchmark has not been run here.
    """
    p = Path(path) if path is not None else BENCHMARK_RESULT
    if not p.is_file():
        return pd.DataFrame(columns=["measurement", "value"]), f"{p.name} is missing: run benchmarks/monitor_drift.py"
    r = json.loads(p.read_text(encoding="utf-8"))
    nd, dr, bb = r["no_drift"], r["drift"], r["bernoulli_at_alpha"]
    rows = [
        ("no-drift streams (simulator)", f"{nd['streams']} streams × {nd['length']} questions"),
        ("false alarms", f"{nd['alarms']} ({nd['rate']:.4f})"),
        ("exact one-sided 95% upper bound", f"{nd['upper_95']:.4f}"),
        ("nominal level", f"{nd['nominal']:g}"),
        ("drift streams (simulator)", (f"{dr['streams']} streams × {dr['length']} questions, base error "
                                      f"+{dr['shift']:g} at question {dr['change_at']}")),
        ("detected", f"{dr['detected']} of {dr['streams']}"),
        ("median detection delay (questions after the change)",
         "—" if dr["median_delay"] is None else f"{dr['median_delay']:g} (quartiles {dr['q25']:g}–{dr['q75']:g})"),
        ("boundary check: i.i.d. errors at rate α",
         f"{bb['alarms']} alarms in {bb['streams']} streams × {bb['length']} looks ({bb['rate']:.4f})"),
    ]
    note = f"measured by `{r['command'].strip()}` (seed {r['seed']}, α = {r['alpha']:g}, level {r['level']:g})"
    if not math.isfinite(nd["upper_95"]):
        note += "; the bound is undefined"
    return pd.DataFrame(rows, columns=["measurement", "value"]), note
