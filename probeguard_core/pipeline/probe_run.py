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
one per (question, arm), appended and flushed per record (resumable).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core.logs import ARMS, Cost, ProbeRecord, QuestionLog, read_probe

from .engines import Engine
from .hyperparameters import hp
from .parsing import QueryParse, format_options, parse_counter_queries
from .retrieval import IndexedDoc, Retriever, format_documents
from .runio import AppendOnlyJsonl, append_cost, check_run_config, derive_seed
from .substrate import candidate_from, is_unanimous
from .templates import PROMPT_VERSION, prompt_format, render

__all__ = ["ProbeConfig", "run_probe", "probe_eligible", "donor_map", "ARMS"]

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

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if bad or not self.arms:
            raise ValueError(f"arms must be a non-empty subset of {list(ARMS)}, got {list(self.arms)}")
        if (self.n_candidates is not None and self.n_candidates < 1) or self.temperature <= 0:
            raise ValueError("n_candidates must be >= 1 and temperature > 0")


def probe_eligible(logs: Sequence[QuestionLog]) -> list[QuestionLog]:
    """Questions whose first round is unanimous on one non-null answer (Algorithm 1's input)."""
    return [log for log in logs if is_unanimous(log.rounds[0].candidates)]


def donor_map(qids: Sequence[str], seed: int) -> dict[str, str]:
    """qid -> donor qid for the irrelevant-documents arm (deterministic, never itself)."""
    order = sorted(qids, key=lambda q: (hashlib.sha256(f"{seed}|{q}".encode()).hexdigest(), q))
    if len(order) < 2:
        return {}
    return {q: order[(i + 1) % len(order)] for i, q in enumerate(order)}


def _reanswer(engine: Engine, log: QuestionLog, arm: str, docs: str, cfg: ProbeConfig):
    v = cfg.prompt_version
    values = dict(question=log.question, options=format_options(log.options), consensus=log.rounds[0].candidates[0].answer)
    if arm != "instruction_only":
        values["documents"] = docs
    msgs = [{"role": "system", "content": render("system_answer", v)},
            {"role": "user", "content": render(_USER_TEMPLATE[arm], v, **values)}]
    (gens,) = engine.generate([msgs], n=log.n_candidates, temperature=cfg.temperature,
                              max_new_tokens=cfg.max_new_tokens, seed=derive_seed(cfg.seed, log.qid, "probe", arm),
                              logprobs=cfg.logprobs, enable_thinking=False)
    return [candidate_from(g, log.options) for g in gens], sum(g.n_tokens for g in gens)


def _counter_queries(engine: Engine, log: QuestionLog, cfg: ProbeConfig) -> tuple[QueryParse, int]:
    v = cfg.prompt_version
    m = log.rounds[0].candidates[0].answer
    msgs = [{"role": "system", "content": render("system_counter_query", v)},
            {"role": "user", "content": render("user_counter_query", v, question=log.question,
                                               options=format_options(log.options), consensus=f"{m}. {log.options[m]}")}]
    (g,) = engine.generate([msgs], n=1, temperature=0.0, max_new_tokens=cfg.query_max_new_tokens,
                           seed=derive_seed(cfg.seed, log.qid, "counter_query"), logprobs=None, enable_thinking=True)
    return parse_counter_queries(g[0].text, tuple(prompt_format(v)["counter_queries"])), g[0].n_tokens


