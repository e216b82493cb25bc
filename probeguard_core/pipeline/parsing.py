"""Strict parsers for model output (paper Appendix A formats).

Nothing here guesses: text that does not follow the requested format parses to ``None``
(DESIGN 2.1: ``answer = null`` means "no parseable answer"), never to a default option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["parse_answer", "parse_queries", "parse_confidence", "format_options", "MAX_QUERIES"]

#: Query budget of the substrate and of the probe (Algorithm 1: k <= 4).
MAX_QUERIES = 4

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_QUERY_LINE = re.compile(r"^\s*\[Query[^\]]*\](.*?)$", re.MULTILINE)
_CONFIDENCE_TAG = re.compile(r"<confidence>(.*?)</confidence>", re.DOTALL)
_NUMBER = re.compile(r"^\s*(\d{1,3}(?:\.\d+)?)\s*%?\s*$")


def parse_answer(text: str, options: Mapping[str, str]) -> str | None:
    """The option key in the LAST ``<answer>X</answer>`` tag, or ``None``.

    ``X`` must be exactly one option key (surrounding white space allowed); anything else in
    the last tag (``"A or B"``, ``"E"`` for a four-option question, free text) is unparseable.
    Earlier tags are ignored because a model may quote the format before answering.
    """
    if not isinstance(text, str):
        raise ValueError(f"parse_answer: text must be str, got {type(text).__name__}")
    tags = _ANSWER_TAG.findall(text)
    if not tags:
        return None
    key = tags[-1].strip()
    return key if key in options else None


def parse_queries(text: str, limit: int = MAX_QUERIES) -> list[str]:
    """Queries from ``[Query k] ...`` lines: stripped, empty ones dropped, duplicates removed
    keeping the first occurrence (order kept), at most ``limit`` (paper: 1-4 queries)."""
    if limit < 1:
        raise ValueError(f"parse_queries: limit must be >= 1, got {limit}")
    out: list[str] = []
    for q in _QUERY_LINE.findall(text):
        q = q.strip()
        if q and q not in out:
            out.append(q)
    return out[:limit]


def parse_confidence(text: str) -> float | None:
    """Verbalized confidence from the last ``<confidence>N</confidence>`` tag (0..100), else ``None``."""
    tags = _CONFIDENCE_TAG.findall(text)
    if not tags:
        return None
    m = _NUMBER.match(tags[-1])
    if not m:
        return None
    value = float(m.group(1))
    return value if 0.0 <= value <= 100.0 else None


def format_options(options: Mapping[str, str]) -> str:
    """``"A. text"`` lines in key order (the substrate's option rendering)."""
    return "\n".join(f"{k}. {v}" for k, v in sorted(options.items()))
