"""Releases from real parts, run end to end by the pipeline on CPU (issues 13 and 27).

``python -m probeguard_core.pipeline.real_release`` builds a release folder from the real parts of
:mod:`.real_parts` (MMLU medical questions, SmolLM2-135M-Instruct, HPO definitions) and the
MiniLM stand-ins of :mod:`.standins`.  Two releases are built this way (``make real-release``,
``make real-release-lowtemp``):

* ``data/real-smollm2-135m-mmlu-med``: 50 questions at the paper's temperature 0.7;
* ``data/real-smollm2-135m-mmlu-med-lowtemp``: 200 questions outside a 40-question pilot, at the
  temperature the pilot chose (:mod:`.real_pilot`: the highest of a descending grid at which at
  least a quarter of the pilot is unanimous in round 1), so the unanimous layer, the probe and its
  control arms run on real model text.

Protocol (paper §3, Appendix A, Table 9): N = 8, T = 8, the Appendix A prompts, conflict-guided
queries, BM25 (k1 0.9, b 0.4) top 32 -> re-rank -> keep 2 per query -> at most 8 documents, the
probe with its control arms on every unanimous first round, NLI on round 1 and the last round,
both self-reports.  Departures forced by a 135M model on one CPU thread are recorded in the
manifest (``choices``) and the datasheet (:mod:`.real_datasheet`).

Every stage appends to a work folder (``outputs/<release>/``) and resumes where it stopped; the
substrate's and the probe's fixed chunks of questions are sharded over ``--workers`` one-thread
processes (a record depends on its chunk, never on the number of processes); the release folder
is assembled from the work folder at the end (``--replace`` to rebuild an existing one).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from probeguard_core.fileio import sha256_file
from probeguard_core.pipeline.real_parts import (
    BACKBONE,
    DATASET,
    MMLU_MED_SUBJECTS,
    RELEASE,
    RealConfig,
    build_parts,
    chunks,
    gguf_path,
    hpo_path,
    mmlu_path,
    substrate_config,
)

__all__ = ["assemble", "main", "merge_shards", "run_stages", "summarize"]


# --------------------------------------------------------------------------------------------
# stages
# --------------------------------------------------------------------------------------------

class _Timer:
    """Wall seconds per stage, accumulated over resumed runs (``work/stages.json``)."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.is_file() else {}

    def add(self, stage: str, seconds: float, **extra: Any) -> None:
        d = self.data.setdefault(stage, {"wall_s": 0.0})
        d["wall_s"] = round(d["wall_s"] + seconds, 3)
        for k, v in extra.items():
            d[k] = max(d.get(k, 0), v) if k in ("workers", "threads") else d.get(k, 0) + v if isinstance(v, (int, float)) else v
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def _shard_path(work: Path, shard: int, workers: int) -> Path:
    return work / f"logs.shard-{shard}-of-{workers}.jsonl"


def _substrate_shard(work: str, cfg: RealConfig, cache: str | None, shard: int, workers: int,
                     stop_at: float | None) -> dict[str, int]:
    """One worker process of a sharded substrate: chunks ``shard, shard + workers, ...`` into its
    own append-only shard file (resumable), one thread; returns the engine's counters."""
    from probeguard_core.pipeline.substrate import run_substrate

    w = Path(work)
    parts = build_parts(w, cfg, Path(cache) if cache else None,
                        calls_log=f"engine_calls.shard-{shard}-of-{workers}.jsonl")
    out, conf = _shard_path(w, shard, workers), substrate_config(cfg, parts["version"])
    for chunk in chunks(parts["questions"], cfg)[shard::workers]:
        if stop_at is not None and time.time() >= stop_at:
            break
        run_substrate(chunk, parts["wrapped"], parts["retriever"], out, conf, batch_size=len(chunk),
                      reproducible=True, progress=False)
    eng = parts["engine"]
    return {"prompt_tokens": eng.prompt_tokens, "forced_rows": eng.forced_rows, "tagged_rows": eng.tagged_rows}


def _shard_lines(work: Path, workers: int) -> int:
    paths = [_shard_path(work, i, workers) for i in range(workers)]
    return sum(len(p.read_bytes().splitlines()) for p in paths if p.is_file())


