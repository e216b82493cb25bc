"""Independent conformance suite: DESIGN section 4 names against DESIGN section 3 arithmetic.

It keeps only what the unit tests (tests/test_<module>.py) lack: examples that pin a DESIGN
reading no unit test pins (duplicates of unit tests were removed, issue 10).

Every expected value below was worked out by hand from the DESIGN text (and the paper's
Eqs. 2-11, Appendix C, Algorithm 2), not from the implementation; each example carries a
comment deriving it.  The examples are chosen so that plausible misreadings (nulls as an
option, first-seen tie-break, greedy tag removal, >= instead of >, no 1e-9 in k, ...) give a
different number.  Logs are built here from raw dicts (not tests/helpers.py) so that the
suite depends only on DESIGN 2.1 field names.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom
from statsmodels.stats.proportion import proportion_confint

from probeguard_core import certify, claims, features, logs, metrics, probe, rse, scoring
from probeguard_core.logs import LogFormatError, QuestionLog, ReAnswer

LN2 = math.log(2.0)
NAN = float("nan")


# ------------------------------------------------------------------------------- builders
def _cand(answer: str | None, rationale: str = "Some reasoning.") -> dict[str, Any]:
    return {"answer": answer, "rationale": rationale, "logprob": -1.0, "n_tokens": 3,
            "mean_token_entropy": 0.1}


def _log_dict(rounds, gold="A", options="ABCD", docs=None, qid="q", max_rounds=None) -> dict[str, Any]:
    if max_rounds is None:  # a contested last round below max_rounds is a cut-short log (refused)
        last = set(rounds[-1])
        max_rounds = 8 if len(last) == 1 and None not in last else len(rounds)
    rr = []
    for t, answers in enumerate(rounds):
        d = None if docs is None else docs[t]
        rr.append({"round": t + 1, "candidates": [_cand(a) for a in answers],
                   "retrieval": None if d is None else {"queries": ["q"], "doc_ids": list(d)}})
    return {"schema_version": 1, "qid": qid, "dataset": "medqa", "backbone": "b/x",
            "question": "Q?", "options": {k: f"opt {k}" for k in options}, "gold": gold,
            "specialty": None, "n_candidates": len(rounds[0]), "max_rounds": max_rounds,
            "rounds": rr, "cost": None}


def qlog(rounds, **kw) -> QuestionLog:
    """rounds[t][i] = candidate i's answer in round t+1 (None = null answer)."""
    return QuestionLog.model_validate(_log_dict(rounds, **kw))


def same(a: float, b: float) -> bool:
    """Equality that treats NaN == NaN (missing must stay missing)."""
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


A, B, C, D, E, X = "A", "B", "C", "D", "E", None


# =============================================================================== s_t, a1, agreement
def test_a1_null_answers_count_in_N():
    # round 1 = [A, null, B, B, null], N = 5: s_1(B) = 2/5 (nulls stay in the denominator) -> a1 = 0.4
    # round 2 unanimous B -> terminal 1.0; a-bar = (0.4 + 1.0) / 2 = 0.7
    lg = qlog([[A, X, B, B, X], [B] * 5])
    assert features.first_round_agreement(lg) == pytest.approx(0.4)
    assert features.terminal_agreement(lg) == pytest.approx(1.0)
    assert features.trajectory_agreement(lg) == pytest.approx(0.7)


def test_a1_mostly_null_round():
    # [null, C, null, null]: s_1(C) = 1/4 -> a1 = 0.25 (not 1.0, which excluding nulls from N would give)
    lg = qlog([[X, C, X, X]])
    assert features.first_round_agreement(lg) == pytest.approx(0.25)
    assert features.terminal_agreement(lg) == pytest.approx(0.25)


def test_terminal_agreement_with_tie_and_trajectory():
    # r1 [A,B,C,D]: max share 1/4; r2 [C,C,B,B]: modal B (tie) with share 2/4
    # terminal = 0.5, a1 = 0.25, a-bar = (0.25 + 0.5)/2 = 0.375
    lg = qlog([[A, B, C, D], [C, C, B, B]])
    assert features.first_round_agreement(lg) == pytest.approx(0.25)
    assert features.terminal_agreement(lg) == pytest.approx(0.5)
    assert features.trajectory_agreement(lg) == pytest.approx(0.375)


def test_trajectory_agreement_three_rounds():
    # s_t(m_t): r1 [A,B,C,null] -> 1/4; r2 [A,A,B,null] -> 2/4; r3 [B,B,B,B] -> 1
    # a-bar (Eq. 7) = (0.25 + 0.5 + 1) / 3 = 0.583333...
    lg = qlog([[A, B, C, X], [A, A, B, X], [B, B, B, B]])
    assert features.trajectory_agreement(lg) == pytest.approx(1.75 / 3)


