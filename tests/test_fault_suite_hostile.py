"""Hostile input, round three (issue 25): the fault suite's cases against the surfaces added since.

One section per class of the issue: a record that hangs the run (the claim extractor), certificate
versions, release folders, converters, the monitor, lone surrogates, spreadsheet formulas in
``decisions.csv`` and the book's own input.  Every refusal is exit 2 and one line
``file[:line]: field: reason`` (no traceback, no partial output, inputs unchanged); the helpers
are those of :mod:`test_fault_suite`.  (Decompression bombs and line sizes: the readers' own tests.)
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_cli_certify import build_cell
import test_fault_suite
from test_fault_suite import one_error_line, run

from probeguard_core import claims as C
from probeguard_core import deploy
from probeguard_core.deploy.certificate import READABLE_VERSIONS

ROOT = Path(__file__).resolve().parents[1]
RELEASES = [ROOT / "data" / "simulated-v1" / "medqa" / "qwen3-8b",
            ROOT / "data" / "real-smollm2-135m-mmlu-med" / "mmlu-med" / "smollm2-135m-instruct"]
cell, cert_path = test_fault_suite.cell, test_fault_suite.cert_path  # the fault suite's cell and certificate fixtures

# --------------------------------------------------------------------------------------------
# 1. a record that hangs the run: the claim extractor is linear in the rationale's length
# --------------------------------------------------------------------------------------------

#: The pattern the extractor used before issue 25 (quadratic on repeated unclosed tags).
OLD_SPAN = re.compile(r"<answer>.*?</answer>", re.IGNORECASE | re.DOTALL)
TOKENS = ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "<answer", "answer>", "</", "A", ". ", "\n", "x", "İ"]




@pytest.mark.parametrize("release_cell", RELEASES, ids=lambda p: p.parts[-3])
def test_claims_unchanged_on_the_shipped_releases(release_cell: Path) -> None:
    """The NLI cache of each shipped release holds the claims the old extractor gave (joined by a
    space) for round 1: the new scan reproduces every one of a sample, and strips as the old pattern did."""
    logs = {}
    for raw in gzip.decompress((release_cell / "logs.jsonl.gz").read_bytes()).splitlines()[:300]:
        log = json.loads(raw)
        logs[log["qid"]] = log
    checked = tagged = 0
    for raw in gzip.decompress((release_cell / "nli.jsonl.gz").read_bytes()).splitlines():
        rec = json.loads(raw)
        if rec["round"] != 1 or rec["qid"] not in logs:
            continue
        cands = logs[rec["qid"]]["rounds"][0]["candidates"]
        for idx, claim in zip(rec["candidates"], rec["claims"], strict=True):
            text = cands[idx]["rationale"]
            assert C.strip_answer_tags(text) == OLD_SPAN.sub("", text)
            assert " ".join(C.extract_claims(text)) == claim, (rec["qid"], idx)
            checked += 1
            tagged += "<answer>" in text.lower()
    assert checked >= 100 and tagged >= 10, (checked, tagged)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=16))
def test_strip_answer_tags_equals_the_old_pattern(tokens: list[str]) -> None:
    text = "".join(tokens)
    assert C.strip_answer_tags(text) == OLD_SPAN.sub("", text)


def test_hostile_rationale_is_handled() -> None:
    """1 MiB of unclosed (and of closed) answer tags: the same claims as the old pattern gives on a
    short copy, in one linear scan (the old pattern took minutes; no time is asserted here, the
    benchmark benchmarks/hostile_rationale.py prints it)."""
    unclosed = "<answer>A " * (2**20 // 10) + "Therefore B."
    assert C.extract_claims(unclosed) == [unclosed.strip()]  # no span closes: nothing removed, one sentence
    closed = "<answer>A</answer> " * (2**20 // 19) + "Hence C. It fits."
    assert C.extract_claims(closed) == ["Hence C."]
    short = "<answer>A " * 50 + "x </answer> <answer>B" + ". Thus D is best. "
    assert C.strip_answer_tags(short) == OLD_SPAN.sub("", short)
    rng = random.Random(42)
    mixed = "".join(rng.choice(TOKENS) for _ in range(200_000))
    assert C.strip_answer_tags(mixed) == OLD_SPAN.sub("", mixed)  # closes often: the old pattern is fast here


# --------------------------------------------------------------------------------------------
# 2. certificates: every accepted version self-checked; unknown versions refused; relabelling refused
# --------------------------------------------------------------------------------------------

def _edit_and_relabel(obj: dict, version: object) -> dict:
    """Add a note (an edit the hashes catch) and change the version."""
    obj = dict(obj, notes=[*obj["notes"], "edited after certification"])
    obj["format_version"] = version
    return obj


@pytest.mark.parametrize("version", [0, 1, 3, 99, -1, "2", 2.0, True, None])
def test_certificate_edited_and_relabelled_is_refused(version: object, cert_path: Path, cell: dict[str, Path],
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An edited version-2 certificate with its format_version changed up, down or to a non-integer:
    refused by apply (down to 1 it would have skipped the hash check before issue 25)."""
    obj = _edit_and_relabel(json.loads(cert_path.read_text()), version)
    bad = tmp_path / "certificate.json"
    bad.write_text(json.dumps(obj, indent=2))
    before = bad.read_bytes()
    dec = tmp_path / "d.csv"
    rc, _, err = run(["apply", "--certificate", bad, "--logs", cell["logs"], "--probe", cell["probe"],
                      "--nli", cell["nli"], "--out", dec], capsys)
    assert rc == 2, err
    line = one_error_line(err, "apply")
    assert str(bad) in line and "format_version" in line, line
    assert not dec.exists() and bad.read_bytes() == before


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_every_readable_version_is_self_checked(version: int, cert_path: Path, tmp_path: Path) -> None:
    """Each version the reader accepts recomputes its numbers: a lowered threshold is refused."""
    obj = json.loads(cert_path.read_text())
    assert obj["format_version"] == version
    p = tmp_path / "c.json"
    p.write_text(json.dumps(obj))
    deploy.load_certificate(p)  # honest: read
    next(s for s in obj["strata"] if s["threshold"] is not None)["threshold"] -= 0.5
    p.write_text(json.dumps(obj))
    with pytest.raises(deploy.DeployError, match=r"threshold' is"):
        deploy.load_certificate(p)


