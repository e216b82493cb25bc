"""Claim extraction rule (Appendix C; DESIGN 3): hand-worked unit tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probeguard_core.claims import CUES, extract_claims, split_sentences, strip_answer_tags

APPENDIX_K = (
    "The patient has fever, purulent cough and a new consolidation. "
    "Tuberculosis is unlikely given the acute course. "
    "Haemophilus influenzae is less common in adults. "
    "Given the clinical presentation, the most likely causal microorganism is Streptococcus pneumoniae.\n"
    "<answer>B</answer>"
)


def test_appendix_k_sentence_is_the_claim():
    assert extract_claims(APPENDIX_K) == [
        "Given the clinical presentation, the most likely causal microorganism is Streptococcus pneumoniae."
    ]


def test_empty_and_whitespace_rationales_give_no_claims():
    assert extract_claims("") == []
    assert extract_claims("   \n\n  ") == []
    assert extract_claims("<answer>A</answer>") == []
    assert extract_claims("<ANSWER>\nA\n</Answer>\n") == []


def test_no_cue_gives_last_sentence():
    assert extract_claims("Sodium is low. Potassium is high. Start insulin.") == ["Start insulin."]


def test_single_sentence_without_punctuation():
    assert extract_claims("It is B") == ["It is B"]


def test_cue_sentences_kept_in_original_order():
    text = "Therefore it is A. Potassium is high. The correct choice is A. Start insulin."
    assert extract_claims(text) == ["Therefore it is A.", "The correct choice is A."]


def test_at_most_three_the_last_three():
    text = "Option A fails. Option B fails. Option C fails. Option D fits. Thus the answer is D."
    assert extract_claims(text) == ["Option C fails.", "Option D fits.", "Thus the answer is D."]


def test_only_last_five_sentences_are_searched():
    text = "The answer is A. One. Two. Three. Four. Five."
    # the cue sentence is sixth from the end: no cue in the tail -> last sentence
    assert extract_claims(text) == ["Five."]
    text2 = "The answer is A. Two. Three. Four. Five."
    assert extract_claims(text2) == ["The answer is A."]


def test_cues_are_case_insensitive_substrings():
    assert extract_claims("HENCE B. Done.") == ["HENCE B."]
    assert extract_claims("She answered quickly. Done.") == ["She answered quickly."]
    assert extract_claims("Several options exist. Done.") == ["Several options exist."]
    assert extract_claims("We must bestow care. Done.") == ["We must bestow care."]
    assert extract_claims("Most Likely B. Done.") == ["Most Likely B."]
    # "most  likely" with two spaces is not the cue "most likely"
    assert extract_claims("Most  likely B. Done.") == ["Done."]


@pytest.mark.parametrize("cue", CUES)
def test_every_cue_is_recognized(cue):
    assert extract_claims(f"Intro. Here {cue} appears. Ending here.") == [f"Here {cue} appears."]


def test_answer_span_removed_case_insensitive_multiline_and_everywhere():
    text = "Therefore <Answer>\nB\n</ANSWER> is right. Ending. <answer>B</answer>"
    assert strip_answer_tags(text) == "Therefore  is right. Ending. "
    assert extract_claims(text) == ["Therefore  is right."]


def test_answer_span_non_greedy():
    text = "<answer>A</answer> Keep this. <answer>B</answer>"
    assert strip_answer_tags(text) == " Keep this. "


def test_answer_tag_content_cannot_supply_a_cue():
    assert extract_claims("Start insulin. <answer>the answer is A</answer>") == ["Start insulin."]


def test_split_at_newlines_and_after_terminal_punctuation_followed_by_whitespace():
    assert split_sentences("a. b! c? d\ne\n\n f") == ["a.", "b!", "c?", "d", "e", "f"]
    # no split without following white space, or at other punctuation
    assert split_sentences("3.5 mg/dL; e.g.thus A.B") == ["3.5 mg/dL; e.g.thus A.B"]
    assert split_sentences("Is it A?\tYes.") == ["Is it A?", "Yes."]
    assert split_sentences("Wait...  Then.") == ["Wait...", "Then."]


def test_newline_splits_even_without_punctuation():
    text = "Answer analysis\nB is right because of X\nthe best choice: B"
    assert extract_claims(text) == ["Answer analysis", "the best choice: B"]


def test_rejects_non_string():
    with pytest.raises(ValueError, match="rationale must be a str"):
        extract_claims(None)  # type: ignore[arg-type]


@given(st.text(alphabet=st.sampled_from(list("ab .!?\nXY<>/answer")), max_size=80))
def test_claims_are_nonempty_sentences_of_the_tail(text):
    claims = extract_claims(text)
    sentences = split_sentences(strip_answer_tags(text))
    assert len(claims) <= 3
    assert (claims == []) == (sentences == [])
    tail = sentences[-5:]
    for c in claims:
        assert c and c == c.strip() and c in tail


# ------------------------------------------------------------------ Appendix C's worked example
# probeguard-paper-full.md, Appendix C, "Worked example (MedQA, dimeric-immunoglobulin question,
# candidate 2)": the rationale's final portion (of 1,367 characters) and the extracted claim,
# verbatim (the paper's curly quotes and its spelling "adherance").
APPENDIX_C_TAIL = ("Option C, \u2018Inhibiting bacterial adherance and colonization of mucous membranes,\u2019 is the "
                   "most accurate description of the primary function of dimeric IgA. <answer>C</answer>")
APPENDIX_C_CLAIM = ("Option C, \u2018Inhibiting bacterial adherance and colonization of mucous membranes,\u2019 is the "
                    "most accurate description of the primary function of dimeric IgA.")


def test_appendix_c_worked_example_final_portion():
    assert extract_claims(APPENDIX_C_TAIL) == [APPENDIX_C_CLAIM]


def test_appendix_c_worked_example_as_printed_with_its_elision():
    # the paper prints the portion after ". . . "; the elision's dots are cue-free pieces
    assert extract_claims(". . . " + APPENDIX_C_TAIL) == [APPENDIX_C_CLAIM]


def test_appendix_c_worked_example_full_length_rationale():
    # the elided part of the 1,367-character rationale carries no cue in the last five sentences
    # (else the paper's rule would keep more than one claim); pad with cue-free sentences
    # to the printed length, over several lines, and the claim is unchanged.
    filler = ("Dimeric IgA is produced by plasma cells in the lamina propria. It is transported across the "
              "epithelium by the polymeric immunoglobulin receptor.\nThe secretory component protects it from "
              "proteolysis in the gut lumen. ")
    body = ""
    while len(body) + len(APPENDIX_C_TAIL) < 1367:
        body += filler
    rationale = (body + APPENDIX_C_TAIL)[-1367:]
    assert len(rationale) == 1367
    assert extract_claims(rationale) == [APPENDIX_C_CLAIM]
    # the answer tag is stripped and its letter is no sentence of its own
    assert all("<answer>" not in c and c != "C" for c in extract_claims(rationale))
