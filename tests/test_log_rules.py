"""Log-format rules a careless or hostile log breaks (issue 12 section 3), all through the CLI.

Each class was accepted silently before (a cut-short log read as "not converged", a retrieval
after the last round, a document retrieved twice in one round, a positive sequence
log-probability) or gave a traceback (pathological JSON).  Now each is ``file:line: field:
reason`` on stderr and exit 2 from ``probeguard validate``.
"""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import make_log

from probeguard_core import logs as L
from probeguard_core.cli import main

CONTESTED = [["A", "B", "A"], ["A", "B", "B"]]  # two contested rounds, N=3


def _write(tmp_path: Path, lines: list[str | dict[str, Any]], name: str = "logs.jsonl") -> Path:
    text = "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
    path = tmp_path / name
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    return path


def _cli_error(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"probeguard validate: error: {path}:"), err
    assert "Traceback" not in err
    return err


def _good() -> dict[str, Any]:
    return make_log([["A", "B", "A"], ["A", "A", "A"]], qid="q0", doc_ids=[["d1", "d2"], None])


def test_cut_short_log_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = make_log(CONTESTED, qid="q1", max_rounds=8)
    err = _cli_error(_write(tmp_path, [_good(), cut]), capsys)
    assert ":2: rounds: log is cut short: round 2 is contested but only 2 of max_rounds=8" in err


def test_contested_at_max_rounds_and_all_null_stop_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    at_limit = make_log(CONTESTED, qid="q1", max_rounds=2)  # S3: not converged, legitimately
    all_null = make_log([["A", "B", "A"], [None, None, None]], qid="q2", max_rounds=8)  # identical answers stop
    path = _write(tmp_path, [_good(), at_limit, all_null])
    assert main(["validate", str(path)]) == 0
    assert "3 records OK" in capsys.readouterr().out


def test_retrieval_after_last_round_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = make_log([["A", "B", "A"], ["A", "A", "A"]], qid="q1", doc_ids=[["d1"], ["d9"]])
    err = _cli_error(_write(tmp_path, [bad]), capsys)
    assert ":1: rounds[1].retrieval: round 2 is the last logged round but has a retrieval" in err


def test_duplicate_doc_ids_in_a_round_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = make_log([["A", "B", "A"], ["A", "A", "A"]], qid="q1", doc_ids=[["d1", "d2", "d1"], None])
    err = _cli_error(_write(tmp_path, [_good(), bad], "logs.jsonl.gz"), capsys)
    assert ":2: rounds[0].retrieval.doc_ids: document id 'd1' is retrieved more than once in one round" in err


@pytest.mark.parametrize("lp", [1e-9, 3.5])
def test_positive_sequence_logprob_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], lp: float) -> None:
    bad = copy.deepcopy(_good())
    bad["rounds"][1]["candidates"][2]["logprob"] = lp
    err = _cli_error(_write(tmp_path, [bad]), capsys)
    assert f":1: rounds[1].candidates[2].logprob: sequence log-probability {lp!r} is positive" in err


def test_zero_logprob_is_accepted() -> None:
    rec = _good()
    rec["rounds"][0]["candidates"][0]["logprob"] = 0.0
    assert L.QuestionLog.model_validate(rec).rounds[0].candidates[0].logprob == 0.0


@pytest.mark.parametrize("depth", [100_000, 5_000])
def test_deep_nesting_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], depth: int) -> None:
    line = json.dumps(_good())[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"
    err = _cli_error(_write(tmp_path, [_good() | {"qid": "q9"}, line]), capsys)
    assert ":2: <record>: invalid JSON: nesting too deep" in err


@pytest.mark.parametrize("depth", [300, 900])
def test_moderate_nesting_in_an_extra_field_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str], depth: int) -> None:
    """Deeper than orjson re-encodes (the fast path steps aside), within what the strict path parses."""
    line = json.dumps(_good(), separators=(",", ":"))[:-1] + ',"extra":' + "[" * depth + "]" * depth + "}"
    path = _write(tmp_path, [line])
    assert main(["validate", str(path)]) == 0
    assert "1 records OK" in capsys.readouterr().out


def test_integer_past_digit_limit_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digits = sys.get_int_max_str_digits() + 10
    line = json.dumps(_good())[:-1] + ', "extra": ' + "7" * digits + "}"
    err = _cli_error(_write(tmp_path, [line]), capsys)
    assert ":1: <record>: invalid JSON: Exceeds the limit" in err


def test_fast_and_strict_paths_agree_on_every_shipped_style_line(tmp_path: Path) -> None:
    """Lines written by write_jsonl take the fast path; hand-written spellings the strict one; same records."""
    recs = [L.QuestionLog.model_validate(_good()), L.QuestionLog.model_validate(make_log(CONTESTED, qid="q1"))]
    fast = L.write_jsonl(tmp_path / "a" / "logs.jsonl", recs)
    loose = _write(tmp_path, [json.dumps(r.model_dump(mode="json"), indent=None) for r in recs])  # ", " and ": "
    assert L.read_logs(fast) == L.read_logs(loose) == recs


def test_duplicate_key_still_refused_on_a_compact_line(tmp_path: Path) -> None:
    body = json.dumps(_good(), separators=(",", ":"))
    line = body[:-1] + ',"qid":"q0"}'  # a compact line that repeats a key
    with pytest.raises(L.LogFormatError, match=r"logs.jsonl:1: <record>: duplicate key 'qid' in one JSON object"):
        L.read_logs(_write(tmp_path, [line]))
