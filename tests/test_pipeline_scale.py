"""vLLM engine (skips cleanly without CUDA or vllm) and the Ray Data scale-out path
(its sharding and merge run on CPU without Ray; the Ray Data job runs on a local CPU cluster)."""

from __future__ import annotations

import json

import pytest

import tiny_models as tm
from probeguard_core.logs import read_logs
from probeguard_core.pipeline.ray_scale import SubstrateShardWorker, merge_parts, part_path, shard_questions
from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate


def test_shard_questions_covers_in_order():
    qs = list(range(11))
    parts = shard_questions(qs, 4)
    assert [len(p) for p in parts] == [3, 3, 3, 2] and sum(parts, []) == qs
    assert shard_questions(qs[:2], 5) == [[0], [1]]
    with pytest.raises(ValueError):
        shard_questions(qs, 0)


@pytest.mark.slow
def test_sharded_workers_merge_to_the_single_run(tmp_path, monkeypatch):
    """Ray's unit of work (one shard per actor call), run here without Ray: merged == single run."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from probeguard_core.cli import main
    from probeguard_core.questions import load_questions

    tm.build_tiny_qwen3(tmp_path / "qwen")
    tm.build_tiny_cross_encoder(tmp_path / "ce")
    tm.write_corpus(tmp_path / "corpus.jsonl")
    questions = load_questions(tm.write_questions(tmp_path / "b.json", 5), dataset="medqa")
    assert main(["index", "build", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "index")]) == 0
    cfg = SubstrateConfig(dataset="medqa", backbone="tiny", n_candidates=2, max_rounds=2, max_new_tokens=8,
                          query_max_new_tokens=8)
    out = tmp_path / "ray" / "logs.jsonl"
    worker = SubstrateShardWorker(questions, str(out), cfg.__dict__, "transformers", str(tmp_path / "qwen"),
                                  str(tmp_path / "index"), str(tmp_path / "ce"), reproducible=True)
    parts = shard_questions(questions, 3)
    rows = {"shard": [], "start": [], "stop": []}
    start = 0
    for i, p in enumerate(parts):
        rows["shard"].append(i), rows["start"].append(start), rows["stop"].append(start + len(p))
        start += len(p)
    with pytest.raises(ValueError, match="no record yet"):
        merge_parts(out, [q.qid for q in questions], len(parts))
    assert worker({k: v[::-1] for k, v in rows.items()}) == {"shard": [2, 1, 0]}  # any shard order
    assert part_path(out, 0).exists()
    merge_parts(out, [q.qid for q in questions], len(parts))
    single = tmp_path / "single" / "logs.jsonl"
    run_substrate(questions, worker.engine, worker.retriever, single, cfg, reproducible=True, progress=False)
    assert out.read_bytes() == single.read_bytes()
    assert len(read_logs(out)) == 5


@pytest.mark.slow
@pytest.mark.xdist_group("ray-local-cluster")
def test_ray_job_on_local_cluster_matches_single_run(tmp_path, monkeypatch):
    """The Ray Data job itself (run_substrate_ray) on a local 2-CPU cluster, transformers engine on
    CPU, two actors over three shards: the merged records and run settings equal a single-process
    run's byte for byte (seeds derive from (seed, qid); the tiny models are deterministic on CPU)."""
    ray = pytest.importorskip("ray", reason="Ray Data is in the 'test' extra")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # before ray.init: the workers inherit it
    from probeguard_core.cli import main

    tm.build_tiny_qwen3(tmp_path / "qwen")
    tm.build_tiny_cross_encoder(tmp_path / "ce")
    tm.write_corpus(tmp_path / "corpus.jsonl")
    qfile = tm.write_questions(tmp_path / "b.json", 4)
    assert main(["index", "build", "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "index")]) == 0
    run = ["substrate", "--questions", str(qfile), "--dataset", "medqa", "--n", "2", "--rounds", "2",
           "--max-new-tokens", "8", "--query-max-new-tokens", "8", "--index", str(tmp_path / "index"),
           "--reranker", str(tmp_path / "ce"), "--engine", "transformers", "--device", "cpu",
           "--model", str(tmp_path / "qwen"), "--batch-size", "2", "--reproducible", "--no-progress"]
    out = tmp_path / "ray" / "logs.jsonl"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        # the CLI uses the connection made here; on a cluster it connects to --ray-address itself
        assert main([*run, "--out", str(out), "--ray-address", "auto", "--replicas", "2",
                     "--num-cpus-per-worker", "1", "--shards", "3"]) == 0
        assert ray.cluster_resources().get("CPU") == 2
    finally:
        ray.shutdown()
    assert [part_path(out, i).exists() for i in range(4)] == [True, True, True, False]  # three shards, three parts

    # The actors run with one torch thread each (Ray sets OMP_NUM_THREADS from num_cpus = 1); the
    # reference run must too: on CPU the thread count changes the reduction order, hence a
    # log-prob's or an entropy's last bits (seen: 1e-10 relative with torch's default of 2).
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = tmp_path / "single" / "logs.jsonl"
        assert main([*run, "--out", str(single)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert out.read_bytes() == single.read_bytes()
    assert (out.parent / "logs.run.json").read_bytes() == (single.parent / "logs.run.json").read_bytes()
    qids = [json.loads(line)["qid"] for line in single.read_text().splitlines()]
    assert len(qids) == 4 and [r.qid for r in read_logs(out)] == qids
    cost = (out.parent / "logs.cost.jsonl").read_text().splitlines()
    assert [json.loads(line)["qid"] for line in cost] == qids


def test_ray_job_argument_errors(tmp_path, capsys):
    from probeguard_core.cli import main

    qfile = tm.write_questions(tmp_path / "b.json", 2)
    assert main(["substrate", "--questions", str(qfile), "--dataset", "medqa", "--rounds", "1", "--model", "m",
                 "--out", str(tmp_path / "x.jsonl"), "--ray-address", "auto", "--replicas", "0"]) == 2
    assert "--replicas must be >= 1" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    cfg = SubstrateConfig(dataset="d", backbone="b")
    from probeguard_core.pipeline.ray_scale import run_substrate_ray

    with pytest.raises(ValueError, match="unknown engine"):
        run_substrate_ray([], out="x.jsonl", model="m", index="i", config=cfg, engine="llama")
    with pytest.raises(ValueError, match="tensor_parallel_size > 1 needs the vLLM engine"):
        run_substrate_ray([], out="x.jsonl", model="m", index="i", config=cfg, engine="transformers",
                          tensor_parallel_size=2)
    with pytest.raises(ValueError, match="must be >= 0"):
        run_substrate_ray([], out="x.jsonl", model="m", index="i", config=cfg, num_gpus_per_worker=-1)


@pytest.mark.gpu
def test_vllm_engine_on_tiny_qwen3(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the vLLM engine needs a GPU")
    pytest.importorskip("vllm")
    from probeguard_core.pipeline.engines import VLLMEngine

    folder = tm.build_tiny_qwen3(tmp_path / "qwen", hidden_size=128, head_dim=32)
    eng = VLLMEngine(str(folder), gpu_memory_utilization=0.3, max_model_len=1024, dtype="float32",
                     engine_kwargs={"enforce_eager": True})
    msgs = [[{"role": "user", "content": f"patient {i} fever?"}] for i in range(3)]
    a = eng.generate(msgs, n=4, temperature=0.7, max_new_tokens=12, seed=[1, 2, 3], logprobs=20)
    b = eng.generate(msgs, n=4, temperature=0.7, max_new_tokens=12, seed=[1, 2, 3], logprobs=20)
    assert [len(g) for g in a] == [4, 4, 4] and a == b  # per-request seeds: reproducible
    for g in a[0]:
        assert 1 <= g.n_tokens <= 12 and len(g.first_top_logprobs) == 20
    (greedy,) = eng.generate(msgs[:1], n=1, temperature=0.0, max_new_tokens=12, seed=0, logprobs=None,
                             enable_thinking=True)
    assert greedy[0].token_logprobs is None