def run_probe(
    logs: Sequence[QuestionLog],
    engine: Engine,
    retriever: Retriever,
    out: str | Path,
    config: ProbeConfig,
    *,
    reproducible: bool = False,
    progress: bool = True,
) -> Path:
    """Probe every first-round-unanimous question of ``logs``; appends DESIGN 2.2 records to ``out``."""
    eligible = probe_eligible(logs)
    wrong_n = [log.qid for log in eligible if config.n_candidates not in (None, log.n_candidates)]
    if wrong_n:
        raise ValueError(f"probe: n_candidates={config.n_candidates} differs from the logs' N for {wrong_n[:3]}; "
                         "the probe re-answers with the substrate's N")
    run_cfg = {"stage": "probe", **asdict(config), "arms": list(config.arms), "engine": type(engine).__name__,
               "model": engine.name, "reranker": getattr(retriever.reranker, "model", None),
               "index_sha256": retriever.index.corpus_sha256, "reproducible": reproducible}
    check_run_config(out, run_cfg)
    sink = AppendOnlyJsonl(out, read_probe, key=lambda r: (r.qid, r.arm))
    by_id = {d.id: d for d in retriever.index.docs}
    counter: dict[str, ProbeRecord | _Evidence] = {}  # qid -> its counter-evidence (queries, doc_ids)
    if Path(out).exists() and Path(out).stat().st_size:
        counter = {r.qid: r for r in read_probe(out) if r.arm == "counter_evidence"}
    print(f"probe: {len(eligible)} of {len(logs)} questions are unanimous in round 1", file=sys.stderr)
    first_pass = [a for a in ("counter_evidence", "instruction_only", "neutral_instruction") if a in config.arms]
    need_counter = bool({"counter_evidence", "neutral_instruction", "irrelevant_docs"} & set(config.arms))
    units = len(eligible) * len(config.arms)
    bar = tqdm(total=units, desc="probe", unit="arm", disable=not progress)

    def write(log: QuestionLog, arm: str, queries: list[str], docs: list[IndexedDoc], t0: float, tokens: int,
              extra: dict | None = None) -> ProbeRecord:
        cands, used = _reanswer(engine, log, arm, format_documents(docs), config)
        tokens += used
        wall = round(time.perf_counter() - t0, 6)
        rec = ProbeRecord(schema_version=1, qid=log.qid, dataset=log.dataset, backbone=log.backbone, arm=arm,
                          consensus=log.rounds[0].candidates[0].answer, queries=queries, doc_ids=[d.id for d in docs],
                          reanswers=cands, cost=None if reproducible else Cost(wall_s=wall, completion_tokens=tokens),
                          prompt_version=config.prompt_version, **(extra or {}))
        if reproducible:
            append_cost(out, {"qid": log.qid, "arm": arm}, wall, tokens)
        sink.append([rec], keys=[(log.qid, arm)])
        return rec

    # pass 1: arms that use only this question's own evidence
    for log in eligible:
        if need_counter and log.qid not in counter:
            t0 = time.perf_counter()
            parsed, qtok = _counter_queries(engine, log, config)
            queries = parsed.queries
            docs = retriever.retrieve(queries) if queries else []
            counter[log.qid] = _Evidence(queries, [d.id for d in docs])
            if "counter_evidence" in config.arms and (log.qid, "counter_evidence") not in sink.done:
                write(log, "counter_evidence", queries, docs, t0, qtok,
                      extra={"query_parse": parsed.status, "n_queries_found": parsed.n_found})
        for arm in first_pass:
            if (log.qid, arm) in sink.done:
                bar.update(1)
                continue
            t0 = time.perf_counter()
            if arm == "instruction_only":
                write(log, arm, [], [], t0, 0)
            else:  # neutral_instruction: this question's counter-evidence, neutral framing
                ev = counter[log.qid]
                write(log, arm, list(ev.queries), [by_id[d] for d in ev.doc_ids], t0, 0)
            bar.update(1)

    # pass 2: another question's counter-evidence
    if "irrelevant_docs" in config.arms:
        donors = donor_map([log.qid for log in eligible], config.seed)
        for log in eligible:
            if (log.qid, "irrelevant_docs") in sink.done:
                bar.update(1)
                continue
            donor = donors.get(log.qid)
            if donor is None:
                print(f"probe: irrelevant_docs arm skipped for {log.qid!r}: it needs a second probed question",
                      file=sys.stderr)
                continue
            ev = counter[donor]
            write(log, "irrelevant_docs", list(ev.queries), [by_id[d] for d in ev.doc_ids], time.perf_counter(), 0,
                  extra={"donor_qid": donor})
            bar.update(1)
    bar.close()
    return Path(out)


@dataclass(frozen=True)
class _Evidence:
    queries: list[str]
    doc_ids: list[str]
