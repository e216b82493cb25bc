"""Malformed artifacts (DESIGN 2): every kind is rejected as ``file:line: field: reason``.

Each case writes a small file whose records are valid except for one defect and asserts the
reader raises :class:`LogFormatError` naming the file, the line, the field and the reason.
"""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import make_log, make_nli, make_probe, make_self_report

from probeguard_core import logs as L

GOOD = make_log([["A", "B", "A"], ["A", "A", "A"]], qid="q0")  # N=3, converged in round 2


def _log(**kw: Any) -> dict[str, Any]:
    """A valid 3-candidate, 2-round log for qid q1, with keyword overrides."""
    return make_log([["A", "B", "C"], ["A", "A", "B"]], qid="q1", doc_ids=[["d1"], None], **kw)


def _mut(fn: Callable[[dict[str, Any]], None], base: dict[str, Any] | None = None) -> dict[str, Any]:
    rec = copy.deepcopy(_log() if base is None else base)
    fn(rec)
    return rec


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Mutation setting a dotted path such as 'rounds.1.candidates.2.logprob'."""

    def fn(rec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        obj: Any = rec
        for p in parents:
            obj = obj[int(p)] if isinstance(obj, list) else obj[p]
        if isinstance(obj, list):
            obj[int(last)] = value
        elif value is _DEL:
            del obj[last]
        else:
            obj[last] = value

    return fn


_DEL = object()
PLACEHOLDER = 12345.5  # replaced textually to produce NaN / Infinity tokens


def _raw_with(path: str, token: str, base: dict[str, Any] | None = None) -> str:
    """A JSON line whose value at ``path`` is the literal ``token`` (e.g. NaN)."""
    return json.dumps(_mut(_set(path, PLACEHOLDER), base)).replace(str(PLACEHOLDER), token)


def _probe_unanimous_log() -> dict[str, Any]:
    return make_log([["A", "A", "A"]], qid="q1")


@dataclass
class Case:
    name: str
    filename: str
    lines: list[Any]  # dict -> JSON, str -> verbatim line, bytes -> verbatim bytes line
    line: int | None
    field: str | None
    reason: str
    reader: str = "logs"
    logs: list[dict[str, Any]] | None = None  # cross-file check against these logs
    truncate: bool = False
    raw_bytes: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    # ---- file and line level -----------------------------------------------------------------
    Case("invalid_json", "logs.jsonl", [GOOD, '{"schema_version": 1, "qid": '], 2, None, "invalid JSON"),
    Case("non_object_line", "logs.jsonl", [GOOD, "[1, 2]"], 2, None, "expected a JSON object, got list"),
    Case("blank_line", "logs.jsonl", [GOOD, "   ", _log()], 2, None, "empty line"),
    Case("empty_file", "logs.jsonl", [], None, None, "file is empty", raw_bytes=b""),
    Case("zero_byte_gz", "logs.jsonl.gz", [], None, None, "file is empty", raw_bytes=b""),
    Case("empty_gz", "logs.jsonl.gz", [], None, None, "file is empty", raw_bytes=gzip.compress(b"", mtime=0)),
    Case("truncated_gz", "logs.jsonl.gz", [GOOD, _log()], 2, None, "truncated or corrupt gzip", truncate=True),
    Case("truncated_gz_trailer", "logs.jsonl.gz", [], 2, None, "truncated or corrupt gzip",
         raw_bytes=gzip.compress(json.dumps(GOOD).encode() + b"\n", mtime=0)[:-4]),
    Case("not_gzip_named_gz", "logs.jsonl.gz", [], None, None, "not gzip-compressed", raw_bytes=b'{"a": 1}\n'),
    Case("gzip_named_plain", "logs.jsonl", [], None, None, "name does not end in .gz",
         raw_bytes=gzip.compress(json.dumps(GOOD).encode() + b"\n", mtime=0)),
    Case("non_utf8", "logs.jsonl", [GOOD, json.dumps(_log()).encode().replace(b"Question q1", b"Question \xff\xfe")],
         2, None, "not valid UTF-8"),
    Case("duplicate_json_key", "logs.jsonl", [GOOD, json.dumps(_log()).replace('"options": {', '"options": {"A": "x", ')],
         2, "options", "duplicate key 'A'"),
    # ---- schema_version ----------------------------------------------------------------------
    Case("schema_version_2", "logs.jsonl", [GOOD, _mut(_set("schema_version", 2))], 2, "schema_version",
         "unsupported schema_version 2"),
    Case("schema_version_bool", "logs.jsonl", [_mut(_set("schema_version", True))], 1, "schema_version",
         "valid integer"),
    Case("schema_version_float", "logs.jsonl", [_mut(_set("schema_version", 1.0))], 1, "schema_version",
         "valid integer"),
    Case("schema_version_missing", "logs.jsonl", [_mut(_set("schema_version", _DEL))], 1, "schema_version",
         "missing required field"),
    # ---- execution log fields (DESIGN 2.1) ---------------------------------------------------
    Case("missing_gold", "logs.jsonl", [GOOD, GOOD | {"qid": "q2"}, _mut(_set("gold", _DEL))], 3, "gold",
         "missing required field"),
    Case("missing_specialty", "logs.jsonl", [_mut(_set("specialty", _DEL))], 1, "specialty", "missing required field"),
    Case("specialty_int", "logs.jsonl", [_mut(_set("specialty", 3))], 1, "specialty", "valid string"),
    Case("empty_qid", "logs.jsonl", [_mut(_set("qid", ""))], 1, "qid", "at least 1 character"),
    Case("n_candidates_str", "logs.jsonl", [_mut(_set("n_candidates", "3"))], 1, "n_candidates", "valid integer"),
    Case("max_rounds_bool", "logs.jsonl", [_mut(_set("max_rounds", True))], 1, "max_rounds", "valid integer"),
    Case("options_lowercase_key", "logs.jsonl", [_log(options={"a": "x", "B": "y"}, gold="B")], 1, "options",
         "option key 'a' is not one uppercase letter"),
    Case("options_two_letter_key", "logs.jsonl", [_log(options={"A": "x", "BC": "y"})], 1, "options",
         "option key 'BC'"),
    Case("options_single", "logs.jsonl", [_mut(_set("options", {"A": "x"}))], 1, "options", "at least 2 options"),
    Case("option_text_int", "logs.jsonl", [_mut(_set("options.C", 3))], 1, "options.C", "valid string"),
    Case("gold_not_option", "logs.jsonl", [_log(gold="E")], 1, "gold", "'E' is not among the options"),
    Case("answer_not_option", "logs.jsonl", [GOOD, _mut(_set("rounds.1.candidates.2.answer", "E"))], 2,
         "rounds[1].candidates[2].answer", "'E' is not among the options"),
    Case("answer_int", "logs.jsonl", [_mut(_set("rounds.0.candidates.1.answer", 1))], 1,
         "rounds[0].candidates[1].answer", "valid string"),
    Case("too_few_candidates", "logs.jsonl", [_mut(lambda r: r["rounds"][0]["candidates"].pop())], 1,
         "rounds[0].candidates", "expected n_candidates=3 candidates, got 2"),
    Case("n_candidates_mismatch", "logs.jsonl", [_mut(_set("n_candidates", 8))], 1, "rounds[0].candidates",
         "expected n_candidates=8"),
    Case("rounds_not_consecutive", "logs.jsonl", [_mut(_set("rounds.1.round", 3))], 1, "rounds[1].round",
         "expected round 2 (consecutive from 1), got 3"),
    Case("round_zero", "logs.jsonl", [_mut(_set("rounds.0.round", 0))], 1, "rounds[0].round",
         "greater than or equal to 1"),
    Case("too_many_rounds", "logs.jsonl", [_mut(_set("max_rounds", 1))], 1, "rounds", "2 rounds exceed max_rounds=1"),
    Case("no_rounds", "logs.jsonl", [_mut(_set("rounds", []))], 1, "rounds", "at least 1 item"),
    Case("unanimous_then_round", "logs.jsonl", [make_log([["B", "B", "B"], ["A", "B", "B"]])], 1, "rounds[0]",
         "round 1 is unanimous but is followed by round 2"),
    Case("duplicate_qid", "logs.jsonl", [_log(), GOOD, _log()], 3, "qid", "duplicate record qid='q1' (first on line 1)"),
    Case("nan_logprob", "logs.jsonl", [GOOD, GOOD | {"qid": "q2"}, _raw_with("rounds.1.candidates.2.logprob", "NaN")],
         3, "rounds[1].candidates[2].logprob", "non-finite number nan"),
    Case("infinity_logprob", "logs.jsonl", [_raw_with("rounds.0.candidates.0.logprob", "-Infinity")], 1,
         "rounds[0].candidates[0].logprob", "non-finite number -inf"),
    Case("overflow_logprob", "logs.jsonl", [_raw_with("rounds.0.candidates.0.logprob", "1e999")], 1,
         "rounds[0].candidates[0].logprob", "non-finite number inf"),
    Case("nan_in_extra_field", "logs.jsonl", [_raw_with("my_extra", "NaN")], 1, "my_extra", "non-finite"),
    Case("logprob_string", "logs.jsonl", [_mut(_set("rounds.1.candidates.2.logprob", "-3.2"))], 1,
         "rounds[1].candidates[2].logprob", "valid number (got '-3.2')"),
    Case("logprob_bool", "logs.jsonl", [_mut(_set("rounds.1.candidates.2.logprob", False))], 1,
         "rounds[1].candidates[2].logprob", "valid number"),
    Case("logprob_missing", "logs.jsonl", [_mut(_set("rounds.0.candidates.0.logprob", _DEL))], 1,
         "rounds[0].candidates[0].logprob", "missing required field"),
    Case("negative_n_tokens", "logs.jsonl", [_mut(_set("rounds.0.candidates.1.n_tokens", -1))], 1,
         "rounds[0].candidates[1].n_tokens", "greater than or equal to 0"),
    Case("n_tokens_float", "logs.jsonl", [_mut(_set("rounds.0.candidates.1.n_tokens", 3.0))], 1,
         "rounds[0].candidates[1].n_tokens", "valid integer"),
    Case("negative_entropy", "logs.jsonl", [_mut(_set("rounds.0.candidates.1.mean_token_entropy", -0.1))], 1,
         "rounds[0].candidates[1].mean_token_entropy", "greater than or equal to 0"),
    Case("rationale_missing", "logs.jsonl", [_mut(_set("rounds.0.candidates.0.rationale", _DEL))], 1,
         "rounds[0].candidates[0].rationale", "missing required field"),
    Case("candidate_not_object", "logs.jsonl", [_mut(_set("rounds.0.candidates.0", "A"))], 1,
         "rounds[0].candidates[0]", "valid dictionary"),
    Case("retrieval_missing", "logs.jsonl", [_mut(_set("rounds.1.retrieval", _DEL))], 1, "rounds[1].retrieval",
         "missing required field"),
    Case("retrieval_doc_id_int", "logs.jsonl", [_mut(_set("rounds.0.retrieval.doc_ids", ["d1", 7]))], 1,
         "rounds[0].retrieval.doc_ids[1]", "valid string"),
    Case("retrieval_string", "logs.jsonl", [_mut(_set("rounds.0.retrieval", "d1"))], 1, "rounds[0].retrieval",
         "valid dictionary"),
    Case("cost_negative_wall", "logs.jsonl", [_log(cost={"wall_s": -1.0, "completion_tokens": 3})], 1, "cost.wall_s",
         "greater than or equal to 0"),
    Case("cost_tokens_bool", "logs.jsonl", [_log(cost={"wall_s": 1.0, "completion_tokens": True})], 1,
         "cost.completion_tokens", "valid integer"),
    # ---- probe records (DESIGN 2.2) ----------------------------------------------------------
    Case("probe_unknown_arm", "probe.jsonl", [make_probe(["A", "A", "B"], arm="devils_advocate")], 1, "arm",
         "Input should be 'counter_evidence'", reader="probe"),
    Case("probe_too_many_docs", "probe.jsonl", [make_probe(["A"] * 3, doc_ids=[f"d{i}" for i in range(9)])], 1,
         "doc_ids", "at most 8 items", reader="probe"),
    Case("probe_instruction_only_docs", "probe.jsonl", [make_probe(["A"] * 3, arm="instruction_only", doc_ids=["d1"])],
         1, "doc_ids", "no queries and no documents", reader="probe"),
    Case("probe_consensus_lowercase", "probe.jsonl", [make_probe(["A"] * 3, consensus="a")], 1, "consensus",
         "not one uppercase letter", reader="probe"),
    Case("probe_reanswer_bad_key", "probe.jsonl", [make_probe(["A", "ab", "A"])], 1, "reanswers[1].answer",
         "not one uppercase letter", reader="probe"),
    Case("probe_reanswer_missing_logprob", "probe.jsonl",
         [_mut(_set("reanswers.2.logprob", _DEL), make_probe(["A"] * 3))], 1, "reanswers[2].logprob",
         "missing required field", reader="probe"),
    Case("probe_duplicate_qid_arm", "probe.jsonl", [make_probe(["A"] * 3), make_probe(["A"] * 3)], 2, "arm",
         "duplicate record qid='q1', arm='counter_evidence'", reader="probe"),
    Case("probe_consensus_differs", "probe.jsonl",
         [make_probe(["A"] * 3, arm="instruction_only"), make_probe(["B"] * 3, consensus="B")], 2, "consensus",
         "'B' differs from the log's unanimous first-round answer 'A'", reader="probe", logs=[_probe_unanimous_log()]),
    Case("probe_log_not_unanimous", "probe.jsonl", [make_probe(["A"] * 3)], 1, "consensus", "not unanimous in round 1",
         reader="probe", logs=[make_log([["A", "B", "A"], ["A", "A", "A"]])]),
    Case("probe_wrong_n_reanswers", "probe.jsonl", [make_probe(["A"] * 2)], 1, "reanswers",
         "expected N=3 re-answers, got 2", reader="probe", logs=[_probe_unanimous_log()]),
    Case("probe_reanswer_not_option", "probe.jsonl", [make_probe(["A", "E", "A"])], 1, "reanswers[1].answer",
         "'E' is not among the options", reader="probe", logs=[_probe_unanimous_log()]),
    # ---- self-report (DESIGN 2.3) ------------------------------------------------------------
    Case("verbalized_over_100", "self_report.jsonl", [make_self_report(verbalized_confidence=101)], 1,
         "verbalized_confidence", "less than or equal to 100", reader="self_report"),
    Case("verbalized_negative", "self_report.jsonl", [make_self_report(verbalized_confidence=-1)], 1,
         "verbalized_confidence", "greater than or equal to 0", reader="self_report"),
    Case("p_true_over_1", "self_report.jsonl", [make_self_report("q1"), make_self_report("q2", p_true=1.5)], 2,
         "p_true", "less than or equal to 1", reader="self_report"),
    Case("p_true_nan", "self_report.jsonl", ['{"schema_version": 1, "qid": "q1", "dataset": "d", "backbone": "b", '
                                             '"verbalized_confidence": null, "p_true": NaN}'], 1,
         "p_true", "non-finite", reader="self_report"),
    Case("self_report_duplicate_qid", "self_report.jsonl", [make_self_report("q1"), make_self_report("q1")], 2,
         "qid", "duplicate record", reader="self_report"),
    # ---- NLI cache (DESIGN 2.4) --------------------------------------------------------------
    Case("nli_not_square", "nli.jsonl", [make_nli(entailment=[[1.0, 0.5], [0.5]])], 1, "entailment[1]",
         "not square", reader="nli"),
    Case("nli_rows_mismatch", "nli.jsonl", [make_nli(entailment=[[1.0, 0.5]])], 1, "entailment",
         "1 rows for 2 claims", reader="nli"),
    Case("nli_out_of_range", "nli.jsonl", [make_nli(entailment=[[1.0, 1.2], [0.5, 1.0]])], 1, "entailment[0][1]",
         "not in [0, 1]", reader="nli"),
    Case("nli_negative_prob", "nli.jsonl", [make_nli(entailment=[[1.0, 0.2], [-0.5, 1.0]])], 1, "entailment[1][0]",
         "not in [0, 1]", reader="nli"),
    Case("nli_nan_prob", "nli.jsonl", [_raw_with("entailment.1.1", "NaN", make_nli())], 1, "entailment[1][1]",
         "non-finite", reader="nli"),
    Case("nli_claims_mismatch", "nli.jsonl", [make_nli(candidates=[0, 1, 2])], 1, "claims",
         "2 claims for 3 candidate indices", reader="nli"),
    Case("nli_duplicate_candidates", "nli.jsonl", [make_nli(candidates=[1, 1])], 1, "candidates",
         "index 1 is listed more than once", reader="nli"),
    Case("nli_negative_candidate", "nli.jsonl", [make_nli(candidates=[0, -1])], 1, "candidates[1]",
         "greater than or equal to 0", reader="nli"),
    Case("nli_duplicate_qid_round", "nli.jsonl", [make_nli(), make_nli()], 2, "round",
         "duplicate record qid='q1', round=1", reader="nli"),
    Case("nli_not_modal_voters", "nli.jsonl", [make_nli(candidates=[0, 1])], 1, "candidates",
         "not the voters [0, 2] of round 1's modal answer 'A'", reader="nli", logs=[make_log([["A", "B", "A"], ["A"] * 3])]),
    Case("nli_round_not_logged", "nli.jsonl", [make_nli(round=3, candidates=[0, 2])], 1, "round",
         "has 2 logged rounds, not round 3", reader="nli", logs=[make_log([["A", "B", "A"], ["A"] * 3])]),
    Case("nli_unknown_qid", "nli.jsonl", [make_nli(qid="zz")], 1, "qid", "'zz' is not in the execution logs",
         reader="nli", logs=[make_log([["A", "A"]])]),
    Case("nli_all_null_round", "nli.jsonl", [make_nli()], 1, "round", "no non-null answer",
         reader="nli", logs=[make_log([[None, None], ["A", "A"]])]),
]

READERS = {"logs": L.read_logs, "probe": L.read_probe, "nli": L.read_nli, "self_report": L.read_self_report}


def _write(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / case.filename
    if case.raw_bytes is not None:
        path.write_bytes(case.raw_bytes)
        return path
    chunks = []
    for rec in case.lines:
        line = rec if isinstance(rec, bytes) else (rec if isinstance(rec, str) else json.dumps(rec)).encode("utf-8")
        chunks.append(line + b"\n")
    data = b"".join(chunks)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
        if case.truncate:
            data = data[: len(data) - 12]  # drop the trailer and some deflate data
    path.write_bytes(data)
    return path


def test_at_least_30_distinct_kinds() -> None:
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_is_rejected_with_file_line_field(tmp_path: Path, case: Case) -> None:
    path = _write(tmp_path, case)
    reader = READERS[case.reader]
    with pytest.raises(L.LogFormatError) as info:
        if case.logs is None:
            reader(path)
        else:
            logs = [L.QuestionLog.model_validate(d) for d in case.logs]
            reader(path, logs=logs)
    err = info.value
    assert Path(err.path).name == case.filename
    assert err.line == case.line
    assert err.field == case.field
    assert case.reason in err.reason, str(err)
    where = str(path) if case.line is None else f"{path}:{case.line}"
    assert str(err) == f"{where}: {case.field or '<record>'}: {err.reason}"


def test_message_names_nested_field_exactly(tmp_path: Path) -> None:
    """The example of the brief: a bad log-prob on line 3, round 2, candidate 3."""
    bad = _mut(_set("rounds.1.candidates.2.logprob", "x"))
    path = _write(tmp_path, Case("x", "logs.jsonl", [GOOD, GOOD | {"qid": "q2"}, bad], 3, None, ""))
    with pytest.raises(L.LogFormatError) as info:
        L.read_logs(path)
    assert str(info.value) == f"{path}:3: rounds[1].candidates[2].logprob: Input should be a valid number (got 'x')"


_FIELD_RE = r"^[a-z_]+(\[\d+\])*(\.[A-Za-z_]+(\[\d+\])*)*$"
_MUTATIONS = [
    ("rounds.0.candidates.0.logprob", "x"),
    ("rounds.0.candidates.0.logprob", True),
    ("rounds.0.candidates.0.mean_token_entropy", [1]),
    ("rounds.0.candidates.0.n_tokens", "3"),
    ("rounds.0.candidates.0.answer", 3),
    ("rounds.0.retrieval", 3),
    ("rounds.0.retrieval.queries", "q"),
    ("cost", "free"),
    ("options", ["A", "B"]),
    ("rounds", {"round": 1}),
    ("specialty", ["x"]),
]


@pytest.mark.parametrize(("where", "value"), _MUTATIONS)
def test_no_schema_tag_leaks_into_field_names(where: str, value: Any) -> None:
    """Nullable / union types must not leak pydantic branch names (e.g. 'float', 'function-after[...]')."""
    with pytest.raises(L.LogFormatError) as info:
        L.validate_record(L.QuestionLog, _mut(_set(where, value)), "logs.jsonl", 5)
    field_name = info.value.field
    assert field_name is not None
    import re

    assert re.match(_FIELD_RE, field_name), field_name
    assert field_name.replace("[", ".").replace("]", "").replace("..", ".") == where, field_name


def test_probe_and_self_report_fields_do_not_leak_tags() -> None:
    for model, rec, where, value in [
        (L.QuestionLog, _log(cost={"wall_s": 1.0, "completion_tokens": 2}), "cost.wall_s", "1"),
        (L.ProbeRecord, make_probe(["A"] * 3), "arm", 5),
        (L.ProbeRecord, make_probe(["A"] * 3), "reanswers.0.mean_token_entropy", "x"),
        (L.SelfReport, make_self_report(), "p_true", "0.5"),
        (L.NLIRecord, make_nli(), "entailment.0.1", "0.5"),
    ]:
        with pytest.raises(L.LogFormatError) as info:
            L.validate_record(model, _mut(_set(where, value), rec), "f.jsonl", 1)
        assert info.value.field.replace("[", ".").replace("]", "").replace("..", ".") == where
