"""Scale-out over many GPUs or nodes with Ray Data (no home-made worker pool).

The substrate (paper §3) is a per-question loop (rounds depend on earlier rounds), so the unit
of parallelism is a *shard of questions*: Ray Data maps shards onto a pool of actors
(``map_batches`` with a callable class, ``compute=ActorPoolStrategy(size=replicas)``); each
actor holds one engine of the given kind -- :class:`~probeguard_core.pipeline.engines.VLLMEngine`
on GPU nodes (one GPU per actor by default, or a placement group of ``tensor_parallel_size``
GPUs), :class:`~probeguard_core.pipeline.engines.TransformersEngine` on CPUs (the tests' local
cluster) -- reserves ``num_cpus_per_worker`` / ``num_gpus_per_worker``, and runs
:func:`~probeguard_core.pipeline.substrate.run_substrate` into its own resumable part file.
:func:`merge_parts` then writes the parts in the input question order, with the run's
settings and cost sidecars, as a single-process run lays them out.

Because every question's seeds derive from ``(seed, qid)``, the sharding does not change any
question's seeds: with a deterministic engine the merged file equals a single-process run
(tests/test_pipeline_scale.py checks it byte for byte on a local 2-CPU cluster; vLLM is
deterministic only with ``VLLM_BATCH_INVARIANT=1``; see :class:`VLLMEngine`).
Re-submitting the same job resumes every shard where it stopped.

Ray's own ``ray.data.llm`` (``vLLMEngineProcessorConfig`` + ``build_processor``, called
``build_llm_processor`` before Ray 2.5x) is a single map of prompts through an engine; the
substrate's later rounds depend on earlier rounds' answers and on retrieval, so a shard runs
the whole per-question loop inside one actor instead.

Usage (``ray[data]`` is in the ``test`` extra; vLLM in the ``gpu`` extra)::

    import ray
    from probeguard_core.pipeline.ray_scale import run_substrate_ray
    ray.init(address="auto")          # a cluster started with `ray start`; ray.init() = local
    run_substrate_ray(questions, out="logs.jsonl", model="Qwen/Qwen3-8B", index="index/",
                      config=SubstrateConfig(dataset="medqa", backbone="Qwen/Qwen3-8B"),
                      engine="vllm", replicas=8, num_gpus_per_worker=1, tensor_parallel_size=1)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probeguard_core.fileio import write_files_atomically
from probeguard_core.logs import jsonl_bytes, read_logs

from .runio import check_run_config, sidecar
from .substrate import SubstrateConfig, run_substrate

__all__ = ["shard_questions", "part_path", "merge_parts", "SubstrateShardWorker", "run_substrate_ray"]


def shard_questions(questions: Sequence[Any], n_shards: int) -> list[list[Any]]:
    """Contiguous, nearly equal shards in input order (empty shards dropped)."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    k, r = divmod(len(questions), n_shards)
    out, start = [], 0
    for i in range(n_shards):
        end = start + k + (1 if i < r else 0)
        if end > start:
            out.append(list(questions[start:end]))
        start = end
    return out


def part_path(out: str | Path, shard: int) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".parts") / f"shard-{shard:05d}.jsonl"


def merge_parts(out: str | Path, qids: Sequence[str], n_shards: int) -> Path:
    """Write all shards' records to ``out`` in the order of ``qids``; every qid must be present.

    The output is laid out like a single-process :func:`run_substrate` run's: the records, the
    run's settings ``<out>.run.json`` (every shard's must be the same; the shards ran one
    configuration) and, when the shards ran with ``reproducible=True``, the cost sidecar
    ``<out>.cost.jsonl`` (lines in question order)."""
    recs, settings, costs = {}, {}, {}
    for i in range(n_shards):
        p = part_path(out, i)
        if p.exists():
            for rec in read_logs(p):
                recs[rec.qid] = rec
            run_json = sidecar(p, ".run.json")
            if run_json.exists():
                settings[i] = json.loads(run_json.read_text(encoding="utf-8"))
            cost = sidecar(p, ".cost.jsonl")
            if cost.exists():
                for line in cost.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        costs[str(json.loads(line)["qid"])] = line
    missing = [q for q in qids if q not in recs]
    if missing:
        raise ValueError(f"{out}: {len(missing)} questions have no record yet (e.g. {missing[:3]}); re-run to resume")
    configs = {json.dumps(c, sort_keys=True) for c in settings.values()}
    if len(configs) > 1:
        raise ValueError(f"{part_path(out, 0).parent}: the shards ran with different settings; "
                         "delete the parts and re-run with one configuration")
    if configs:
        check_run_config(out, json.loads(configs.pop()))
    out = Path(out)
    files = {out: jsonl_bytes(out, [recs[q] for q in qids])}
    if costs:
        files[sidecar(out, ".cost.jsonl")] = "".join(costs[q] + "\n" for q in qids if q in costs).encode("utf-8")
    write_files_atomically(files)  # the records and their cost sidecar as one set (issue 25)
    return out


