"""Bad input and faults through the ``probeguard certify`` / ``apply`` command line (issue 6, item 4).

Every malformed kind of the foundation (the case table of ``test_logs_malformed.py``), plus
truncated ``.gz``, empty files, duplicate qids across files, alpha or delta out of (0, 1), a
certified stratum with no questions, an output folder that cannot be written, a malformed
certificate for ``apply`` and failures in the middle of writing.  Each must give one clear
line on stderr, a non-zero exit and no partial output.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import make_log, write_records
from test_cli_certify import build_cell, certify_argv
from test_logs_malformed import CASES, _write

from probeguard_core import deploy
from probeguard_core.cli import main

LOG_CASES = [c for c in CASES if c.reader in ("logs", "probe", "nli")]


def run(argv: list[Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(err: str, command: str = "certify") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"probeguard {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def no_output(out: Path) -> None:
    """Nothing was written: the folder does not exist (it is created only on success)."""
    assert not out.exists(), sorted(p.name for p in out.iterdir()) if out.is_dir() else out


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_cell(tmp_path_factory.mktemp("cell"), n_s1=120, n_s2=80, n_s3=10)


@pytest.fixture(scope="module")
def cert_path(cell: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cert") / "o"
    assert main([str(a) for a in certify_argv(cell, out, 0.2)]) == 0
    return out / "certificate.json"


# --------------------------------------------------------------------------------------------
# every malformed kind of the foundation, through `certify`
# --------------------------------------------------------------------------------------------

def test_the_case_table_is_large() -> None:
    assert len({c.name for c in LOG_CASES}) >= 30


@pytest.mark.parametrize("case", LOG_CASES, ids=lambda c: c.name)
def test_malformed_input_through_certify(case: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, case)
    argv: list[Any] = ["certify", "--alpha", "0.1", "--out", tmp_path / "out"]
    if case.reader == "logs":
        argv += ["--logs", path]
    else:
        logs = case.logs if case.logs is not None else [make_log([["A", "A", "A"]], qid="q1")]
        logs_path = write_records(tmp_path / "ok" / "logs.jsonl", logs)
        argv += ["--logs", logs_path, f"--{case.reader}", path]
    rc, _, err = run(argv, capsys)
    assert rc == 2
    line = one_error_line(err)
    where = str(path) if case.line is None else f"{path}:{case.line}"
    assert f"error: {where}: {case.field or '<record>'}: " in line, line
    assert case.reason in line, line
    no_output(tmp_path / "out")


# --------------------------------------------------------------------------------------------
# files: truncated gzip, empty files, duplicates across files
# --------------------------------------------------------------------------------------------

def _truncate(src: Path, dst: Path) -> Path:
    data = gzip.compress(src.read_bytes(), mtime=0)
    dst.write_bytes(data[: len(data) // 2])
    return dst


@pytest.mark.parametrize("role", ["logs", "probe", "nli"])
def test_truncated_gz(role: str, cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(cell)
    files[role] = _truncate(Path(cell[role]), tmp_path / f"{role}.jsonl.gz")
    out = tmp_path / "out"
    rc, _, err = run(certify_argv(files, out), capsys)
    assert rc == 2
    line = one_error_line(err)
    assert f"{files[role]}:" in line and "gzip" in line
    no_output(out)


@pytest.mark.parametrize("role", ["logs", "probe", "nli"])
@pytest.mark.parametrize("gz", [False, True])
def test_empty_file(role: str, gz: bool, cell: dict[str, Path], tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(cell)
    p = tmp_path / (f"{role}.jsonl.gz" if gz else f"{role}.jsonl")
    p.write_bytes(gzip.compress(b"", mtime=0) if gz else b"")
    files[role] = p
    out = tmp_path / "out"
    rc, _, err = run(certify_argv(files, out), capsys)
    assert rc == 2
    assert f"{p}: <record>: file is empty" in one_error_line(err)
    no_output(out)


def test_missing_file(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(cell, nli=tmp_path / "nope.jsonl")
    rc, _, err = run(certify_argv(files, tmp_path / "out"), capsys)
    assert rc == 2 and "nope.jsonl" in one_error_line(err) and "does not exist" in err
    no_output(tmp_path / "out")


def test_duplicate_qids_across_logs_files(cell: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(cell["logs"]).read_text().splitlines(keepends=True)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(lines[:100]))
    b.write_text("".join(lines[99:]))  # line 99 (0-based) in both files
    qid = json.loads(lines[99])["qid"]
    out = tmp_path / "out"
    rc, _, err = run(["certify", "--logs", a, "--logs", b, "--probe", cell["probe"], "--nli", cell["nli"],
                      "--alpha", "0.15", "--out", out], capsys)
    assert rc == 2
    line = one_error_line(err)
    assert f"{b}:1: qid: duplicate qid {qid!r} across files (also in {a})" in line
    no_output(out)


@pytest.mark.parametrize("role", ["probe", "nli"])
def test_duplicate_records_across_probe_or_nli_files(role: str, cell: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = certify_argv(cell, out) + [f"--{role}", cell[role]]  # the same file twice
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "across files" in one_error_line(err)
    no_output(out)


# --------------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["alpha", "delta"])
@pytest.mark.parametrize("value", ["0", "1", "-0.1", "1.5", "nan", "inf", "abc"])
def test_level_out_of_range(name: str, value: str, cell: dict[str, Path], tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    argv = ["certify", "--logs", cell["logs"], "--probe", cell["probe"], "--nli", cell["nli"],
            "--alpha", "0.15", "--out", out]
    if name == "alpha":
        argv[argv.index("--alpha") + 1] = value
    else:
        argv += ["--delta", value]
    rc, _, err = run(argv, capsys)
    assert rc == 2
    line = one_error_line(err)
    assert f"--{name} must be" in line and repr(value) in line
    no_output(out)


def test_library_rejects_levels_too(cell: dict[str, Path]) -> None:
    inputs = deploy.load_inputs(cell["logs"], cell["probe"], cell["nli"])
    for kw in ({"alpha": 0.0}, {"alpha": 1.0}, {"alpha": 0.1, "delta": 1.2}, {"alpha": float("nan")}):
        with pytest.raises(deploy.DeployError, match="must be"):
            deploy.certify_logs(inputs, **kw)


# --------------------------------------------------------------------------------------------
# a certified stratum with no calibration questions
# --------------------------------------------------------------------------------------------

def test_empty_certified_stratum_refused_then_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Decision: S1 or S2 without a single calibration question is refused by default (a
    certificate that silently refers a whole stratum is a surprise); --allow-empty-strata
    accepts it, the stratum abstains as a whole and is not counted in the Bonferroni m."""
    cell = build_cell(tmp_path / "c", n_s1=120, n_s2=0, n_s3=5)
    out = tmp_path / "out"
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 2
    line = one_error_line(err)
    assert "stratum S2 has no calibration questions" in line and "--allow-empty-strata" in line
    no_output(out)
    rc, _, err = run([*certify_argv(cell, out), "--allow-empty-strata"], capsys)
    assert rc == 0, err
    assert "stratum S2 has no calibration questions" in err  # repeated as a note
    cert = json.loads((out / "certificate.json").read_text())
    s2 = next(s for s in cert["strata"] if s["name"] == "S2")
    assert s2["n"] == 0 and s2["threshold"] is None and not s2["certified"] and s2["status"] == "abstains"
    assert cert["certified_strata"] == ["S1"] and cert["bonferroni_level"] == pytest.approx(0.05 / 20)
    assert "No calibration questions" in (out / "report.html").read_text()