# --------------------------------------------------------------------------------------------
# 7. decisions.csv opened in a spreadsheet: formula cells neutralised (OWASP)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_decisions_csv_neutralises_formula_cells(start: str, cert_path: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"{start}HYPERLINK(\"http://x\")"
    hostile = build_cell(tmp_path / "c", n_s1=12, n_s2=6, n_s3=2, qid_prefix=prefix)
    raw = [json.loads(x)["qid"] for x in Path(hostile["logs"]).read_text().splitlines()]
    assert all(q.startswith(start) for q in raw)
    dec, jl = tmp_path / "d.csv", tmp_path / "d.jsonl"
    for out in (dec, jl):
        rc, _, err = run(["apply", "--certificate", cert_path, "--logs", hostile["logs"], "--probe", hostile["probe"],
                          "--nli", hostile["nli"], "--out", out], capsys)
        assert rc == 0, err
    with dec.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["qid"] for r in rows] == [f"'{q}" for q in raw]
    for r in rows:  # no other text cell starts a formula; numbers stay numbers
        assert not any(v.startswith(("=", "+", "@", "\t", "\r")) for v in r.values()), r
        if r["score"]:
            float(r["score"])
    assert [json.loads(x)["qid"] for x in jl.read_text().splitlines()] == raw  # JSON Lines: raw


def test_neutralise_formulas_leaves_numbers_and_plain_text() -> None:
    frame = pd.DataFrame({"qid": ["a", "=1+1", "-x", "b-c", "@me"], "score": [-0.5, 1.0, -2.0, 0.0, 3.0]})
    out = deploy.apply.neutralise_formulas(frame)
    assert out["qid"].tolist() == ["a", "'=1+1", "'-x", "b-c", "'@me"]
    assert out["score"].tolist() == [-0.5, 1.0, -2.0, 0.0, 3.0]
    assert frame["qid"].tolist()[1] == "=1+1"  # the input is not changed


