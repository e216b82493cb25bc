"""`probeguard convert ma-rag` and `probeguard validate` through the CLI entry point."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probeguard_core import features as F
from probeguard_core.cli import main
from probeguard_core.logs import read_logs

FIX = Path(__file__).parent / "fixtures" / "ma_rag"
ARGS = ["--questions", str(FIX / "MedQA_small.json"), "--dataset", "medqa", "--backbone", "Qwen/Qwen3-8B",
        "--n-candidates", "3", "--max-rounds", "3"]


def test_convert_then_validate(tmp_path, capsys):
    out = tmp_path / "logs.jsonl.gz"
    assert main(["convert", "ma-rag", "--tree", str(FIX / "run_good"), *ARGS, "--out", str(out)]) == 0
    logs = read_logs(out)
    assert [log.qid for log in logs] == ["0", "1", "2"]
    # no document ids in MA-RAG logs: the retrieval family is missing, never zero
    table = F.feature_table(logs)
    assert np.isnan(table["docs_total"]).all()
    assert main(["validate", str(out)]) == 0
    assert "3 records OK" in capsys.readouterr().out


def test_convert_rejects_a_round_after_unanimity_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "sub" / "logs.jsonl"
    rc = main(["convert", "ma-rag", "--tree", str(FIX / "bad_unanimous_then_round"), *ARGS, "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "question_0/round_1.jsonl" in err and "unanimous but is followed by round 2" in err
    assert not out.exists()


def test_validate_rejects_an_unknown_artifact_name(tmp_path, capsys):
    bad = tmp_path / "stuff.jsonl"
    bad.write_text("{}\n")
    assert main(["validate", str(bad)]) == 2
    assert "unknown artifact name 'stuff'" in capsys.readouterr().err
