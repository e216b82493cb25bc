"""Bounded reads (issue 25, decompression bombs): a line and a decompressed file have a size limit.

A small ``.gz`` that expands to a multi-GiB single line is refused by the CLI with exit 2 and one
line ``file:1: <record>: line longer than N bytes``, within 2 GiB of address space
(``ulimit -v``), before any record is held; the limits are flags of every command.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_log

from probeguard_core import jsonl as J
from probeguard_core import logs as L
from probeguard_core.cli import main

GIB = 2**30
_CLI = "import sys; from probeguard_core.cli import main; sys.exit(main())"


def _bomb(path: Path, gib: int = 3) -> Path:
    """``{"schema_version":1,"qid":"`` followed by ``gib`` GiB of ``0`` and no newline, streamed:
    one gzip member of 16 MiB of zeros compressed once and written again and again (a file of
    concatenated members is one gzip stream), so neither the test nor the file holds it whole."""
    member = gzip.compress(b"0" * 2**24, mtime=0)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(b'{"schema_version":1,"qid":"', mtime=0))
        for _ in range(gib * 64):
            fh.write(member)
    assert path.stat().st_size < 4 * 2**20  # a few MiB on disk
    return path


def _run_bounded(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process limited to 2 GiB of virtual memory."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("PROBEGUARD_DEBUG", None)
    cmd = f"ulimit -v 2097152 && exec {sys.executable} -c '{_CLI}' " + " ".join(args)
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [["validate", "logs.jsonl.gz"],
                                     ["certify", "--logs", "logs.jsonl.gz", "--alpha", "0.1", "--out", "out"]])
def test_gzip_bomb_fails_in_bounded_memory(tmp_path: Path, command: list[str]) -> None:
    _bomb(tmp_path / "logs.jsonl.gz")
    got = _run_bounded(command, tmp_path)
    assert got.returncode == 2, got.stderr[-2000:]
    assert "Traceback" not in got.stderr and "MemoryError" not in got.stderr
    lines = got.stderr.strip().splitlines()
    assert lines == [f"probeguard {command[0]}: error: logs.jsonl.gz:1: <record>: "
                     f"line longer than {J.MAX_LINE_BYTES} bytes (the limit)"], got.stderr
    assert not (tmp_path / "out").exists()  # no partial output


def test_questions_document_bomb_fails_in_bounded_memory(tmp_path: Path) -> None:
    """``convert ma-rag --questions`` reads a whole JSON document: bounded like a line."""
    member = gzip.compress(b" " * 2**24, mtime=0)  # 3 GiB of white space inside one JSON document
    with open(tmp_path / "questions.json.gz", "wb") as fh:
        fh.write(gzip.compress(b'{"medqa": ', mtime=0))
        for _ in range(3 * 64):
            fh.write(member)
    (tmp_path / "tree").mkdir()
    got = _run_bounded(["convert", "ma-rag", "--tree", "tree", "--questions", "questions.json.gz", "--dataset", "medqa",
                        "--backbone", "b", "--out", "logs.jsonl"], tmp_path)
    assert got.returncode == 2, got.stderr[-2000:]
    assert got.stderr.strip().splitlines() == [f"probeguard convert: error: questions.json.gz: <record>: document longer "
                                               f"than {J.MAX_LINE_BYTES} bytes after decompression (the limit)"]
    assert not (tmp_path / "logs.jsonl").exists()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["logs.jsonl", "logs.jsonl.gz"])
def test_line_limit_flag_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    import json

    good = json.dumps(make_log([["A", "A"]], qid="q0"), separators=(",", ":")).encode()
    big = json.dumps(make_log([["A", "A"]], qid="q1", question="x" * 5000), separators=(",", ":")).encode()
    path = _write(tmp_path / name, good + b"\n" + big + b"\n")
    assert main(["validate", str(path)]) == 0  # within the default bound
    capsys.readouterr()
    assert main(["validate", "--max-line-bytes", str(len(big) - 1), str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"probeguard validate: error: {path}:2: <record>: line longer than {len(big) - 1} bytes (the limit)"
    assert main(["validate", "--max-line-bytes", str(len(big)), str(path)]) == 0  # the bound is inclusive


def test_file_limit_and_size_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    lines = [json.dumps(make_log([["A", "A"]], qid=f"q{i}"), separators=(",", ":")).encode() for i in range(3)]
    path = _write(tmp_path / "logs.jsonl.gz", b"\n".join(lines) + b"\n")
    assert main(["validate", "--max-file-bytes", "1K", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"probeguard validate: error: {path}: <record>: file longer than 1024 bytes after decompression (the limit)"
    assert main(["validate", "--max-file-bytes", "1M", "--max-line-bytes", "64KiB", str(path)]) == 0
    with pytest.raises(SystemExit):
        main(["validate", "--max-line-bytes", "0", str(path)])
    assert "positive number of bytes" in capsys.readouterr().err


def test_limits_apply_to_the_fast_and_the_strict_path_alike(tmp_path: Path) -> None:
    """A canonical file (the fast read's) and a spaced one (the models') give the same error."""
    import json

    rec = make_log([["A", "A"]], qid="q0")
    for name, line in [("a", json.dumps(rec, separators=(",", ":"))), ("b", json.dumps(rec))]:
        (tmp_path / name).mkdir()
        path = _write(tmp_path / name / "logs.jsonl", (line + "\n").encode())
        with J.read_limits(line_bytes=len(line) - 1), pytest.raises(L.LogFormatError) as info:
            L.read_logs(path)
        assert (info.value.line, info.value.field, info.value.reason) == (1, None, f"line longer than {len(line) - 1} bytes (the limit)")
        assert L.read_logs(path)[0].qid == "q0"  # the default bound again outside the block