# --------------------------------------------------------------------------------------------
# 4. converters: non-canonical question / round numbers, round 0, a 5,000-digit integer
# --------------------------------------------------------------------------------------------

MA_RAG = ROOT / "tests" / "fixtures" / "ma_rag"
CONVERT_ARGS = ["--questions", str(MA_RAG / "MedQA_small.json"), "--dataset", "medqa", "--backbone", "Qwen/Qwen3-8B",
                "--n-candidates", "3", "--max-rounds", "3"]


def _without_progress(err: str) -> str:
    """stderr less the converter's progress bar (tqdm redraws with carriage returns)."""
    return "\n".join(x for x in err.replace("\r", "\n").splitlines() if x.strip() and "question/s" not in x)


def _good_tree(tmp_path: Path) -> Path:
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(MA_RAG / "run_good", tree)
    return tree


def _question_dir(tree: Path) -> Path:
    return next(p for p in sorted(tree.rglob("question_0")) if p.is_dir())


CONVERTER_CASES = [
    ("question_02_beside_question_2", lambda q: q.parent / "question_02",
     lambda q, bad: __import__("shutil").copytree(q, bad), "leading zero"),
    ("round_02_beside_round_2", lambda q: q / "round_02.jsonl",
     lambda q, bad: bad.write_bytes((q / "round_1.jsonl").read_bytes()), "leading zero"),
    ("round_0", lambda q: q / "round_0.jsonl",
     lambda q, bad: bad.write_bytes((q / "round_1.jsonl").read_bytes()), "rounds are numbered from 1"),
    ("question_5000_digits", lambda q: q.parent / ("question_" + "7" * 5000)[:250],
     lambda q, bad: __import__("shutil").copytree(q, bad), "digits is too long"),
]