# =============================================================================== m_t and majority flips
def test_majority_flips_consecutive_changes():
    # m_t: r1 [A,A,B,C] -> A; r2 [B,B,B,A] -> B; r3 [A,A,C,B] -> A; r4 unanimous A -> A
    # Eq. 8 counts t < T_stop with m_{t+1} != m_t: (1->2) yes, (2->3) yes, (3->4) no -> 2
    lg = qlog([[A, A, B, C], [B, B, B, A], [A, A, C, B], [A, A, A, A]])
    assert features.majority_flips(lg) == 2


def test_majority_flips_back_and_forth_counts_each_change():
    # m_t = A, B, A: two changes (comparing with m_1 or the final answer would give 1 or 0)
    lg = qlog([[A, A, B], [B, B, A], [A, A, B]])
    assert features.majority_flips(lg) == 2


def test_modal_tie_breaks_alphabetically_even_when_later_key_listed_first():
    # r1 [C,C,B,B]: C and B tie at 2/4 -> m_1 = B (alphabetically first), not C (first seen)
    # r2 [B,B,B,C]: m_2 = B.  Flips = 0; a first-seen or reverse-alphabetical tie-break gives m_1 = C -> 1.
    lg = qlog([[C, C, B, B], [B, B, B, C]])
    assert features.majority_flips(lg) == 0
    # both rounds tied the other way round: m_1 = m_2 = B -> 0 (first-seen would give C, B -> 1)
    lg = qlog([[C, C, B, B], [B, B, C, C]])
    assert features.majority_flips(lg) == 0


def test_modal_tie_three_way_with_a_single():
    # r1 [C,C,B,B,A]: C=2, B=2, A=1 -> m_1 = B; r2 [A,C,B,B,B] -> m_2 = B; flips = 0
    # (m_1 = C under any other tie-break -> 1 flip)
    lg = qlog([[C, C, B, B, A], [A, C, B, B, B]])
    assert features.majority_flips(lg) == 0


def test_null_is_never_the_modal_answer():
    # r1 [null,null,null,C,D]: nulls (3) are not an option; C and D tie at 1 -> m_1 = C
    # r2 unanimous C -> m_2 = C -> 0 flips (treating null as an option would make m_1 = null -> 1 flip)
    assert features.majority_flips(qlog([[X, X, X, C, D], [C] * 5])) == 0
    # same first round, then unanimous D: m_1 = C, m_2 = D -> 1 flip
    assert features.majority_flips(qlog([[X, X, X, C, D], [D] * 5])) == 1


def test_single_round_has_no_flips():
    assert features.majority_flips(qlog([[B, B, B]])) == 0


# =============================================================================== final answer, correct
@pytest.mark.parametrize(
    "rounds, expected",
    [
        # unanimous last round on D -> D
        ([[A, B, C, D], [D, D, D, D]], D),
        # [A,A,B,B,C]: A and B tie at the top -> no answer (tie-break is for m_t, not for the final answer)
        ([[A, A, B, B, C]], None),
        # tie between C and B in the last round: None, NOT the alphabetically first B
        ([[A, B, C, D], [C, C, B, B]], None),
        # all-null last round -> no answer
        ([[A, B, X, X], [X, X, X, X]], None),
        # [null,null,null,B,C,C]: nulls are not a plurality candidate; C (2) beats B (1) -> C
        ([[A, B, C, X, X, X], [X, X, X, B, C, C]], C),
        # non-unanimous but unique plurality -> B
        ([[A, B, C], [B, B, A]], B),
    ],
)
def test_final_answer(rounds, expected):
    assert features.final_answer(qlog(rounds)) == expected


def test_correct_is_final_answer_equals_gold_and_no_answer_is_error():
    # final D, gold D -> correct; final D, gold A -> wrong; tie -> None -> wrong even if gold is one of the tied
    assert features.is_correct(qlog([[A, B, C, D], [D] * 4], gold=D)) is True
    assert features.is_correct(qlog([[A, B, C, D], [D] * 4], gold=A)) is False
    assert features.is_correct(qlog([[A, B, C, D], [C, C, B, B]], gold=B)) is False
    assert features.is_correct(qlog([[A, B], [X, X]], gold=A)) is False


# =============================================================================== converged, strata
@pytest.mark.parametrize(
    "rounds, expected_stratum, expected_converged",
    [
        ([[C, C, C]], "S1", True),                 # a1 = 1: stops at round 1, unanimous -> S1, converged
        ([[A, B, A], [B, B, B]], "S2", True),      # a1 = 2/3 < 1, last round unanimous B -> S2
        ([[A, A, X], [A, A, A]], "S2", True),      # a null in round 1 makes a1 = 2/3 < 1 -> S2 (not S1)
        ([[A, A, X]], "S3", False),                # single round, not unanimous on a non-null answer -> S3
        ([[A, B], [A, B]], "S3", False),           # split to the end -> S3
        ([[A, B], [X, X]], "S3", False),           # all-null last round is not "unanimous on one non-null" -> S3
        ([[A, B, C, D], [C, C, B, B]], "S3", False),
        ([[A, B, C, D], [A, A, A, B]], "S3", False),  # final answer exists (A) but not unanimous -> S3
    ],
)
def test_stratum_and_converged(rounds, expected_stratum, expected_converged):
    lg = qlog(rounds)
    assert features.stratum(lg) == expected_stratum
    assert features.converged(lg) is expected_converged


