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

# the two tags of an answer span, found one after the other (a linear scan, issue 25: the one
# pattern ``<answer>.*?</answer>`` re-scans to the end from every unclosed opening tag, which is
# quadratic in a rationale made of repeated opening tags)
_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE = re.compile(r"</answer>", re.IGNORECASE)
# a newline, or white space preceded by sentence-final punctuation
_SPLIT = re.compile(r"\n|(?<=[.!?])\s+")
# any cue as a substring (one search instead of one ``in`` per cue)
_CUE = re.compile("|".join(re.escape(c) for c in CUES))


def strip_answer_tags(text: str) -> str:
    """Remove every ``<answer>...</answer>`` span (non-greedy, case-insensitive, multiline).

    The same result as ``re.sub(r"<answer>.*?</answer>", "", text, flags=re.I | re.S)`` in time
    linear in ``len(text)``: each span runs from the leftmost opening tag to the first closing
    tag after it; once an opening tag has no closing tag after it, no later one has either, so
    the scan stops (where the regular expression would retry from every later opening tag).
    """
    pieces: list[str] = []
    pos = 0
    while (opening := _OPEN.search(text, pos)) is not None:
        closing = _CLOSE.search(text, opening.end())
        if closing is None:
            break
        pieces.append(text[pos:opening.start()])
        pos = closing.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


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