def test_empty_logs_after_filtering_is_impossible_but_library_refuses(tmp_path: Path) -> None:
    with pytest.raises(deploy.DeployError, match="logs are empty"):
        deploy.certify_logs([], alpha=0.1)


# --------------------------------------------------------------------------------------------
# outputs that cannot be written
# --------------------------------------------------------------------------------------------

def test_output_folder_under_a_regular_file(cell: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out = blocker / "sub" / "dir"
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 2
    assert f"cannot create output folder {out}" in one_error_line(err) and "is a file" in err
    assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_output_is_a_regular_file(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 2 and "is not a folder" in one_error_line(err)
    assert out.read_text() == "x"


def test_output_under_proc(cell: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = Path("/proc/probeguard-cannot-write-here")
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 2 and "cannot create output folder" in one_error_line(err)
    assert not out.exists()


def test_rename_failure_leaves_nothing(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The second rename fails: the first file is removed again, no temporary file remains,
    and the folder this run created is removed."""
    real = os.replace
    calls: list[str] = []

    def flaky(src: str, dst: Any) -> None:
        calls.append(str(dst))
        if str(dst).endswith("report.html"):
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(deploy.os, "replace", flaky)
    out = tmp_path / "new" / "out"
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 2 and "No space left on device" in one_error_line(err)
    assert calls and calls[0].endswith("certificate.json")
    assert not (tmp_path / "new").exists()


def test_interrupt_while_writing_keeps_old_outputs(cell: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "certificate.json").write_text("old")
    real = os.replace

    def interrupted(src: str, dst: Any) -> None:
        if str(dst).endswith("certificate.json"):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(deploy.os, "replace", interrupted)
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 130 and "interrupted" in err
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json"]
    assert (out / "certificate.json").read_text() == "old"


def test_failed_run_does_not_touch_existing_outputs(cell: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(certify_argv(cell, out), capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rc, _, err = run(certify_argv(cell, out, 0.15, "--delta", "2"), capsys)
    assert rc == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --------------------------------------------------------------------------------------------
# apply: malformed certificate, bad outputs
# --------------------------------------------------------------------------------------------

def _mutated(cert_path: Path, fn: Any) -> str:
    obj = json.loads(cert_path.read_text())
    fn(obj)
    return json.dumps(obj)


BAD_CERTS: list[tuple[str, Any, str]] = [
    ("empty", lambda p: "", "certificate file is empty"),
    ("not_json", lambda p: p.read_text()[:200], "not valid JSON"),
    ("array", lambda p: "[1, 2]", "expected a JSON object, got list"),
    ("wrong_format", lambda p: _mutated(p, lambda o: o.update(format="something")), "not a probeguard certificate"),
    ("missing_strata", lambda p: _mutated(p, lambda o: o.pop("strata")), "missing field 'strata'"),
    ("missing_standardization", lambda p: _mutated(p, lambda o: o.pop("standardization")),
     "missing field 'standardization'"),
    ("threshold_string", lambda p: _mutated(p, lambda o: o["strata"][0].update(threshold="0.3")),
     "strata[0].threshold must be a finite number or null"),
    ("nan_token", lambda p: p.read_text().replace('"alpha": 0.2', '"alpha": NaN'), "non-standard JSON number NaN"),
    ("alpha_out_of_range", lambda p: _mutated(p, lambda o: o.update(alpha=1.5)), "alpha must be in (0, 1)"),
    ("future_version", lambda p: _mutated(p, lambda o: o.update(format_version=99)), "unsupported format_version 99"),
    ("bad_constants", lambda p: _mutated(p, lambda o: o["standardization"]["medqa"].pop("rse")),
     "standardization['medqa'].rse must hold numeric 'mean' and 'sd'"),
    ("duplicate_stratum", lambda p: _mutated(p, lambda o: o["strata"].append(o["strata"][0])), "duplicate stratum"),
    ("not_utf8", lambda p: b"\xff\xfe{}", "cannot read the certificate"),
]


@pytest.mark.parametrize(("name", "make", "message"), BAD_CERTS, ids=[b[0] for b in BAD_CERTS])
def test_malformed_certificate_for_apply(name: str, make: Any, message: str, cert_path: Path, cell: dict[str, Path],
                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "certificate.json"
    content = make(cert_path)
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    dec = tmp_path / "d.csv"
    rc, _, err = run(["apply", "--certificate", bad, "--logs", cell["logs"], "--probe", cell["probe"],
                      "--nli", cell["nli"], "--out", dec], capsys)
    assert rc == 2
    line = one_error_line(err, "apply")
    assert str(bad) in line and message in line, line
    assert not dec.exists()


def test_apply_missing_certificate(cell: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(["apply", "--certificate", tmp_path / "none.json", "--logs", cell["logs"],
                      "--out", tmp_path / "d.csv"], capsys)
    assert rc == 2 and "does not exist" in one_error_line(err, "apply")


@pytest.mark.parametrize("name", ["d.txt", "d.json", "decisions"])
def test_apply_output_suffix(name: str, cert_path: Path, cell: dict[str, Path], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(["apply", "--certificate", cert_path, "--logs", cell["logs"], "--out", tmp_path / name], capsys)
    assert rc == 2 and ".csv or .jsonl" in one_error_line(err, "apply")
    assert not (tmp_path / name).exists()


def test_apply_output_unwritable(cert_path: Path, cell: dict[str, Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run(["apply", "--certificate", cert_path, "--logs", cell["logs"], "--out", blocker / "d.csv"],
                     capsys)
    assert rc == 2 and "is a file" in one_error_line(err, "apply")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_apply_malformed_logs(cert_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "logs.jsonl"
    bad.write_text('{"schema_version": 1, "qid": \n')
    dec = tmp_path / "d.jsonl"
    rc, _, err = run(["apply", "--certificate", cert_path, "--logs", bad, "--out", dec], capsys)
    assert rc == 2 and f"{bad}:1: <record>: invalid JSON" in one_error_line(err, "apply")
    assert not dec.exists()


# --------------------------------------------------------------------------------------------
# the real console script (exit status, one line, no traceback)
# --------------------------------------------------------------------------------------------

def test_console_script_truncated_gz(cell: dict[str, Path], tmp_path: Path) -> None:
    bad = _truncate(Path(cell["logs"]), tmp_path / "logs.jsonl.gz")
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("probeguard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "probeguard_core.cli"]
    r = subprocess.run([*cmd, "certify", "--logs", str(bad), "--alpha", "0.1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.startswith(f"probeguard certify: error: {bad}:") and "Traceback" not in r.stderr
    assert not out.exists()