def merge_shards(work: Path, questions: Sequence[Any], workers: int) -> int:
    """Write ``logs.jsonl`` and ``logs.cost.jsonl`` from the shard files, lines copied verbatim in
    the seeded question order (only questions every earlier one of which is done, so a resumed
    run never leaves a gap); the two files are written as one set
    (:func:`probeguard_core.fileio.write_files_atomically`: a kill between them cannot leave logs
    whose costs are another merge's). Returns the number of questions merged."""
    from probeguard_core.fileio import write_files_atomically
    from probeguard_core.pipeline.runio import sidecar

    lines: dict[str, dict[str, str]] = {"logs": {}, "cost": {}}
    for shard in range(workers):
        src = _shard_path(work, shard, workers)
        for kind, path in (("logs", src), ("cost", sidecar(src, ".cost.jsonl"))):
            if path.is_file():
                for line in path.read_text(encoding="utf-8").splitlines():
                    lines[kind][str(json.loads(line)["qid"])] = line  # cost: last line per qid wins
    order: list[str] = []
    for q in questions:
        if str(q.qid) not in lines["logs"]:
            break
        order.append(str(q.qid))
    write_files_atomically({
        work / "logs.jsonl": "".join(lines["logs"][k] + "\n" for k in order).encode("utf-8"),
        work / "logs.cost.jsonl": "".join(lines["cost"][k] + "\n" for k in order).encode("utf-8"),
    })
    return len(order)


