"""Strict parsers for model output (paper Appendix A formats).

Nothing here guesses: text that does not follow the requested format parses to ``None``
(DESIGN 2.1: ``answer = null`` means "no parseable answer"), never to a default option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["parse_answer", "parse_queries", "parse_counter_queries", "parse_confidence", "format_options",
           "MAX_QUERIES", "QueryParse"]

#: Query budget of the substrate and of the probe (Algorithm 1: k <= 4).
MAX_QUERIES = 4

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_QUERY_LINE = re.compile(r"^\s*\[Query[^\]]*\](.*?)$", re.MULTILINE)
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


@dataclass(frozen=True)
class QueryParse:
    """Counter-queries parsed from a reply, with how the reply met the requested count.

    ``status``: ``"ok"`` (within the requested range), ``"too_few"`` (fewer than asked, at least
    one: they are used), ``"too_many"`` (more than the budget: the first ``high`` are used, in
    order), ``"none"`` (no ``[Query k]`` line: a parse failure, so nothing is retrieved).
    ``n_found`` counts the distinct non-empty queries in the reply.
    """

    queries: list[str]
    status: str
    n_found: int


def parse_counter_queries(text: str, bounds: tuple[int, int] = (2, 4)) -> QueryParse:
    """The probe's counter-queries (paper Appendix A: "2-4 precise BM25 queries"; Algorithm 1: k <= 4).

    Never padded or invented: a reply without query lines is ``status="none"`` with no queries.
    """
    low, high = bounds
    if not 1 <= low <= high:
        raise ValueError(f"parse_counter_queries: bounds must satisfy 1 <= low <= high, got {bounds}")
    found = parse_queries(text, limit=10**6)
    if not found:
        status = "none"
    elif len(found) < low:
        status = "too_few"
    elif len(found) > high:
        status = "too_many"
    else:
        status = "ok"
    return QueryParse(queries=found[:high], status=status, n_found=len(found))


@lru_cache(maxsize=None)
def _tag(name: str) -> re.Pattern[str]:
    if not re.fullmatch(r"\w+", name):
        raise ValueError(f"tag name must be a word, got {name!r}")
    return re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL)


def parse_confidence(text: str, tag: str = "conf") -> float | None:
    """Verbalized confidence from the last ``<tag>N</tag>`` (0..100), else ``None``.

    ``tag`` is the prompt version's ``confidence_tag`` (v2, the paper: ``conf``; v1: ``confidence``).
    """
    tags = _tag(tag).findall(text)
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
