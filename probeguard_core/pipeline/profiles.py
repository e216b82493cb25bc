"""Substrate profiles: how the consensus substrate parses, stops, shows documents and samples.

The paper's substrate is MA-RAG (NJU-RL/MA-RAG at commit 423f031, ``ma_rag_entropy.py``),
run unmodified (§3).  This package re-implements it; a *profile* fixes each behaviour where a
re-implementation has to choose:

* ``"ma-rag"`` behaves as MA-RAG does, point by point (each rule cites the source line it
  follows; docs/pipeline.md tabulates them);
* ``"probeguard"`` (the default) is this project's: strict parsing, null answers never
  unanimous, titled documents.

MA-RAG's parse failure ``''`` maps to the log as ``answer = null`` (DESIGN 2.1: "no parseable
answer"), exactly as the MA-RAG log adapter maps it; so does a letter that is not an option key
(``judger`` can return ``"O"`` for ``<answer>Option C</answer>``).  The raw judger output is kept
beside it as the candidate's extra field ``prediction``, and the profile's stopping test reads
those raw predictions: under ``"ma-rag"`` eight ``''`` are unanimous and stop the run, as in
MA-RAG (``ma_rag_entropy.py`` line 168).  Records carry ``substrate_profile``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .parsing import MAX_QUERIES, parse_answer, parse_queries
from .retrieval import format_documents

__all__ = ["DEFAULT_PROFILE", "PROFILES", "SubstrateProfile", "get_profile", "marag_judger"]

DEFAULT_PROFILE = "probeguard"

_MA_TAG = re.compile(r"<answer>(.*?)</answer>")  # no DOTALL: a tag spanning lines does not match
_MA_CAPITAL = re.compile(r"([A-Z])")
_MA_WORD_CAPITAL = re.compile(r"\b([A-Z])\b")
_MA_PUNCT = re.compile(r"[（）。、，：！？\[\]]")
_MA_SPLITS = ("最终答案", "答案是", "答案为", "答案选", "Final Answer", "Answer:")
_MA_QUERY = re.compile(r"\[Query .*?\](.*?)$", re.MULTILINE)


def marag_judger(text: str) -> str:
    """MA-RAG's ``judger(answer, target, single_answer=True)`` prediction (utils.py lines 49-70).

    With both tags present: the capital letters inside the LAST ``<answer>...</answer>`` (matched
    within one line), alphabetically last one.  Without tags: after the last of MA-RAG's answer
    markers (``Final Answer``, ``Answer:``, four Chinese ones), else in the whole text, the
    alphabetically last stand-alone capital letter (after replacing some punctuation by spaces).
    Any failure (no tag match, no letter) gives ``''``.
    """
    try:
        if "<answer>" in text and "</answer>" in text:
            letters = _MA_CAPITAL.findall(_MA_TAG.findall(text)[-1])
        else:
            text = _MA_PUNCT.sub(" ", text)
            for marker in _MA_SPLITS:
                if marker in text:
                    letters = _MA_WORD_CAPITAL.findall(text.split(marker)[-1])
                    break
            else:
                letters = _MA_WORD_CAPITAL.findall(text)
        return max(letters)  # MA-RAG: sorted(ans)[-1]
    except (IndexError, ValueError):  # no tag match / no letter: MA-RAG's bare except -> ''
        return ""


def _marag_queries(text: str) -> list[str]:
    """MA-RAG's query parse (ma_rag_entropy.py lines 174-175): ``[Query ...]`` lines, stripped,
    de-duplicated, no cap.  MA-RAG de-duplicates with ``set()``, whose order depends on Python's
    hash seed; we keep first occurrences in order (the one point we cannot reproduce).  An empty
    query retrieves nothing in either, so it is dropped."""
    out: list[str] = []
    for q in _MA_QUERY.findall(text):
        q = q.strip()
        if q and q not in out:
            out.append(q)
    return out


def _ours_queries(text: str) -> list[str]:
    return parse_queries(text, MAX_QUERIES)


def _content_only(docs: Sequence) -> str:
    # utils.py lines 136-137: combine_docs(docs, '\n') joins doc["content"]; no titles, no numbers.
    # With queries but no document the join is '' (ma_rag_entropy.py line 188), not 'null'.
    return "\n".join(d.content for d in docs)


def _entropy_order(entropies: Sequence[float | None], reverse_ties: bool) -> list[int]:
    """Indices by mean token entropy, highest first.  Missing entropy counts as +inf (MA-RAG:
    ``np.mean([])`` is nan, which ``np.argsort`` puts last, hence first after ``[::-1]``)."""
    key = [math.inf if e is None or math.isnan(e) else e for e in entropies]
    idx = sorted(range(len(key)), key=lambda i: key[i])  # stable ascending, as np.argsort on N <= 16
    if reverse_ties:
        return idx[::-1]  # ma_rag_entropy.py line 194: argsort(...)[::-1] reverses ties too
    return sorted(range(len(key)), key=lambda i: -key[i])  # stable descending: ties in panel order


@dataclass(frozen=True)
class SubstrateProfile:
    """One substrate behaviour; see the module docstring and docs/pipeline.md."""

    name: str
    #: raw prediction of a completion ('' / None = no answer); the log's ``answer`` is
    #: :meth:`answer` of it
    predict: Callable[[str, Mapping[str, str]], str | None]
    #: stopping test over a round's raw predictions
    unanimous: Callable[[Sequence[str | None]], bool]
    #: the documents as shown to the model
    render_documents: Callable[[Sequence], str]
    #: the text the cross-encoder sees for a document: "title+content" or "content"
    rerank_text: str
    #: queries from a query reply
    queries: Callable[[str], list[str]]
    #: at most this many documents per retrieval round (None: no cap)
    max_docs: int | None
    #: previous answers: equal entropies in reversed panel order (MA-RAG) or panel order
    reverse_entropy_ties: bool
    #: how a missing mean entropy is printed in the previous-answers block
    missing_entropy: str
    #: sampling of the candidate calls (top_k 0 = off)
    top_k: int
    top_p: float
    #: option lines: skip empty options and keep the file's order (MA-RAG) or sorted keys
    marag_options: bool
    #: keep the raw prediction as the candidate's extra field ``prediction``
    keep_prediction: bool

    def answer(self, prediction: str | None, options: Mapping[str, str]) -> str | None:
        """The DESIGN 2.1 answer: the prediction when it is an option key, else null."""
        return prediction if prediction in options else None

    def format_options(self, options: Mapping[str, str]) -> str:
        if self.marag_options:  # utils.py lines 44-46: dict order, empty or " " options skipped
            return "\n".join(f"{k}. {v}" for k, v in options.items() if len(v) > 0 and v != " ")
        return "\n".join(f"{k}. {v}" for k, v in sorted(options.items()))

    def entropy_order(self, entropies: Sequence[float | None]) -> list[int]:
        return _entropy_order(entropies, self.reverse_entropy_ties)


def _ours_unanimous(preds: Sequence[str | None]) -> bool:
    return len(set(preds)) == 1 and None not in preds


def _marag_unanimous(preds: Sequence[str | None]) -> bool:
    return len(set(preds)) == 1  # ma_rag_entropy.py line 168: '' counts like any prediction


PROFILES: dict[str, SubstrateProfile] = {
    "probeguard": SubstrateProfile(
        name="probeguard", predict=parse_answer, unanimous=_ours_unanimous, render_documents=format_documents,
        rerank_text="title+content", queries=_ours_queries, max_docs=8, reverse_entropy_ties=False,
        missing_entropy="n/a", top_k=0, top_p=1.0, marag_options=False, keep_prediction=False,
    ),
    "ma-rag": SubstrateProfile(
        name="ma-rag", predict=lambda text, options: marag_judger(text), unanimous=_marag_unanimous,
        render_documents=_content_only, rerank_text="content", queries=_marag_queries, max_docs=None,
        reverse_entropy_ties=True, missing_entropy="nan", top_k=20, top_p=0.95, marag_options=True,
        keep_prediction=True,
    ),
}


def get_profile(name: str | SubstrateProfile) -> SubstrateProfile:
    if isinstance(name, SubstrateProfile):
        return name
    if name not in PROFILES:
        raise ValueError(f"unknown substrate profile {name!r}; expected one of {sorted(PROFILES)}")
    return PROFILES[name]
