"""Consensus-process features (Eqs. 2, 7-11; DESIGN 3): hand-worked examples, registry, properties."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import make_log, make_nli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon

from probeguard_core import features as F
from probeguard_core.feature_reference import feature_table_reference
from probeguard_core.logs import NLIRecord, QuestionLog


def L(rounds, **kw) -> QuestionLog:
    return QuestionLog.model_validate(make_log(rounds, **kw))


def NLI(**kw) -> NLIRecord:
    return NLIRecord.model_validate(make_nli(**kw))


def nan_equal(a, b) -> bool:
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, abs=1e-12) for x, y in zip(a, b))


# ------------------------------------------------------------------ agreement, Eqs. 2 and 7

def test_agreement_hand_worked():
    log = L([["A", "B", "A", None], ["B", "B", "A", "C"], ["B", "B", "B", "B"]], gold="B")
    assert F.first_round_agreement(log) == 0.5  # s_1(A) = 2/4
    assert F.round_agreements(log) == [0.5, 0.5, 1.0]
    assert F.terminal_agreement(log) == 1.0
    assert F.trajectory_agreement(log) == pytest.approx(2 / 3)
    assert F.modal_answers(log) == ["A", "B", "B"]
    assert F.majority_flips(log) == 1


def test_modal_tie_is_alphabetically_first():
    log = L([["C", "C", "B", "B"], ["B", "A", "A", "B"], ["D", "D", "D", "D"]], gold="D")
    assert F.modal_answers(log) == ["B", "A", "D"]  # C/B tie -> B; B/A tie -> A
    assert F.majority_flips(log) == 2
    assert F.first_round_agreement(log) == 0.5


def test_ties_between_same_options_are_not_flips():
    log = L([["B", "A"], ["A", "B"], ["A", "A"]])
    assert F.modal_answers(log) == ["A", "A", "A"]
    assert F.majority_flips(log) == 0


def test_nulls_count_in_n_but_are_never_the_mode():
    log = L([[None, None, "B"]], options="ABC", gold="B")
    assert F.answer_shares(log, log.rounds[0]) == {"A": 0.0, "B": pytest.approx(1 / 3), "C": 0.0}
    assert F.first_round_agreement(log) == pytest.approx(1 / 3)
    assert F.final_answer(log) == "B"


def test_all_null_round_has_no_modal_answer():
    # DESIGN 3: a round whose answers are all null has m_t = None; Eq. 8 compares None as a value
    log = L([["B", "C"], [None, None]], options="BCD", gold="C")
    assert F.modal_answers(log) == ["B", None]
    assert F.round_agreements(log) == [0.5, 0.0]
    assert F.majority_flips(log) == 1  # B -> None is a change of the leading answer
    assert F.final_answer(log) is None
    assert not F.is_correct(log)
    assert not F.converged(log)
    # no m*: every option with a supporter is a minority (B and C, one round each of two)
    assert F.minority_persistence(log) == 0.5 and F.n_minority_options(log) == 2
    ft = F.feature_table([log])
    assert ft.loc["q1", "a_last"] == 0.0 and ft.loc["q1", "n_flip"] == 1.0
    pd.testing.assert_frame_equal(ft, feature_table_reference([log]))


def test_modal_answer_agrees_with_logs_on_every_round():
    from probeguard_core import logs as LG

    rounds = [["B", "C", "B"], [None, None, None], ["C", "C", None], [None, "D", None], ["D", "B", None]]
    log = L(rounds, options="BCD", gold="C")
    assert F.modal_answers(log) == [LG.modal_answer(r) for r in log.rounds] == ["B", None, "C", "D", "B"]
    assert F.majority_flips(log) == 4
    pd.testing.assert_frame_equal(F.feature_table([log]), feature_table_reference([log]))


def test_entropy_summed_in_canonical_order():
    # the same multiset of shares on different options gives bit-equal entropies
    perms = [["A", "A", "A", "A", "B", "B", "C", "D", None, "E"],
             ["E", "E", "E", "E", "D", "D", "A", "B", None, "C"],
             ["C", "B", "C", "C", "C", "A", "A", "E", "D", None]]
    logs = [L([p], options="ABCDE", gold="A", qid=f"q{i}") for i, p in enumerate(perms)]
    hs = [F.answer_entropies(g)[0] for g in logs]
    assert hs[0] == hs[1] == hs[2]
    ft = F.feature_table(logs)
    assert ft["H_first"].nunique() == 1 and ft["H_first"].iloc[0] == hs[0]
    assert F.canonical_sum([0.1, 0.2, 0.3]) == F.canonical_sum([0.3, 0.1, 0.2])


def test_single_round_unanimous():
    log = L([["A", "A", "A"]], gold="A")
    assert F.first_round_agreement(log) == F.terminal_agreement(log) == F.trajectory_agreement(log) == 1.0
    assert F.majority_flips(log) == 0
    assert F.converged(log) and F.stratum(log) == "S1" and F.is_correct(log)
    assert F.minority_persistence(log) == 0.0
    assert F.answer_entropies(log) == [0.0]
    assert F.doc_repeat_rates(log)[0] != F.doc_repeat_rates(log)[0]  # NaN


def test_single_candidate():
    log = L([["C"]], gold="A")
    assert F.stratum(log) == "S1" and F.final_answer(log) == "C" and not F.is_correct(log)


# ------------------------------------------------------------------ final answer, strata

@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (["A", "A", "B", None], "A"),
        (["A", "B", None, None], None),  # A/B tie
        ([None, None, None, "C"], "C"),  # nulls are not an answer
        ([None, None, None, None], None),
        (["B", "B", "A", "A"], None),
    ],
)
def test_final_answer(last, expected):
    log = L([last])
    assert F.final_answer(log) == expected
    assert F.is_correct(log) == (expected == "A")


def test_strata():
    assert F.stratum(L([["A"] * 4])) == "S1"
    assert F.stratum(L([["A", "A", "B", "A"], ["B"] * 4])) == "S2"
    assert F.stratum(L([["A", "A", "B", "A"], ["B", "B", "A", "B"]])) == "S3"
    # a unanimous *null* round is not unanimity on an answer
    assert F.stratum(L([[None, None]])) == "S3"
    assert F.stratum(L([["A", None]])) == "S3"
    assert not F.converged(L([["A", "A", None]]))


# ------------------------------------------------------------------ minority persistence, Eq. 9

def test_minority_persistence_hand_worked():
    # m* = B; A supported in rounds 1, 2 (2/4), C in round 1 (1/4), D in round 3 (1/4)
    log = L(
        [["A", "B", "C", "B"], ["A", "B", "B", "B"], ["B", "B", "D", "B"], ["B", "B", "B", "B"]],
        gold="B",
    )
    assert F.minority_persistence(log) == 0.5
    assert F.n_minority_options(log) == 3


def test_minority_persistence_zero_without_other_supporters():
    assert F.minority_persistence(L([["A", None, "A"]])) == 0.0
    assert F.n_minority_options(L([["A", None, "A"]])) == 0


def test_minority_persistence_without_final_answer_uses_last_mode():
    # last round ties A/B -> no final answer; m* = m_T = A; B persists in both rounds
    log = L([["A", "B", "B", "C"], ["A", "B", "A", "B"]])
    assert F.final_answer(log) is None
    assert F.minority_persistence(log) == 1.0
    log2 = L([["B", "B", "C", "A"], ["C", "B", "C", "B"]])  # m_T = B (tie B/C); C in both rounds
    assert F.minority_persistence(log2) == 1.0
    log3 = L([["B", "B", "A", "A"], ["C", "B", "C", "B"]])  # m* = B; A 1 round, C 1 round
    assert F.minority_persistence(log3) == 0.5


# ------------------------------------------------------------------ entropy, Eq. 11; JS

def test_answer_entropies_hand_worked():
    log = L([["A", "B", "A", "B"], ["A", "B", None, None], ["A", "A", "A", "C"], ["A", "A", "A", "A"]])
    h = F.answer_entropies(log)
    assert h[0] == pytest.approx(math.log(2))
    # nulls count in N and are not a term: -2 * 0.25 ln 0.25 = 0.5 ln 4
    assert h[1] == pytest.approx(0.5 * math.log(4))
    assert h[2] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert h[3] == 0.0


def test_js_divergences_match_scipy():
    log = L([["A", "B", "A", None], ["B", "B", "A", "C"], ["B", "B", "B", "B"]], gold="B")
    js = F.js_divergences(log)
    assert math.isnan(js[0])
    p = [[0.5, 0.25, 0, 0, 0.25], [0.25, 0.5, 0.25, 0, 0], [0, 1, 0, 0, 0]]
    for t in (1, 2):
        assert js[t] == pytest.approx(jensenshannon(p[t - 1], p[t]) ** 2, abs=1e-12)


# ------------------------------------------------------------------ document repeat rate, Eq. 10

def test_doc_repeat_rates_hand_worked():
    log = L(
        [["A", "B"], ["A", "B"], ["B", "A"], ["A", "B"], ["A", "B"], ["B", "B"]],
        gold="B",
        doc_ids=[["d1", "d2"], ["d2", "d3"], None, [], ["d1", "d4", "d5", "d6"], None],
    )
    rho = F.doc_repeat_rates(log)
    assert math.isnan(rho[0])  # t = 1 always undefined
    assert rho[1] == 0.5  # D_2 = {d2, d3}, d2 seen
    assert math.isnan(rho[2])  # retrieval null
    assert math.isnan(rho[3])  # |D_t| = 0
    assert rho[4] == 0.25  # d1 seen of {d1, d4, d5, d6}


def test_doc_repeat_rates_without_retrieval_all_nan():
    rho = F.doc_repeat_rates(L([["A", "B"], ["A", "A"]]))
    assert len(rho) == 2 and all(math.isnan(x) for x in rho)


# ------------------------------------------------------------------ registry

def test_registry_has_34_unique_features_in_five_families():
    reg = F.load_registry()
    names = [s.name for s in reg]
    assert len(names) == 34 == len(set(names))
    fams = {s.family for s in reg}
    assert fams == set(F.FAMILIES)
    for fam in F.FAMILIES:
        assert sum(s.family == fam for s in reg) >= 1
    for s in reg:
        assert s.aggregation in F.AGGREGATIONS and s.formula and s.missing
    # the families named in Appendix B are present
    assert {"a_first", "a_mean", "n_flip", "minority_persistence", "rse_first", "rho_mean", "js_mean",
            "H_frac_nonincreasing", "H_first", "H_last", "H_slope"} <= set(names)


def _write_registry(tmp_path: Path, mutate) -> Path:
    doc = yaml.safe_load(F._default_registry_path().read_text(encoding="utf-8"))
    mutate(doc["features"])
    p = tmp_path / "features.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda fs: fs[0].__setitem__("aggregation", "median"), r"features\[0\] \(a_first\): aggregation: 'median'"),
        (lambda fs: fs[1].__setitem__("family", "vibes"), r"family: 'vibes'"),
        (lambda fs: fs[2].__setitem__("base", "nonsense"), r"base: 'nonsense'"),
        (lambda fs: fs[3].__setitem__("name", "a_first"), r"duplicate feature name 'a_first'"),
        (lambda fs: fs[4].pop("formula"), r"formula: missing required field"),
        (lambda fs: fs[5].__setitem__("name", "made_up"), r"no implementation for special feature 'made_up'"),
        (lambda fs: fs[0].__setitem__("colour", "red"), r"colour: unknown field"),
    ],
)
def test_registry_rejects_bad_entries(tmp_path, mutate, match):
    p = _write_registry(tmp_path, mutate)
    with pytest.raises(ValueError, match=match):
        F.load_registry(p)


def test_feature_table_follows_a_custom_registry(tmp_path):
    p = _write_registry(tmp_path, lambda fs: fs.__delitem__(slice(2, None)))
    ft = F.feature_table([L([["A", "B"], ["A", "A"]])], registry=p)
    assert list(ft.columns) == ["a_first", "a_last"]


# ------------------------------------------------------------------ feature_table

def _example_logs():
    return [
        L([["A", "B", "A", None], ["B", "B", "A", "C"], ["B", "B", "B", "B"]], gold="B", qid="q1",
          doc_ids=[["d1", "d2"], ["d2", "d3"], None]),
        L([["A", "A", "A", "A"]], qid="q2"),
        L([["A", "B", "C", None], [None, None, None, None]], qid="q3", doc_ids=[[], None]),
    ]


def test_feature_table_shape_columns_dtype():
    ft = F.feature_table(_example_logs())
    assert list(ft.columns) == [s.name for s in F.load_registry()]
    assert list(ft.index) == ["q1", "q2", "q3"] and ft.index.name == "qid"
    assert all(dt == np.float64 for dt in ft.dtypes)


def test_feature_table_hand_worked_values():
    nli = [NLI(qid="q2", claims=["a", "b", "c"], entailment=[[1, 0.8, 0.2], [0.6, 1, 0.9], [0.4, 0.7, 1]])]
    ft = F.feature_table(_example_logs(), nli=nli)
    q1, q2, q3 = ft.loc["q1"], ft.loc["q2"], ft.loc["q3"]
    # q1: agreement series 0.5, 0.5, 1.0
    assert q1["a_first"] == 0.5 and q1["a_last"] == 1.0 and q1["a_mean"] == pytest.approx(2 / 3)
    assert q1["a_slope"] == pytest.approx(0.25) and q1["a_max"] == 1.0
    assert q1["n_flip"] == 1 and q1["t_stop"] == 3 and q1["converged"] == 1
    # entropies: ln 2 (0.5 ln 2 + 0.25 ln 4 = ln 2), ln 2 - ... ; round 2 = 0.5,0.25,0.25
    h2 = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert q1["H_first"] == pytest.approx(math.log(2)) and q1["H_max"] == pytest.approx(h2)
    assert q1["H_frac_nonincreasing"] == 0.5  # ln2 -> 1.04 increases, 1.04 -> 0 decreases
    assert q1["minority_persistence"] == pytest.approx(2 / 3) and q1["n_minority_options"] == 2
    # minority share: round 1 B = 0.25; round 2 A + C = 0.5; round 3 0
    assert q1["minority_first"] == 0.25 and q1["minority_max"] == 0.5 and q1["minority_mean"] == 0.25
    assert q1["rho_mean"] == 0.5 and q1["rho_last"] == 0.5 and math.isnan(q1["rho_slope"])
    assert q1["docs_total"] == 4 and q1["queries_total"] == 2
    assert all(math.isnan(q1[c]) for c in ("rse_first", "rse_mean", "hard_se_first"))
    # q2: unanimous in one round; slopes and JS are missing, not zero
    for c in ("a_slope", "H_slope", "minority_slope", "js_mean", "js_max", "H_frac_nonincreasing"):
        assert math.isnan(q2[c]), c
    assert q2["converged"] == 1 and q2["minority_persistence"] == 0
    # RSE = mean(min(.8,.6), min(.2,.4), min(.9,.7)) = (0.6 + 0.2 + 0.7) / 3
    assert q2["rse_first"] == pytest.approx(0.5) and q2["rse_last"] == pytest.approx(0.5)
    # clusters: {0,1} (0.8/0.6 > .5), {2} (0.2/0.4 vs rep 0) -> H(2/3, 1/3)
    assert q2["hard_se_first"] == pytest.approx(-(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)))
    for c in ("rho_mean", "rho_max", "docs_total", "queries_total"):
        assert math.isnan(q2[c]), c  # no retrieval record -> retrieval family missing
    # q3: an empty retrieval gives counts 0 but rho missing
    assert q3["docs_total"] == 0 and q3["queries_total"] == 1 and math.isnan(q3["rho_mean"])
    assert q3["converged"] == 0


def test_rationale_family_uses_records_by_round():
    log = L([["A", "B", "A"], ["A", "A", "B"], ["A", "A", "A"]], qid="q")
    full = [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
    half = [[1, 0.5, 0.5], [0.5, 1, 0.5], [0.5, 0.5, 1]]
    nli = {("q", 1): NLI(qid="q", round=1, claims=["a", "b"], entailment=[[1, 0.2], [0.2, 1]]),
           ("q", 3): NLI(qid="q", round=3, claims=["a", "b", "c"], entailment=full)}
    ft = F.feature_table([log], nli=nli)
    assert ft.loc["q", "rse_first"] == pytest.approx(0.2)
    assert ft.loc["q", "rse_last"] == 1.0
    assert ft.loc["q", "rse_mean"] == pytest.approx(0.6)
    assert ft.loc["q", "rse_max"] == 1.0
    assert ft.loc["q", "hard_se_first"] == pytest.approx(math.log(2))
    assert ft.loc["q", "hard_se_mean"] == pytest.approx(math.log(2) / 2)
    # a record naming a round the log does not have is an error, not ignored
    with pytest.raises(ValueError, match="round=4"):
        F.feature_table([log], nli=[NLI(qid="q", round=4, claims=["a", "b", "c"], entailment=half)])
    with pytest.raises(ValueError, match="other/backbone"):
        F.feature_table([log], nli=[NLI(qid="q", backbone="other/backbone")])
    with pytest.raises(ValueError, match="duplicate"):
        F.feature_table([log], nli=[NLI(qid="q"), NLI(qid="q")])
    # records for questions not in the table are ignored (a cache can cover a larger pool)
    assert F.feature_table([log], nli=[NLI(qid="other")]).loc["q"].isna().sum() >= 6


def test_feature_table_rejects_duplicate_qids_and_non_logs():
    log = L([["A", "A"]])
    with pytest.raises(ValueError, match="duplicate qid 'q1'"):
        F.feature_table([log, log])
    with pytest.raises(ValueError, match="expected a QuestionLog"):
        F.feature_table([make_log([["A", "A"]])])


def test_feature_table_empty():
    ft = F.feature_table([])
    assert ft.shape == (0, 34)


def test_feature_table_matches_reference_on_examples():
    nli = [NLI(qid="q1", round=2, claims=["a", "b"], entailment=[[1, 0.7], [0.9, 1]])]
    pd.testing.assert_frame_equal(F.feature_table(_example_logs(), nli), feature_table_reference(_example_logs(), nli))


# ------------------------------------------------------------------ properties

@st.composite
def logs_strategy(draw, qid="q"):
    options = draw(st.sampled_from(["AB", "ABCD", "ABCDE", "BCD"]))
    n = draw(st.integers(2, 6))
    t_stop = draw(st.integers(1, 5))
    answer = st.one_of(st.none(), st.sampled_from(list(options)))
    rounds = []
    for t in range(t_stop):
        r = draw(st.lists(answer, min_size=n, max_size=n))
        if t < t_stop - 1 and len(set(r)) == 1 and r[0] is not None:
            r[0] = None  # only the last round may be unanimous (substrate stops)
        rounds.append(r)
    docs = draw(
        st.one_of(
            st.none(),
            st.lists(st.one_of(st.none(), st.lists(st.sampled_from(["d1", "d2", "d3", "d4"]), max_size=4, unique=True)),
                     min_size=t_stop, max_size=t_stop),
        )
    )
    if docs:
        docs[-1] = None  # no retrieval after the last round (there is no next round)
    return L(rounds, options=options, gold=options[0], doc_ids=docs, qid=qid)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=6, unique=True).flatmap(
    lambda ids: st.tuples(*[logs_strategy(qid=f"q{i}") for i in ids])))
def test_vectorized_table_equals_per_question_reference(logs):
    logs = list(logs)
    a = F.feature_table(logs)
    b = feature_table_reference(logs)
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(logs_strategy(), st.randoms(use_true_random=False))
def test_feature_table_invariant_to_permuting_candidates(log, rnd):
    raw = log.model_dump(mode="json")
    for r in raw["rounds"]:
        rnd.shuffle(r["candidates"])
    permuted = QuestionLog.model_validate(raw)
    pd.testing.assert_frame_equal(F.feature_table([log]), F.feature_table([permuted]))
    assert F.final_answer(log) == F.final_answer(permuted) and F.stratum(log) == F.stratum(permuted)


@settings(max_examples=40, deadline=None)
@given(logs_strategy())
def test_ranges(log):
    row = F.feature_table([log]).iloc[0]
    for c in ("a_first", "a_last", "a_mean", "a_max", "minority_persistence", "minority_first", "minority_max"):
        assert 0.0 <= row[c] <= 1.0, c
    assert 0 <= row["n_flip"] <= row["t_stop"] - 1
    assert row["js_max"] != row["js_max"] or 0 <= row["js_max"] <= math.log(2) + 1e-12
    h = F.answer_entropies(log)
    # sum_a -s ln s with sum_a s = c <= 1 over K options peaks at c = min(1, K/e):
    # ln K for K >= 3, but 2/e > ln 2 for two options with null answers
    k = len(log.options)
    assert all(0 <= x <= max(math.log(k), k / math.e) + 1e-12 for x in h)
    if all(c.answer is not None for r in log.rounds for c in r.candidates):
        assert all(x <= math.log(k) + 1e-12 for x in h)
    rho = F.doc_repeat_rates(log)
    assert len(rho) == len(log.rounds) and math.isnan(rho[0])
    assert all(math.isnan(x) or 0 <= x <= 1 for x in rho)
