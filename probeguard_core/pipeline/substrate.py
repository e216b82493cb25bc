"""The multi-round consensus substrate (paper §3, Appendix A; MA-RAG's entropy-guided variant).

Per question, round t = 1..T:

1. N candidates answer (temperature 0.7, top-20 log-probs) with a rationale and an
   ``<answer>X</answer>`` tag; round 1 sees the question, later rounds also see the documents
   retrieved after the previous round and the previous round's answers, ordered by mean token
   entropy (highest first, so the most confident answer is read last) with the substrate's
   caveat that the ordering may be wrong and its instruction to answer towards lower entropy.
2. Stop at unanimity, or t = T.  The *substrate profile* (:mod:`.profiles`) fixes the
   unanimity test, the answer parser, the document rendering, the reranker's input and the
   sampling: ``"probeguard"`` (default; strict parsing, null answers never unanimous) or
   ``"ma-rag"`` (MA-RAG's own rules, point by point; docs/pipeline.md).
3. Otherwise one conflict-guided query call (temperature 0, thinking on) lists the dispute
   points as ``[Query k]`` lines: 1-4 queries, order kept, duplicates removed.
4. Retrieval (BM25 + rerank, <= 8 documents) gives D_t, logged as the round's ``retrieval``;
   no parseable query means no retrieval (``retrieval = null``, documents shown as ``null``).

Questions are processed in chunks of ``batch_size`` in lock-step (one engine call per round
for the whole chunk: vLLM batches across questions) and written in input order when the
chunk ends.  Seeds are derived from ``(seed, qid, purpose, round)``, so chunking and resuming
do not change any question's result.  Output: DESIGN 2.1 records (``read_logs``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core.logs import Candidate, Cost, QuestionLog, Retrieval, Round, read_logs

from .engines import Engine, Generation
from .hyperparameters import hp
from .profiles import DEFAULT_PROFILE, PROFILES, SubstrateProfile, get_profile
from .retrieval import Retriever
from .runio import AppendOnlyJsonl, append_cost, check_run_config, chunking_config, chunks, derive_seed
from .templates import PROMPT_VERSION, render

__all__ = ["SubstrateConfig", "answers_block", "candidate_from", "is_unanimous", "run_substrate", "stops"]


_G = "consensus_generation"


@dataclass(frozen=True)
class SubstrateConfig:
    """Table 9 defaults (consensus generation), read from ``data/hyperparameters.yaml``."""

    dataset: str
    backbone: str
    n_candidates: int = hp(_G, "n_candidates")
    max_rounds: int = hp(_G, "max_rounds")
    temperature: float = hp(_G, "temperature")
    max_new_tokens: int = hp(_G, "max_new_tokens")
    query_max_new_tokens: int = hp(_G, "query_max_new_tokens")
    logprobs: int = hp(_G, "logprobs")
    seed: int = SEED
    prompt_version: str = PROMPT_VERSION
    profile: str = DEFAULT_PROFILE

    def __post_init__(self) -> None:
        get_profile(self.profile)
        for name in ("n_candidates", "max_rounds", "max_new_tokens", "query_max_new_tokens", "logprobs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise ValueError(f"candidate temperature must be > 0 (N samples), got {self.temperature}")


def candidate_from(gen: Generation, options: dict[str, str],
                   profile: SubstrateProfile = PROFILES[DEFAULT_PROFILE]) -> Candidate:
    """A DESIGN 2.1 candidate: the profile's parse (null when no option key), rationale = the text.

    Under the ``"ma-rag"`` profile the raw judger output is kept as the extra field ``prediction``.
    """
    pred = profile.predict(gen.text, options)
    extra = {"prediction": pred} if profile.keep_prediction else {}
    return Candidate(
        answer=profile.answer(pred, options),
        rationale=gen.text,
        logprob=gen.logprob,
        n_tokens=gen.n_tokens,
        mean_token_entropy=gen.mean_token_entropy,
        **extra,
    )


def is_unanimous(cands: Sequence[Candidate]) -> bool:
    """All answers the same option, none null (DESIGN 3; the probe's eligibility, a1 = 1)."""
    answers = {c.answer for c in cands}
    return len(answers) == 1 and None not in answers


def stops(cands: Sequence[Candidate], profile: SubstrateProfile) -> bool:
    """The profile's unanimity test over the round's raw predictions."""
    if profile.keep_prediction:
        return profile.unanimous([(c.model_extra or {}).get("prediction") for c in cands])
    return profile.unanimous([c.answer for c in cands])


def answers_block(cands: Sequence[Candidate], by_entropy: bool,
                  profile: SubstrateProfile = PROFILES[DEFAULT_PROFILE]) -> str:
    """Numbered previous answers; ``by_entropy`` orders them by mean token entropy, highest first
    (missing entropy first), as the substrate does, and prints each entropy."""
    idx = list(range(len(cands)))
    if by_entropy:
        idx = profile.entropy_order([c.mean_token_entropy for c in cands])
        parts = []
        for k, i in enumerate(idx, start=1):
            e = cands[i].mean_token_entropy
            shown = profile.missing_entropy if e is None else f"{e:.2f}"
            parts.append(f"{k}. The assistant's previous answer is (Entropy {shown}):\n{cands[i].rationale}")
        return "\n\n".join(parts)
    return "\n\n".join(f"{k}. The assistant's previous answer is:\n{c.rationale}" for k, c in enumerate(cands, start=1))


@dataclass
class _State:
    q: Any
    start: float
    rounds: list[Round] = field(default_factory=list)
    documents: str = "null"
    tokens: int = 0
    done: bool = False
    wall: float = 0.0


def _answer_prompt(st: _State, cfg: SubstrateConfig) -> list[dict[str, str]]:
    v, prof = cfg.prompt_version, get_profile(cfg.profile)
    opts = prof.format_options(st.q.options)
    if not st.rounds:
        user = render("user_round1", v, question=st.q.question, options=opts)
    else:
        user = render("user_round_next", v, question=st.q.question, options=opts, documents=st.documents,
                      answers=answers_block(st.rounds[-1].candidates, by_entropy=True, profile=prof))
    return [{"role": "system", "content": render("system_answer", v)}, {"role": "user", "content": user}]


def _query_prompt(st: _State, cands: Sequence[Candidate], cfg: SubstrateConfig) -> list[dict[str, str]]:
    v = cfg.prompt_version
    user = render("user_query", v, question=st.q.question, options=get_profile(cfg.profile).format_options(st.q.options),
                  answers=answers_block(cands, by_entropy=False))
    return [{"role": "system", "content": render("system_query", v)}, {"role": "user", "content": user}]


def _run_chunk(chunk: Sequence[Any], engine: Engine, retriever: Retriever | None, cfg: SubstrateConfig) -> list[_State]:
    t0 = time.perf_counter()
    prof = get_profile(cfg.profile)
    states = [_State(q, t0) for q in chunk]
    for t in range(1, cfg.max_rounds + 1):
        active = [s for s in states if not s.done]
        if not active:
            break
        gens = engine.generate([_answer_prompt(s, cfg) for s in active], n=cfg.n_candidates,
                               temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                               seed=[derive_seed(cfg.seed, s.q.qid, "answer", t) for s in active],
                               logprobs=cfg.logprobs, enable_thinking=False)
        asking: list[tuple[_State, list[Candidate]]] = []
        for s, g in zip(active, gens):
            cands = [candidate_from(x, s.q.options, prof) for x in g]
            s.tokens += sum(x.n_tokens for x in g)
            s.rounds.append(Round(round=t, candidates=cands, retrieval=None))
            if stops(cands, prof) or t == cfg.max_rounds:
                s.done, s.wall = True, time.perf_counter() - s.start
            else:
                asking.append((s, cands))
        if not asking:
            continue
        qgens = engine.generate([_query_prompt(s, c, cfg) for s, c in asking], n=1, temperature=0.0,
                                max_new_tokens=cfg.query_max_new_tokens,
                                seed=[derive_seed(cfg.seed, s.q.qid, "query", t) for s, _ in asking],
                                logprobs=None, enable_thinking=True)
        for (s, _), g in zip(asking, qgens):
            s.tokens += g[0].n_tokens
            queries = prof.queries(g[0].text)
            if queries and retriever is not None:
                docs = retriever.retrieve(queries, rerank_text=prof.rerank_text, max_docs=prof.max_docs)
                s.rounds[-1].retrieval = Retrieval(queries=queries, doc_ids=[d.id for d in docs])
                s.documents = prof.render_documents(docs)
            else:
                s.documents = "null"
    return states


def _record(s: _State, cfg: SubstrateConfig, reproducible: bool) -> QuestionLog:
    q = s.q
    cost = None if reproducible else Cost(wall_s=round(s.wall, 6), completion_tokens=s.tokens)
    return QuestionLog(
        schema_version=1, qid=str(q.qid), dataset=cfg.dataset, backbone=cfg.backbone, question=q.question,
        options=dict(q.options), gold=q.gold, specialty=getattr(q, "specialty", None),
        n_candidates=cfg.n_candidates, max_rounds=cfg.max_rounds, rounds=s.rounds, cost=cost,
        prompt_version=cfg.prompt_version, substrate_profile=cfg.profile,
    )


def run_substrate(
    questions: Sequence[Any],
    engine: Engine,
    retriever: Retriever | None,
    out: str | Path,
    config: SubstrateConfig,
    *,
    batch_size: int = 1,
    reproducible: bool = False,
    progress: bool = True,
) -> Path:
    """Run the substrate over ``questions`` (objects with ``qid, question, options, gold,
    specialty``), appending DESIGN 2.1 records to ``out`` (resumable; see :mod:`.runio`).

    ``retriever=None`` is allowed only for ``max_rounds == 1`` (no retrieval can happen).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if retriever is None and config.max_rounds > 1:
        raise ValueError("a retriever (index) is required when max_rounds > 1")
    prof = get_profile(config.profile)
    sampling = (getattr(engine, "top_k", None), getattr(engine, "top_p", None))
    if prof.name == "ma-rag" and sampling not in ((None, None), (prof.top_k, prof.top_p)):
        raise ValueError(f"substrate profile 'ma-rag' samples with top_k={prof.top_k}, top_p={prof.top_p} (Qwen3's "
                         f"generation config, which MA-RAG's vLLM server applies); the engine has top_k={sampling[0]}, "
                         f"top_p={sampling[1]}: build it with those values (CLI: leave --top-k/--top-p unset)")
    qids = [str(q.qid) for q in questions]
    if len(set(qids)) != len(qids):
        raise ValueError("questions: duplicate qid")
    run_cfg = {"stage": "substrate", **asdict(config), "engine": type(engine).__name__, "model": engine.name,
               "reranker": getattr(getattr(retriever, "reranker", None), "model", None),
               "index_sha256": getattr(getattr(retriever, "index", None), "corpus_sha256", None),
               "reproducible": reproducible, "top_k": sampling[0], "top_p": sampling[1],
               **chunking_config(engine, batch_size)}
    check_run_config(out, run_cfg)
    sink = AppendOnlyJsonl(out, read_logs, key=lambda r: r.qid)
    todo = [q for q in questions if str(q.qid) not in sink.done]
    bar = tqdm(total=len(questions), initial=len(questions) - len(todo), desc="substrate", unit="q", disable=not progress)
    # chunks are cut from the input order and decoded whole (runio.chunks), a chunk's records
    # written in one write, so a resumed run decodes the same chunks as an uninterrupted one
    for chunk in chunks(questions, batch_size, lambda q: str(q.qid) in sink.done):
        states = _run_chunk(chunk, engine, retriever, config)
        states = [s for s in states if str(s.q.qid) not in sink.done]
        recs = [_record(s, config, reproducible) for s in states]  # input order
        if reproducible:
            for s, rec in zip(states, recs):
                append_cost(out, {"qid": rec.qid}, round(s.wall, 6), s.tokens)
        sink.append(recs, keys=[rec.qid for rec in recs])
        bar.update(len(recs))
    bar.close()
    return Path(out)
