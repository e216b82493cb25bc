"""``probeguard certify`` / ``probeguard apply`` (§3.3, §4.4, §5.3, Appendix I).

A synthetic cell (built here with the ``helpers`` builders, seed 42) has all three strata,
probe and NLI records for the unanimous layer and specialty labels with some nulls.  The
tests run the real command line (``probeguard_core.cli.main``) and check the certificate
against the core modules (``certify.ltt_test`` and its plain reference loop,
``scoring.stratum_scores``) and that ``apply`` on the calibration data reproduces the
certificate's coverage exactly.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import make_log, make_nli, make_probe, write_records

from probeguard_core import __version__, certify, deploy, scoring
from probeguard_core import logs as L
from probeguard_core.cli import main

SPECIALTIES = ("cardiology", "neurology", "pediatrics")


# --------------------------------------------------------------------------------------------
# Synthetic cell
# --------------------------------------------------------------------------------------------

def build_cell(
    folder: Path,
    n_s1: int = 260,
    n_s2: int = 140,
    n_s3: int = 30,
    seed: int = 42,
    dataset: str = "medqa",
    backbone: str = "Qwen/Qwen3-8B",
    n_cand: int = 4,
    specialty: bool = True,
    qid_prefix: str | None = None,
    gz: bool = False,
) -> dict[str, Path]:
    """Write logs / probe / nli files of one synthetic cell; return their paths.

    S1 (unanimous first round): wrong consensus flips more under the probe and has less
    coherent rationales (lower entailment), so z(kappa) + z(RSE) ranks it lower.  S2: correct
    answers converge faster (higher a-bar).  S3: never converges.  Specialty: cycles through
    :data:`SPECIALTIES`, every fifth question null.
    """
    rng = np.random.default_rng(seed)
    prefix = qid_prefix or dataset
    logs: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    nlis: list[dict[str, Any]] = []
    common = {"dataset": dataset, "backbone": backbone}

    def spec(i: int) -> str | None:
        if not specialty or i % 5 == 4:
            return None
        return SPECIALTIES[i % len(SPECIALTIES)]

    for i in range(n_s1):
        qid = f"{prefix}-s1-{i:04d}"
        ok = rng.random() < 0.88
        ans = "A" if ok else "B"
        logs.append(make_log([[ans] * n_cand], gold="A", qid=qid, specialty=spec(i), **common))
        keep = int(rng.binomial(n_cand, 0.93 if ok else 0.45))
        probes.append(make_probe([ans] * keep + ["C"] * (n_cand - keep), consensus=ans, qid=qid, **common))
        base = rng.uniform(0.55, 0.97) if ok else rng.uniform(0.2, 0.75)
        E = [[1.0 if a == b else round(float(np.clip(base + rng.normal(0, 0.04), 0, 1)), 4)
              for b in range(n_cand)] for a in range(n_cand)]
        nlis.append(make_nli([f"Therefore the answer is {ans}."] * n_cand, entailment=E,
                             candidates=list(range(n_cand)), qid=qid, round=1, **common))
    others = "BCD"
    for i in range(n_s2):
        qid = f"{prefix}-s2-{i:04d}"
        ok = rng.random() < 0.7
        ans = "A" if ok else "B"
        t_stop = int(rng.integers(2, 4 if ok else 6))
        rounds = []
        for t in range(t_stop - 1):
            k = int(rng.integers(1, n_cand)) if ok else int(rng.integers(1, max(2, n_cand - 1)))
            rounds.append([ans] * k + [others[(t + j) % 3] if others[(t + j) % 3] != ans else "D"
                                       for j in range(n_cand - k)])
        rounds.append([ans] * n_cand)
        logs.append(make_log(rounds, gold="A", qid=qid, specialty=spec(i), **common))
    for i in range(n_s3):
        qid = f"{prefix}-s3-{i:04d}"
        rounds = [["A", "B"] + ["A"] * (n_cand - 2) for _ in range(3)]
        logs.append(make_log(rounds, gold="A" if i % 2 else "B", qid=qid, specialty=spec(i), max_rounds=3,
                             **common))
    ext = ".jsonl.gz" if gz else ".jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "logs": write_records(folder / f"logs{ext}", logs),
        "probe": write_records(folder / f"probe{ext}", probes),
        "nli": write_records(folder / f"nli{ext}", nlis),
    }


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def certify_argv(cell: dict[str, Path], out: Path, alpha: float = 0.15, *extra: str) -> list[str]:
    return ["certify", "--logs", cell["logs"], "--probe", cell["probe"], "--nli", cell["nli"],
            "--alpha", str(alpha), "--out", out, *extra]


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_cell(tmp_path_factory.mktemp("cell"))


@pytest.fixture(scope="module")
def certified(cell: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("cert") / "out"
    assert main([str(a) for a in certify_argv(cell, out)]) == 0
    return out, json.loads((out / "certificate.json").read_text())


def _calibration(cell: dict[str, Path]) -> tuple[list[L.QuestionLog], list[L.ProbeRecord], list[L.NLIRecord]]:
    logs = L.read_logs(cell["logs"])
    return logs, L.read_probe(cell["probe"], logs=logs), L.read_nli(cell["nli"], logs=logs)


# --------------------------------------------------------------------------------------------
# certify
# --------------------------------------------------------------------------------------------

def test_certificate_contents(cell: dict[str, Path], certified: tuple[Path, dict[str, Any]]) -> None:
    out, cert = certified
    assert (out / "report.html").is_file()
    assert cert["format"] == "probeguard-certificate" and cert["package_version"] == __version__
    assert cert["alpha"] == 0.15 and cert["delta"] == 0.05
    assert cert["grid"] == [round(0.05 * k, 2) for k in range(1, 21)]
    assert cert["datasets"] == ["medqa"] and cert["stratify_by"] is None
    assert cert["created_by"].startswith("probeguard certify --logs ") and "--alpha 0.15" in cert["created_by"]
    assert set(cert["score_definitions"]) == {"S1", "S2", "S3"}
    assert "i.i.d." in cert["assumption"]
    # sha256 of every input file
    roles = {f["role"]: f for f in cert["inputs"]}
    assert set(roles) == {"logs", "probe", "nli"}
    for role, f in roles.items():
        assert f["sha256"] == hashlib.sha256(Path(cell[role]).read_bytes()).hexdigest()
    # z constants of the calibration unanimous layer (population sd)
    logs, probe, nli = _calibration(cell)
    ref = scoring.stratum_scores(logs, probe, nli)
    s1 = ref[ref["stratum"] == "S1"]
    z = cert["standardization"]["medqa"]
    assert z["kappa"]["n"] == z["rse"]["n"] == len(s1) == 260
    assert z["kappa"]["mean"] == pytest.approx(s1["kappa"].mean(), rel=1e-12)
    assert z["rse"]["sd"] == pytest.approx(s1["rse"].std(ddof=0), rel=1e-12)
    # both strata tested; m = 2 as in the paper; S3 abstains; "certified" = holds a threshold
    assert cert["format_version"] == 2
    assert cert["tested_strata"] == ["S1", "S2"] and cert["n_tested_strata"] == 2
    with_thr = [s["name"] for s in cert["strata"] if s["threshold"] is not None]
    assert cert["certified_strata"] == with_thr and cert["n_certified_strata"] == len(with_thr)
    assert cert["bonferroni_level"] == pytest.approx(0.05 / (20 * 2))
    by = {s["name"]: s for s in cert["strata"]}
    assert set(by) == {"S1", "S2", "S3"}
    assert by["S3"]["threshold"] is None and by["S3"]["n_answered"] == 0 and by["S3"]["n"] == 30
    assert sum(s["n"] for s in cert["strata"]) == cert["n"] == 430
    assert by["S1"]["status"] == "certified", by["S1"]  # the synthetic scores separate well


def test_thresholds_and_pvalues_match_the_core(cell: dict[str, Path], certified: tuple[Path, dict[str, Any]]) -> None:
    """Every number of the grid equals certify.ltt_test; thresholds equal the plain reference loop."""
    _, cert = certified
    logs, probe, nli = _calibration(cell)
    ref = scoring.stratum_scores(logs, probe, nli)
    for st in cert["strata"]:
        if st["name"] == "S3":
            continue
        part = ref[ref["stratum"] == st["name"]]
        errors = ~part["correct"].to_numpy(dtype=bool)
        res = certify.ltt_test(part["score"].to_numpy(), errors, 0.15, 0.05, n_strata=2)
        assert [g["coverage"] for g in st["grid"]] == res.coverage.tolist()
        assert [g["threshold"] for g in st["grid"]] == res.lambdas.tolist()
        assert [g["n_c"] for g in st["grid"]] == res.n_c.tolist()
        assert [g["errors"] for g in st["grid"]] == res.E_c.tolist()
        assert [g["p_value"] for g in st["grid"]] == res.p_values.tolist()
        loop = certify._ltt_threshold_loop(part["score"].to_numpy(), errors, 0.15, 0.05, n_strata=2)
        assert st["threshold"] == loop
        assert st["n"] == len(part) and st["n_errors"] == int(errors.sum())
        if st["threshold"] is not None:
            # coverage on the calibration data: share scoring strictly above the threshold
            above = part["score"].to_numpy() > st["threshold"]
            assert st["n_answered"] == int(above.sum())
            assert st["n_answered_errors"] == int(errors[above].sum())
            assert st["coverage"] == above.sum() / len(part)


def test_apply_reproduces_the_certificate_coverage(
    cell: dict[str, Path], certified: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, cert = certified
    dec = tmp_path / "decisions.csv"
    rc, _stdout, err = run_cli(["apply", "--certificate", out / "certificate.json", "--logs", cell["logs"],
                               "--probe", cell["probe"], "--nli", cell["nli"], "--out", dec], capsys)
    assert rc == 0, err
    df = pd.read_csv(dec, keep_default_na=False, na_values=[""])
    assert len(df) == cert["n"] and df["qid"].is_unique
    assert list(df.columns[:8]) == ["qid", "dataset", "stratum", "base_stratum", "specialty", "score",
                                    "threshold", "decision"]
    assert "final_answer" in df.columns
    for st in cert["strata"]:
        rows = df[df["stratum"] == st["name"]]
        assert len(rows) == st["n"]
        assert int((rows["decision"] == "answer").sum()) == st["n_answered"], st["name"]
    assert (df["decision"] == "answer").sum() / len(df) == cert["coverage"]
    # the decision rule: answer iff score > threshold; S3 always abstains
    ans = df["decision"] == "answer"
    assert (df.loc[ans, "score"] > df.loc[ans, "threshold"]).all()
    assert not ans[df["base_stratum"] == "S3"].any()
    # a released answer only when answering
    assert df.loc[~ans, "final_answer"].isna().all()
    assert (df.loc[ans, "final_answer"] == df.loc[ans, "system_answer"]).all()


def test_frozen_scores_equal_stratum_scores(cell: dict[str, Path], certified: tuple[Path, dict[str, Any]]) -> None:
    """apply scores S1 with the certificate's frozen z constants; on the calibration layer they equal
    scoring.stratum_scores bit for bit."""
    _, cert = certified
    logs, probe, nli = _calibration(cell)
    ref = scoring.stratum_scores(logs, probe, nli)
    dec = deploy.apply_certificate(cert, logs, probe, nli).set_index("qid")
    s12 = ref["stratum"].isin(["S1", "S2"])
    assert np.array_equal(dec.loc[ref.index[s12], "score"].to_numpy(), ref.loc[s12, "score"].to_numpy())


def test_apply_on_new_logs_uses_calibration_scale(
    certified: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, cert = certified
    new = build_cell(tmp_path / "new", n_s1=40, n_s2=20, n_s3=5, seed=7, qid_prefix="new")
    dec = tmp_path / "d.jsonl"
    rc, _, err = run_cli(["apply", "--certificate", out / "certificate.json", "--logs", new["logs"],
                          "--probe", new["probe"], "--nli", new["nli"], "--out", dec], capsys)
    assert rc == 0, err
    recs = [json.loads(x) for x in dec.read_text().splitlines()]
    assert len(recs) == 65
    logs = L.read_logs(new["logs"])
    probe = L.read_probe(new["probe"], logs=logs)
    nli = L.read_nli(new["nli"], logs=logs)
    tab = scoring.stratum_scores(logs, probe, nli)
    z = cert["standardization"]["medqa"]
    s1 = tab[tab["stratum"] == "S1"]
    expect = (s1["kappa"] - z["kappa"]["mean"]) / z["kappa"]["sd"] + (s1["rse"] - z["rse"]["mean"]) / z["rse"]["sd"]
    got = {r["qid"]: r for r in recs}
    for qid, e in expect.items():
        assert got[qid]["score"] == pytest.approx(e, rel=1e-12, abs=1e-12)
    thr = {s["name"]: s["threshold"] for s in cert["strata"]}
    for r in recs:
        t = thr[r["stratum"]]
        want = t is not None and r["score"] is not None and r["score"] > t
        assert (r["decision"] == "answer") == want
        assert r["threshold"] == t


def test_deterministic_bytes(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert run_cli(certify_argv(cell, out), capsys)[0] == 0
    first = {n: (out / n).read_bytes() for n in ("certificate.json", "report.html")}
    shutil.rmtree(out)
    assert run_cli(certify_argv(cell, out), capsys)[0] == 0
    assert {n: (out / n).read_bytes() for n in first} == first


def test_several_logs_files_equal_one(cell: dict[str, Path], certified: tuple[Path, dict[str, Any]],
                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(cell["logs"]).read_text().splitlines(keepends=True)
    a, b = tmp_path / "a" / "logs.jsonl", tmp_path / "b" / "logs.jsonl"
    for p, part in ((a, lines[::2]), (b, lines[1::2])):
        p.parent.mkdir()
        p.write_text("".join(part))
    out = tmp_path / "o"
    rc, _, err = run_cli(["certify", "--logs", a, "--logs", b, "--probe", cell["probe"], "--nli", cell["nli"],
                          "--alpha", "0.15", "--out", out], capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    ref = certified[1]
    assert [(s["name"], s["threshold"], s["n_answered"]) for s in cert["strata"]] == \
        [(s["name"], s["threshold"], s["n_answered"]) for s in ref["strata"]]
    assert [f["role"] for f in cert["inputs"]] == ["logs", "logs", "probe", "nli"]


def test_gzip_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = build_cell(tmp_path / "c", n_s1=120, n_s2=60, n_s3=5, gz=True)
    rc, _, err = run_cli(certify_argv(cell, tmp_path / "o"), capsys)
    assert rc == 0, err


# --------------------------------------------------------------------------------------------
# stratify by specialty (Appendix I)
# --------------------------------------------------------------------------------------------

def test_stratify_by_specialty(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "spec"
    rc, _stdout, err = run_cli(certify_argv(cell, out, 0.15, "--stratify-by", "specialty"), capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    names = [s["name"] for s in cert["strata"]]
    expected = [f"{b}|{s}" for b in ("S1", "S2") for s in (*SPECIALTIES, "unspecified")] + ["S3"]
    assert names == expected
    # nothing dropped: null specialty forms "unspecified"
    assert sum(s["n"] for s in cert["strata"]) == 430
    logs = L.read_logs(cell["logs"])
    n_null_s1 = sum(1 for g in logs if g.specialty is None and len(g.rounds) == 1)
    assert next(s for s in cert["strata"] if s["name"] == "S1|unspecified")["n"] == n_null_s1 > 0
    # Bonferroni m = number of certified cells
    assert cert["n_tested_strata"] == 8 and cert["tested_strata"] == expected[:-1]
    assert cert["certified_strata"] == [s["name"] for s in cert["strata"] if s["threshold"] is not None]
    assert cert["bonferroni_level"] == pytest.approx(0.05 / (20 * 8))
    html = (out / "report.html").read_text()
    assert "unspecified" in html and "Appendix I" in html
    # the per-cell thresholds are the core LTT with n_strata = 8
    ref = scoring.stratum_scores(logs, *_calibration(cell)[1:])
    ref["cell"] = [f"{s}|{sp or 'unspecified'}" for s, sp in zip(ref["stratum"], [g.specialty for g in logs])]
    for st in cert["strata"][:-1]:
        part = ref[ref["cell"] == st["name"]]
        assert st["threshold"] == certify.ltt_threshold(part["score"].to_numpy(), ~part["correct"].to_numpy(dtype=bool),
                                                        0.15, 0.05, n_strata=8)
    # apply reproduces the per-cell coverage
    d = deploy.apply_certificate(cert, logs, *_calibration(cell)[1:])
    for st in cert["strata"]:
        assert int((d.loc[d["stratum"] == st["name"], "decision"] == "answer").sum()) == st["n_answered"]


def test_stratify_by_specialty_without_any_specialty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = build_cell(tmp_path / "c", n_s1=120, n_s2=60, n_s3=5, specialty=False)
    out = tmp_path / "o"
    rc, _, err = run_cli(certify_argv(cell, out, 0.2, "--stratify-by", "specialty"), capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    assert [s["name"] for s in cert["strata"]] == ["S1|unspecified", "S2|unspecified", "S3"]
    assert cert["n_tested_strata"] == 2


# --------------------------------------------------------------------------------------------
# refusals and special cases
# --------------------------------------------------------------------------------------------

def test_mixed_datasets_refused_unless_allowed(cell: dict[str, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    other = build_cell(tmp_path / "mmlu", n_s1=60, n_s2=30, n_s3=3, dataset="mmlu_pro_med", seed=3)
    argv = ["certify", "--logs", cell["logs"], "--logs", other["logs"], "--probe", cell["probe"],
            "--probe", other["probe"], "--nli", cell["nli"], "--nli", other["nli"], "--alpha", "0.15"]
    out = tmp_path / "o"
    rc, _, err = run_cli([*argv, "--out", out], capsys)
    assert rc == 2
    assert "§4.4" in err and "mix 2 datasets" in err and "--allow-mixed-datasets" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()
    rc, _, err = run_cli([*argv, "--out", out, "--allow-mixed-datasets"], capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["datasets"] == ["medqa", "mmlu_pro_med"] and cert["allow_mixed_datasets"] is True
    assert set(cert["standardization"]) == {"medqa", "mmlu_pro_med"}  # z per dataset (§3.2)
    assert "--allow-mixed-datasets" in (out / "report.html").read_text()


def test_apply_refuses_a_foreign_dataset(certified: tuple[Path, dict[str, Any]], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = certified
    other = build_cell(tmp_path / "x", n_s1=10, n_s2=5, n_s3=1, dataset="medmcqa")
    dec = tmp_path / "d.csv"
    rc, _, err = run_cli(["apply", "--certificate", out / "certificate.json", "--logs", other["logs"],
                          "--out", dec], capsys)
    assert rc == 2 and "medmcqa" in err and "Assumption 1" in err
    assert not dec.exists()


def test_without_probe_and_nli_s1_abstains(cell: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    rc, _, err = run_cli(["certify", "--logs", cell["logs"], "--alpha", "0.15", "--out", out], capsys)
    assert rc == 0, err
    assert "S1 abstains as a whole" in err
    cert = json.loads((out / "certificate.json").read_text())
    by = {s["name"]: s for s in cert["strata"]}
    assert by["S1"]["threshold"] is None and by["S1"]["n"] == 260 and not by["S1"]["certified"]
    assert cert["tested_strata"] == ["S2"] and cert["n_tested_strata"] == 1
    assert cert["standardization"] == {}
    d = deploy.apply_certificate(cert, L.read_logs(cell["logs"]))
    assert not (d.loc[d["base_stratum"] == "S1", "decision"] == "answer").any()
    assert int((d["decision"] == "answer").sum()) == cert["n_answered"]


def test_probe_without_nli_is_refused(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    rc, _, err = run_cli(["certify", "--logs", cell["logs"], "--probe", cell["probe"], "--alpha", "0.15",
                          "--out", out], capsys)
    assert rc == 2 and "needs both probe and NLI" in err and not out.exists()


def test_incomplete_probe_is_refused(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(cell["probe"]).read_text().splitlines(keepends=True)
    short = tmp_path / "probe.jsonl"
    short.write_text("".join(lines[:-1]))
    out = tmp_path / "o"
    rc, _, err = run_cli(["certify", "--logs", cell["logs"], "--probe", short, "--nli", cell["nli"],
                          "--alpha", "0.15", "--out", out], capsys)
    assert rc == 2 and "1 of 260 S1" in err and "medqa-s1-0259" in err and not out.exists()


def test_uncertifiable_alpha_reports_abstention(cell: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """At a tiny alpha no grid point is rejected: the strata abstain; apply answers nothing."""
    out = tmp_path / "o"
    rc, _stdout, err = run_cli(certify_argv(cell, out, 0.001), capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    assert all(s["threshold"] is None for s in cert["strata"]) and cert["n_answered"] == 0
    assert {s["status"] for s in cert["strata"] if s["tested"]} == {"not certified"}
    assert cert["certified_strata"] == [] and cert["n_certified_strata"] == 0
    d = deploy.apply_certificate(cert, *_calibration(cell))
    assert (d["decision"] == "abstain").all()


def test_entry_point_subprocess(cell: dict[str, Path], tmp_path: Path) -> None:
    """The installed console script end to end (certify, then apply)."""
    exe = Path(sys.executable).with_name("probeguard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "probeguard_core.cli"]
    out = tmp_path / "o"
    r = subprocess.run([*cmd, *map(str, certify_argv(cell, out))], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "certified 430 questions" in r.stdout
    dec = tmp_path / "d.csv"
    r = subprocess.run([*cmd, "apply", "--certificate", str(out / "certificate.json"), "--logs", str(cell["logs"]),
                        "--probe", str(cell["probe"]), "--nli", str(cell["nli"]), "--out", str(dec)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with open(dec, newline="") as fh:
        rows = list(csv.DictReader(fh))
    cert = json.loads((out / "certificate.json").read_text())
    assert sum(r["decision"] == "answer" for r in rows) == cert["n_answered"]
    assert not math.isnan(cert["coverage"])


# --------------------------------------------------------------------------------------------
# acceptance on the shipped release's MedQA cell
# --------------------------------------------------------------------------------------------

RELEASE_CELL = Path(__file__).resolve().parents[1] / "data" / "simulated-v1" / "medqa" / "qwen3-8b"


def test_release_medqa_cell_certifies_and_apply_reproduces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {k: RELEASE_CELL / f"{k}.jsonl.gz" for k in ("logs", "probe", "nli")}
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        pytest.skip(f"the shipped release's MedQA cell is absent ({missing[0]}); the synthetic tests above cover certify")
    out = tmp_path / "o"
    rc, _stdout, err = run_cli(certify_argv(files, out), capsys)
    assert rc == 0, err
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["datasets"] == ["medqa"] and cert["backbones"] == ["Qwen/Qwen3-8B"]
    assert any(s["status"] == "certified" for s in cert["strata"])
    assert cert["n_answered"] > 0
    dec = tmp_path / "d.csv"
    rc, _, err = run_cli(["apply", "--certificate", out / "certificate.json", "--logs", files["logs"],
                          "--probe", files["probe"], "--nli", files["nli"], "--out", dec], capsys)
    assert rc == 0, err
    df = pd.read_csv(dec)
    assert len(df) == cert["n"]
    assert (df["decision"] == "answer").sum() / len(df) == cert["coverage"]
    for st in cert["strata"]:
        assert int((df.loc[df["stratum"] == st["name"], "decision"] == "answer").sum()) == st["n_answered"]


# --------------------------------------------------------------------------------------------
# library API and per-question reasons
# --------------------------------------------------------------------------------------------

def test_library_certificate_equals_cli(cell: dict[str, Path], certified: tuple[Path, dict[str, Any]]) -> None:
    inputs = deploy.load_inputs(cell["logs"], cell["probe"], cell["nli"])
    cert = deploy.certify_logs(inputs, alpha=0.15, created_by=certified[1]["created_by"])
    assert cert == certified[1]
    # the same with plain lists and no file records
    logs, probe, nli = _calibration(cell)
    bare = deploy.certify_logs(logs, probe, nli, alpha=0.15)
    assert bare["strata"] == cert["strata"] and bare["inputs"] == []


def test_apply_reasons_unseen_specialty_and_missing_probe(cell: dict[str, Path], tmp_path: Path) -> None:
    logs, probe, nli = _calibration(cell)
    cert = deploy.certify_logs(logs, probe, nli, alpha=0.15, stratify_by="specialty")
    s1 = [g for g in logs if len(g.rounds) == 1]
    new = [s1[0].model_copy(update={"specialty": "dermatology"}), s1[1], s1[2]]
    keep = {s1[0].qid, s1[2].qid}  # s1[1] loses its probe record
    d = deploy.apply_certificate(cert, new, [r for r in probe if r.qid in keep],
                                 [r for r in nli if r.qid in {g.qid for g in new}]).set_index("qid")
    assert d.loc[s1[0].qid, "stratum"] == "S1|dermatology"
    assert d.loc[s1[0].qid, "decision"] == "abstain"
    assert d.loc[s1[0].qid, "reason"] == "stratum not present at calibration: no certificate"
    assert math.isnan(d.loc[s1[1].qid, "score"]) and d.loc[s1[1].qid, "decision"] == "abstain"
    assert d.loc[s1[1].qid, "reason"] == "no score: probe or NLI record missing"
    assert not math.isnan(d.loc[s1[2].qid, "score"])
