"""Snapshot baselines (section 4.1, Table 2) and the signal table."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import make_log, make_nli, make_probe, make_self_report

from probeguard_core.baselines import SIGNALS, answer_entropy_score, sequence_logprob, signal_table
from probeguard_core.logs import NLIRecord, ProbeRecord, QuestionLog, SelfReport


def L(rounds, **kw) -> QuestionLog:
    return QuestionLog.model_validate(make_log(rounds, **kw))


def test_sequence_logprob_averages_voters_of_the_final_answer():
    log = L([["A", "A", "B", None]], logprobs=[[-2.0, -4.0, -100.0, -50.0]])
    assert sequence_logprob(log) == -3.0


def test_sequence_logprob_uses_only_the_final_round():
    log = L([["A", "B", "B"], ["A", "A", "B"]], logprobs=[[-9.0, -9.0, -9.0], [-1.0, -3.0, -7.0]])
    assert sequence_logprob(log) == -2.0


def test_sequence_logprob_skips_null_logprobs_and_is_nan_when_all_null():
    log = L([["A", "A", "B"]], logprobs=[[None, -6.0, -1.0]])
    assert sequence_logprob(log) == -6.0
    log2 = L([["A", "A", "B"]], logprobs=[[None, None, -1.0]])
    assert math.isnan(sequence_logprob(log2))


def test_sequence_logprob_without_final_answer_uses_last_mode():
    log = L([["B", "A", "A", "B"]], logprobs=[[-1.0, -5.0, -7.0, -3.0]])  # tie -> m_T = A
    assert sequence_logprob(log) == -6.0


def test_sequence_logprob_length_normalized():
    raw = make_log([["A", "A"]], logprobs=[[-4.0, -9.0]])
    raw["rounds"][0]["candidates"][0]["n_tokens"] = 2
    raw["rounds"][0]["candidates"][1]["n_tokens"] = 3
    log = QuestionLog.model_validate(raw)
    assert sequence_logprob(log, length_normalized=True) == pytest.approx((-2.0 - 3.0) / 2)


def test_answer_entropy_score_is_negated_first_round_entropy():
    log = L([["A", "B", "A", "B"], ["A"] * 4])
    assert answer_entropy_score(log) == pytest.approx(-math.log(2))
    assert answer_entropy_score(L([["A"] * 4])) == 0.0


def _sources():
    logs = [
        L([["A"] * 4], qid="u1", gold="A", logprobs=[[-1.0] * 4]),
        L([["B", "A", "B", "B"], ["B"] * 4], qid="s2", gold="A"),
        L([["B", "A", "B", "A"], ["A", "B", None, None]], qid="s3", gold="A"),
    ]
    sr = [SelfReport.model_validate(make_self_report(qid="u1", verbalized_confidence=90.0, p_true=None)),
          SelfReport.model_validate(make_self_report(qid="zz"))]
    nli = [NLIRecord.model_validate(make_nli(qid="u1", entailment=[[1, 0.4], [0.6, 1]]))]
    probe = [ProbeRecord.model_validate(make_probe(["A", "A", "B", None], qid="u1"))]
    return logs, sr, nli, probe


def test_signal_table():
    logs, sr, nli, probe = _sources()
    t = signal_table(logs, sr, nli, probe)
    assert list(t.columns) == [*SIGNALS, "correct", "stratum"]
    assert list(t.index) == ["u1", "s2", "s3"] and t.index.name == "qid"
    assert list(t["stratum"]) == ["S1", "S2", "S3"]
    assert list(t["correct"]) == [True, False, False]
    assert list(t["terminal_agreement"]) == [1.0, 1.0, 0.25]
    assert list(t["first_round_agreement"]) == [1.0, 0.75, 0.5]
    assert t.loc["u1", "sequence_logprob"] == -1.0
    assert t.loc["s2", "answer_entropy"] == pytest.approx(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert t.loc["u1", "verbalized_confidence"] == 90.0
    assert math.isnan(t.loc["u1", "p_true"]) and math.isnan(t.loc["s2", "verbalized_confidence"])
    assert t.loc["u1", "rse"] == pytest.approx(0.4) and math.isnan(t.loc["s2", "rse"])
    assert t.loc["u1", "keep_rate"] == 0.5 and math.isnan(t.loc["s3", "keep_rate"])
    for c in SIGNALS:
        assert t[c].dtype == np.float64


def test_signal_table_without_optional_sources_is_nan_not_zero():
    logs, *_ = _sources()
    t = signal_table(logs)
    for c in ("verbalized_confidence", "p_true", "rse", "keep_rate"):
        assert t[c].isna().all()


def test_signal_table_from_a_cell_like_object():
    logs, sr, nli, probe = _sources()
    cell = SimpleNamespace(logs=logs, self_report=sr, nli=nli, probe=probe)
    a = signal_table(cell)
    b = signal_table(logs, sr, nli, probe)
    assert a.equals(b)


def test_signal_table_rejects_duplicates():
    logs, sr, nli, probe = _sources()
    with pytest.raises(ValueError, match="duplicate qid"):
        signal_table([logs[0], logs[0]])
    with pytest.raises(ValueError, match="self_reports: duplicate"):
        signal_table(logs, [sr[0], sr[0]])
