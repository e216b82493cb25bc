"""NLI scoring of concluding claims (paper §3.2 Eq. 3, Appendix C, Appendix L) -> DESIGN 2.4.

For each logged round that the rationale features need (by default round 1 and the last
round; ``rounds="all"`` for every round):

* candidates = indices of the candidates voting the round's modal answer m_t (DESIGN 3:
  ties -> alphabetically first key; null answers never vote), all N on a unanimous round;
  a round without any non-null answer has no claims to compare and gets no record (RSE is
  then missing for it); such rounds are counted and reported on stderr;
* claim = :func:`probeguard_core.claims.extract_claims` of the rationale, joined by a space
  (an empty rationale gives the empty claim "");
* ``entailment[i][j] = P(entailment | premise = claim i, hypothesis = claim j)`` from an MNLI
  classifier (``microsoft/deberta-large-mnli`` by default); the entailment label id is read
  from the model config (``id2label``/``label2id``; an error when no label names entailment);
  inputs truncated to 256 tokens, batched;
* only i != j pairs are scored; the diagonal is set to 1.0 (a claim entails itself; RSE uses
  only i < j, so the diagonal never enters a score).  Identical (premise, hypothesis) text
  pairs are scored once and reused (LM-Polygraph style de-duplication), also across rounds of
  the same question.

Records are appended per question (all its rounds in one write); resumable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from probeguard_core.claims import extract_claims
from probeguard_core.features import answer_shares, modal_answer
from probeguard_core.logs import NLIRecord, QuestionLog, read_nli
from probeguard_core.pipeline.devices import load_sequence_classifier

from .hyperparameters import hp
from .runio import AppendOnlyJsonl, check_run_config

__all__ = ["NLIScorer", "run_nli", "entailment_label_id", "round_claims", "DEFAULT_NLI_MODEL", "rounds_needed"]

DEFAULT_NLI_MODEL = hp("rationale_scoring", "nli_model")  # data/hyperparameters.yaml
MAX_LENGTH = hp("rationale_scoring", "nli_max_length")  # Table 9: NLI input limit


def entailment_label_id(config) -> int:
    """The class index meaning *entailment*, from ``id2label`` (or ``label2id``) of a model config.

    A label counts when its lower-cased name starts with ``"entail"`` (so ``not_entailment`` does
    not); exactly one must match.
    """
    labels: dict[int, str] = {}
    for i, name in (getattr(config, "id2label", None) or {}).items():
        labels[int(i)] = str(name)
    for name, i in (getattr(config, "label2id", None) or {}).items():
        labels.setdefault(int(i), str(name))
    hits = sorted({i for i, name in labels.items() if name.strip().lower().startswith("entail")})
    if len(hits) != 1:
        raise ValueError(f"NLI model config: cannot identify one entailment label among {labels} "
                         "(need exactly one label named like 'entailment')")
    return hits[0]


@dataclass
class NLIScorer:
    """Batched P(entailment | premise, hypothesis) with a sequence-classification NLI model."""

    model: str = DEFAULT_NLI_MODEL
    device: str | None = None
    batch_size: int = 32
    max_length: int = MAX_LENGTH
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        self.tokenizer, self.net, self.device = load_sequence_classifier(self.model, self.device, self.trust_remote_code)
        self.entail_id = entailment_label_id(self.net.config)
        self.calls = 0  # pairs actually run through the model (for tests and cost accounting)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        out: list[float] = []
        for i in range(0, len(pairs), self.batch_size):
            chunk = pairs[i:i + self.batch_size]
            enc = self.tokenizer([p for p, _ in chunk], [h for _, h in chunk], truncation=True, padding=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                probs = torch.softmax(self.net(**enc).logits.float(), dim=-1)[:, self.entail_id]
            out.extend(probs.tolist())
            self.calls += len(chunk)
        return out


def rounds_needed(log: QuestionLog, which: str) -> list[int]:
    if which == "all":
        return list(range(1, len(log.rounds) + 1))
    if which == "first-last":
        return sorted({1, len(log.rounds)})
    raise ValueError(f"rounds must be 'first-last' or 'all', got {which!r}")


def round_claims(log: QuestionLog, t: int) -> tuple[list[int], list[str]]:
    """(indices of the candidates voting m_t, their claim strings) for round ``t`` (1-based)."""
    rnd = log.rounds[t - 1]
    shares = answer_shares(log, rnd)
    m = modal_answer(shares)
    idx = [i for i, c in enumerate(rnd.candidates) if c.answer is not None and c.answer == m]
    return idx, [" ".join(extract_claims(rnd.candidates[i].rationale)) for i in idx]


def _provenance(log: QuestionLog) -> dict[str, str]:
    """The prompt version (and substrate profile) of the log the claims come from, when it names them."""
    extra = log.model_extra or {}
    return {k: extra[k] for k in ("prompt_version", "substrate_profile") if k in extra}


def _question_records(log: QuestionLog, scorer: NLIScorer, which: str, model_name: str) -> list[NLIRecord]:
    per_round = [(t, *round_claims(log, t)) for t in rounds_needed(log, which)]
    per_round = [r for r in per_round if r[1]]  # rounds without a non-null answer: nothing to score
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for _, _, claims in per_round:
        for i, a in enumerate(claims):
            for j, b in enumerate(claims):
                if i != j and (a, b) not in seen:
                    seen.add((a, b))
                    pairs.append((a, b))
    prob = dict(zip(pairs, scorer.score(pairs)))
    recs = []
    for t, idx, claims in per_round:
        n = len(claims)
        mat = [[1.0 if i == j else float(prob[(claims[i], claims[j])]) for j in range(n)] for i in range(n)]
        recs.append(NLIRecord(schema_version=1, qid=log.qid, dataset=log.dataset, backbone=log.backbone, round=t,
                              model=model_name, candidates=idx, claims=claims, entailment=mat, **_provenance(log)))
    return recs


def run_nli(logs: Sequence[QuestionLog], scorer: NLIScorer, out: str | Path, *, rounds: str = "first-last",
            model_name: str | None = None, progress: bool = True) -> Path:
    """Score the claims of ``logs`` and append DESIGN 2.4 records to ``out`` (resumable)."""
    name = model_name or scorer.model
    check_run_config(out, {"stage": "nli", "model": name, "rounds": rounds, "max_length": scorer.max_length})
    sink = AppendOnlyJsonl(out, read_nli, key=lambda r: (r.qid, r.round))
    t0 = time.perf_counter()
    no_votes = 0
    for log in tqdm(logs, desc="nli", unit="q", disable=not progress):
        wanted = rounds_needed(log, rounds)
        if all((log.qid, t) in sink.done for t in wanted):
            continue
        recs = [r for r in _question_records(log, scorer, rounds, name) if (r.qid, r.round) not in sink.done]
        no_votes += sum(1 for t in wanted if not round_claims(log, t)[0])
        sink.append(recs, keys=[(r.qid, r.round) for r in recs])
    print(f"nli: {scorer.calls} pairs scored in {time.perf_counter() - t0:.1f}s; {no_votes} round(s) without any "
          "parseable answer have no claims and no record", file=sys.stderr)
    return Path(out)
