"""Hostile input, round three (issue 25): the fault suite's cases against the surfaces added since.

One section per class of the issue: a record that hangs the run (the claim extractor), certificate
versions, release folders, converters, the monitor, lone surrogates, spreadsheet formulas in
``decisions.csv`` and the book's own input.  Every refusal is exit 2 and one line
``file[:line]: field: reason`` (no traceback, no partial output, inputs unchanged); the helpers
are those of :mod:`test_fault_suite`.  (Decompression bombs and line sizes: the readers' own tests.)
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probeguard_core import claims as C

ROOT = Path(__file__).resolve().parents[1]
RELEASES = [ROOT / "data" / "simulated-v1" / "medqa" / "qwen3-8b",
            ROOT / "data" / "real-smollm2-135m-mmlu-med" / "mmlu-med" / "smollm2-135m-instruct"]

# --------------------------------------------------------------------------------------------
# 1. a record that hangs the run: the claim extractor is linear in the rationale's length
# --------------------------------------------------------------------------------------------

#: The pattern the extractor used before issue 25 (quadratic on repeated unclosed tags).
OLD_SPAN = re.compile(r"<answer>.*?</answer>", re.IGNORECASE | re.DOTALL)
TOKENS = ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "<answer", "answer>", "</", "A", ". ", "\n", "x", "İ"]


@pytest.mark.parametrize("cell", RELEASES, ids=lambda p: p.parts[-3])
def test_claims_unchanged_on_the_shipped_releases(cell: Path) -> None:
    """The NLI cache of each shipped release holds the claims the old extractor gave (joined by a
    space) for round 1: the new scan reproduces every one of a sample, and strips as the old pattern did."""
    logs = {}
    for raw in gzip.decompress((cell / "logs.jsonl.gz").read_bytes()).splitlines()[:300]:
        log = json.loads(raw)
        logs[log["qid"]] = log
    checked = tagged = 0
    for raw in gzip.decompress((cell / "nli.jsonl.gz").read_bytes()).splitlines():
        rec = json.loads(raw)
        if rec["round"] != 1 or rec["qid"] not in logs:
            continue
        cands = logs[rec["qid"]]["rounds"][0]["candidates"]
        for idx, claim in zip(rec["candidates"], rec["claims"], strict=True):
            text = cands[idx]["rationale"]
            assert C.strip_answer_tags(text) == OLD_SPAN.sub("", text)
            assert " ".join(C.extract_claims(text)) == claim, (rec["qid"], idx)
            checked += 1
            tagged += "<answer>" in text.lower()
    assert checked >= 100 and tagged >= 10, (checked, tagged)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=16))
def test_strip_answer_tags_equals_the_old_pattern(tokens: list[str]) -> None:
    text = "".join(tokens)
    assert C.strip_answer_tags(text) == OLD_SPAN.sub("", text)


def test_hostile_rationale_is_handled() -> None:
    """1 MiB of unclosed (and of closed) answer tags: the same claims as the old pattern gives on a
    short copy, in one linear scan (the old pattern took minutes; no time is asserted here, the
    benchmark benchmarks/hostile_rationale.py prints it)."""
    unclosed = "<answer>A " * (2**20 // 10) + "Therefore B."
    assert C.extract_claims(unclosed) == [unclosed.strip()]  # no span closes: nothing removed, one sentence
    closed = "<answer>A</answer> " * (2**20 // 19) + "Hence C. It fits."
    assert C.extract_claims(closed) == ["Hence C."]
    short = "<answer>A " * 50 + "x </answer> <answer>B" + ". Thus D is best. "
    assert C.strip_answer_tags(short) == OLD_SPAN.sub("", short)
    rng = random.Random(42)
    mixed = "".join(rng.choice(TOKENS) for _ in range(200_000))
    assert C.strip_answer_tags(mixed) == OLD_SPAN.sub("", mixed)  # closes often: the old pattern is fast here