class SubstrateShardWorker:
    """Ray Data callable class: one engine + retriever per actor, one shard per row."""

    def __init__(self, questions: Sequence[Any], out: str, config: dict, engine_kind: str, model: str,
                 index: str | None, reranker: str | None, engine_kwargs: dict | None = None, batch_size: int = 64,
                 reproducible: bool = False):
        from .engines import make_engine
        from .retrieval import BM25Index, CrossEncoderReranker, Retriever

        self.questions = list(questions)
        self.out = out
        self.config = SubstrateConfig(**config)
        self.engine = make_engine(engine_kind, model, **(engine_kwargs or {}))
        # no index: one-round runs only (run_substrate refuses max_rounds > 1 without a retriever)
        self.retriever = (Retriever(BM25Index.load(index), CrossEncoderReranker(reranker) if reranker else None)
                          if index is not None else None)
        self.batch_size = batch_size
        self.reproducible = reproducible

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        done = []
        for shard, start, stop in zip(batch["shard"], batch["start"], batch["stop"]):
            qs = self.questions[int(start):int(stop)]
            run_substrate(qs, self.engine, self.retriever, part_path(self.out, int(shard)), self.config,
                          batch_size=self.batch_size, reproducible=self.reproducible, progress=False)
            done.append(int(shard))
        return {"shard": done}


def run_substrate_ray(questions: Sequence[Any], *, out: str | Path, model: str, index: str | Path | None,
                      config: SubstrateConfig, reranker: str | None = "ncbi/MedCPT-Cross-Encoder",
                      engine: str = "vllm", engine_kwargs: dict[str, Any] | None = None, replicas: int = 1,
                      num_cpus_per_worker: float = 1, num_gpus_per_worker: float | None = None,
                      tensor_parallel_size: int = 1, shards: int | None = None, batch_size: int = 64,
                      reproducible: bool = False) -> Path:
    """Run the substrate (paper §3) on the connected Ray cluster; returns the merged ``out``.

    ``engine`` is :func:`~probeguard_core.pipeline.engines.make_engine`'s kind: ``"vllm"`` on GPU
    nodes (production), ``"transformers"`` on CPUs (the tests' local cluster); ``engine_kwargs``
    go to that engine (e.g. ``{"device": "cpu", "batch_prompts": 4}``).  ``replicas`` actors each
    hold one engine and reserve ``num_cpus_per_worker`` CPUs and ``num_gpus_per_worker`` GPUs
    (default: 1 for vLLM, 0 for transformers); vLLM with ``tensor_parallel_size > 1`` reserves a
    ``STRICT_PACK`` placement group of that many GPUs per actor instead.  Connect first
    (``ray.init()`` locally, ``ray.init(address=...)`` on a cluster); without a connection Ray
    starts a local one.
    """
    if replicas < 1 or tensor_parallel_size < 1:
        raise ValueError(f"replicas and tensor_parallel_size must be >= 1, got {replicas} and {tensor_parallel_size}")
    if engine not in ("vllm", "transformers"):
        raise ValueError(f"unknown engine {engine!r}; expected 'transformers' or 'vllm'")
    if tensor_parallel_size > 1 and engine != "vllm":
        raise ValueError("tensor_parallel_size > 1 needs the vLLM engine")
    if num_gpus_per_worker is None:
        num_gpus_per_worker = 1 if engine == "vllm" else 0
    if num_cpus_per_worker < 0 or num_gpus_per_worker < 0:
        raise ValueError(f"num_cpus_per_worker and num_gpus_per_worker must be >= 0, got "
                         f"{num_cpus_per_worker} and {num_gpus_per_worker}")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ValueError("Ray scale-out needs Ray Data: pip install 'ray[data]' (in the 'test' extra)") from exc
    n_shards = shards or replicas * 4
    parts = shard_questions(questions, n_shards)
    rows, start = [], 0
    for i, p in enumerate(parts):
        rows.append({"shard": i, "start": start, "stop": start + len(p)})
        start += len(p)
    kwargs: dict[str, Any] = dict(engine_kwargs or {})
    resources: dict[str, Any] = {"num_cpus": num_cpus_per_worker, "num_gpus": num_gpus_per_worker}
    if engine == "vllm":
        kwargs.setdefault("tensor_parallel_size", tensor_parallel_size)
    if tensor_parallel_size > 1:
        # a STRICT_PACK placement group per actor, made by `ray_remote_args_fn` (Ray PR #45143,
        # written for vLLM with TP > 1; vLLM's former offline_inference/distributed.py example)
        # and captured by vLLM's Ray workers; vLLM picks Ray inside a placement group anyway:
        # say so rather than rely on it
        kwargs["engine_kwargs"] = {"distributed_executor_backend": "ray", **kwargs.get("engine_kwargs", {})}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cpus = num_cpus_per_worker

        def _strategy() -> dict[str, Any]:
            pg = ray.util.placement_group([{"GPU": 1, "CPU": cpus}] * tensor_parallel_size, strategy="STRICT_PACK")
            return {"scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)}

        resources = {"num_gpus": 0, "ray_remote_args_fn": _strategy}
    ds = ray.data.from_items(rows)
    ds = ds.map_batches(
        SubstrateShardWorker,
        fn_constructor_kwargs=dict(questions=list(questions), out=str(out), config=asdict(config), engine_kind=engine,
                                   model=model, index=None if index is None else str(index), reranker=reranker,
                                   engine_kwargs=kwargs, batch_size=batch_size, reproducible=reproducible),
        batch_size=1,
        # a fixed pool of `replicas` actors (`concurrency=` is deprecated since Ray 2.51)
        compute=ray.data.ActorPoolStrategy(size=replicas),
        **resources,
    )
    ds.materialize()
    return merge_parts(out, [str(q.qid) for q in questions], len(parts))