def run_stages(work: Path, cfg: RealConfig, parts: dict[str, Any], stages: Sequence[str], progress: bool = True,
               stop_at: float | None = None, workers: int = 1, cache: Path | None = None) -> None:
    """Run the stages in order; ``stop_at`` (epoch seconds) stops the substrate between chunks,
    and the later stages then run on the questions it finished. ``workers > 1`` runs the
    substrate's chunks in that many one-thread processes (:func:`_substrate_shard`) and merges
    their shard files; the records are the same as one process would write."""
    import resource

    import torch

    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.nli_run import run_nli
    from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe
    from probeguard_core.pipeline.self_report import run_self_report
    from probeguard_core.pipeline.substrate import run_substrate

    timer = _Timer(work / "stages.json")
    eng, wrapped, version = parts["engine"], parts["wrapped"], parts["version"]

    def timed(stage: str, fn: Any) -> None:
        t0, c0, p0, f0, n0 = time.perf_counter(), time.process_time(), eng.prompt_tokens, eng.forced_rows, eng.tagged_rows
        fn()
        timer.add(stage, time.perf_counter() - t0, prompt_tokens=eng.prompt_tokens - p0,
                  forced_tag_rows=eng.forced_rows - f0, own_tag_rows=eng.tagged_rows - n0,
                  threads=torch.get_num_threads(), cpu_s=round(time.process_time() - c0, 3))

    if "substrate" in stages and workers > 1:
        import multiprocessing as mp

        t0 = time.perf_counter()
        args = [(str(work), cfg, str(cache) if cache else None, i, workers, stop_at) for i in range(workers)]
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with mp.get_context("spawn").Pool(workers) as pool:
            job = pool.starmap_async(_substrate_shard, args)
            with tqdm(total=len(parts["questions"]), desc=f"substrate ({workers} processes)", unit="q",
                      disable=not progress) as bar:
                while not job.ready():  # the shard files are the progress: one line per finished question
                    job.wait(10)
                    bar.update(_shard_lines(work, workers) - bar.n)
            counts = job.get()
        done = merge_shards(work, parts["questions"], workers)
        if done < len(parts["questions"]):
            print(f"substrate: {done} of {len(parts['questions'])} questions done (rerun to resume)", file=sys.stderr)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's processes, reaped on exit
        cpu = (children.ru_utime + children.ru_stime) - (children0.ru_utime + children0.ru_stime)
        timer.add("substrate", time.perf_counter() - t0, workers=workers, threads=1, cpu_s=round(cpu, 3),
                  prompt_tokens=sum(c["prompt_tokens"] for c in counts),
                  forced_tag_rows=sum(c["forced_rows"] for c in counts), own_tag_rows=sum(c["tagged_rows"] for c in counts))
    elif "substrate" in stages:
        def substrate() -> None:
            done: list[Any] = []
            for chunk in chunks(parts["questions"], cfg):  # chunk by chunk, so a deadline can cut in between
                if stop_at is not None and time.time() >= stop_at:
                    print(f"substrate: stopped at the deadline after {len(done)} of {len(parts['questions'])} "
                          "questions (rerun to resume)", file=sys.stderr)
                    break
                run_substrate(chunk, wrapped, parts["retriever"], work / "logs.jsonl", substrate_config(cfg, version),
                              batch_size=len(chunk), reproducible=True, progress=progress)
                done += chunk

        timed("substrate", substrate)
    logs = read_logs(work / "logs.jsonl") if (work / "logs.jsonl").is_file() else []
    # the later stages run in this one process; with --workers k it uses k threads (the substrate's
    # cores), so their floats depend on k (recorded in stages.json), never their structure
    torch.set_num_threads(max(workers, cfg.num_threads))
    if "probe" in stages:
        pc = ProbeConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                         query_max_new_tokens=cfg.query_max_new_tokens, seed=cfg.seed, prompt_version=version)
        # chunks of max_batch_rows // N questions: one decode batch per arm, and a kill loses one chunk
        timed("probe", lambda: run_probe(logs, wrapped, parts["retriever"], work / "probe.jsonl", pc,
                                         batch_size=max(1, cfg.max_batch_rows // cfg.n_candidates),
                                         reproducible=True, progress=progress))
    if "nli" in stages:
        timed("nli", lambda: run_nli(logs, parts["nli"], work / "nli.jsonl", rounds="first-last", progress=progress))
    if "self_report" in stages:
        timed("self_report", lambda: run_self_report(logs, wrapped, work / "self_report.jsonl",
                                                     max_new_tokens=cfg.self_report_max_new_tokens, seed=cfg.seed,
                                                     prompt_version=version, progress=progress))


# --------------------------------------------------------------------------------------------
# release
# --------------------------------------------------------------------------------------------

def _costs(path: Path) -> dict[Any, dict[str, Any]]:
    """Last line per unit of a reproducible-mode cost sidecar."""
    out: dict[Any, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            o = json.loads(line)
            out[(o["qid"], o.get("arm"))] = o
    return out


def summarize(work: Path, release: Path | None = None) -> dict[str, Any]:
    """Headline numbers of the run (what the datasheet reports), computed from the artifacts."""
    from probeguard_core.features import final_answer
    from probeguard_core.logs import read_logs, read_probe, read_self_report

    logs = read_logs(work / "logs.jsonl")
    cands = [c for log in logs for r in log.rounds for c in r.candidates]
    first = [log.rounds[0].candidates for log in logs]
    finals = [final_answer(log) for log in logs]
    probe = read_probe(work / "probe.jsonl", logs) if (work / "probe.jsonl").is_file() else []
    sr = read_self_report(work / "self_report.jsonl") if (work / "self_report.jsonl").is_file() else []
    cost = _costs(work / "logs.cost.jsonl")
    pcost = _costs(work / "probe.cost.jsonl")
    stages = json.loads((work / "stages.json").read_text()) if (work / "stages.json").is_file() else {}
    rounds = [len(log.rounds) for log in logs]
    retr = [r.retrieval for log in logs for r in log.rounds[:-1]]
    return {
        "questions": len(logs),
        "by_subject": {s: sum(1 for log in logs if log.specialty == s) for s in MMLU_MED_SUBJECTS},
        "accuracy_final_answer": sum(1 for log, a in zip(logs, finals) if a == log.gold) / len(logs),
        "final_answer_missing": sum(1 for a in finals if a is None),
        "candidate_accuracy_round1": sum(c.answer == log.gold for log in logs for c in log.rounds[0].candidates) / sum(len(f) for f in first),
        "first_round_unanimity": sum(1 for f in first if len({c.answer for c in f}) == 1 and f[0].answer is not None) / len(logs),
        "parse_failure_rate": sum(1 for c in cands if c.answer is None) / len(cands),
        "candidates": len(cands),
        "rounds_used": {"mean": float(np.mean(rounds)), "histogram": {str(t): rounds.count(t) for t in sorted(set(rounds))}},
        "unanimous_stop": sum(1 for log in logs if len({c.answer for c in log.rounds[-1].candidates}) == 1
                              and log.rounds[-1].candidates[0].answer is not None),
        "retrieval_rounds": sum(1 for r in retr if r is not None),
        "rounds_without_parseable_query": sum(1 for r in retr if r is None),
        "substrate_completion_tokens": sum(o["completion_tokens"] for o in cost.values()),
        "probe_completion_tokens": sum(o["completion_tokens"] for o in pcost.values()),
        "probed_questions": len({p.qid for p in probe}),
        "probe_records": len(probe),
        "verbalized_confidence_null": sum(1 for r in sr if r.verbalized_confidence is None),
        "p_true_null": sum(1 for r in sr if r.p_true is None),
        "self_reports": len(sr),
        "stages": stages,
    }


def _merge_costs(recs: list[Any], cost: dict[Any, dict[str, Any]], key: Any) -> list[Any]:
    from probeguard_core.logs import Cost

    out = []
    for r in recs:
        c = cost.get(key(r))
        out.append(r if c is None else r.model_copy(update={"cost": Cost(wall_s=c["wall_s"], completion_tokens=c["completion_tokens"])}))
    return out


def assemble(work: Path, out: Path, cfg: RealConfig, parts_info: dict[str, Any], *, replace: bool = False) -> Path:
    """The release folder from the work folder: artifacts (costs merged), DATASHEET.md, manifest."""
    import shutil

    from probeguard_core.logs import read_logs, read_nli, read_probe, read_self_report, write_jsonl
    from probeguard_core.release import backbone_slug, write_manifest
    from probeguard_core.pipeline.devices import cpu_fingerprint
    from probeguard_core.pipeline.real_datasheet import choices, components, datasheet, probe_layer, versions

    if out.exists():
        if not replace:
            raise ValueError(f"{out}: exists; pass --replace to rebuild it from {work}")
        shutil.rmtree(out)
    logs = _merge_costs(read_logs(work / "logs.jsonl"), _costs(work / "logs.cost.jsonl"), lambda r: (r.qid, None))
    cell = out / DATASET / backbone_slug(BACKBONE)
    write_jsonl(cell / "logs.jsonl.gz", logs)
    if (work / "probe.jsonl").is_file():
        write_jsonl(cell / "probe.jsonl.gz", _merge_costs(read_probe(work / "probe.jsonl", logs),
                                                         _costs(work / "probe.cost.jsonl"), lambda r: (r.qid, r.arm)))
    if (work / "nli.jsonl").is_file():
        write_jsonl(cell / "nli.jsonl.gz", read_nli(work / "nli.jsonl", logs))
    if (work / "self_report.jsonl").is_file():
        write_jsonl(cell / "self_report.jsonl.gz", read_self_report(work / "self_report.jsonl"))
    summary = summarize(work)
    probe = read_probe(work / "probe.jsonl", logs) if (work / "probe.jsonl").is_file() else []
    pilot = parts_info.get("pilot")
    (out / "DATASHEET.md").write_text(datasheet(cfg, summary, parts_info, probe_layer(logs, probe)), encoding="utf-8")
    comp = components(cfg, parts_info)
    stand_ins = [f"{k}: {v['what']}" for k, v in comp.items() if v.get("stand_in")]
    extra = {"generator": "probeguard_core.pipeline.real_release",
             "pipeline_command": "make real-release-lowtemp" if pilot else "make real-release",
             "stand_ins": stand_ins, "components": comp, "config": cfg.__dict__ | {"prompt_version": parts_info["prompt_version"]},
             "choices": choices(cfg, pilot), "summary": {k: v for k, v in summary.items() if k != "stages"},
             "wall_time_s": {k: v["wall_s"] for k, v in summary["stages"].items()},
             "environment": {"python": platform.python_version(), "machine": platform.machine(),
                             **versions(), "cpu": cpu_fingerprint()}}
    if pilot:
        extra["pilot"] = pilot
    write_manifest(out, name=out.name, provenance="real", seed=cfg.seed,
                   cells=[{"dataset": DATASET, "backbone": BACKBONE, "path": f"{DATASET}/{backbone_slug(BACKBONE)}", "role": "main"}],
                   extra=extra)
    return out


def _parts_info(parts: dict[str, Any]) -> dict[str, Any]:
    idx = parts["index"]
    return {"mmlu_sha256": sha256_file(mmlu_path()), "gguf_sha256": sha256_file(gguf_path()),
            "hpo_sha256": sha256_file(hpo_path()), "n_docs": len(idx.docs), "index_sha256": idx.corpus_sha256,
            "prompt_version": parts["version"]}


STAGES = ("substrate", "probe", "nli", "self_report")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.pipeline.real_release", description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default=RELEASE, help="the release's name (default: the first real release)")
    ap.add_argument("--out", default=None, help="release folder (default data/<release>)")
    ap.add_argument("--work", default=None, help="work folder (append-only stage outputs; resumable; default outputs/<release>)")
    ap.add_argument("--cache", default=None, help="model cache folder (default: $PROBEGUARD_CACHE or ~/.cache/probeguard)")
    ap.add_argument("--questions", type=int, default=RealConfig.n_questions)
    ap.add_argument("--pilot", type=int, default=0, metavar="N",
                    help="hold N questions out as a temperature pilot (probeguard_core.pipeline.real_pilot) and run the "
                         "release at the temperature it chooses (0: no pilot, the paper's temperature)")
    ap.add_argument("--max-new-tokens", type=int, default=RealConfig.max_new_tokens)
    ap.add_argument("--query-max-new-tokens", type=int, default=RealConfig.query_max_new_tokens)
    ap.add_argument("--threads", type=int, default=RealConfig.num_threads)
    ap.add_argument("--workers", type=int, default=1,
                    help="substrate processes of one thread each (the records do not depend on it); the later stages "
                         "run in one process with this many threads")
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    ap.add_argument("--no-assemble", action="store_true", help="run the stages only")
    ap.add_argument("--assemble-only", action="store_true", help="only (re)build the release folder from the work folder")
    ap.add_argument("--replace", action="store_true", help="rebuild an existing release folder")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--substrate-minutes", type=float, default=None,
                    help="stop the substrate between chunks after this many minutes (resumable); the later stages "
                         "run on the questions finished")
    a = ap.parse_args(argv)
    cfg = RealConfig(n_questions=a.questions, max_new_tokens=a.max_new_tokens, query_max_new_tokens=a.query_max_new_tokens,
                     num_threads=a.threads, release=a.release, pilot_questions=a.pilot)
    work = Path(a.work or f"outputs/{a.release}")
    cache = Path(a.cache) if a.cache else None
    work.mkdir(parents=True, exist_ok=True)
    pilot = None
    if cfg.pilot_questions:
        from probeguard_core.pipeline.real_pilot import run_pilot, with_costs

        pilot = with_costs(work, run_pilot(work, cfg, cache, workers=max(1, a.workers)))
        if pilot["chosen_temperature"] is None:
            print(f"{work / 'pilot' / 'pilot.json'}: chosen_temperature: no pilot temperature reached first-round "
                  f"unanimity {pilot['target']}", file=sys.stderr)
            return 2
        cfg = replace(cfg, temperature=pilot["chosen_temperature"])
    cfg_path = work / "real_config.json"
    text = json.dumps(cfg.__dict__, indent=1, sort_keys=True) + "\n"
    if cfg_path.is_file() and cfg_path.read_text() != text:
        raise SystemExit(f"{work}: made with another configuration ({cfg_path}); use another --work folder")
    cfg_path.write_text(text)
    if a.assemble_only:
        from probeguard_core.pipeline.retrieval import BM25Index
        from probeguard_core.pipeline.templates import PROMPT_VERSION

        parts = {"index": BM25Index.load(work / "index"), "version": cfg.prompt_version or PROMPT_VERSION}
    else:
        parts = build_parts(work, cfg, cache)
        stop_at = None if a.substrate_minutes is None else time.time() + 60 * a.substrate_minutes
        run_stages(work, cfg, parts, a.stages, progress=not a.no_progress, stop_at=stop_at, workers=a.workers, cache=cache)
    if not a.no_assemble:
        out = assemble(work, Path(a.out or f"data/{a.release}"), cfg, _parts_info(parts) | {"pilot": pilot}, replace=a.replace)
        print(f"release written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