@pytest.mark.parametrize("opt", list("ABCDE"))
def test_S1_always_single_round_converged(opt):
    # a1 = 1 means round 1 is unanimous on a non-null answer: T_stop = 1, converged, S1, final = opt
    lg = qlog([[opt] * 8], options="ABCDE")
    assert features.first_round_agreement(lg) == 1.0
    assert features.stratum(lg) == "S1"
    assert features.final_answer(lg) == opt
    assert features.majority_flips(lg) == 0
    assert features.minority_persistence(lg) == 0.0


# =============================================================================== minority persistence (Eq. 9)
def test_minority_persistence_counts_rounds_with_a_supporter():
    # final A.  B has >= 1 supporter in rounds 1,2,3 -> 3/4; C: round 1 -> 1/4; D: round 2 -> 1/4
    # pi = max = 3/4 (share-weighted or max-share readings would give other numbers)
    lg = qlog([[A, B, B, C], [A, A, B, D], [A, A, A, B], [A, A, A, A]])
    assert features.minority_persistence(lg) == pytest.approx(0.75)


def test_minority_persistence_no_final_answer_uses_last_modal():
    # last round [C,C,B,B]: tie -> no final answer -> m* = last round's modal answer = B (alphabetical).
    # others: A supported in rounds 1,2 -> 2/3; C in round 3 -> 1/3 -> pi = 2/3.
    # (m* = C, first seen, would give B in 3/3 -> 1.0; excluding nothing would also give 1.0)
    lg = qlog([[B, B, B, A], [B, B, A, A], [C, C, B, B]])
    assert features.minority_persistence(lg) == pytest.approx(2 / 3)


def test_minority_persistence_counts_rounds_where_other_option_led():
    # final A; B supported (as the majority) in round 1 only; T_stop = 2 -> 1/2
    assert features.minority_persistence(qlog([[B, B, B, A], [A, A, A, A]])) == pytest.approx(0.5)
    # final D (3 of 4); A supported in all 3 rounds -> 3/3 = 1
    assert features.minority_persistence(qlog([[A, A, A, D], [A, A, D, D], [D, D, D, A]])) == pytest.approx(1.0)


def test_minority_persistence_zero_without_other_supporters():
    # nobody ever votes another option -> 0 (a null is not an option, so [A,null,A] adds nothing)
    assert features.minority_persistence(qlog([[A, A, A]])) == 0.0
    assert features.minority_persistence(qlog([[A, X, A], [A, A, A]])) == 0.0


# =============================================================================== doc repeat rates (Eq. 10)
def _rates(lg):
    return [float(x) for x in features.doc_repeat_rates(lg)]


def test_doc_repeat_rates_union_of_all_earlier_rounds_and_sets():
    # D1 = {a,b}; D2 = {c,d,a}; D3 = null; D4 = [] (empty); D5 = {b,c,e}; D6 = null (the last
    # round retrieves nothing; a document id twice in one round is refused by the reader)
    # rho_1 = NaN (t = 1); rho_2 = |{a}|/3 = 1/3;
    # rho_3 = NaN (no retrieval); rho_4 = NaN (|D_4| = 0, never 0);
    # rho_5 = |{b,c}| / 3 = 2/3 (b comes from round 1: union of ALL earlier rounds, not just t-1)
    docs = [["a", "b"], ["c", "d", "a"], None, [], ["b", "c", "e"], None]
    lg = qlog([[A, B]] * 6, docs=docs)
    got = _rates(lg)
    exp = [NAN, 1 / 3, NAN, NAN, 2 / 3, NAN]
    assert len(got) == 6
    assert all(same(g, e) for g, e in zip(got, exp)), got


def test_doc_repeat_rate_defined_zero_when_nothing_seen_before():
    # D1 = null, D2 = {x}: t = 2 and |D_2| = 1 > 0 -> rho_2 = 0/1 = 0.0 (defined, not NaN)
    got = _rates(qlog([[A, B], [A, B], [A, B]], docs=[None, ["x"], None]))
    assert math.isnan(got[0]) and got[1] == 0.0


def test_doc_repeat_rates_all_missing_without_retrieval():
    got = _rates(qlog([[A, B], [A, B], [B, B]]))
    assert len(got) == 3 and all(math.isnan(g) for g in got)


def test_doc_repeat_rates_full_and_partial_repeat():
    # D1 = {a}; D2 = {a} -> 1/1; D3 = {a,b} -> 1/2
    got = _rates(qlog([[A, B]] * 4, docs=[["a"], ["a"], ["a", "b"], None]))
    assert all(same(g, e) for g, e in zip(got, [NAN, 1.0, 0.5]))


