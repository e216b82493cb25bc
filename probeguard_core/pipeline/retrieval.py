"""Retrieval stack of the substrate (paper §4.1, Appendix L): BM25 + cross-encoder rerank.

* BM25 (``bm25s``, k1 = 0.9, b = 0.4, Lucene variant) over a MedCorp-shaped corpus
  (DESIGN 2.6, ``{"id", "title", "content"}``), document text = title + content;
* 32 candidates per query, reranked by a cross-encoder (``ncbi/MedCPT-Cross-Encoder`` by
  default; any sequence-classification model with one logit, by name or folder);
* 2 kept per query, deduplicated by id within one retrieval round (a query that re-finds an
  earlier query's document contributes fewer), at most 8 documents per round.

A query none of whose terms occur in the corpus vocabulary retrieves nothing (BM25 score 0
everywhere); documents with BM25 score 0 are never candidates.  Ties are broken by corpus
order, so retrieval is deterministic.

Index folder (``probeguard index build``): ``meta.json`` (format, parameters, corpus sha256),
``docs.jsonl`` (the corpus, in order) and ``bm25s/`` (the ``bm25s`` arrays, no pickle).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from probeguard_core.pipeline.devices import load_sequence_classifier
from probeguard_core.pipeline.hyperparameters import hp

__all__ = [
    "BM25Index",
    "CrossEncoderReranker",
    "IndexedDoc",
    "Retriever",
    "build_index",
    "doc_text",
    "DEFAULT_RERANKER",
    "K1",
    "B",
]

# Table 9 (Retrieval), from data/hyperparameters.yaml
K1 = hp("retrieval", "bm25_k1")
B = hp("retrieval", "bm25_b")
CANDIDATES_PER_QUERY = hp("retrieval", "candidates_per_query")
KEEP_PER_QUERY = hp("retrieval", "keep_per_query")
MAX_DOCS = hp("retrieval", "max_docs")
DEFAULT_RERANKER = hp("retrieval", "reranker")
INDEX_FORMAT = "probeguard-bm25s/1"
STOPWORDS = "en"


@dataclass(frozen=True)
class IndexedDoc:
    """A corpus snippet as stored in the index (DESIGN 2.6 shape)."""

    id: str
    title: str
    content: str


def doc_text(title: str, content: str) -> str:
    """Title and content joined the substrate's way (a period between unless the title ends one)."""
    title, content = title.strip(), content.strip()
    if not title:
        return content
    return f"{title} {content}" if title.endswith((".", "?", "!")) else f"{title}. {content}"


def _bm25s() -> Any:
    """The ``bm25s`` module, imported with JAX confined to the CPU (issue 26).

    ``bm25s.selection`` runs a ``jax.lax.top_k`` call at import when JAX is installed, and JAX's
    first call initialises its default backend: on a GPU machine that preallocates 75 % of the
    GPU's memory (139 -> 34 GiB free on an H200), so a vLLM engine started afterwards cannot
    start.  The index never uses JAX (scores come from ``BM25.get_scores``, top-k from numpy), so
    JAX is imported here with ``JAX_PLATFORMS=cpu``, unless the user set ``JAX_PLATFORMS`` or
    imported JAX before us (their choice stands).  The variable is removed again afterwards, so
    child processes do not inherit it; JAX, once imported, keeps the platforms it read.
    """
    import os
    import sys

    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    confine = "jax" not in sys.modules and "JAX_PLATFORMS" not in os.environ
    if confine:
        os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        import bm25s
    finally:
        if confine:
            os.environ.pop("JAX_PLATFORMS", None)
    return bm25s


def _tokenize(texts: list[str]) -> list[list[str]]:
    bm25s = _bm25s()
    return bm25s.tokenize(texts, stopwords=STOPWORDS, return_ids=False, show_progress=False)


