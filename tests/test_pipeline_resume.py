"""Kill-and-resume: a substrate run killed with SIGKILL after its first question is written,
then restarted, ends byte-identical to an uninterrupted run (transformers engine, fixed seed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import tiny_models as tm
from probeguard_core.logs import read_logs

pytestmark = pytest.mark.slow

RUN = "import sys; from probeguard_core.cli import main; sys.exit(main(sys.argv[1:]))"


def _cmd(root, out):
    return [sys.executable, "-c", RUN, "substrate", "--engine", "transformers", "--model", str(root / "qwen"),
            "--questions", str(root / "benchmark.json"), "--dataset", "medqa", "--n", "4", "--rounds", "3",
            "--max-new-tokens", "96", "--query-max-new-tokens", "16", "--index", str(root / "index"),
            "--reranker", str(root / "ce"), "--batch-size", "1", "--reproducible", "--no-progress", "--out", str(out)]


def _env():
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    tm.build_tiny_qwen3(root / "qwen")
    tm.build_tiny_cross_encoder(root / "ce")
    tm.write_corpus(root / "corpus.jsonl", 50)
    tm.write_questions(root / "benchmark.json", 5)
    from probeguard_core.cli import main

    assert main(["index", "build", "--corpus", str(root / "corpus.jsonl"), "--out", str(root / "index")]) == 0
    return root


def test_sigkill_then_resume_is_byte_identical(root):
    full = root / "full" / "logs.jsonl"
    subprocess.run(_cmd(root, full), env=_env(), check=True, capture_output=True, timeout=300)
    assert len(read_logs(full)) == 5

    part = root / "part" / "logs.jsonl"
    proc = subprocess.Popen(_cmd(root, part), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if part.exists() and part.read_bytes().count(b"\n") >= 1:
                break
            if proc.poll() is not None:
                pytest.fail("the run ended before it could be killed")
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    written = part.read_bytes().count(b"\n")
    assert 1 <= written < 5, "the kill must land after the first question and before the last"
    # simulate a write cut short by the kill: a partial last line must be dropped on restart
    with open(part, "ab") as fh:
        fh.write(b'{"schema_version":1,"qid":"q')
    res = subprocess.run(_cmd(root, part), env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "unfinished last line" in res.stderr
    assert part.read_bytes() == full.read_bytes()
    # the cost sidecar has every question (completion tokens reproducible; seconds are not)
    import json

    def tokens(p):
        rows = [json.loads(x) for x in p.read_text().splitlines()]
        return {r["qid"]: r["completion_tokens"] for r in rows}

    assert tokens(part.with_name("logs.cost.jsonl")) == tokens(full.with_name("logs.cost.jsonl"))
    assert len(tokens(full.with_name("logs.cost.jsonl"))) == 5