# =============================================================================== answer entropies (Eq. 11)
def test_answer_entropies_natural_log_nulls_not_an_option():
    # r1 [A,A,B,null]: s(A)=1/2, s(B)=1/4 -> H = .5 ln2 + .25 ln4 = ln 2 exactly
    #   (null as an option: 1.5 ln2; nulls dropped from N: 0.6365) ; r2 unanimous -> 0
    got = features.answer_entropies(qlog([[A, A, B, X], [C, C, C, C]]))
    assert list(got) == pytest.approx([LN2, 0.0])


def test_answer_entropies_uniform_and_binary():
    assert list(features.answer_entropies(qlog([[A, B, C, D]]))) == pytest.approx([math.log(4)])
    # two options half/half: ln 2 = 0.6931 nats (1.0 would be bits)
    assert list(features.answer_entropies(qlog([[A, B]]))) == pytest.approx([LN2])


def test_answer_entropy_all_null_round_is_zero():
    # all s_t(a) = 0 -> the sum of Eq. 11 over options is empty -> 0 (0 ln 0 = 0)
    got = features.answer_entropies(qlog([[A, B, X, X], [X, X, X, X], [A, A, A, A]]))
    assert list(got) == pytest.approx([LN2, 0.0, 0.0])


# =============================================================================== feature_table consistency
def test_feature_table_columns_match_per_log_functions():
    # the registry columns must carry the same numbers as the DESIGN 4 per-log functions
    lg1 = qlog([[A, B]] * 6, docs=[["a", "b"], ["c", "d", "a"], None, [], ["b", "c", "e"], None], qid="r")
    lg2 = qlog([[B, B, B, A], [B, B, A, A], [C, C, B, B]], qid="m")
    lg3 = qlog([[C, C, C, C]], qid="u")
    ft = features.feature_table([lg1, lg2, lg3])
    assert list(ft.index) == ["r", "m", "u"]
    # lg1: rho defined at t=2 (1/3) and t=5 (2/3): mean 0.5, last 2/3, max 2/3
    assert ft.loc["r", "rho_mean"] == pytest.approx(0.5)
    assert ft.loc["r", "rho_last"] == pytest.approx(2 / 3)
    assert ft.loc["r", "rho_max"] == pytest.approx(2 / 3)
    for lg in (lg1, lg2, lg3):
        row = ft.loc[lg.qid]
        assert row["a_first"] == pytest.approx(features.first_round_agreement(lg))
        assert row["a_last"] == pytest.approx(features.terminal_agreement(lg))
        assert row["a_mean"] == pytest.approx(features.trajectory_agreement(lg))
        assert row["n_flip"] == features.majority_flips(lg)
        assert row["minority_persistence"] == pytest.approx(features.minority_persistence(lg))
        assert row["H_first"] == pytest.approx(features.answer_entropies(lg)[0])
        assert row["t_stop"] == len(lg.rounds)
    assert ft.loc["m", "minority_persistence"] == pytest.approx(2 / 3)
    # instant unanimity: no retrieval -> the retrieval family is missing, never 0
    assert math.isnan(ft.loc["u", "rho_mean"])


# =============================================================================== claim extraction (App. C)
def test_claims_empty_and_whitespace_give_nothing():
    assert claims.extract_claims("") == []
    assert claims.extract_claims("   \n\t  \n") == []
    # only an answer tag: nothing left after removal -> no sentence -> no claim
    assert claims.extract_claims("<answer>B</answer>") == []


def test_claims_remove_every_tag_non_greedy_and_multiline():
    # removing both spans separately keeps the middle sentence:
    #   "First point.  The best choice is B.  Final remark." -> 3 sentences; only the middle one has a cue
    #   ("best", "choice").  Greedy removal would leave no cue -> ["Final remark."];
    #   single-line removal would leave "<answer>" pieces (containing the cue "answer").
    r = "First point. <answer>A</answer> The best choice is B. <answer>\nB\n</answer> Final remark."
    assert claims.extract_claims(r) == ["The best choice is B."]


def test_claims_tag_removed_without_inserting_space():
    # "Thus B.<answer>B</answer>Then C." -> "Thus B.Then C.": '.' not followed by white space -> one sentence
    assert claims.extract_claims("Thus B.<answer>B</answer>Then C.") == ["Thus B.Then C."]


def test_claims_no_split_inside_abbreviation_without_space():
    # "e.g.5": no white space after the dots -> not a sentence boundary; no cue -> the (only) sentence
    assert claims.extract_claims("Start low, e.g.5 mg then titrate") == ["Start low, e.g.5 mg then titrate"]
    # with a space after "e.g." it IS a boundary: pieces "Start low, e.g." and "5 mg then titrate" -> last
    assert claims.extract_claims("Start low, e.g. 5 mg then titrate") == ["5 mg then titrate"]


def test_claims_split_on_question_exclamation_tab_and_newlines():
    # "?" and "!" followed by white space split; every piece has the cue "answer"/"thus" -> all three
    r = "Is the answer B? The answer is not B! Thus the answer is C."
    assert claims.extract_claims(r) == ["Is the answer B?", "The answer is not B!", "Thus the answer is C."]
    # a tab is white space too
    assert claims.extract_claims("Option A fails.\tOption B holds.") == ["Option A fails.", "Option B holds."]
    # newlines split even without punctuation; empty pieces between blank lines are dropped
    r2 = "Answer analysis\nthe best is C\n\n\nend"
    assert claims.extract_claims(r2) == ["Answer analysis", "the best is C"]


