"""Concluding-claim extraction (paper Appendix C; DESIGN section 3).

The rule, frozen before any rationale was inspected:

1. remove every ``<answer>...</answer>`` span (tag case-insensitive, span may cross lines);
2. split the rest into sentences at newlines and after ``.``, ``!`` or ``?`` followed by
   white space; strip each piece and drop empty ones;
3. among the last five sentences keep those containing a conclusion cue (case-insensitive
   substring of: answer, option, choice, correct, therefore, thus, hence, most likely,
   best), at most three: the last three when more qualify, in their original order;
4. no cue in the last five: the last sentence.  An empty rationale gives no claims.

Cues are plain substrings, so "answered", "options" and "bestow" qualify: the rule is
deliberately permissive (Appendix C).
"""

from __future__ import annotations

import re

__all__ = ["CUES", "TAIL", "MAX_CLAIMS", "extract_claims", "split_sentences", "strip_answer_tags"]

CUES = ("answer", "option", "choice", "correct", "therefore", "thus", "hence", "most likely", "best")
TAIL = 5
MAX_CLAIMS = 3

_ANSWER_SPAN = re.compile(r"<answer>.*?</answer>", re.IGNORECASE | re.DOTALL)
# a newline, or white space preceded by sentence-final punctuation
_SPLIT = re.compile(r"\n|(?<=[.!?])\s+")
# any cue as a substring (one search instead of one ``in`` per cue)
_CUE = re.compile("|".join(re.escape(c) for c in CUES))


def strip_answer_tags(text: str) -> str:
    """Remove every ``<answer>...</answer>`` span (non-greedy, case-insensitive, multiline)."""
    return _ANSWER_SPAN.sub("", text)


def split_sentences(text: str) -> list[str]:
    """Split at newlines and after . ! ? followed by white space; strip, drop empty pieces."""
    return [s for s in (piece.strip() for piece in _SPLIT.split(text)) if s]


def extract_claims(rationale: str) -> list[str]:
    """The concluding claims of one rationale (Appendix C); ``[]`` for an empty rationale."""
    if not isinstance(rationale, str):
        raise ValueError(f"rationale must be a str, got {type(rationale).__name__}")
    sentences = split_sentences(strip_answer_tags(rationale))
    if not sentences:
        return []
    tail = sentences[-TAIL:]
    cued = [s for s in tail if _CUE.search(s.lower())]
    if not cued:
        return [sentences[-1]]
    return cued[-MAX_CLAIMS:]
