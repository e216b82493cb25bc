"""MA-RAG native logs -> DESIGN 2.1 (DESIGN 2.5), on the fixture trees of tests/fixtures/ma_rag/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from probeguard_core import logs as L
from probeguard_core.adapters import convert_ma_rag_question, convert_ma_rag_tree
from probeguard_core.questions import load_questions

FIX = Path(__file__).parent / "fixtures" / "ma_rag"
KW = {"dataset": "medqa", "backbone": "Qwen/Qwen3-8B", "n_candidates": 3, "max_rounds": 3}


@pytest.fixture()
def questions():
    return load_questions(FIX / "MedQA_small.json", dataset="medqa")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(FIX / "run_good", dst)
    return dst


def _edit(path: Path, line: int, **changes) -> None:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for k, v in changes.items():
        if v is _DEL:
            del rows[line - 1][k]
        else:
            rows[line - 1][k] = v
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


_DEL = object()


def test_convert_good_tree(questions) -> None:
    logs = convert_ma_rag_tree(FIX / "run_good", questions, **KW)
    assert [x.qid for x in logs] == ["0", "1", "2"]
    q0, q1, q2 = logs
    # question 0: unanimous first round on the gold answer
    assert len(q0.rounds) == 1 and {c.answer for c in q0.rounds[0].candidates} == {"B"}
    c = q0.rounds[0].candidates
    assert (c[0].logprob, c[0].n_tokens, c[0].mean_token_entropy) == (-0.75, 2, 1.0)
    assert (c[1].logprob, c[1].n_tokens, c[1].mean_token_entropy) == (-0.5, 3, 0.25)
    assert c[0].rationale.endswith("<answer>B</answer>")
    # '' and an out-of-range 'E' become null, never guessed
    assert [x.answer for x in q1.rounds[0].candidates] == ["A", None, None]
    assert [x.answer for x in q1.rounds[2].candidates] == ["A", "A", "A"]
    # missing logprobs / entropies -> null
    last = q2.rounds[2].candidates[2]
    assert (last.logprob, last.n_tokens, last.mean_token_entropy) == (None, None, None)
    # no retrieval ids in MA-RAG: missing, not an empty list
    assert all(r.retrieval is None for x in logs for r in x.rounds)
    assert all(x.cost is None and x.backbone == "Qwen/Qwen3-8B" and x.dataset == "medqa" for x in logs)
    assert q2.options["D"] == ""  # options are kept exactly as the dataset gives them
    assert q0.gold == "B" and q0.question == questions[0].question


def test_round_trip_through_writer(tmp_path: Path, questions) -> None:
    logs = convert_ma_rag_tree(FIX / "run_good" / "evaluations", {q.qid: q for q in questions}, **KW)
    out = L.write_jsonl(tmp_path / "logs.jsonl.gz", logs)
    assert L.read_logs(out) == logs


def test_unanimous_then_round_names_round_file(questions) -> None:
    with pytest.raises(L.LogFormatError) as info:
        convert_ma_rag_tree(FIX / "bad_unanimous_then_round", questions, dataset="medqa", backbone="b", n_candidates=3)
    err = info.value
    assert err.path.endswith("question_0/round_1.jsonl")
    assert err.field == "rounds[0]" and "unanimous but is followed by round 2" in err.reason


def test_interrupted_run_is_rejected(tree: Path, questions) -> None:
    (tree / "evaluations" / "question_1" / "round_3.jsonl").unlink()
    with pytest.raises(L.LogFormatError, match=r"question_1/round_2.jsonl: <record>: round 2 is neither unanimous"):
        convert_ma_rag_tree(tree, questions, **KW)


@pytest.mark.parametrize(
    ("rel", "line", "change", "field", "reason"),
    [
        ("question_1/round_2.jsonl", 2, {"prediction": 3}, "prediction", "valid string"),
        ("question_1/round_2.jsonl", 2, {"prediction": _DEL}, "prediction", "missing required field"),
        ("question_1/round_2.jsonl", 3, {"round": 3}, "round", "3 in the file of round 2"),
        ("question_1/round_2.jsonl", 3, {"round": True}, "round", "valid integer"),
        ("question_1/round_2.jsonl", 1, {"answer_id": 2}, "answer_id", "answer ids are 1..N"),
        ("question_1/round_2.jsonl", 1, {"answer": "D"}, "answer", "differs from the question's gold 'A'"),
        ("question_1/round_1.jsonl", 2, {"logprobs": [-0.5, "x"]}, "logprobs[1]", "valid number"),
        ("question_1/round_1.jsonl", 2, {"token_entropies": [0.5, -1.0]}, "token_entropies[1]", "greater than or equal to 0"),
        ("question_1/round_1.jsonl", 2, {"response": None, "reasoning": None}, "response", "neither"),
        ("question_0/round_1.jsonl", 3, {"logprobs": [-1e308, -1e308]}, "logprobs", "sum of token log-probabilities is -inf"),
    ],
)
def test_bad_native_line(tree: Path, questions, rel: str, line: int, change: dict, field: str, reason: str) -> None:
    path = tree / "evaluations" / rel
    _edit(path, line, **change)
    with pytest.raises(L.LogFormatError) as info:
        convert_ma_rag_tree(tree, questions, **KW)
    err = info.value
    assert (Path(err.path), err.line, err.field) == (path, line, field)
    assert reason in err.reason, str(err)


def test_nan_token_logprob_names_file_line_field(tree: Path, questions) -> None:
    path = tree / "evaluations" / "question_1" / "round_1.jsonl"
    text = path.read_text().splitlines()
    text[0] = text[0].replace('"logprobs": [-0.5]', '"logprobs": [NaN]')
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(L.LogFormatError) as info:
        convert_ma_rag_tree(tree, questions, **KW)
    assert (info.value.line, info.value.field) == (1, "logprobs[0]")


def test_reasoning_used_when_no_response(tree: Path, questions) -> None:
    path = tree / "evaluations" / "question_0" / "round_1.jsonl"
    _edit(path, 1, response=_DEL, reasoning="Only the thinking text. Thus B.")
    log = convert_ma_rag_tree(tree, questions, **KW)[0]
    assert log.rounds[0].candidates[0].rationale == "Only the thinking text. Thus B."


def test_wrong_candidate_count(tree: Path, questions) -> None:
    path = tree / "evaluations" / "question_0" / "round_1.jsonl"
    with pytest.raises(L.LogFormatError, match="expected n_candidates=4 candidate lines, got 3"):
        convert_ma_rag_question(path.parent, questions[0], "medqa", "b", n_candidates=4)
    with pytest.raises(L.LogFormatError) as info:
        convert_ma_rag_question(path.parent, questions[0], "medqa", "b", n_candidates=2)
    assert info.value.line == 3 and "more than n_candidates=2" in info.value.reason


def test_tree_structure_errors(tree: Path, questions) -> None:
    ev = tree / "evaluations"
    (ev / "question_1" / "round_2.jsonl").rename(ev / "question_1" / "round_4.jsonl")
    with pytest.raises(L.LogFormatError, match=r"question_1/round_2.jsonl: <record>: missing"):
        convert_ma_rag_tree(tree, questions, **KW)
    (ev / "question_1" / "round_4.jsonl").rename(ev / "question_1" / "round_2.jsonl")
    shutil.copy(ev / "question_1" / "round_3.jsonl", ev / "question_1" / "round_4.jsonl")
    with pytest.raises(L.LogFormatError, match=r"question_1/round_4.jsonl: <record>: more than max_rounds=3"):
        convert_ma_rag_tree(tree, questions, **KW)


def test_too_many_rounds(tree: Path, questions) -> None:
    with pytest.raises(L.LogFormatError, match=r"question_1/round_3.jsonl: <record>: more than max_rounds=2"):
        convert_ma_rag_tree(tree, questions, **(KW | {"max_rounds": 2}))


def test_unknown_question_and_stray_entries(tree: Path, questions) -> None:
    with pytest.raises(L.LogFormatError, match="question_2: <record>: no question with qid '2'"):
        convert_ma_rag_tree(tree, questions[:2], **KW)
    (tree / "evaluations" / "question_0" / "notes.txt").write_text("x")
    with pytest.raises(L.LogFormatError, match="notes.txt: <record>: unexpected entry"):
        convert_ma_rag_tree(tree, questions, **KW)
    (tree / "evaluations" / "question_0" / "notes.txt").unlink()
    (tree / "evaluations" / "stray.log").write_text("x")
    with pytest.raises(L.LogFormatError, match="stray.log: <record>: unexpected entry"):
        convert_ma_rag_tree(tree, questions, **KW)


def test_empty_tree_and_bad_arguments(tmp_path: Path, questions) -> None:
    with pytest.raises(L.LogFormatError, match="no question_<id>/ folders"):
        convert_ma_rag_tree(tmp_path, questions, **KW)
    with pytest.raises(ValueError, match="belongs to dataset 'medqa', not 'medmcqa'"):
        convert_ma_rag_tree(FIX / "run_good", questions, **(KW | {"dataset": "medmcqa"}))
    with pytest.raises(ValueError, match="n_candidates"):
        convert_ma_rag_tree(FIX / "run_good", questions, **(KW | {"n_candidates": 0}))
    with pytest.raises(ValueError, match="expected Question"):
        convert_ma_rag_tree(FIX / "run_good", [{"qid": "0"}], **KW)


def test_converted_answer_matches_stop_rule_semantics(tree: Path, questions) -> None:
    """All-'' predictions stop MA-RAG: the converted last round is all null (not converged, not an error)."""
    ev = tree / "evaluations" / "question_0" / "round_1.jsonl"
    for n in (1, 2, 3):
        _edit(ev, n, prediction="")
    log = convert_ma_rag_tree(tree, questions, **KW)[0]
    assert [c.answer for c in log.rounds[0].candidates] == [None, None, None]