def test_claims_cues_are_case_insensitive_substrings():
    # "answered" contains "answer", "bestow" contains "best", "enthusiastic" contains "thus",
    # "almost likely" contains "most likely"; "Nothing here." / "Plain." contain no cue.
    r = "He ANSWERED quickly. Nothing here. She will Bestow gifts. Plain. Enthusiastic crowd."
    assert claims.extract_claims(r) == ["He ANSWERED quickly.", "She will Bestow gifts.", "Enthusiastic crowd."]
    assert claims.extract_claims("Plain. It is almost likely benign. Done.") == ["It is almost likely benign."]
    assert claims.extract_claims("OPTIONAL step. Done.") == ["OPTIONAL step."]


def test_claims_only_last_five_sentences_are_searched():
    # 6 sentences; the cue sits in the 1st, outside the last five -> no cue -> last sentence
    r = "Therefore the answer is A. Alpha. Beta. Gamma. Delta. Epsilon."
    assert claims.extract_claims(r) == ["Epsilon."]
    # cue in the 5th-from-last sentence -> inside the window -> kept
    r2 = "Zero. Hence one. Two. Three. Four. Five."
    assert claims.extract_claims(r2) == ["Hence one."]


def test_claims_at_most_three_the_last_three_in_order():
    # last five = all five; cues in sentences 1-4 -> keep the LAST three (2,3,4), in original order
    r = "The answer is A. Option B is wrong. Choice C is wrong. Thus D. Done."
    assert claims.extract_claims(r) == ["Option B is wrong.", "Choice C is wrong.", "Thus D."]


def test_claims_no_cue_gives_last_sentence_and_unterminated_tail():
    assert claims.extract_claims("Alpha. Beta. Gamma") == ["Gamma"]
    assert claims.extract_claims("Considering all. <answer>C</answer>") == ["Considering all."]


# =============================================================================== RSE (Eq. 3)
def test_rse_asymmetric_3x3():
    # pairs: (0,1) min(.9,.5)=.5; (0,2) min(.2,.6)=.2; (1,2) min(.8,.3)=.3 -> mean 1.0/3
    M = [[1.0, 0.9, 0.2], [0.5, 1.0, 0.8], [0.6, 0.3, 1.0]]
    assert rse.rationale_semantic_entropy(M) == pytest.approx(1.0 / 3)
    # the diagonal is not a pair: zeroing it changes nothing
    E0 = [[0.0, 0.9, 0.2], [0.5, 0.0, 0.8], [0.6, 0.3, 0.0]]
    assert rse.rationale_semantic_entropy(E0) == pytest.approx(1.0 / 3)


def test_rse_two_claims_and_degenerate():
    assert rse.rationale_semantic_entropy([[1.0, 0.7], [0.4, 1.0]]) == pytest.approx(0.4)
    assert math.isnan(rse.rationale_semantic_entropy([[1.0]]))          # n = 1 < 2
    assert math.isnan(rse.rationale_semantic_entropy(np.zeros((0, 0))))  # n = 0 < 2


def test_rse_random_matches_pairwise_mean():
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 8):
        M = rng.random((n, n))
        ref = np.mean([min(M[i, j], M[j, i]) for i in range(n) for j in range(i + 1, n)])
        assert rse.rationale_semantic_entropy(M) == pytest.approx(ref)


# =============================================================================== keep rate / flipped (Eq. 4)
def _re(answers):
    return [ReAnswer(answer=a, rationale="r", logprob=None, n_tokens=None) for a in answers]


def test_keep_rate_nulls_not_kept():
    # consensus B, N = 8: kept = positions with B = 4 (nulls and A/C not kept) -> 4/8
    assert probe.keep_rate(_re([B, X, B, C, X, B, A, B]), B) == pytest.approx(0.5)
    assert probe.keep_rate(_re([X] * 8), B) == 0.0
    assert probe.keep_rate(_re([B] * 8), B) == 1.0
    # one of 3 kept -> 1/3 (N = number of re-answers, nulls included)
    assert probe.keep_rate(_re([A, B, X]), B) == pytest.approx(1 / 3)


def test_flipped_when_plurality_tie_or_other():
    assert probe.is_flipped(_re([B, B, C, C, X]), B) is True       # tie for the top -> flipped
    assert probe.is_flipped(_re([B, B, B, C, C]), B) is False      # unique plurality B = m*
    assert probe.is_flipped(_re([C, C, C, B, B]), B) is True       # plurality C
    # nulls are not an answer: [B,B,C,null,null,null] -> plurality among options is B -> not flipped
    assert probe.is_flipped(_re([B, B, C, X, X, X]), B) is False
    assert probe.is_flipped(_re([X] * 4), B) is True               # no plurality at all


