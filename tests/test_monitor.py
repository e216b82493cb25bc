"""``probeguard monitor`` (issue 12 §2): the e-process, the alarm, recalibration, the drift stream.

The e-process is checked against direct numerical integration of its mixture and for validity
on i.i.d. Bernoulli(alpha) errors looked at after every step.  The command line runs on a
synthetic cell (``test_cli_certify.build_cell``): batches from the calibration distribution
give exit 0; batches whose clinicians' labels mark answered unanimous questions wrong give
exit 3 and an ALARM line naming S1.  The simulator-based false-alarm rate over 500 streams and
the detection delay are measured by ``benchmarks/monitor_drift.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats
from test_cli_certify import build_cell, certify_argv

from probeguard_core import deploy
from probeguard_core.deploy import monitor
from probeguard_core.cli import main
from probeguard_core.simulate.drift import DriftSchedule, drift_stream, drifted_params


def run(argv: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------------------------
# the e-process
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("S", "n", "p0"), [(0, 5, 0.1), (3, 10, 0.1), (12, 40, 0.15), (1, 60, 0.05), (30, 90, 0.2)])
def test_closed_form_equals_the_integral(S: int, n: int, p0: float) -> None:
    a, b = p0 * monitor.DEFAULT_PRIOR_STRENGTH, (1 - p0) * monitor.DEFAULT_PRIOR_STRENGTH
    prior = stats.beta(a, b)

    def f(p: float) -> float:
        return (p / p0) ** S * ((1 - p) / (1 - p0)) ** (n - S) * prior.pdf(p)

    want = integrate.quad(f, p0, 1, limit=200)[0] / prior.sf(p0)
    assert float(monitor.log_evalue(S, n, p0)) == pytest.approx(math.log(want), rel=1e-6, abs=1e-8)


def test_valid_when_looking_after_every_question() -> None:
    """Ville: P(ever M_n >= 1/level) <= level at the boundary risk = alpha (3000 streams x 400 looks)."""
    rng = np.random.default_rng(42)
    alpha, level = 0.1, 0.05
    e = rng.random((3000, 400)) < alpha
    S = np.cumsum(e, axis=1)
    n = np.arange(1, 401)[None, :]
    rate = (monitor.log_evalue(S, n, alpha) >= math.log(1 / level)).any(axis=1).mean()
    assert rate <= level + 3 * math.sqrt(level * (1 - level) / 3000)
    # and it has power: risk 0.3 where 0.1 is promised is caught in nearly every stream
    e = rng.random((500, 400)) < 0.3
    S = np.cumsum(e, axis=1)
    assert (monitor.log_evalue(S, n, alpha) >= math.log(1 / level)).any(axis=1).mean() > 0.95


def test_lower_bound_crosses_alpha_when_the_test_rejects() -> None:
    S = np.array([0, 5, 10, 20, 30])
    n = np.array([10, 50, 50, 60, 60])
    lcb = monitor.confidence_lower_bound(S, n)
    rej = monitor.log_evalue(S, n, 0.1) >= math.log(20)
    assert np.all(lcb <= np.maximum(S / n, 1e-9) + 1e-9)
    assert np.array_equal(lcb > 0.1, rej)


# --------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cal(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mon")
    cell = build_cell(root / "cal", n_s1=260, n_s2=140, n_s3=30)
    assert main([str(a) for a in certify_argv(cell, root / "cert", 0.15)]) == 0
    return {**cell, "certificate": root / "cert" / "certificate.json", "root": root}


def _batch(root: Path, k: int, *, wrong_share: float = 0.0, seed: int = 0) -> dict[str, Path]:
    """A batch from the calibration distribution; with ``wrong_share``, that share of unanimous
    questions is relabelled (gold moved off the consensus): the clinicians say the answer was wrong."""
    cell = build_cell(root / f"b{k}", n_s1=130, n_s2=70, n_s3=15, seed=1000 + seed, qid_prefix=f"b{k}")
    if wrong_share:
        rng = np.random.default_rng(seed)
        lines = [json.loads(x) for x in Path(cell["logs"]).read_text().splitlines()]
        for rec in lines:
            votes = {c["answer"] for c in rec["rounds"][0]["candidates"]}
            if len(votes) == 1 and rng.random() < wrong_share:
                rec["gold"] = "D" if votes != {"D"} else "C"
        Path(cell["logs"]).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return cell


def _argv(cal: dict[str, Path], batches: list[dict[str, Path]], out: Path, *extra: Any) -> list[Any]:
    argv: list[Any] = ["monitor", "--certificate", cal["certificate"], "--out", out, *extra]
    for b in batches:
        argv += ["--logs", b["logs"], "--probe", b["probe"], "--nli", b["nli"]]
    return argv


def test_no_drift_no_alarm(cal: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batches = [_batch(tmp_path, k, seed=k) for k in range(3)]
    rc, out, err = run(_argv(cal, batches, tmp_path / "m"), capsys)
    assert rc == 0, err
    assert "ALARM" not in err and "S1" in out
    res = json.loads((tmp_path / "m" / "monitor.json").read_text())
    assert res["n_questions"] == 3 * 215 and res["alarms"] == {} and len(res["batches"]) == 3
    cert = json.loads(cal["certificate"].read_text())
    assert res["certificate_sha256"] == cert["content_sha256"]
    assert [s["stratum"] for s in res["strata"]] == cert["certified_strata"]
    page = (tmp_path / "m" / "timeline.html").read_text()
    assert "<svg" in page and "default-src 'none'" in page and "<script" not in page
    assert (tmp_path / "m" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_drift_raises_the_alarm_with_exit_3(cal: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    batches = [_batch(tmp_path, 0, seed=0)] + [_batch(tmp_path, k, wrong_share=0.4, seed=k) for k in (1, 2, 3)]
    rc, _out, err = run(_argv(cal, batches, tmp_path / "m"), capsys)
    assert rc == 3, err
    lines = [x for x in err.splitlines() if "ALARM" in x]
    assert len(lines) == 1 and lines[0].startswith("probeguard monitor: ALARM stratum S1: at question ")
    res = json.loads((tmp_path / "m" / "monitor.json").read_text())
    al = res["alarms"]["S1"]
    assert al["position"] > 215  # not in the undrifted first batch
    assert f"by {al['excess']:.4f}" in lines[0] and al["lcb"] > res["alpha"] and al["excess"] > 0
    assert al["e_value"] >= 1 / res["level"]
    # recomputed from the decisions: the errors among answered S1 questions up to the alarm
    cert = deploy.load_certificate(cal["certificate"])
    bs = monitor.batches_from_files([b["logs"] for b in batches], [b["probe"] for b in batches],
                                    [b["nli"] for b in batches])
    errs = []
    for b in bs:
        t = deploy.calibration_table(cert, b.logs, b.probe, b.nli)
        errs += (~t.loc[(t["stratum"] == "S1") & (t["decision"] == "answer"), "correct"].astype(bool)).tolist()
    S = np.cumsum(errs)
    first = int(np.flatnonzero(monitor.log_evalue(S, np.arange(1, len(S) + 1), cert["alpha"]) >= math.log(20))[0])
    assert al["n_answered"] == first + 1 and al["n_errors"] == int(S[first])


def test_recalibration_records_its_window(cal: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    batches = [_batch(tmp_path, k, seed=k) for k in range(3)]
    rc, _out, err = run(_argv(cal, batches, tmp_path / "m", "--recalibrate-window", 400), capsys)
    assert rc == 0, err
    new = deploy.load_certificate(tmp_path / "m" / "recalibrated" / "certificate.json")  # self-check passes
    rec = new["recalibration"]
    assert rec["window"] == 400 and rec["n_questions"] == 400 and new["n"] == 400
    assert rec["last_qid"] == "b2-s3-0014" and [b["n_used"] for b in rec["batches"]] == [400 - 215, 215]
    old = json.loads(cal["certificate"].read_text())
    assert rec["replaces_certificate_sha256"] == old["content_sha256"] and rec["reason"] == "requested"
    assert (new["alpha"], new["delta"], new["grid"]) == (old["alpha"], old["delta"], old["grid"])
    assert (tmp_path / "m" / "recalibrated" / "report.html").is_file()
    assert (tmp_path / "m" / "recalibrated" / "dossiers.jsonl").is_file()


def test_monitor_refuses_to_write_over_its_inputs(cal: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    b = _batch(tmp_path, 0)
    out = tmp_path / "m"
    out.mkdir()
    logs = out / "timeline.html"
    logs.write_bytes(Path(b["logs"]).read_bytes())
    rc, _, err = run(["monitor", "--certificate", cal["certificate"], "--logs", logs, "--probe", b["probe"],
                      "--nli", b["nli"], "--out", out], capsys)
    assert rc == 2 and "never writes over one of its own inputs" in err


def test_monitor_refuses_a_tampered_certificate(cal: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    obj = json.loads(cal["certificate"].read_text())
    next(s for s in obj["strata"] if s["threshold"] is not None)["threshold"] -= 1.0
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps(obj))
    b = _batch(tmp_path, 0)
    rc, _, err = run(["monitor", "--certificate", bad, "--logs", b["logs"], "--out", tmp_path / "m"], capsys)
    assert rc == 2 and "threshold" in err and not (tmp_path / "m").exists()


# --------------------------------------------------------------------------------------------
# the drift stream generator
# --------------------------------------------------------------------------------------------

def test_schedule_and_params() -> None:
    s = DriftSchedule(shift=0.2, change_at=10, ramp=40, levels=4)
    assert [s.shift_at(i) for i in (0, 9, 10, 19, 20, 49, 500)] == [0, 0, 0.05, 0.05, 0.1, 0.2, 0.2]
    p = drifted_params("medqa/qwen3-8b", 0.2)
    base = drifted_params("medqa/qwen3-8b", 0.0)
    cp, c0 = p["cells"]["medqa/qwen3-8b"], base["cells"]["medqa/qwen3-8b"]
    assert cp["unanimous_error"]["value"] == pytest.approx(c0["unanimous_error"]["value"] + 0.2)
    u = c0["first_round_unanimity"]["value"]
    assert cp["overall_accuracy"]["value"] == pytest.approx(c0["overall_accuracy"]["value"] - u * 0.2)
    with pytest.raises(ValueError):
        DriftSchedule(shift=1.5)


def test_drift_stream_is_valid_and_deterministic() -> None:
    a = drift_stream(24, batch_size=10, seed=5)
    b = drift_stream(24, batch_size=10, seed=5)
    assert [len(x.logs) for x in a] == [10, 10, 4]
    qids = [g.qid for x in a for g in x.logs]
    assert len(set(qids)) == 24 and qids[0] == "medqa-stream5-00000"
    assert [g.model_dump() for x in a for g in x.logs] == [g.model_dump() for x in b for g in x.logs]
    s1 = {g.qid for x in a for g in x.logs if len({c.answer for c in g.rounds[0].candidates}) == 1
          and g.rounds[0].candidates[0].answer is not None}
    assert {r.qid for x in a for r in x.probe} == s1 and {r.arm for x in a for r in x.probe} == {"counter_evidence"}
