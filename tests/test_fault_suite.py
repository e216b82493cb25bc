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
from probeguard_core import logs as L
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

    monkeypatch.setattr(os, "replace", flaky)
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

    monkeypatch.setattr(os, "replace", interrupted)
    rc, _, err = run(certify_argv(cell, out), capsys)
    assert rc == 130 and "interrupted" in err
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json"]
    assert (out / "certificate.json").read_text() == "old"


def test_failed_run_does_not_touch_existing_outputs(cell: dict[str, Path], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run(certify_argv(cell, out), capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rc, _, _err = run(certify_argv(cell, out, 0.15, "--delta", "2"), capsys)
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


def _thr(o: dict[str, Any]) -> dict[str, Any]:
    """The first stratum that holds a threshold."""
    return next(s for s in o["strata"] if s["threshold"] is not None)


def _thr_index(o: dict[str, Any]) -> int:
    return next(i for i, s in enumerate(o["strata"]) if s["threshold"] is not None)


def _bump(d: dict[str, Any], key: str, by: float) -> None:
    d[key] = d[key] + by


#: A certificate whose parts disagree (issue 12 §3): refused, naming the field that disagrees.
TAMPERED: list[tuple[str, Any, str]] = [
    ("threshold_lowered", lambda o: _bump(_thr(o), "threshold", -0.5), "threshold' is"),
    ("pvalue_edited", lambda o: _thr(o)["grid"][0].update(p_value=0.0), ".grid[0].p_value"),
    ("rejection_flipped", lambda o: [g.update(rejected=True) for g in _thr(o)["grid"]], "rejected"),
    ("selected_moved", lambda o: [g.update(selected=(j == 0)) for j, g in enumerate(_thr(o)["grid"])], ".grid' selects"),
    ("n_answered_inflated", lambda o: _bump(_thr(o), "n_answered", 5), ".n_answered"),
    ("answered_errors_hidden", lambda o: _thr(o).update(n_answered_errors=0) if _thr(o)["n_answered_errors"]
     else _bump(_thr(o), "n_answered_errors", 1), ".n_answered"),
    ("coverage_edited", lambda o: _bump(_thr(o), "coverage", 0.01), ".coverage"),
    ("error_rate_edited", lambda o: _bump(_thr(o), "error_rate", -0.01), ".error_rate"),
    ("alpha_raised", lambda o: o.update(alpha=0.3), ".p_value"),
    ("delta_raised", lambda o: o.update(delta=0.2), "bonferroni_level"),
    ("bonferroni_edited", lambda o: o.update(bonferroni_level=o["bonferroni_level"] * 2), "bonferroni_level"),
    ("total_n_edited", lambda o: _bump(o, "n", 1), "field 'n' is"),
    ("total_answered_edited", lambda o: _bump(o, "n_answered", 1), "field 'n_answered' is"),
    ("z_mean_edited", lambda o: _bump(o["standardization"]["medqa"]["kappa"], "mean", 0.05),
     "field 'standardization' was edited"),
    ("z_n_edited", lambda o: _bump(o["standardization"]["medqa"]["kappa"], "n", 1), "'standardization' counts"),
    ("z_sd_negative", lambda o: o["standardization"]["medqa"]["rse"].update(sd=-0.1), "sd >= 0"),
    ("certified_list_lies", lambda o: o.update(certified_strata=[s["name"] for s in o["strata"]]), "certified_strata"),
    ("tested_count_lies", lambda o: _bump(o, "n_tested_strata", 1), "n_tested_strata"),
    ("notes_edited", lambda o: o["notes"].append("trust me"), "field 'notes' was edited"),
    ("field_added", lambda o: o.update(extra=1), "field 'extra' was added"),
    ("hash_table_edited", lambda o: o["field_sha256"].update(alpha="0" * 64), "field 'alpha' was edited"),
    ("content_hash_edited", lambda o: o.update(content_sha256="0" * 64), "content_sha256"),
    ("status_lies", lambda o: _thr(o).update(status="not certified"), ".status"),
    ("grid_point_removed", lambda o: _thr(o)["grid"].pop(), ".grid' does not list"),
    ("grid_reordered", lambda o: o.update(grid=o["grid"][::-1]), "ascending"),
]


@pytest.mark.parametrize(("name", "edit", "message"), TAMPERED, ids=[t[0] for t in TAMPERED])
def test_tampered_certificate_is_refused(name: str, edit: Any, message: str, cert_path: Path, cell: dict[str, Path],
                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before issue 12 every one of these was applied silently (a lowered threshold answered more)."""
    obj = json.loads(cert_path.read_text())
    edit(obj)
    bad = tmp_path / "certificate.json"
    bad.write_text(json.dumps(obj, indent=2))
    dec = tmp_path / "d.csv"
    rc, _, err = run(["apply", "--certificate", bad, "--logs", cell["logs"], "--probe", cell["probe"],
                      "--nli", cell["nli"], "--out", dec], capsys)
    assert rc == 2, err
    line = one_error_line(err, "apply")
    assert str(bad) in line and message in line, line
    assert not dec.exists()


def test_untampered_certificate_round_trips(cert_path: Path) -> None:
    obj = json.loads(cert_path.read_text())
    cert = deploy.load_certificate(cert_path)
    assert cert.to_json() == obj and cert.to_bytes() == cert_path.read_bytes()
    assert obj["content_sha256"] and set(obj["field_sha256"]) >= {"alpha", "strata[S1]", "standardization"}


def test_version_1_certificate_is_refused_with_a_re_certify_message(cert_path: Path, cell: dict[str, Path],
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A format-1 certificate (certified_strata = the tested strata, no hashes) is refused (issue 25):
    it has no per-field hashes, so an edit recomputed consistently would pass; the deployer is told
    to re-certify.  Before issue 25 it was read, and an edited one applied."""
    obj = json.loads(cert_path.read_text())
    v1 = {k: v for k, v in obj.items() if k not in ("field_sha256", "content_sha256", "tested_strata", "n_tested_strata")}
    v1.update(format_version=1, certified_strata=obj["tested_strata"], n_certified_strata=obj["n_tested_strata"])
    for st in v1["strata"]:
        st["certified"] = st.pop("tested")
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(v1))
    with pytest.raises(deploy.DeployError, match=r"field 'format_version' is 1.*re-certify with `probeguard certify`"):
        deploy.load_certificate(p)
    dec = tmp_path / "d.csv"
    rc, _, err = run(["apply", "--certificate", p, "--logs", cell["logs"], "--probe", cell["probe"],
                      "--nli", cell["nli"], "--out", dec], capsys)
    line = one_error_line(err, "apply")
    assert rc == 2 and line.startswith(f"probeguard apply: error: {p}: field 'format_version' is 1"), line
    assert "probeguard certify" in line and not dec.exists()
    assert deploy.load_certificate(cert_path).format_version == 2  # the same certificate as format 2 reads


# --------------------------------------------------------------------------------------------
# no command writes over one of its own inputs, however the path is spelled (issue 12 §3)
# --------------------------------------------------------------------------------------------

def _spell(target: Path, how: str, tmp_path: Path) -> Path:
    """``target`` spelled relative (to the cwd), absolute with ``..``, or through a symlink."""
    if how == "relative":
        return Path(os.path.relpath(target, Path.cwd()))
    if how == "dotdot":
        return target.parent / ".." / target.parent.name / target.name
    link = tmp_path / f"link-{target.name}"
    link.symlink_to(target)
    return link


SPELLINGS = ["relative", "dotdot", "symlink"]


@pytest.mark.parametrize("how", SPELLINGS)
def test_apply_out_onto_its_logs_is_refused(how: str, cert_path: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    cell = build_cell(tmp_path / "c", n_s1=30, n_s2=20, n_s3=2)
    logs = tmp_path / "logs.jsonl"
    logs.write_bytes(Path(cell["logs"]).read_bytes())
    before = logs.read_bytes()
    rc, _, err = run(["apply", "--certificate", cert_path, "--logs", logs, "--out", _spell(logs, how, tmp_path)], capsys)
    assert rc == 2 and "never writes over one of its own inputs" in one_error_line(err, "apply")
    assert logs.read_bytes() == before


@pytest.mark.parametrize("how", SPELLINGS)
def test_apply_dossiers_onto_the_certificate_is_refused(how: str, cert_path: Path, cell: dict[str, Path],
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert = tmp_path / "cert.jsonl"
    cert.write_bytes(cert_path.read_bytes())
    rc, _, err = run(["apply", "--certificate", cert, "--logs", cell["logs"], "--out", tmp_path / "d.csv",
                      "--dossiers", _spell(cert, how, tmp_path)], capsys)
    assert rc == 2 and "never writes over one of its own inputs" in one_error_line(err, "apply")
    assert cert.read_bytes() == cert_path.read_bytes() and not (tmp_path / "d.csv").exists()


@pytest.mark.parametrize("how", SPELLINGS)
def test_certify_out_onto_its_inputs_is_refused(how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Logs saved as DIR/report.html with --out DIR: certify would replace its own input."""
    cell = build_cell(tmp_path / "c", n_s1=30, n_s2=20, n_s3=2)
    folder = tmp_path / "o"
    folder.mkdir()
    logs = folder / "report.html"
    logs.write_bytes(Path(cell["logs"]).read_bytes())
    before = logs.read_bytes()
    spelled = _spell(logs, how, tmp_path)
    rc, _, err = run(["certify", "--logs", spelled, "--alpha", "0.2", "--allow-empty-strata", "--out", folder], capsys)
    assert rc == 2 and "never writes over one of its own inputs" in one_error_line(err), err
    assert logs.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["report.html"]


@pytest.mark.parametrize("how", SPELLINGS)
def test_convert_out_onto_its_questions_is_refused(how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = tmp_path / "benchmark.json"
    questions.write_text('{"medqa": {"q1": {"question": "Q?", "options": {"A": "a", "B": "b"}, "answer": "A"}}}')
    before = questions.read_bytes()
    tree = tmp_path / "tree"
    tree.mkdir()
    rc, _, err = run(["convert", "ma-rag", "--tree", tree, "--questions", questions, "--dataset", "medqa",
                      "--backbone", "m", "--out", _spell(questions, how, tmp_path)], capsys)
    assert rc == 2 and "never writes over one of its own inputs" in one_error_line(err, "convert")
    assert questions.read_bytes() == before


def test_convert_out_inside_its_tree_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    rc, _, err = run(["convert", "ma-rag", "--tree", tree, "--questions", tmp_path / "q.json", "--dataset", "medqa",
                      "--backbone", "m", "--out", tree / "logs.jsonl"], capsys)
    assert rc == 2 and "inside the input folder" in one_error_line(err, "convert")


# --------------------------------------------------------------------------------------------
# probe / NLI / self-report records join their logs on qid, dataset and backbone (issue 12 §3)
# --------------------------------------------------------------------------------------------

def _edited_records(src: Path, dst: Path, edit: Any) -> Path:
    recs = [json.loads(x) for x in Path(src).read_text().splitlines()]
    edit(recs)
    return write_records(dst, recs)


JOIN_CASES = [
    ("probe", "backbone", lambda r: r[2].update(backbone="other/model"), ":3: backbone: probe record of backbone"),
    ("probe", "dataset", lambda r: r[0].update(dataset="medmcqa"), ":1: dataset: probe record of dataset"),
    ("probe", "unknown_qid", lambda r: r.append(dict(r[0], qid="not-logged")), "qid: probe record for qid 'not-logged'"),
    ("nli", "backbone", lambda r: r[1].update(backbone="other/model"), ":2: backbone: NLI record of backbone"),
    ("nli", "dataset", lambda r: r[0].update(dataset="medmcqa"), ":1: dataset: NLI record of dataset"),
    ("nli", "unknown_qid", lambda r: r.append(dict(r[0], qid="not-logged")), "'not-logged' is not in the execution logs"),
]


@pytest.mark.parametrize(("role", "what", "edit", "message"), JOIN_CASES, ids=[f"{c[0]}-{c[1]}" for c in JOIN_CASES])
@pytest.mark.parametrize("command", ["certify", "apply"])
def test_records_must_join_their_logs(role: str, what: str, edit: Any, message: str, command: str,
                                      cell: dict[str, Path], cert_path: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(cell)
    files[role] = _edited_records(cell[role], tmp_path / f"{role}.jsonl", edit)
    out = tmp_path / ("out" if command == "certify" else "d.csv")
    if command == "certify":
        argv = certify_argv(files, out, 0.2)
    else:
        argv = ["apply", "--certificate", cert_path, "--logs", files["logs"], "--probe", files["probe"],
                "--nli", files["nli"], "--out", out]
    rc, _, err = run(argv, capsys)
    assert rc == 2
    line = one_error_line(err, command)
    assert str(files[role]) in line and message in line, line
    assert not out.exists()


@pytest.mark.parametrize("what", ["backbone", "dataset", "unknown_qid"])
def test_self_report_joins_by_the_same_rule(what: str, tmp_path: Path) -> None:
    """The release reader applies the one rule to self-report records too."""
    from probeguard_core import release as R

    folder = tmp_path / "medqa" / "qwen3-8b"
    logs = [make_log([["A", "A"]], qid=f"q{i}", dataset="medqa", backbone="Qwen/Qwen3-8B") for i in range(3)]
    write_records(folder / "logs.jsonl", logs)
    srs = [{"schema_version": 1, "qid": f"q{i}", "dataset": "medqa", "backbone": "Qwen/Qwen3-8B",
            "verbalized_confidence": 80.0, "p_true": 0.7} for i in range(3)]
    {"backbone": lambda: srs[1].update(backbone="x/y"), "dataset": lambda: srs[1].update(dataset="pubmedqa"),
     "unknown_qid": lambda: srs[1].update(qid="zz")}[what]()
    write_records(folder / "self_report.jsonl", srs)
    cell = R.Cell(release=None, path=folder, dataset="medqa", backbone="Qwen/Qwen3-8B", role="main")  # type: ignore[arg-type]
    with pytest.raises(L.LogFormatError, match=r"self_report\.jsonl:2: (qid|dataset|backbone): self-report record"):
        _ = cell.self_report


# --------------------------------------------------------------------------------------------
# the summary line and interrupted runs (issue 12 §3)
# --------------------------------------------------------------------------------------------

def test_summary_counts_only_strata_with_a_threshold(cell: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(certify_argv(cell, tmp_path / "o", 0.02), capsys)  # S1 and S2 tested, neither certifies
    assert rc == 0, err
    cert = json.loads((tmp_path / "o" / "certificate.json").read_text())
    n_thr = sum(s["threshold"] is not None for s in cert["strata"])
    assert cert["n_tested_strata"] == 2 and n_thr == 0
    assert f"{n_thr} certified strata (with a threshold) of 2 tested" in out.splitlines()[0], out


def test_summary_counts_one_certified_of_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = build_cell(tmp_path / "c", n_s1=260, n_s2=140, n_s3=30)
    rc, out, err = run(certify_argv(cell, tmp_path / "o", 0.15), capsys)
    assert rc == 0, err
    cert = json.loads((tmp_path / "o" / "certificate.json").read_text())
    with_thr = [s["name"] for s in cert["strata"] if s["threshold"] is not None]
    assert with_thr == ["S1"] and cert["n_certified_strata"] == 1
    assert "1 certified strata (with a threshold) of 2 tested" in out.splitlines()[0], out


def test_stale_temporaries_of_a_killed_run_are_removed(cell: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed between mkstemp and rename (SIGKILL: no cleanup) leaves .NAME.XXXXXXXX.tmp; the next run removes them."""
    out = tmp_path / "o"
    out.mkdir()
    stale = [out / ".certificate.json.ab_cd123.tmp", out / ".report.html.zz9zz9zz.tmp", out / ".dossiers.jsonl.k2k2k2k2.tmp"]
    for p in stale:
        p.write_text("partial")
    keep = out / ".notes.txt.abcdefgh.tmp"  # not a name this writer creates: left alone
    keep.write_text("mine")
    rc, _, err = run(certify_argv(cell, out, 0.2), capsys)
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == [keep.name, "certificate.json", "dossiers.jsonl", "report.html"]


def test_killed_run_leaves_nothing_the_next_run_keeps(cell: dict[str, Path], tmp_path: Path) -> None:
    """SIGKILL a real certify run in the middle of writing; re-run; only the three outputs remain."""
    out = tmp_path / "o"
    code = (
        "import os, signal, sys\n"
        "import probeguard_core.deploy.certify\n"
        "def die(a, b):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.replace = die\n"
        "from probeguard_core.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = [str(a) for a in certify_argv(cell, out, 0.2)]
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ), check=False)
    assert r.returncode == -9
    left = sorted(p.name for p in out.iterdir())
    assert left and all(n.endswith(".tmp") for n in left), left  # what a killed run leaves
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["certificate.json", "dossiers.jsonl", "report.html"]


def test_interrupted_before_writing_creates_no_folder(cell: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*a: Any, **k: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "calibration_table", interrupted)
    out = tmp_path / "deep" / "er" / "o"
    rc, _, _ = run(certify_argv(cell, out, 0.2), capsys)
    assert rc == 130
    assert not (tmp_path / "deep").exists()


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