# =============================================================================== LTT (Algorithm 2)
GRID = [j / 20 for j in range(1, 21)]


def ref_ltt(scores, errors, alpha, delta=0.05, grid=GRID, m=2):
    """Straight transcription of DESIGN 3 'LTT' (written for this suite)."""
    n = len(scores)
    level = delta / (len(grid) * m)
    desc = sorted(scores, reverse=True)
    for c in sorted(grid, reverse=True):
        if n == 0:
            return None
        k = math.ceil(c * n - 1e-9)
        lam = desc[k - 1]
        above = [i for i in range(n) if scores[i] > lam]
        n_c = len(above)
        E_c = sum(bool(errors[i]) for i in above)
        p = 1.0 if n_c == 0 else float(binom.cdf(E_c, n_c, alpha))
        if p <= level:
            return lam
    return None


def test_ltt_strictly_greater_count():
    # n = 10 distinct scores, no errors, alpha = .5, level = .05/(20*2) = .00125.
    # c = 1: k = 10, lambda = min score, n_c = 9 (strictly greater), p = .5^9 = .00195 > level;
    # c = .95: k = ceil(9.5) = 10, same; smaller c: fewer above, larger p -> None.
    # (counting >= would give n_c = 10, p = .5^10 = .00098 -> reject -> 0.1)
    s = [1.0 - 0.1 * i for i in range(10)]
    assert certify.ltt_threshold(s, [False] * 10, alpha=0.5) is None
    # with one certified stratum the level is .0025 >= .00195 -> c = 1 is rejected -> lambda = min score
    assert certify.ltt_threshold(s, [False] * 10, alpha=0.5, n_strata=1) == pytest.approx(min(s))


def test_ltt_twenty_all_correct():
    # n = 20, no errors: c = 1 -> lambda = 20th largest = 1, n_c = 19, p = .5^19 -> reject -> 1.0
    s = list(range(20, 0, -1))
    assert certify.ltt_threshold(s, [0] * 20, alpha=0.5) == 1.0




def test_ltt_first_rejection_from_the_top_wins():
    # n = 200, score of rank r = 201 - r; errors at ranks 1..3 and 161..200; alpha = .2, level = .00125
    # c=1.00: k=200, n_c=199, E=42, p=.689   no
    # c=0.95: k=190, n_c=189, E=32, p=.168   no
    # c=0.90: k=180, n_c=179, E=22, p=.0046  no
    # c=0.85: k=170, n_c=169, E=12, p=2.7e-6 reject -> lambda = 170th largest = 201 - 170 = 31
    # (smaller c would also reject, but the largest rejected c wins; c = .05..0.25 do not reject,
    #  so testing from the bottom with early stopping would find nothing)
    s = [201 - r for r in range(1, 201)]
    e = [r <= 3 or r >= 161 for r in range(1, 201)]
    assert certify.ltt_threshold(s, e, alpha=0.2) == 31.0


def test_ltt_ties_at_lambda():
    # 25 questions at 2.0 and 5 at 1.0, all correct, alpha = .5.
    # c = 1: k = 30, lambda = 1.0, n_c = #{s > 1} = 25, p = .5^25 -> reject -> threshold 1.0
    s = [2.0] * 25 + [1.0] * 5
    assert certify.ltt_threshold(s, [0] * 30, alpha=0.5) == 1.0
    # all scores equal: lambda = that score for every c, n_c = 0, p = 1 -> never rejected -> None
    assert certify.ltt_threshold([0.7] * 30, [0] * 30, alpha=0.5) is None
    # one question: n_c = 0 -> p = 1 -> None
    assert certify.ltt_threshold([0.3], [0], alpha=0.5) is None




def test_stratified_certify_uses_m2_and_deploy_is_strict():
    # S1: 20 distinct scores 20..1 all correct -> c = 1 rejected (p = .5^19) -> lambda_S1 = 1
    # S2: 10 all correct -> p = .5^9 = .00195 > .05/40 -> uncertified (None)
    s = list(range(20, 0, -1)) + [1.0 - 0.1 * i for i in range(10)] + [NAN, NAN]
    strata = ["S1"] * 20 + ["S2"] * 10 + ["S3"] * 2
    errors = [False] * 32
    cert = certify.stratified_certify(s, errors, strata, alpha=0.5)
    assert cert.thresholds["S1"] == 1.0
    assert cert.thresholds["S2"] is None
    # deploy: answer iff score > lambda (strict); a score equal to lambda abstains; S2 and S3 abstain
    got = cert.decide([1.0, 1.5, 0.9, 100.0, 100.0], ["S1", "S1", "S1", "S2", "S3"])
    assert list(got) == [False, True, False, False, False]




