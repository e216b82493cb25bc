"""Self-report baselines (paper §4.1, Appendix A) -> DESIGN 2.3.

Both are elicited post hoc on the system's final answer (:func:`probeguard_core.features.final_answer`),
one call each per question at temperature 0, thinking off (batched across questions):

* verbalized confidence (Tian et al. 2023; Xiong et al. 2024): a number 0-100 in the prompt
  version's tag (v2, the paper's prompt: ``<conf>N</conf>``; v1: ``<confidence>``); anything
  unparseable or out of range is ``null``;
* P(True) (Kadavath et al. 2022): from the FIRST generated token's top-20 log-probabilities,
  ``p_true = sum P(true variants) / (sum P(true variants) + sum P(false variants))``, where a
  variant is any top-20 token that, stripped of white space and lower-cased, equals ``"true"``
  (resp. ``"false"``): ``" True"``, ``"True"``, ``"true"``, ``"TRUE"``, ...
  **Fallback:** when no variant of either appears among the top 20, ``p_true`` is ``null``
  (never 0.5); when only one side appears, it is 1.0 or 0.0.

A question without a final answer (tie or all null) has nothing to assess: both are ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core.features import final_answer
from probeguard_core.logs import QuestionLog, SelfReport, read_self_report

from .engines import Engine
from .hyperparameters import hp
from .parsing import format_options, parse_confidence
from .runio import AppendOnlyJsonl, check_run_config, chunking_config, chunks, derive_seed
from .templates import PROMPT_VERSION, chat_messages, prompt_format

__all__ = ["p_true_from_top_logprobs", "run_self_report"]


def p_true_from_top_logprobs(top: Sequence[tuple[str, float]]) -> float | None:
    """Normalized P(True) over True/False variants of the first token's top log-probs; ``None``
    when neither appears (the stated fallback)."""
    t = [math.exp(lp) for tok, lp in top if tok.strip().lower() == "true"]
    f = [math.exp(lp) for tok, lp in top if tok.strip().lower() == "false"]
    if not t and not f:
        return None
    pt, pf = math.fsum(t), math.fsum(f)
    return pt / (pt + pf)


def _messages(log: QuestionLog, answer: str, purpose: str, version: str) -> list[dict[str, str]]:
    return chat_messages(purpose, version, question=log.question, options=format_options(log.options),
                         answer=f"{answer}. {log.options[answer]}")


def run_self_report(logs: Sequence[QuestionLog], engine: Engine, out: str | Path, *,
                    max_new_tokens: int = hp("self_report", "max_new_tokens"),
                    seed: int = SEED, prompt_version: str = PROMPT_VERSION, batch_size: int = 64,
                    progress: bool = True) -> Path:
    """Elicit both self-reports for every log; appends DESIGN 2.3 records to ``out`` (resumable).

    Batched across questions (issue 15): per chunk of ``batch_size`` questions (cut from the
    input order and decoded whole: :func:`.runio.chunks`), one ``engine.generate`` for all
    verbalized-confidence prompts and one for all P(True) prompts; the chunk's unwritten records
    are appended in input order when it ends.  Seeds are per request (``(seed, qid, purpose)``),
    so the records do not depend on ``batch_size``, except with a batched engine
    (``batch_prompts``), whose chunking is then recorded in ``<out>.run.json``
    (:func:`.runio.chunking_config`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    check_run_config(out, {"stage": "self_report", "engine": type(engine).__name__, "model": engine.name,
                           "max_new_tokens": max_new_tokens, "seed": seed, "prompt_version": prompt_version,
                           **chunking_config(engine, batch_size)})
    sink = AppendOnlyJsonl(out, read_self_report, key=lambda r: r.qid)
    tag = prompt_format(prompt_version)["confidence_tag"]
    temperature = hp("self_report", "temperature")
    bar = tqdm(total=len(logs), initial=sum(log.qid in sink.done for log in logs), desc="self-report", unit="q",
               disable=not progress)
    for chunk in chunks(logs, batch_size, lambda log: log.qid in sink.done):
        answers = {log.qid: final_answer(log) for log in chunk}
        asked = [log for log in chunk if answers[log.qid] is not None]
        conf: dict[str, float | None] = {}
        ptrue: dict[str, float | None] = {}
        if asked:
            vcs = engine.generate([_messages(log, answers[log.qid], "verbalized_confidence", prompt_version) for log in asked],
                                  n=1, temperature=temperature, max_new_tokens=max_new_tokens,
                                  seed=[derive_seed(seed, log.qid, "verbalized") for log in asked], logprobs=None)
            pts = engine.generate([_messages(log, answers[log.qid], "p_true", prompt_version) for log in asked],
                                  n=1, temperature=temperature, max_new_tokens=1,
                                  seed=[derive_seed(seed, log.qid, "p_true") for log in asked],
                                  logprobs=hp("self_report", "p_true_top_logprobs"))
            for log, vc, pt in zip(asked, vcs, pts):
                conf[log.qid] = parse_confidence(vc[0].text, tag=tag)
                ptrue[log.qid] = p_true_from_top_logprobs(pt[0].first_top_logprobs or [])
        recs = [SelfReport(schema_version=1, qid=log.qid, dataset=log.dataset, backbone=log.backbone,
                           verbalized_confidence=conf.get(log.qid), p_true=ptrue.get(log.qid),
                           final_answer=answers[log.qid], prompt_version=prompt_version)
                for log in chunk if log.qid not in sink.done]
        sink.append(recs, keys=[r.qid for r in recs])
        bar.update(len(recs))
    bar.close()
    return Path(out)
