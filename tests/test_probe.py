"""Keep rate (Eq. 4) and flip rule (Figure 3; DESIGN 3)."""

from __future__ import annotations

import pytest
from helpers import make_candidate, make_probe
from hypothesis import given
from hypothesis import strategies as st

from probeguard_core.logs import Candidate, ProbeRecord
from probeguard_core.probe import is_flipped, keep_rate, probe_table


def P(reanswers, **kw) -> ProbeRecord:
    return ProbeRecord.model_validate(make_probe(reanswers, **kw))


def test_keep_rate_hand_worked():
    assert keep_rate(["A"] * 8, "A") == 1.0
    assert keep_rate(["B"] * 8, "A") == 0.0
    assert keep_rate(["A", "A", "A", "B", "C", None, "A", None], "A") == 0.5
    assert keep_rate([None, None], "A") == 0.0  # null = not kept, still counted in N


def test_keep_rate_accepts_candidates():
    cands = [Candidate.model_validate(make_candidate(a)) for a in ["A", "B", None, "A"]]
    assert keep_rate(cands, "A") == 0.5
    assert not is_flipped(cands, "A")


@pytest.mark.parametrize(
    ("reanswers", "flipped"),
    [
        (["A", "A", "B"], False),
        (["A", "B", "B"], True),
        (["A", "B"], True),  # tie = flipped
        (["A", "A", "B", "B", None], True),
        ([None, None, None], True),  # all null = flipped
        (["A", None, None, None], False),  # unique plurality among answers is A
        (["B", "C", "A", "A"], False),
        (["B", "C", "D"], True),
    ],
)
def test_is_flipped(reanswers, flipped):
    assert is_flipped(reanswers, "A") is flipped


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([], "A"), "empty"),
        ((["A"], ""), "consensus"),
        ((["A"], None), "consensus"),
        (("AAB", "A"), "not one string"),
        (([1, 2], "A"), r"reanswers\[0\]"),
    ],
)
def test_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        keep_rate(*args)
    with pytest.raises(ValueError, match=match):
        is_flipped(*args)


def test_probe_table():
    recs = [
        P(["A", "A", "B", "A"], qid="q1"),
        P(["A", "A", "A", "A"], qid="q1", arm="instruction_only"),
        P(["B", "B", "A", None], qid="q2", consensus="A"),
    ]
    t = probe_table(recs)
    assert list(t.index.names) == ["qid", "arm"]
    assert t.loc[("q1", "counter_evidence"), "kappa"] == 0.75
    assert not t.loc[("q1", "counter_evidence"), "flipped"]
    assert t.loc[("q1", "instruction_only"), "kappa"] == 1.0
    assert t.loc[("q2", "counter_evidence"), "kappa"] == 0.25
    assert t.loc[("q2", "counter_evidence"), "flipped"]
    assert t.loc[("q2", "counter_evidence"), "n"] == 4
    ce = t.xs("counter_evidence", level="arm")
    assert list(ce.index) == ["q1", "q2"]
    assert t["flipped"].dtype == bool and t["kappa"].dtype == float


def test_probe_table_rejects_duplicates():
    with pytest.raises(ValueError, match="duplicate probe record for qid='q1'"):
        probe_table([P(["A"]), P(["B"])])


def test_probe_table_empty():
    assert probe_table([]).shape == (0, 6)


@given(st.lists(st.sampled_from(["A", "B", "C", None]), min_size=1, max_size=10))
def test_keep_rate_properties(answers):
    k = keep_rate(answers, "A")
    assert 0 <= k <= 1 and k * len(answers) == pytest.approx(answers.count("A"))
    if k > 0.5:
        assert not is_flipped(answers, "A")
    if k == 0:
        assert is_flipped(answers, "A")


def test_keep_rates_per_qid_checks_consensus_and_duplicates():
    from helpers import make_log, make_probe

    from probeguard_core.logs import LogFormatError, ProbeRecord, QuestionLog
    from probeguard_core.probe import keep_rates

    logs = [QuestionLog.model_validate(make_log([["A"] * 4], qid=q)) for q in ("q1", "q2")]
    recs = [ProbeRecord.model_validate(make_probe(["A", "A", "B", None], qid="q1")),
            ProbeRecord.model_validate(make_probe(["A"] * 4, qid="q9")),  # not in logs: ignored
            ProbeRecord.model_validate(make_probe(["B"] * 4, qid="q2", arm="neutral_instruction"))]
    assert keep_rates(recs, logs) == {"q1": 0.5}
    assert keep_rates(recs, logs, arm="neutral_instruction") == {"q2": 0.0}
    with pytest.raises(ValueError, match="duplicate record for qid='q1'"):
        keep_rates(recs[:1] * 2, logs)
    wrong = ProbeRecord.model_validate(make_probe(["B"] * 4, qid="q1", consensus="B"))
    with pytest.raises(LogFormatError, match="consensus: 'B' differs"):
        keep_rates([wrong], logs)