@pytest.mark.parametrize(("name", "where", "make", "reason"), CONVERTER_CASES, ids=[c[0] for c in CONVERTER_CASES])
def test_converter_refuses_ambiguous_numbers(name: str, where, make, reason: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    tree = _good_tree(tmp_path)
    q = _question_dir(tree)
    bad = where(q)
    make(q, bad)
    out = tmp_path / "logs.jsonl"
    rc, _, err = run(["convert", "ma-rag", "--tree", tree, *CONVERT_ARGS, "--out", out], capsys)
    assert rc == 2, err
    line = one_error_line(_without_progress(err), "convert")
    assert f"{bad}: <record>: " in line and reason in line, line
    assert not out.exists()


def test_questions_file_with_a_5000_digit_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    questions = tmp_path / "benchmark.json"
    questions.write_text('{"medqa": {"q1": {"question": "Q?", "options": {"A": "a", "B": "b"}, "answer": "A", '
                         '"id": ' + "9" * 5000 + "}}}")
    out = tmp_path / "logs.jsonl"
    rc, _, err = run(["convert", "ma-rag", "--tree", _good_tree(tmp_path), "--questions", questions, "--dataset",
                      "medqa", "--backbone", "m", "--out", out], capsys)
    assert rc == 2, err
    line = one_error_line(_without_progress(err), "convert")
    assert f"{questions}: <record>: invalid JSON" in line and "digits" in line, line
    assert not out.exists()


def test_questions_file_nested_too_deeply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A deeply nested questions file: one line naming the file, no RecursionError traceback."""
    questions = tmp_path / "benchmark.json"
    questions.write_text('{"medqa": ' + "[" * 100_000 + "]" * 100_000 + "}")
    out = tmp_path / "logs.jsonl"
    rc, _, err = run(["convert", "ma-rag", "--tree", _good_tree(tmp_path), "--questions", questions, "--dataset",
                      "medqa", "--backbone", "m", "--out", out], capsys)
    assert rc == 2, err
    line = one_error_line(_without_progress(err), "convert")
    assert f"{questions}: <record>: invalid JSON: nested too deeply" in line, line
    assert not out.exists()


# --------------------------------------------------------------------------------------------
# 3. release folders: every file against the manifest, nothing outside, strict JSON, provenance
# --------------------------------------------------------------------------------------------

def _tiny_release(tmp_path: Path, provenance: str = "simulated", generator: str = "probeguard_core.simulate") -> Path:
    from helpers import make_log, write_records

    from probeguard_core.release import write_manifest

    root = tmp_path / "rel"
    logs = [make_log([["A", "A"]], qid=f"q{i}", dataset="medqa", backbone="Qwen/Qwen3-8B") for i in range(3)]
    write_records(root / "medqa" / "qwen3-8b" / "logs.jsonl", logs)
    write_manifest(root, name="tiny", provenance=provenance, seed=42, extra={"generator": generator},
                   cells=[{"dataset": "medqa", "backbone": "Qwen/Qwen3-8B", "path": "medqa/qwen3-8b"}])
    return root


def _manifest_edit(fn):
    def edit(root: Path) -> Path:
        m = root / "manifest.json"
        obj = json.loads(m.read_text())
        fn(obj, root)
        m.write_text(json.dumps(obj))
        return m
    return edit


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _symlink_out(root: Path) -> Path:
    outside = root.parent / "secret.txt"
    outside.write_text("outside")
    link = root / "medqa" / "notes.txt"
    link.symlink_to(outside)
    return link


RELEASE_CASES = [
    ("extra_file", lambda r: _write(r / "medqa" / "qwen3-8b" / "extra.txt", b"x"), "not listed in"),
    ("missing_file", lambda r: (r / "medqa" / "qwen3-8b" / "logs.jsonl").unlink() or r / "manifest.json",
     "logs.jsonl"),
    ("dotdot_entry", _manifest_edit(lambda o, r: o["files"].update({"../outside.txt": "0" * 64})), "leaves the release"),
    ("absolute_entry", _manifest_edit(lambda o, r: o["files"].update({"/etc/passwd": "0" * 64})), "leaves the release"),
    ("dotdot_cell", _manifest_edit(lambda o, r: o["cells"][0].update(path="../rel/medqa/qwen3-8b")),
     "leaves the release"),
    ("symlink_out", _symlink_out, "a symlink pointing outside"),
    ("duplicate_provenance", lambda r: _write(r / "manifest.json", (r / "manifest.json").read_bytes().replace(
        b'"provenance": "simulated",', b'"provenance": "simulated", "provenance": "real",', 1)),
     "provenance: duplicate key"),
    ("not_utf8", lambda r: _write(r / "manifest.json", b"\xff" + (r / "manifest.json").read_bytes()), "not valid UTF-8"),
    ("deep_nesting", lambda r: _write(r / "manifest.json", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
     "nested too deeply"),
    ("real_but_simulator", _manifest_edit(lambda o, r: o.update(provenance="real")), "contradicts generator"),
]


@pytest.mark.parametrize(("name", "break_", "reason"), RELEASE_CASES, ids=[c[0] for c in RELEASE_CASES])
def test_validate_refuses_a_broken_release(name: str, break_, reason: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = _tiny_release(tmp_path)
    assert run(["validate", root], capsys)[0] == 0
    named = break_(root)
    before = {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}
    rc, out, err = run(["validate", root], capsys)
    assert rc == 2, (out, err)
    line = one_error_line(err, "validate")
    assert str(named) in line and reason in line, line
    assert {p: p.read_bytes() for p in before} == before


# --------------------------------------------------------------------------------------------
# 8. the book's input: the release is validated before any notebook runs
# --------------------------------------------------------------------------------------------

BOOK_BREAKS = [
    ("missing_cell_folder", lambda r: __import__("shutil").rmtree(r / "medqa" / "qwen3-8b"), "has no logs.jsonl"),
    ("changed_artifact", lambda r: (r / "medqa" / "qwen3-8b" / "logs.jsonl").write_bytes(
        (r / "medqa" / "qwen3-8b" / "logs.jsonl").read_bytes() + b"\n"), "sha256 differs from the manifest"),
]


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")} if folder.exists() else {}


@pytest.mark.parametrize(("name", "break_", "reason"), BOOK_BREAKS, ids=[b[0] for b in BOOK_BREAKS])
def test_building_the_book_validates_the_release_first(name: str, break_, reason: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from probeguard_core.book import build

    root = _tiny_release(tmp_path)
    assert build.check_release(root) == root  # intact: accepted
    break_(root)

    def no_notebook(*a: object, **k: object) -> None:
        raise AssertionError("a notebook ran before the release was validated")

    monkeypatch.setattr(build, "run_notebooks", no_notebook)
    generated = build.repo_root() / build.GENERATED
    before = _snapshot(generated)
    rc = build.main(["--release", str(root), "--no-html", "--no-pdf"])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("book.build: error: ") and reason in lines[0], err
    assert "Traceback" not in err and _snapshot(generated) == before


# --------------------------------------------------------------------------------------------
# 6. text that cannot be written: a lone surrogate is refused at validate with file:line:field
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "old", "new"), [
    ("question", '"question": "', '"question": "\\ud800'),
    ("rounds[0].candidates[1].rationale", '"rationale": "', '"rationale": "x\\udfff'),
])
def test_lone_surrogate_refused_at_validate(field: str, old: str, new: str, cell: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(cell["logs"]).read_text().splitlines(keepends=True)
    line = lines[2]
    if field.startswith("rounds"):
        first = line.index(old)
        at = line.index(old, first + 1)  # the second candidate's rationale
    else:
        at = line.index(old)
    lines[2] = line[:at] + new + line[at + len(old):]
    bad = tmp_path / "logs.jsonl"
    bad.write_text("".join(lines))
    before = bad.read_bytes()
    rc, out, err = run(["validate", bad], capsys)
    assert rc == 2, (out, err)
    msg = one_error_line(err, "validate")
    assert f"{bad}:3: {field}: a lone UTF-16 surrogate" in msg, msg
    assert bad.read_bytes() == before
    assert run(["validate", cell["logs"]], capsys)[0] == 0  # the honest file passes


# --------------------------------------------------------------------------------------------
# 5. monitor: legal but suspicious input is warned about (exit 0), as apply notes
# --------------------------------------------------------------------------------------------

def _warnings(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("probeguard monitor: warning: ")]


def test_monitor_warns_when_probe_and_nli_join_some_batches_only(cert_path: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    b0 = build_cell(tmp_path / "b0", n_s1=40, n_s2=20, n_s3=4, seed=7, qid_prefix="b0")
    b1 = build_cell(tmp_path / "b1", n_s1=40, n_s2=20, n_s3=4, seed=8, qid_prefix="b1")
    out = tmp_path / "m"
    rc, _, err = run(["monitor", "--certificate", cert_path, "--out", out, "--logs", b0["logs"], "--logs", b1["logs"],
                      "--probe", b0["probe"], "--nli", b0["nli"]], capsys)
    assert rc in (0, 3), err
    ws = _warnings(err)
    assert len(ws) == 2 and "Traceback" not in err, err
    assert ws[0].startswith(f"probeguard monitor: warning: --probe holds no record for batch(es) {b1['logs']}: ")
    assert ws[1].startswith(f"probeguard monitor: warning: --nli holds no record for batch(es) {b1['logs']}: ")
    rc, _, err = run(["monitor", "--certificate", cert_path, "--out", tmp_path / "m2", "--logs", b0["logs"],
                      "--logs", b1["logs"], "--probe", b0["probe"], "--probe", b1["probe"], "--nli", b0["nli"],
                      "--nli", b1["nli"]], capsys)
    assert rc in (0, 3) and _warnings(err) == [], err  # every batch joined: no warning


def test_monitor_warns_on_the_certificates_own_calibration_file(cell: dict[str, Path], cert_path: Path,
                                                                tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(["monitor", "--certificate", cert_path, "--out", tmp_path / "m", "--logs", cell["logs"],
                      "--probe", cell["probe"], "--nli", cell["nli"]], capsys)
    assert rc in (0, 3), err
    assert _warnings(err) == [f"probeguard monitor: warning: {cell['logs']}: logs: the same file (sha256) as the "
                              "certificate's own calibration logs; monitoring it tests nothing new"], err
    assert (tmp_path / "m" / "monitor.json").exists()