class BM25Index:
    """A ``bm25s`` index plus the documents it covers."""

    def __init__(self, docs: list[IndexedDoc], bm25: Any, corpus_sha256: str):
        self.docs = docs
        self.bm25 = bm25
        self.corpus_sha256 = corpus_sha256

    @classmethod
    def build(cls, docs: Iterable[Any]) -> BM25Index:
        """Index documents with ``.id``, ``.title``, ``.content`` (e.g. ``questions.load_corpus``)."""
        bm25s = _bm25s()

        items: list[IndexedDoc] = []
        seen: set[str] = set()
        h = hashlib.sha256()
        for d in docs:
            doc = IndexedDoc(str(d.id), str(d.title), str(d.content))
            if doc.id in seen:
                raise ValueError(f"corpus: duplicate document id {doc.id!r}")
            seen.add(doc.id)
            items.append(doc)
            h.update(json.dumps([doc.id, doc.title, doc.content], ensure_ascii=False).encode() + b"\n")
        if not items:
            raise ValueError("corpus: no documents to index")
        bm25 = bm25s.BM25(k1=K1, b=B, method="lucene")
        bm25.index(_tokenize([doc_text(d.title, d.content) for d in items]), show_progress=False)
        return cls(items, bm25, h.hexdigest())

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.bm25.save(str(folder / "bm25s"), allow_pickle=False, show_progress=False)
        with open(folder / "docs.jsonl", "w", encoding="utf-8") as fh:
            for d in self.docs:
                fh.write(json.dumps({"id": d.id, "title": d.title, "content": d.content}, ensure_ascii=False) + "\n")
        meta = {"format": INDEX_FORMAT, "k1": K1, "b": B, "method": "lucene", "stopwords": STOPWORDS,
                "n_docs": len(self.docs), "corpus_sha256": self.corpus_sha256}
        (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> BM25Index:
        bm25s = _bm25s()

        folder = Path(folder)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            raise ValueError(f"{folder}: not an index folder (no meta.json); build one with `probeguard index build`")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"{meta_path}: format {meta.get('format')!r}, expected {INDEX_FORMAT!r}")
        docs = []
        with open(folder / "docs.jsonl", encoding="utf-8") as fh:
            for line in fh:
                o = json.loads(line)
                docs.append(IndexedDoc(o["id"], o["title"], o["content"]))
        if len(docs) != meta["n_docs"]:
            raise ValueError(f"{folder}/docs.jsonl: {len(docs)} documents, meta.json says {meta['n_docs']}")
        bm25 = bm25s.BM25.load(str(folder / "bm25s"), allow_pickle=False, show_progress=False)
        if (bm25.k1, bm25.b) != (K1, B):
            raise ValueError(f"{folder}: index built with k1={bm25.k1}, b={bm25.b}; expected {K1}, {B}")
        return cls(docs, bm25, meta["corpus_sha256"])

    def search(self, query: str, k: int = CANDIDATES_PER_QUERY) -> list[tuple[int, float]]:
        """Top-``k`` (document position, BM25 score), score descending, ties by corpus order;
        documents scoring 0 (no query term) are excluded."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vocab = self.bm25.vocab_dict
        tokens = [t for t in _tokenize([query])[0] if t in vocab]
        if not tokens:
            return []
        scores = np.asarray(self.bm25.get_scores(tokens), dtype=np.float64)
        pos = np.flatnonzero(scores > 0)
        if pos.size > k:  # keep everything tied with the k-th best, then sort exactly
            kth = np.partition(scores[pos], pos.size - k)[pos.size - k]
            pos = pos[scores[pos] >= kth]
        order = np.lexsort((pos, -scores[pos]))[:k]
        return [(int(pos[i]), float(scores[pos[i]])) for i in order]


@dataclass
class CrossEncoderReranker:
    """Cross-encoder relevance scores (``AutoModelForSequenceClassification`` with one logit)."""

    model: str = DEFAULT_RERANKER
    device: str | None = None
    batch_size: int = 32
    max_length: int = 512
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        self.tokenizer, self.net, self.device = load_sequence_classifier(self.model, self.device, self.trust_remote_code)
        if self.net.config.num_labels != 1:
            raise ValueError(f"reranker {self.model}: expected one relevance logit, config has num_labels={self.net.config.num_labels}")

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        import torch

        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            chunk = list(texts[i:i + self.batch_size])
            enc = self.tokenizer([query] * len(chunk), chunk, truncation=True, padding=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                out.extend(self.net(**enc).logits[:, 0].float().tolist())
        return out


@dataclass
class Retriever:
    """One retrieval round: queries in order -> at most ``max_docs`` deduplicated documents."""

    index: BM25Index
    reranker: CrossEncoderReranker | None
    candidates_per_query: int = CANDIDATES_PER_QUERY
    keep_per_query: int = KEEP_PER_QUERY
    max_docs: int = MAX_DOCS
    _cache: dict[tuple[str, str], list[int]] = field(default_factory=dict, repr=False)

    def per_query(self, query: str, rerank_text: str = "title+content") -> list[int]:
        """The ``keep_per_query`` best positions for one query (BM25 top-32, then reranked).

        ``rerank_text``: what the cross-encoder reads of a document, ``"title+content"`` (ours)
        or ``"content"`` (MA-RAG, RetrievalSystem.py line 398).  BM25 always indexes title + content.
        """
        if rerank_text not in ("title+content", "content"):
            raise ValueError(f"rerank_text must be 'title+content' or 'content', got {rerank_text!r}")
        key = (query, rerank_text)
        if key not in self._cache:
            hits = self.index.search(query, self.candidates_per_query)
            if self.reranker is None or not hits:
                kept = [p for p, _ in hits[: self.keep_per_query]]
            else:
                docs = [self.index.docs[p] for p, _ in hits]
                texts = [d.content if rerank_text == "content" else doc_text(d.title, d.content) for d in docs]
                scores = self.reranker.score(query, texts)
                order = sorted(range(len(hits)), key=lambda r: (-scores[r], r))  # ties: BM25 rank
                kept = [hits[r][0] for r in order[: self.keep_per_query]]
            self._cache[key] = kept
        return self._cache[key]

    def retrieve(self, queries: Sequence[str], *, rerank_text: str = "title+content",
                 max_docs: int | None | str = "default") -> list[IndexedDoc]:
        """Documents for one retrieval round: per query its kept documents, de-duplicated by id in
        query order, at most ``max_docs`` (``"default"``: the retriever's; ``None``: no cap)."""
        cap = self.max_docs if max_docs == "default" else max_docs
        chosen: list[int] = []
        for q in queries:
            for p in self.per_query(q, rerank_text):
                if p not in chosen and (cap is None or len(chosen) < cap):
                    chosen.append(p)
        return [self.index.docs[p] for p in chosen]


def build_index(corpus_path: str | Path, out: str | Path) -> BM25Index:
    """Load a MedCorp-shaped corpus with :func:`probeguard_core.questions.load_corpus`, index, save."""
    from probeguard_core.questions import load_corpus

    index = BM25Index.build(load_corpus(corpus_path))
    index.save(out)
    return index


def format_documents(docs: Sequence[IndexedDoc]) -> str:
    """Documents as shown to the model; ``"null"`` when there are none (the substrate's text)."""
    if not docs:
        return "null"
    return "\n".join(f"Document [{i}] (Title: {d.title}) {d.content}" for i, d in enumerate(docs, start=1))
