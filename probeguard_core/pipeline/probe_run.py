"""The counter-evidence probe (Algorithm 1, §3.2) and its control arms (Appendix G).

For every question whose first round is unanimous on one option m* (a1 = 1):

* ``counter_evidence``: counter-queries (<= 4, temperature 0, thinking on) from the question
  and m*; retrieval with the substrate's stack (<= 8 documents); N re-answers (temperature
  0.7) under the devil's-advocate instruction, whose key sentence is "do not change your
  answer unless the evidence genuinely warrants it";
* ``instruction_only``: the same instruction, no documents and no queries;
* ``neutral_instruction``: this question's counter-evidence documents, neutral instruction;
* ``irrelevant_docs``: the devil's-advocate instruction with ANOTHER question's counter-evidence
  (its queries and doc ids are logged; ``donor_qid`` names it).  The donor is fixed by the seed:
  probed questions are ordered by ``sha256(seed|qid)`` and each takes the next one (cyclic).
  With fewer than two probed questions the arm cannot run and is reported, not written.

The same system prompt as the substrate is used for every re-answer.  Documents of the
irrelevant arm are read from the ``counter_evidence`` records already written, so they are
exactly the donor's logged counter-evidence.  Output: DESIGN 2.2 records (``read_probe``),
one per (question, arm).

Batching (issue 15): every pass is ONE ``engine.generate`` over all pending questions of a
chunk (``batch_size`` questions; vLLM batches them): the counter-queries of the chunk, then
the re-answers of each arm.  Retrieval runs on the host between the two.  A chunk's records
are appended in question order (arm order within a question) when the chunk ends, so a killed
run loses at most one chunk, and the output does not depend on ``batch_size``: every request
carries a seed derived from ``(seed, qid, purpose, arm)`` (see ``docs/pipeline.md`` for the
choice on per-request seeds with vLLM).  The exception is the batched transformers engine
(``batch_prompts``), whose records depend on the chunk: its chunking is recorded in
``<out>.run.json`` and chunks are cut from the input order and re-answered whole on resume
(:mod:`.runio`).  With ``reproducible=False`` a record's ``wall_s`` is
its chunk's wall time (counter-queries, retrieval, re-answers) shared equally among the chunk's records (batched work has no
per-record wall time); ``completion_tokens`` is exact.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core.logs import ARMS, Cost, ProbeRecord, QuestionLog, read_probe

from .engines import Engine
from .hyperparameters import hp
from .parsing import QueryParse, parse_counter_queries
from .profiles import DEFAULT_PROFILE, get_profile
from .retrieval import MAX_DOCS, IndexedDoc, Retriever
from .runio import AppendOnlyJsonl, append_cost, check_run_config, chunking_config, chunks, derive_seed
from .substrate import candidate_from, is_unanimous
from .templates import PROMPT_VERSION, prompt_format, render

__all__ = ["ARMS", "ProbeConfig", "donor_map", "probe_eligible", "run_probe"]

_USER_TEMPLATE = {
    "counter_evidence": "user_probe_devil",
    "irrelevant_docs": "user_probe_devil",
    "instruction_only": "user_probe_instruction_only",
    "neutral_instruction": "user_probe_neutral",
}


_G = "consensus_generation"  # the probe re-answers with the substrate's generation settings


@dataclass(frozen=True)
class ProbeConfig:
    #: re-answers per arm; ``None`` = the log's N (DESIGN 2.2 requires N re-answers)
    n_candidates: int | None = None
    temperature: float = hp(_G, "temperature")
    max_new_tokens: int = hp(_G, "max_new_tokens")
    query_max_new_tokens: int = hp(_G, "query_max_new_tokens")
    logprobs: int = hp(_G, "logprobs")
    seed: int = SEED
    arms: tuple[str, ...] = ARMS
    prompt_version: str = PROMPT_VERSION
    #: substrate profile of the machinery the probe reuses (answer parser, document rendering,
    #: reranker input); the probe's own rules (2-4 queries, <= 8 documents) do not change
    profile: str = DEFAULT_PROFILE

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms:
            raise ValueError(f"arms must be a non-empty subset of {list(ARMS)}, got {list(self.arms)}")
        if (self.n_candidates is not None and self.n_candidates < 1) or self.temperature <= 0:
            raise ValueError("n_candidates must be >= 1 and temperature > 0")
        get_profile(self.profile)


def probe_eligible(logs: Sequence[QuestionLog]) -> list[QuestionLog]:
    """Questions whose first round is unanimous on one non-null answer (Algorithm 1's input)."""
    return [log for log in logs if is_unanimous(log.rounds[0].candidates)]


def donor_map(qids: Sequence[str], seed: int) -> dict[str, str]:
    """qid -> donor qid for the irrelevant-documents arm (deterministic, never itself)."""
    order = sorted(qids, key=lambda q: (hashlib.sha256(f"{seed}|{q}".encode()).hexdigest(), q))
    if len(order) < 2:
        return {}
    return {q: order[(i + 1) % len(order)] for i, q in enumerate(order)}


def _reanswer_prompt(log: QuestionLog, arm: str, docs: str, cfg: ProbeConfig) -> list[dict[str, str]]:
    v, prof = cfg.prompt_version, get_profile(cfg.profile)
    values = dict(question=log.question, options=prof.format_options(log.options),
                  consensus=log.rounds[0].candidates[0].answer)
    if arm != "instruction_only":
        values["documents"] = docs
    return [{"role": "system", "content": render("system_answer", v)},
            {"role": "user", "content": render(_USER_TEMPLATE[arm], v, **values)}]


def _counter_query_prompt(log: QuestionLog, cfg: ProbeConfig) -> list[dict[str, str]]:
    v, prof = cfg.prompt_version, get_profile(cfg.profile)
    m = log.rounds[0].candidates[0].answer
    return [{"role": "system", "content": render("system_counter_query", v)},
            {"role": "user", "content": render("user_counter_query", v, question=log.question,
                                               options=prof.format_options(log.options),
                                               consensus=f"{m}. {log.options[m]}")}]


@dataclass
class _Unit:
    """One (question, arm) to re-answer in this chunk."""

    log: QuestionLog
    arm: str
    queries: list[str]
    docs: list[IndexedDoc]
    tokens: int = 0
    extra: dict = field(default_factory=dict)
    wall: float = 0.0


def run_probe(
    logs: Sequence[QuestionLog],
    engine: Engine,
    retriever: Retriever,
    out: str | Path,
    config: ProbeConfig,
    *,
    batch_size: int = 64,
    reproducible: bool = False,
    progress: bool = True,
) -> Path:
    """Probe every first-round-unanimous question of ``logs``; appends DESIGN 2.2 records to ``out``.

    ``batch_size`` questions share each ``engine.generate`` call (1 = the per-question baseline;
    the records do not depend on it, except with a batched engine (``batch_prompts``), whose
    chunking is then recorded in ``<out>.run.json``: :func:`.runio.chunking_config`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prof = get_profile(config.profile)
    eligible = probe_eligible(logs)
    wrong_n = [log.qid for log in eligible if config.n_candidates not in (None, log.n_candidates)]
    if wrong_n:
        raise ValueError(f"probe: n_candidates={config.n_candidates} differs from the logs' N for {wrong_n[:3]}; "
                         "the probe re-answers with the substrate's N")
    run_cfg = {"stage": "probe", **asdict(config), "arms": list(config.arms), "engine": type(engine).__name__,
               "model": engine.name, "reranker": getattr(retriever.reranker, "model", None),
               "index_sha256": retriever.index.corpus_sha256, "reproducible": reproducible,
               **chunking_config(engine, batch_size)}
    check_run_config(out, run_cfg)
    sink = AppendOnlyJsonl(out, read_probe, key=lambda r: (r.qid, r.arm))
    by_id = {d.id: d for d in retriever.index.docs}
    counter: dict[str, ProbeRecord | _Evidence] = {}  # qid -> its counter-evidence (queries, doc_ids)
    if Path(out).exists() and Path(out).stat().st_size:
        counter = {r.qid: r for r in read_probe(out) if r.arm == "counter_evidence"}
    print(f"probe: {len(eligible)} of {len(logs)} questions are unanimous in round 1", file=sys.stderr)
    first_pass = [a for a in ARMS if a in config.arms and a != "irrelevant_docs"]
    need_counter = bool({"counter_evidence", "neutral_instruction", "irrelevant_docs"} & set(config.arms))
    bar = tqdm(total=len(eligible) * len(config.arms), desc="probe", unit="arm", disable=not progress)
    bar.update(sum(1 for log in eligible for a in config.arms if (log.qid, a) in sink.done))

    def generate(units: list[_Unit]) -> list:
        """One engine call for all units (each its own seed), generations in unit order."""
        if not units:
            return []
        return engine.generate(
            [_reanswer_prompt(u.log, u.arm, prof.render_documents(u.docs), config) for u in units],
            n=_one_n(units),
            temperature=config.temperature, max_new_tokens=config.max_new_tokens,
            seed=[derive_seed(config.seed, u.log.qid, "probe", u.arm) for u in units],
            logprobs=config.logprobs, enable_thinking=False)

    def records(units: list[_Unit], gens: list, elapsed: float) -> list[ProbeRecord]:
        recs = []
        share = round(elapsed / len(units), 6) if units else 0.0
        for u, g in zip(units, gens):
            cands = [candidate_from(x, u.log.options, prof) for x in g]
            tokens = u.tokens + sum(x.n_tokens for x in g)
            recs.append(ProbeRecord(
                schema_version=1, qid=u.log.qid, dataset=u.log.dataset, backbone=u.log.backbone, arm=u.arm,
                consensus=u.log.rounds[0].candidates[0].answer, queries=u.queries, doc_ids=[d.id for d in u.docs],
                reanswers=cands, cost=None if reproducible else Cost(wall_s=share, completion_tokens=tokens),
                prompt_version=config.prompt_version, substrate_profile=config.profile, **u.extra))
            u.tokens, u.wall = tokens, share
        return recs

    def flush(units: list[_Unit], gens: list, t0: float) -> None:
        """Append a chunk's unwritten records in question order, arm order within a question."""
        kept = [(u, g) for u, g in zip(units, gens) if (u.log.qid, u.arm) not in sink.done]
        if not kept:
            return
        units, gens = [u for u, _ in kept], [g for _, g in kept]
        recs = records(units, gens, time.perf_counter() - t0)
        order = {a: i for i, a in enumerate(ARMS)}
        pairs = sorted(zip(units, recs), key=lambda p: (index[p[0].log.qid], order[p[0].arm]))
        if reproducible:
            for u, _ in pairs:
                append_cost(out, {"qid": u.log.qid, "arm": u.arm}, u.wall, u.tokens)
        sink.append([r for _, r in pairs], keys=[(u.log.qid, u.arm) for u, _ in pairs])
        bar.update(len(pairs))

    index = {log.qid: i for i, log in enumerate(eligible)}
    # pass 1: arms that use only this question's own evidence, chunk by chunk; chunks are cut
    # from the eligible order and re-answered whole (runio.chunks: a batched engine's records
    # depend on the chunk), evidence already written is reused, not asked again
    def pass1_done(log: QuestionLog) -> bool:
        return all((log.qid, a) in sink.done for a in first_pass) and (not need_counter or log.qid in counter)

    for chunk in chunks(eligible, batch_size, pass1_done):
        t0 = time.perf_counter()
        ask = [log for log in chunk if need_counter and log.qid not in counter]
        qtok: dict[str, int] = {}
        parsed: dict[str, QueryParse] = {}
        if ask:  # pass 1a: all counter-queries of the chunk in one call
            gens = engine.generate([_counter_query_prompt(log, config) for log in ask], n=1,
                                   temperature=hp(_G, "query_temperature"), max_new_tokens=config.query_max_new_tokens,
                                   seed=[derive_seed(config.seed, log.qid, "counter_query") for log in ask],
                                   logprobs=None, enable_thinking=True)
            bounds = tuple(prompt_format(config.prompt_version)["counter_queries"])
            for log, g in zip(ask, gens):
                parsed[log.qid] = parse_counter_queries(g[0].text, bounds)
                qtok[log.qid] = g[0].n_tokens
                queries = parsed[log.qid].queries
                docs = retriever.retrieve(queries, rerank_text=prof.rerank_text, max_docs=MAX_DOCS) if queries else []
                counter[log.qid] = _Evidence(queries, [d.id for d in docs])
        units: list[_Unit] = []
        for log in chunk:
            for arm in first_pass:
                if arm == "instruction_only":
                    units.append(_Unit(log, arm, [], []))
                    continue
                ev = counter[log.qid]
                u = _Unit(log, arm, list(ev.queries), [by_id[d] for d in ev.doc_ids])
                if arm == "counter_evidence" and log.qid in parsed:
                    u.tokens = qtok[log.qid]
                    u.extra = {"query_parse": parsed[log.qid].status, "n_queries_found": parsed[log.qid].n_found}
                units.append(u)
        # pass 1b: one call per arm over the chunk (same prompts shape per arm)
        done_units: list[_Unit] = []
        gens: list = []
        for arm in first_pass:
            arm_units = [u for u in units if u.arm == arm]
            gens += generate(arm_units)
            done_units += arm_units
        flush(done_units, gens, t0)

    # pass 2: another question's counter-evidence
    if "irrelevant_docs" in config.arms:
        donors = donor_map([log.qid for log in eligible], config.seed)
        pending: list[_Unit] = []
        for log in eligible:
            donor = donors.get(log.qid)
            if donor is None:
                print(f"probe: irrelevant_docs arm skipped for {log.qid!r}: it needs a second probed question",
                      file=sys.stderr)
                continue
            ev = counter[donor]
            pending.append(_Unit(log, "irrelevant_docs", list(ev.queries), [by_id[d] for d in ev.doc_ids],
                                 extra={"donor_qid": donor}))
        for part in chunks(pending, batch_size, lambda u: (u.log.qid, u.arm) in sink.done):
            t0 = time.perf_counter()
            flush(part, generate(part), t0)
    bar.close()
    return Path(out)


def _one_n(units: list[_Unit]) -> int:
    """The N of a batched call: all its questions must share it (one ``n`` per call)."""
    ns = sorted({u.log.n_candidates for u in units})
    if len(ns) != 1:
        raise ValueError(f"probe: one call needs one N; logs in this chunk have N = {ns}")
    return ns[0]


@dataclass(frozen=True)
class _Evidence:
    queries: list[str]
    doc_ids: list[str]
