"""Question and corpus loaders (DESIGN 2.5-2.6): MIRAGE, MA-RAG and MedCorp shapes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import write_records

from probeguard_core.logs import LogFormatError
from probeguard_core.questions import Doc, Question, iter_corpus, load_corpus, load_questions

FIX = Path(__file__).parent / "fixtures" / "ma_rag"


def _item(answer: str = "A", **kw: Any) -> dict[str, Any]:
    return {"question": "Q?", "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer": answer, **kw}


def _json(tmp_path: Path, data: Any, name: str = "benchmark.json") -> Path:
    p = tmp_path / name
    raw = json.dumps(data).encode()
    p.write_bytes(gzip.compress(raw, mtime=0) if name.endswith(".gz") else raw)
    return p


MIRAGE = {"medqa": {"0000": _item("B"), "0001": _item("D")}, "mmlu": {"anatomy-0": _item(), "x": _item("C")}}


def test_mirage_nested_all_and_one(tmp_path: Path) -> None:
    p = _json(tmp_path, MIRAGE)
    qs = load_questions(p)
    assert [(q.dataset, q.qid, q.gold) for q in qs] == [
        ("medqa", "0000", "B"), ("medqa", "0001", "D"), ("mmlu", "anatomy-0", "A"), ("mmlu", "x", "C")]
    only = load_questions(p, dataset="mmlu")
    assert [q.qid for q in only] == ["anatomy-0", "x"] and only[0].options["D"] == "d"
    assert only[0].specialty is None
    with pytest.raises(ValueError, match="dataset 'pubmedqa' is not in the file"):
        load_questions(p, dataset="pubmedqa")


def test_mirage_flat_needs_dataset(tmp_path: Path) -> None:
    p = _json(tmp_path, {"q1": _item(specialty="cardiology"), "q2": _item("B", meta={"k": 1})}, "medqa.json.gz")
    qs = load_questions(p, dataset="medqa")
    assert [(q.qid, q.specialty) for q in qs] == [("q1", "cardiology"), ("q2", None)]
    assert qs[1].model_extra == {"meta": {"k": 1}}
    with pytest.raises(ValueError, match="pass dataset="):
        load_questions(p)


def test_ma_rag_fixture() -> None:
    qs = load_questions(FIX / "MedQA_small.json", dataset="medqa")
    assert [q.qid for q in qs] == ["0", "1", "2"]
    assert qs[0].gold == "B" and qs[0].options == {"A": "Drug A", "B": "Drug B", "C": "Drug C", "D": "Drug D"}
    assert qs[2].options["D"] == ""  # kept as given
    assert qs[0].model_extra == {"question_type": "Multiple-choice question (only one correct answer)"}
    assert all(isinstance(q, Question) and q.dataset == "medqa" for q in qs)
    with pytest.raises(ValueError, match="MA-RAG file"):
        load_questions(FIX / "MedQA_small.json")


def _ma(**kw: Any) -> dict[str, Any]:
    return {"id": 0, "question": "Q?", "option": {"A": "a", "B": "b"}, "answer": "A", **kw}


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ([_ma(), _ma(id=1, option={"A": "a", "b": "x"})], "[1].option", "option key 'b' is not one uppercase letter"),
        ([_ma(), _ma(id=1, answer="C")], "[1].answer", "'C' is not among the option"),
        ([_ma(), _ma(id=0)], "[1].id", "duplicate id 0 (first at [0])"),
        ([_ma(id="0")], "[0].id", "valid integer"),
        ([_ma(id=True)], "[0].id", "valid integer"),
        ([_ma(id=-1)], "[0].id", "greater than or equal to 0"),
        ([{k: v for k, v in _ma().items() if k != "option"}], "[0].option", "missing required field"),
        ([_ma(option={"A": "a"})], "[0].option", "at least 2 options"),
        ([_ma(option={"A": "a", "B": 2})], "[0].option.B", "valid string"),
        ([_ma(question=None)], "[0].question", "valid string"),
        ([_ma(), 3], "[1]", "expected a JSON object"),
        ([_ma(qid="x")], "[0].qid", "clashes with a Question field"),
        ({"medqa": {"1": _item("E")}}, "medqa.1.answer", "'E' is not among the options"),
        ({"medqa": {"1": _item(), "2": {"question": "Q", "answer": "A"}}}, "medqa.2.options", "missing required field"),
        ({"1": _item(), "2": {"question": "Q", "answer": "A"}}, "2.options", "missing required field"),
        ({"1": _item(), "2": "text"}, "2", "expected a JSON object"),
        ({"medqa": {"1": _item()}, "mmlu": {"2": {"question": "Q", "options": {"A": "a", "B": "b"}}}},
         "mmlu.2.answer", "missing required field"),
        ({"medqa": {"1": _item()}, "mmlu": []}, "mmlu", "non-empty object"),
    ],
)
def test_malformed_question_files(tmp_path: Path, data: Any, field: str, reason: str) -> None:
    p = _json(tmp_path, data)
    with pytest.raises(LogFormatError) as info:
        nested = isinstance(data, dict) and "medqa" in data
        load_questions(p, dataset=None if nested else "medqa")
    err = info.value
    assert (err.path, err.line, err.field) == (str(p), None, field)
    assert reason in err.reason, str(err)
    assert str(err) == f"{p}: {field}: {err.reason}"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "file is empty"),
        (b"[]", "question list is empty"),
        (b"{}", "expected a non-empty JSON list"),
        (b'"text"', "expected a non-empty JSON list"),
        (b'[{"id": 0,', "invalid JSON at line 1"),
        (b'[{"id": 0, "question": "\xff"}]', "not valid UTF-8"),
        (b'[{"id": NaN}]', "non-finite"),
        (b'[{"id": 0, "id": 1}]', "duplicate key 'id'"),
    ],
)
def test_unreadable_question_files(tmp_path: Path, raw: bytes, reason: str) -> None:
    p = tmp_path / "MedQA.json"
    p.write_bytes(raw)
    with pytest.raises(LogFormatError) as info:
        load_questions(p, dataset="medqa")
    assert info.value.line is None and reason in info.value.reason, str(info.value)


def test_missing_question_file(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match="does not exist"):
        load_questions(tmp_path / "nope.json", dataset="medqa")


# ---- corpus -----------------------------------------------------------------------------------

DOCS = [
    {"id": "pubmed23n0001_0", "title": "T0", "content": "c0", "contents": "T0. c0"},
    {"id": "textbook_1", "title": "T1", "content": "c1"},
]


def test_load_corpus_file_and_folder(tmp_path: Path) -> None:
    p = write_records(tmp_path / "corpus" / "a.jsonl", DOCS)
    docs = load_corpus(p)
    assert [d.id for d in docs] == ["pubmed23n0001_0", "textbook_1"]
    assert docs[0].model_extra == {"contents": "T0. c0"} and isinstance(docs[1], Doc)
    write_records(tmp_path / "corpus" / "b.jsonl.gz", [{"id": "x", "title": "", "content": "c"}])
    (tmp_path / "corpus" / "README").write_text("not a corpus file")
    assert [d.id for d in iter_corpus(tmp_path / "corpus")] == ["pubmed23n0001_0", "textbook_1", "x"]


@pytest.mark.parametrize(
    ("records", "line", "field", "reason"),
    [
        ([DOCS[0], {"id": "y", "title": "t"}], 2, "content", "missing required field"),
        ([DOCS[0], {"id": 5, "title": "t", "content": "c"}], 2, "id", "valid string"),
        ([DOCS[0], {"id": "", "title": "t", "content": "c"}], 2, "id", "at least 1 character"),
        ([DOCS[0], DOCS[1], DOCS[0]], 3, "id", "duplicate document id 'pubmed23n0001_0' (first at a.jsonl:1)"),
        ([DOCS[0], "", DOCS[1]], 2, None, "empty line"),
    ],
)
def test_malformed_corpus(tmp_path: Path, records: list, line: int, field: str | None, reason: str) -> None:
    p = write_records(tmp_path / "a.jsonl", records)
    with pytest.raises(LogFormatError) as info:
        load_corpus(p)
    assert (info.value.line, info.value.field) == (line, field)
    assert reason in info.value.reason


def test_empty_corpus_folder(tmp_path: Path) -> None:
    with pytest.raises(LogFormatError, match="no .jsonl"):
        load_corpus(tmp_path)
