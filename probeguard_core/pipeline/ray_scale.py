"""Scale-out over many GPUs or nodes with Ray Data + vLLM (no home-made worker pool).

The substrate is a per-question loop (rounds depend on earlier rounds), so the unit of
parallelism is a *shard of questions*: Ray Data maps shards onto a pool of actors
(``map_batches`` with a callable class, ``compute=ActorPoolStrategy(size=replicas)``, one GPU
per actor or a placement group of ``tensor_parallel_size`` GPUs); each actor holds one
:class:`~probeguard_core.pipeline.engines.VLLMEngine` (which batches the questions of its shard)
and runs :func:`~probeguard_core.pipeline.substrate.run_substrate` into its own resumable part
file.  :func:`merge_parts` then writes the parts in the input question order.

Because every question's seeds derive from ``(seed, qid)``, the sharding does not change any
question's seeds: with a deterministic engine the merged file equals a single-process run
(vLLM is one only with ``VLLM_BATCH_INVARIANT=1``; see :class:`VLLMEngine`).
Re-submitting the same job resumes every shard where it stopped.

Ray's own ``ray.data.llm`` (``vLLMEngineProcessorConfig`` + ``build_processor``, called
``build_llm_processor`` before Ray 2.5x) is a single map of prompts through an engine; the
substrate's later rounds depend on earlier rounds' answers and on retrieval, so a shard runs
the whole per-question loop inside one actor instead.

Usage (on a Ray cluster with the ``gpu`` extra installed)::

    from probeguard_core.pipeline.ray_scale import run_substrate_ray
    run_substrate_ray(questions, out="logs.jsonl", model="Qwen/Qwen3-8B", index="index/",
                      config=SubstrateConfig(dataset="medqa", backbone="Qwen/Qwen3-8B"),
                      replicas=8, tensor_parallel_size=1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probeguard_core.logs import read_logs, write_jsonl

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
    """Write all shards' records to ``out`` in the order of ``qids``; every qid must be present."""
    recs = {}
    for i in range(n_shards):
        p = part_path(out, i)
        if p.exists():
            for rec in read_logs(p):
                recs[rec.qid] = rec
    missing = [q for q in qids if q not in recs]
    if missing:
        raise ValueError(f"{out}: {len(missing)} questions have no record yet (e.g. {missing[:3]}); re-run to resume")
    return write_jsonl(out, [recs[q] for q in qids])


class SubstrateShardWorker:
    """Ray Data callable class: one engine + retriever per actor, one shard per row."""

    def __init__(self, questions: Sequence[Any], out: str, config: dict, engine_kind: str, model: str,
                 index: str, reranker: str | None, engine_kwargs: dict | None = None, batch_size: int = 64,
                 reproducible: bool = False):
        from .engines import make_engine
        from .retrieval import BM25Index, CrossEncoderReranker, Retriever

        self.questions = list(questions)
        self.out = out
        self.config = SubstrateConfig(**config)
        self.engine = make_engine(engine_kind, model, **(engine_kwargs or {}))
        self.retriever = Retriever(BM25Index.load(index), CrossEncoderReranker(reranker) if reranker else None)
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


def run_substrate_ray(questions: Sequence[Any], *, out: str | Path, model: str, index: str | Path,
                      config: SubstrateConfig, reranker: str | None = "ncbi/MedCPT-Cross-Encoder",
                      replicas: int = 1, tensor_parallel_size: int = 1, shards: int | None = None,
                      batch_size: int = 64, reproducible: bool = False) -> Path:
    """Run the substrate on a Ray cluster: ``replicas`` vLLM actors, each on ``tensor_parallel_size`` GPUs."""
    if replicas < 1 or tensor_parallel_size < 1:
        raise ValueError(f"replicas and tensor_parallel_size must be >= 1, got {replicas} and {tensor_parallel_size}")
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ValueError("Ray scale-out needs the 'gpu' extra: pip install 'probeguard_core[gpu]'") from exc
    n_shards = shards or replicas * 4
    parts = shard_questions(questions, n_shards)
    rows, start = [], 0
    for i, p in enumerate(parts):
        rows.append({"shard": i, "start": start, "stop": start + len(p)})
        start += len(p)
    # one GPU per actor, or (tensor parallelism) a STRICT_PACK placement group per actor, made
    # by `ray_remote_args_fn` (Ray PR #45143, written for vLLM with TP > 1; vLLM's former
    # offline_inference/distributed.py example) and captured by vLLM's Ray workers
    engine_kwargs: dict[str, Any] = {"tensor_parallel_size": tensor_parallel_size}
    resources: dict[str, Any] = {"num_gpus": 1}
    if tensor_parallel_size > 1:
        # vLLM picks Ray inside a placement group anyway; say so rather than rely on it
        engine_kwargs["engine_kwargs"] = {"distributed_executor_backend": "ray"}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        def _strategy() -> dict[str, Any]:
            pg = ray.util.placement_group([{"GPU": 1, "CPU": 1}] * tensor_parallel_size, strategy="STRICT_PACK")
            return {"scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)}

        resources = {"num_gpus": 0, "ray_remote_args_fn": _strategy}
    ds = ray.data.from_items(rows)
    ds = ds.map_batches(
        SubstrateShardWorker,
        fn_constructor_kwargs=dict(questions=list(questions), out=str(out), config=asdict(config), engine_kind="vllm",
                                   model=model, index=str(index), reranker=reranker,
                                   engine_kwargs=engine_kwargs,
                                   batch_size=batch_size, reproducible=reproducible),
        batch_size=1,
        # a fixed pool of `replicas` actors (`concurrency=` is deprecated since Ray 2.51)
        compute=ray.data.ActorPoolStrategy(size=replicas),
        **resources,
    )
    ds.materialize()
    return merge_parts(out, [str(q.qid) for q in questions], len(parts))
