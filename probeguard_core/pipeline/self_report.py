"""Self-report baselines (paper §4.1, Appendix A) -> DESIGN 2.3.

Both are elicited post hoc on the system's final answer (:func:`probeguard_core.features.final_answer`),
one call each per question at temperature 0, thinking off:

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
from .runio import AppendOnlyJsonl, check_run_config, derive_seed
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
                    seed: int = SEED, prompt_version: str = PROMPT_VERSION, progress: bool = True) -> Path:
    """Elicit both self-reports for every log; appends DESIGN 2.3 records to ``out`` (resumable)."""
    check_run_config(out, {"stage": "self_report", "engine": type(engine).__name__, "model": engine.name,
                           "max_new_tokens": max_new_tokens, "seed": seed, "prompt_version": prompt_version})
    sink = AppendOnlyJsonl(out, read_self_report, key=lambda r: r.qid)
    for log in tqdm(logs, desc="self-report", unit="q", disable=not progress):
        if log.qid in sink.done:
            continue
        ans = final_answer(log)
        conf = ptrue = None
        if ans is not None:
            (vc,) = engine.generate([_messages(log, ans, "verbalized_confidence", prompt_version)], n=1,
                                    temperature=0.0, max_new_tokens=max_new_tokens,
                                    seed=derive_seed(seed, log.qid, "verbalized"), logprobs=None)
            conf = parse_confidence(vc[0].text, tag=prompt_format(prompt_version)["confidence_tag"])
            (pt,) = engine.generate([_messages(log, ans, "p_true", prompt_version)], n=1, temperature=0.0,
                                    max_new_tokens=1, seed=derive_seed(seed, log.qid, "p_true"), logprobs=20)
            ptrue = p_true_from_top_logprobs(pt[0].first_top_logprobs or [])
        rec = SelfReport(schema_version=1, qid=log.qid, dataset=log.dataset, backbone=log.backbone,
                         verbalized_confidence=conf, p_true=ptrue, final_answer=ans,
                         prompt_version=prompt_version)
        sink.append([rec], keys=[log.qid])
    return Path(out)