def test_repeated_splits_split0_thresholds_match_reference():
    # documented split: perm = default_rng(42 + j).permutation(n); calibration = perm[:n//2]
    rng = np.random.default_rng(11)
    n = 300
    strata = rng.choice(["S1", "S2"], size=n)
    s = np.round(rng.random(n), 2)
    e = rng.random(n) < 0.08 * (1.5 - s)
    df = certify.repeated_splits(s, e, strata, alphas=(0.2,), n_splits=1)
    perm = np.random.default_rng(42).permutation(n)
    cal = np.zeros(n, bool)
    cal[perm[: n // 2]] = True
    for S in ("S1", "S2"):
        m = cal & (strata == S)
        lam = ref_ltt(list(s[m]), list(e[m]), 0.2)
        row = df[(df["stratum"] == S)].iloc[0]
        if lam is None:
            assert math.isnan(row["threshold"])
        else:
            assert row["threshold"] == pytest.approx(lam)
            t = ~cal & (strata == S)
            assert row["coverage"] == pytest.approx(np.mean(s[t] > lam))


# =============================================================================== metrics




def test_aurc_tie_aware_blocks_and_order_invariance():
    # scores [3,2,2,2,1], correct [T,F,T,T,F]: ties enter together.
    # blocks: {3} risk 0/1; {2,2,2} -> 4 answered, 1 error -> 1/4; {1} -> 5 answered, 2 errors -> 2/5
    # AURC = (1*0 + 3*(1/4) + 1*(2/5)) / 5 = 1.15/5 = 0.23
    assert metrics.aurc([3, 2, 2, 2, 1], [True, False, True, True, False]) == pytest.approx(0.23)
    # the order of questions inside a tie block cannot matter
    assert metrics.aurc([3, 2, 2, 2, 1], [True, True, True, False, False]) == pytest.approx(0.23)
    assert metrics.aurc([1, 2, 3, 2, 2], [False, True, True, True, False]) == pytest.approx(0.23)
    rc = metrics.risk_coverage([3, 2, 2, 2, 1], [True, False, True, True, False])
    assert list(rc["coverage"]) == pytest.approx([0.2, 0.8, 1.0])
    assert list(rc["risk"]) == pytest.approx([0.0, 0.25, 0.4])


def test_wilson_hand_and_statsmodels():
    # k = 0, n = 10: Wilson gives [0, z^2 / (n + z^2)], z = 1.959964 -> 3.841459 / 13.841459 = 0.277535
    lo, hi = metrics.wilson_interval(0, 10)
    assert lo == pytest.approx(0.0, abs=1e-12)
    assert hi == pytest.approx(3.841458820694124 / 13.841458820694124, rel=1e-9)
    for k, n, lev in [(3, 20, 0.95), (17, 17, 0.9), (40, 746, 0.95), (1, 2, 0.99)]:
        exp = proportion_confint(k, n, alpha=1 - lev, method="wilson")
        assert metrics.wilson_interval(k, n, level=lev) == pytest.approx(exp)


# =============================================================================== unanimous-layer score
def test_unanimous_layer_score_is_sum_of_zscores():
    kappa = np.array([1.0, 0.75, 0.5, 1.0])
    r = np.array([0.9, 0.2, 0.4, 0.6])
    got = np.asarray(scoring.unanimous_layer_score(kappa, r), float)
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731  (population sd; ranking is scale-free anyway)
    assert got == pytest.approx(z(kappa) + z(r))
    # label-free standardization: a positive affine change of kappa leaves the score unchanged
    assert np.asarray(scoring.unanimous_layer_score(3 * kappa + 1, r), float) == pytest.approx(got)


# =============================================================================== LogFormatError: file:line: field
def _expect(path: Path, line: int, field: str, reader) -> LogFormatError:
    with pytest.raises(LogFormatError) as ei:
        reader(path)
    err = ei.value
    assert (err.line, err.field) == (line, field)
    assert Path(err.path) == path
    assert str(err).startswith(f"{path}:{line}: {field}: "), str(err)
    return err


def test_logformaterror_gold_not_an_option_in_gz(tmp_path):
    # line 3 of a gzip log: gold "E" with options A-D
    recs = [_log_dict([[A, A, A]], qid=f"q{i}") for i in range(3)]
    recs[2]["gold"] = "E"
    p = tmp_path / "logs.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")
    err = _expect(p, 3, "gold", logs.read_logs)
    assert "'E'" in str(err)


def test_logformaterror_self_report_out_of_range(tmp_path):
    # line 2 of a self-report file: verbalized_confidence 101 (> 100); line 1 is fine
    base = {"schema_version": 1, "qid": "a", "dataset": "medqa", "backbone": "b/x",
            "verbalized_confidence": 80, "p_true": 0.4}
    bad = dict(base, qid="b", verbalized_confidence=101)
    p = tmp_path / "self_report.jsonl"
    p.write_text(json.dumps(base) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    _expect(p, 2, "verbalized_confidence", logs.read_self_report)


def test_logformaterror_probe_too_many_docs(tmp_path):
    # line 1 of a probe file: 9 challenge documents (DESIGN 2.2: <= 8)
    rec = {"schema_version": 1, "qid": "q", "dataset": "medqa", "backbone": "b/x",
           "arm": "counter_evidence", "consensus": "A", "queries": ["x"],
           "doc_ids": [f"d{i}" for i in range(9)], "reanswers": [_cand(A), _cand(B)], "cost": None}
    p = tmp_path / "probe.jsonl"
    p.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    _expect(p, 1, "doc_ids", logs.read_probe)


# =============================================================================== additional edge cases
def test_claims_pieces_are_stripped_and_crlf_and_tag_sentences_removed():
    # indentation after a newline is not part of the sentence
    assert claims.extract_claims("First line.\n   Hence indented.") == ["Hence indented."]
    # CRLF line endings: "\r" is white space, stripped from the piece
    assert claims.extract_claims("Alpha\r\nThe answer is B\r\n") == ["The answer is B"]
    # sentences inside the tag are removed before the window is taken: only "Plain." remains
    assert claims.extract_claims("<answer>The answer is A. Option B.</answer> Plain.") == ["Plain."]


def test_claims_window_counts_sentences_after_tag_removal():
    # after removing the tag there are six sentences; the cue ("correct") sits 6th from the end -> no cue
    r = "It is correct. One. Two. <answer>Thus A.</answer> Three. Four. Five."
    assert claims.extract_claims(r) == ["Five."]


def test_rse_unanimous_full_support_and_zero():
    assert rse.rationale_semantic_entropy(np.ones((8, 8))) == pytest.approx(1.0)
    # one-directional support only: min(e_ij, e_ji) = 0 for every pair -> 0
    upper = np.triu(np.ones((4, 4)))
    assert rse.rationale_semantic_entropy(upper) == pytest.approx(0.0)


def test_ltt_errors_tied_at_lambda_are_not_counted():
    # 35 correct at 2.0, 10 errors at 1.0 (n = 45), alpha = .2, level = .00125.
    # c = 1: k = 45, lambda = 1.0; n_c = #{s > 1} = 35, E_c = 0, p = .8^35 = 4.1e-4 -> reject -> 1.0
    # (counting s >= lambda: n_c = 45, E = 10 -> not rejected ... first rejection at c = .75 -> 2.0)
    s = [2.0] * 35 + [1.0] * 10
    e = [False] * 35 + [True] * 10
    assert certify.ltt_threshold(s, e, alpha=0.2) == 1.0


def test_final_answer_and_flips_with_late_option_keys():
    # options A-E; last round [E,E,null,A]: unique plurality E; m_1 of [D,E,A,A]: A (2) -> m: A, E -> 1 flip
    lg = qlog([[D, E, A, A], [E, E, X, A]], options="ABCDE")
    assert features.final_answer(lg) == E
    assert features.majority_flips(lg) == 1
    # minority persistence: m* = E; A supported in both rounds -> 2/2; D in round 1 -> 1/2 -> 1.0
    assert features.minority_persistence(lg) == pytest.approx(1.0)



TRICKY_ROUNDS = [
    [[A, A, B, X], [A, X, X, X], [X, X, X, X]],      # ends all-null
    [[X, X, X, X], [C, C, B, B]],                    # starts all-null, ends tied
    [[C, C, B, B], [B, B, C, C], [D, D, X, X]],      # ties, then unique plurality D
    [[X, X, X, C, D], [D] * 5],
    [[B, B, B, A], [B, B, A, A], [C, C, B, B]],
    [[A, B], [X, X], [B, X], [A, B]],
]


@pytest.mark.parametrize("rounds", TRICKY_ROUNDS)
def test_feature_table_agrees_with_per_log_functions_on_tricky_logs(rounds):
    # feature_table is a second implementation of the same definitions; on any log its
    # registry columns must equal the DESIGN 4 per-log functions
    lg = qlog(rounds)
    row = features.feature_table([lg]).loc[lg.qid]
    h = features.answer_entropies(lg)
    assert row["a_first"] == pytest.approx(features.first_round_agreement(lg))
    assert row["a_last"] == pytest.approx(features.terminal_agreement(lg))
    assert row["a_mean"] == pytest.approx(features.trajectory_agreement(lg))
    assert row["n_flip"] == features.majority_flips(lg)
    assert row["minority_persistence"] == pytest.approx(features.minority_persistence(lg))
    assert row["H_first"] == pytest.approx(h[0])
    assert row["H_last"] == pytest.approx(h[-1])
    assert bool(row["converged"]) is features.converged(lg)


def test_contributing_module_map_names_every_module():
    """CONTRIBUTING.md's module map covers every module of probeguard_core (issue 10)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    pkg = root / "probeguard_core"
    missing = []
    for p in sorted(pkg.rglob("*.py")):
        rel = p.relative_to(pkg)
        top = rel.parts[0] if len(rel.parts) > 1 else None
        name = rel.as_posix().removesuffix("__init__.py") if len(rel.parts) > 1 else rel.as_posix()
        if top in ("cli", "pipeline", "simulate"):
            ok = f"`{top}/`" in text and (p.name == "__init__.py" or p.stem in text)
        else:
            ok = f"`{name}`" in text
        if not ok:
            missing.append(name)
    assert not missing, f"CONTRIBUTING.md's module map does not name: {missing}"
