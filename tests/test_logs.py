"""Valid artifacts (DESIGN 2.1-2.4): reading, round-trips, extras, gzip, cross-file checks."""

from __future__ import annotations

import gzip
import json
import math
import pickle
from pathlib import Path

import pytest
from helpers import make_candidate, make_log, make_nli, make_probe, make_self_report, write_records
from hypothesis import given, settings
from hypothesis import strategies as st

from probeguard_core import logs as L


def _logs() -> list[dict]:
    return [
        make_log([["A", "A", "A"]], qid="q1", extra_top={"nested": [1, 2]}),
        make_log([["A", "B", None], ["B", "B", "A"], ["B", "B", "B"]], qid="q2", gold="B",
                 doc_ids=[["d1", "d2"], ["d2"], None], cost={"wall_s": 1.5, "completion_tokens": 300}),
        make_log([["C", "D", "C"], ["C", "D", "D"]], qid="q3", options="ABCDE", gold="E", specialty="cardiology"),
    ]


@pytest.mark.parametrize("name", ["logs.jsonl", "logs.jsonl.gz"])
def test_read_valid_logs(tmp_path: Path, name: str) -> None:
    path = write_records(tmp_path / name, _logs())
    logs = L.read_logs(path)
    assert [x.qid for x in logs] == ["q1", "q2", "q3"]
    q2 = logs[1]
    assert q2.rounds[1].retrieval is not None and q2.rounds[1].retrieval.doc_ids == ["d2"]
    assert q2.rounds[2].retrieval is None
    assert q2.rounds[0].candidates[2].answer is None
    assert q2.cost is not None and q2.cost.completion_tokens == 300
    assert logs[2].specialty == "cardiology" and logs[2].options["E"] == "option E"
    assert logs[0].model_extra == {"extra_top": {"nested": [1, 2]}}


def test_int_logprob_is_accepted_as_number(tmp_path: Path) -> None:
    rec = make_log([["A", "B"]], logprobs=[[-3, -4.5]])
    (log,) = L.read_logs(write_records(tmp_path / "logs.jsonl", [rec]))
    assert log.rounds[0].candidates[0].logprob == -3.0


def test_round_trip_preserves_extras_and_is_byte_identical(tmp_path: Path) -> None:
    recs = _logs()
    recs[1]["rounds"][0]["candidates"][0]["vllm_seed"] = 7  # nested extra
    recs[1]["rounds"][0]["retrieval"]["scores"] = [0.5, 0.25]
    src = write_records(tmp_path / "in.jsonl", recs)
    logs = L.read_logs(src)
    out1 = L.write_jsonl(tmp_path / "a" / "logs.jsonl.gz", logs)
    out2 = L.write_jsonl(tmp_path / "b" / "logs.jsonl.gz", logs)
    assert out1.read_bytes() == out2.read_bytes()  # reproducible gzip (no mtime / name)
    again = L.read_logs(out1)
    assert again == logs
    assert [x.model_extra for x in again] == [x.model_extra for x in logs]
    assert again[1].rounds[0].candidates[0].model_extra == {"vllm_seed": 7}
    assert again[1].rounds[0].retrieval.model_extra == {"scores": [0.5, 0.25]}
    # the written JSON keeps every input key
    first = json.loads(gzip.decompress(out1.read_bytes()).decode().splitlines()[1])
    assert first["rounds"][0]["candidates"][0]["vllm_seed"] == 7
    assert not list((tmp_path / "a").glob(".*.tmp"))


def test_write_then_read_plain_dicts(tmp_path: Path) -> None:
    out = L.write_jsonl(tmp_path / "self_report.jsonl", [make_self_report("q1"), make_self_report("q2", None, None)])
    recs = L.read_self_report(out)
    assert recs[1].verbalized_confidence is None and recs[1].p_true is None
    assert recs[0].verbalized_confidence == 80.0


def test_write_refuses_nan_and_leaves_no_file(tmp_path: Path) -> None:
    rec = make_self_report()
    rec["p_true"] = math.nan
    with pytest.raises(ValueError):
        L.write_jsonl(tmp_path / "self_report.jsonl", [rec])
    assert list(tmp_path.iterdir()) == []


def test_crlf_line_endings_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\r\n" for r in _logs()))
    assert len(L.read_logs(path)) == 3


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(L.LogFormatError, match="does not exist"):
        L.read_logs(tmp_path / "nope.jsonl")


def test_probe_read_and_consensus_check(tmp_path: Path) -> None:
    logs = [L.QuestionLog.model_validate(d) for d in _logs()]
    recs = [make_probe(["A", "B", None]), make_probe(["A", "A", "A"], arm="instruction_only")]
    path = write_records(tmp_path / "probe.jsonl.gz", recs)
    probes = L.read_probe(path, logs=logs)
    assert [p.arm for p in probes] == ["counter_evidence", "instruction_only"]
    assert probes[1].queries == [] and probes[1].doc_ids == []
    assert probes[0].reanswers[0].mean_token_entropy == 0.5
    assert isinstance(probes[0].reanswers[0], L.Candidate)
    # a probe for a qid not in the logs is left alone (extra pool)
    L.check_probe_consensus([L.ProbeRecord.model_validate(make_probe(["Z"] * 3, consensus="Z", qid="other"))], logs)


def test_reanswer_mean_token_entropy_is_optional() -> None:
    rec = make_probe(["A", "A"])
    for c in rec["reanswers"]:
        del c["mean_token_entropy"]
    assert L.ProbeRecord.model_validate(rec).reanswers[0].mean_token_entropy is None


def test_nli_read_and_check_against_logs(tmp_path: Path) -> None:
    logs = [L.QuestionLog.model_validate(d) for d in _logs()]
    recs = [
        make_nli(["a", "b", "c"], qid="q1"),  # unanimous round: all N candidates
        # q2 round 1 is A, B, None: a 1:1 tie between A and B -> modal A -> voters [0]
        make_nli(["x"], qid="q2", round=1, candidates=[0], entailment=[[1.0]]),
        make_nli(["x", "y"], qid="q3", round=2, candidates=[2, 1]),  # C D D -> D -> {1, 2}, any order
    ]
    path = write_records(tmp_path / "nli.jsonl", recs)
    assert len(L.read_nli(path, logs=logs)) == 3
    with pytest.raises(L.LogFormatError, match="not the voters"):
        L.check_nli_against_logs([L.NLIRecord.model_validate(make_nli(["x", "y"], qid="q2", candidates=[0, 1]))], logs)
    other = L.NLIRecord.model_validate(make_nli(qid="elsewhere"))
    L.check_nli_against_logs([other], logs, allow_unknown_qids=True)
    with pytest.raises(L.LogFormatError, match="not in the execution logs"):
        L.check_nli_against_logs([other], logs, path="nli.jsonl")


def test_modal_answer_ties_and_nulls() -> None:
    def rnd(answers: list) -> L.Round:
        return L.Round(round=1, candidates=[L.Candidate(**make_candidate(a)) for a in answers], retrieval=None)

    assert L.modal_answer(rnd(["B", "A", "B", "A"])) == "A"
    assert L.modal_answer(rnd(["C", None, None, "C", "B"])) == "C"
    assert L.modal_answer(rnd([None, None])) is None


def test_loc_to_field() -> None:
    assert L.loc_to_field(("rounds", 1, "candidates", 2, "logprob")) == "rounds[1].candidates[2].logprob"
    assert L.loc_to_field(("verbalized_confidence", "function-after[_x(), float]")) == "verbalized_confidence"
    assert L.loc_to_field(("arm", "literal['a','b']")) == "arm"
    assert L.loc_to_field(()) == ""


def test_error_attributes() -> None:
    err = L.LogFormatError("x/logs.jsonl", 4, "gold", "bad")
    assert (err.path, err.line, err.field, err.reason) == ("x/logs.jsonl", 4, "gold", "bad")
    assert str(err) == "x/logs.jsonl:4: gold: bad"
    assert str(L.LogFormatError("f", None, None, "empty")) == "f: <record>: empty"
    assert isinstance(err, ValueError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.line, again.field, str(again)) == (err.path, err.line, err.field, str(err))


# ---- property: any log built from random valid answer trajectories round-trips -----------------

@st.composite
def _trajectories(draw: st.DrawFn) -> list[list[str | None]]:
    n = draw(st.integers(1, 5))
    t_max = draw(st.integers(1, 4))
    answer = st.sampled_from(["A", "B", "C", None])
    rounds: list[list[str | None]] = []
    for _ in range(t_max):
        r = draw(st.lists(answer, min_size=n, max_size=n))
        rounds.append(r)
        if len(set(r)) == 1 and r[0] is not None:
            break  # the substrate stops at unanimity
    return rounds


@settings(max_examples=40, deadline=None)
@given(rounds=_trajectories(), lp=st.floats(-50, 0, allow_nan=False))
def test_property_round_trip(tmp_path_factory: pytest.TempPathFactory, rounds: list, lp: float) -> None:
    rec = make_log(rounds, options="ABC", logprobs=[[lp] * len(r) for r in rounds])
    log = L.QuestionLog.model_validate(rec)
    path = L.write_jsonl(tmp_path_factory.mktemp("rt") / "logs.jsonl", [log])
    (back,) = L.read_logs(path)
    assert back == log
    assert back.model_dump(mode="json") == json.loads(json.dumps(rec))


def test_probe_accepts_candidate_objects() -> None:
    """Pipeline code builds re-answers as Candidate objects; they validate as ReAnswer."""
    rec = make_probe(["A", "B"])
    rec["reanswers"] = [L.Candidate.model_validate(make_candidate(a, vllm_seed=3)) for a in ["A", "B"]]
    probe = L.ProbeRecord(**rec)
    assert [type(c) for c in probe.reanswers] == [L.ReAnswer, L.ReAnswer]
    assert probe.reanswers[1].answer == "B" and probe.reanswers[0].model_extra == {"vllm_seed": 3}


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_jsonl_bytes_are_the_bytes_write_jsonl_writes(name: str, tmp_path: Path) -> None:
    """A file written as one of a set (``jsonl_bytes``) is byte for byte what ``write_jsonl`` writes."""
    recs = [make_log([["A", "A", "B"]], qid="q1"), {"qid": "q2", "schema_version": 1, "x": [1, 2.5, None], "t": "é"}]
    p = L.write_jsonl(tmp_path / name, recs)
    assert p.read_bytes() == L.jsonl_bytes(p, recs)
    assert (p.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
