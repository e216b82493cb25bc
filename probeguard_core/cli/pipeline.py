"""``probeguard substrate | probe | nli | self-report | index``: the GPU pipeline stages.

Every stage appends to a plain ``.jsonl`` output and resumes where a killed run stopped
(see :mod:`probeguard_core.pipeline.runio`).  Models are Hugging Face names (resolved in the
local cache; set ``HF_HUB_OFFLINE=1`` on machines without network) or local folders.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probeguard_core import SEED
from probeguard_core.pipeline.hyperparameters import hp
from probeguard_core.pipeline.profiles import DEFAULT_PROFILE, PROFILES
from probeguard_core.pipeline.templates import PROMPT_VERSION, PROMPT_VERSIONS

G = "consensus_generation"  # defaults: probeguard_core/data/hyperparameters.yaml (Table 9)


def _engine(args: argparse.Namespace):
    from probeguard_core.pipeline.engines import make_engine

    return make_engine(args.engine, args.model, **_engine_kwargs(args))


def _engine_kwargs(args: argparse.Namespace) -> dict:
    """The engine's keyword arguments from the stage's flags (one engine per process or Ray actor)."""
    from probeguard_core.pipeline.profiles import get_profile

    prof = get_profile(getattr(args, "profile", "probeguard"))
    top_k = prof.top_k if args.top_k is None else args.top_k  # unset: the substrate profile's sampling
    top_p = prof.top_p if args.top_p is None else args.top_p
    kw: dict = {"top_k": top_k, "top_p": top_p, "trust_remote_code": args.trust_remote_code}
    if args.engine == "vllm":
        kw.update(tensor_parallel_size=args.tensor_parallel_size, gpu_memory_utilization=args.gpu_memory_utilization,
                  per_request_seeds=not args.engine_seed)
        if args.max_model_len:
            kw["max_model_len"] = args.max_model_len
    else:
        kw["device"] = args.device
        if getattr(args, "batch_prompts", None) is not None:
            kw["batch_prompts"] = args.batch_prompts
        if getattr(args, "compile_decode", False):
            kw["compile_decode"] = True
    return kw


def _retriever(args: argparse.Namespace):
    from probeguard_core.pipeline.retrieval import BM25Index, CrossEncoderReranker, Retriever

    index = BM25Index.load(args.index)
    reranker = None if args.reranker == "none" else CrossEncoderReranker(
        args.reranker, device=args.device, trust_remote_code=args.trust_remote_code)
    return Retriever(index, reranker)


def _select(items: list, limit: int | None) -> list:
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    return items if limit is None else items[:limit]


def _substrate(args: argparse.Namespace) -> int:
    from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
    from probeguard_core.questions import load_questions

    questions = _select(load_questions(args.questions, dataset=args.dataset_key or args.dataset), args.limit)
    cfg = SubstrateConfig(dataset=args.dataset, backbone=args.backbone or args.model, n_candidates=args.n,
                          max_rounds=args.rounds, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                          query_max_new_tokens=args.query_max_new_tokens, seed=args.seed,
                          prompt_version=args.prompt_version, profile=args.profile)
    batch = args.batch_size or (64 if args.engine == "vllm" else (args.batch_prompts or 1))
    if args.ray_address is not None:
        return _substrate_ray(args, questions, cfg, batch)
    retriever = _retriever(args) if args.rounds > 1 else None
    out = run_substrate(questions, _engine(args), retriever, args.out, cfg, batch_size=batch,
                        reproducible=args.reproducible, progress=not args.no_progress)
    print(f"substrate: wrote {out}")
    return 0


def _substrate_ray(args: argparse.Namespace, questions: list, cfg, batch: int) -> int:
    """``--ray-address``: the same run as a Ray Data job (pipeline/ray_scale.py), one engine per actor."""
    from probeguard_core.pipeline.ray_scale import run_substrate_ray

    if args.replicas < 1:
        raise ValueError(f"--replicas must be >= 1, got {args.replicas}")
    try:
        import ray
    except ImportError as exc:
        raise ValueError("--ray-address needs Ray Data: pip install 'ray[data]' (in the 'test' extra)") from exc
    if not ray.is_initialized():  # a caller (a test, a notebook) may have connected already
        ray.init(address=args.ray_address)
    out = run_substrate_ray(questions, out=args.out, model=args.model, index=args.index if args.rounds > 1 else None,
                            config=cfg, reranker=None if args.reranker == "none" else args.reranker,
                            engine=args.engine, engine_kwargs=_engine_kwargs(args), replicas=args.replicas,
                            num_cpus_per_worker=args.num_cpus_per_worker,
                            num_gpus_per_worker=args.num_gpus_per_worker,
                            tensor_parallel_size=args.tensor_parallel_size, shards=args.shards, batch_size=batch,
                            reproducible=args.reproducible)
    print(f"substrate: wrote {out} (Ray Data, {args.replicas} workers)")
    return 0


def _probe(args: argparse.Namespace) -> int:
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe

    logs = _select(read_logs(args.logs), args.limit)
    cfg = ProbeConfig(n_candidates=args.n, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                      query_max_new_tokens=args.query_max_new_tokens, seed=args.seed, arms=tuple(args.arms),
                      prompt_version=args.prompt_version, profile=args.profile)
    batch = args.batch_size or 64
    out = run_probe(logs, _engine(args), _retriever(args), args.out, cfg, batch_size=batch,
                    reproducible=args.reproducible, progress=not args.no_progress)
    print(f"probe: wrote {out}")
    return 0


def _nli(args: argparse.Namespace) -> int:
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.nli_run import NLIScorer, run_nli

    logs = _select(read_logs(args.logs), args.limit)
    scorer = NLIScorer(args.nli_model, device=args.device, batch_size=args.batch_size,
                       trust_remote_code=args.trust_remote_code)
    out = run_nli(logs, scorer, args.out, rounds=args.nli_rounds, progress=not args.no_progress)
    print(f"nli: wrote {out}")
    return 0


def _self_report(args: argparse.Namespace) -> int:
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.self_report import run_self_report

    logs = _select(read_logs(args.logs), args.limit)
    out = run_self_report(logs, _engine(args), args.out, max_new_tokens=args.max_new_tokens, seed=args.seed,
                          prompt_version=args.prompt_version, progress=not args.no_progress,
                          batch_size=args.batch_size or 64)
    print(f"self-report: wrote {out}")
    return 0


def _index_build(args: argparse.Namespace) -> int:
    from probeguard_core.pipeline.retrieval import build_index

    index = build_index(args.corpus, args.out)
    print(f"index: {len(index.docs)} documents -> {Path(args.out)}")
    return 0


def _common(p: argparse.ArgumentParser, *, llm: bool) -> None:
    p.add_argument("--out", required=True, help="output .jsonl (appended; a killed run resumes)")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--device", default=None, help="torch device for transformers models (default: cuda if available)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub (off by default)")
    p.add_argument("--no-progress", action="store_true")
    if llm:
        p.add_argument("--model", required=True, help="LLM name in the local HF cache, or a folder")
        p.add_argument("--engine", choices=["vllm", "transformers"], default="vllm")
        p.add_argument("--batch-prompts", type=int, default=None,
                       help="transformers: decode prompts in fixed chunks of this many, one batch (pipeline/batched.py; "
                            "records reproducible for the same chunking, recorded in <out>.run.json); "
                            "unset: batch-invariant decoding")
        p.add_argument("--compile-decode", action="store_true",
                       help="transformers, with --batch-prompts: decode over a static KV cache with a torch.compile'd "
                            "step (falls back, saying so, where the model or torch build cannot; docs/pipeline.md)")
        p.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM: GPUs per model")
        p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vLLM")
        p.add_argument("--max-model-len", type=int, default=None, help="vLLM context limit")
        p.add_argument("--top-k", type=int, default=None,
                       help="0 = off; default: the substrate profile's (probeguard: off; ma-rag: 20)")
        p.add_argument("--top-p", type=float, default=None,
                       help="default: the substrate profile's (probeguard: 1.0; ma-rag: 0.95)")
        p.add_argument("--engine-seed", action="store_true",
                       help="vLLM: no per-request seeds (its fast sampler; results then depend on batching)")
        p.add_argument("--seed", type=int, default=SEED)
        p.add_argument("--prompt-version", choices=list(PROMPT_VERSIONS), default=PROMPT_VERSION,
                       help="prompt templates (v2: the paper's Appendix A; v1: the first paraphrases)")
        p.add_argument("--reproducible", action="store_true",
                       help="inline cost = null, cost in <out>.cost.jsonl: outputs byte-identical across runs")


def _retrieval_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--index", required=required, help="folder from `probeguard index build`")
    p.add_argument("--reranker", default=hp("retrieval", "reranker"), help="cross-encoder name or folder, or 'none'")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("substrate", help="run the multi-round consensus substrate -> logs.jsonl (DESIGN 2.1)")
    p.add_argument("--questions", required=True, help="MIRAGE benchmark.json or an MA-RAG dataset file")
    p.add_argument("--dataset", required=True, help="dataset name written into the logs, e.g. medqa")
    p.add_argument("--dataset-key", default=None, help="dataset key inside the questions file if it differs from --dataset (MIRAGE benchmark.json)")
    p.add_argument("--backbone", default=None, help="backbone name for the logs (default: --model)")
    p.add_argument("--n", type=int, default=hp(G, "n_candidates"), help="candidates per round (N)")
    p.add_argument("--rounds", type=int, default=hp(G, "max_rounds"), help="maximum rounds (T)")
    p.add_argument("--temperature", type=float, default=hp(G, "temperature"))
    p.add_argument("--max-new-tokens", type=int, default=hp(G, "max_new_tokens"))
    p.add_argument("--query-max-new-tokens", type=int, default=hp(G, "query_max_new_tokens"),
                   help="query generation (thinking on)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="questions run in lock-step and written together (default: 64 with vLLM, 1 with transformers)")
    p.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE,
                   help="substrate profile: probeguard (strict parsing, nulls never unanimous) or ma-rag "
                        "(MA-RAG's own rules; docs/pipeline.md)")
    _common(p, llm=True)
    _retrieval_args(p, required=False)
    r = p.add_argument_group("Ray Data scale-out (pipeline/ray_scale.py; docs/pipeline.md)")
    r.add_argument("--ray-address", default=None,
                   help="run as a Ray Data job on this cluster ('auto': the one `ray start` made here; "
                        "'local': a new local one); unset: one process")
    r.add_argument("--replicas", type=int, default=1, help="Ray: workers, each holding one engine")
    r.add_argument("--num-cpus-per-worker", type=float, default=1, help="Ray: CPUs each worker reserves")
    r.add_argument("--num-gpus-per-worker", type=float, default=None,
                   help="Ray: GPUs each worker reserves (default: 1 with vLLM, 0 with transformers)")
    r.add_argument("--shards", type=int, default=None, help="Ray: question shards (default: 4 per worker)")
    p.set_defaults(handler=_usage_errors(_substrate_checked))

    p = sub.add_parser("probe", help="counter-evidence probe and control arms -> probe.jsonl (DESIGN 2.2)")
    p.add_argument("--logs", required=True)
    p.add_argument("--arms", nargs="+", default=["counter_evidence", "instruction_only", "irrelevant_docs",
                                                 "neutral_instruction"])
    p.add_argument("--n", type=int, default=None, help="re-answers per arm (default and required: the logs' N)")
    p.add_argument("--temperature", type=float, default=hp(G, "temperature"))
    p.add_argument("--max-new-tokens", type=int, default=hp(G, "max_new_tokens"))
    p.add_argument("--query-max-new-tokens", type=int, default=hp(G, "query_max_new_tokens"))
    p.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE,
                   help="substrate profile of the reused machinery (answer parser, documents, reranker input)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="questions per engine call (default 64; the records do not depend on it, except with "
                        "--batch-prompts: then it is recorded in <out>.run.json)")
    _common(p, llm=True)
    _retrieval_args(p, required=True)
    p.set_defaults(handler=_usage_errors(_probe))

    p = sub.add_parser("nli", help="entailment among concluding claims -> nli.jsonl (DESIGN 2.4)")
    p.add_argument("--logs", required=True)
    p.add_argument("--nli-model", default=hp("rationale_scoring", "nli_model"))
    p.add_argument("--nli-rounds", choices=["first-last", "all"], default="first-last")
    p.add_argument("--batch-size", type=int, default=32)
    _common(p, llm=False)
    p.set_defaults(handler=_usage_errors(_nli))

    p = sub.add_parser("self-report", help="verbalized confidence and P(True) -> self_report.jsonl (DESIGN 2.3)")
    p.add_argument("--logs", required=True)
    p.add_argument("--max-new-tokens", type=int, default=hp("self_report", "max_new_tokens"))
    p.add_argument("--batch-size", type=int, default=None,
                   help="questions per engine call (default 64; the records do not depend on it, except with "
                        "--batch-prompts: then it is recorded in <out>.run.json)")
    _common(p, llm=True)
    p.set_defaults(handler=_usage_errors(_self_report))

    p = sub.add_parser("index", help="BM25 index of a MedCorp-shaped corpus")
    isub = p.add_subparsers(dest="index_command", required=True, metavar="ACTION")
    b = isub.add_parser("build", help="build and save an index")
    b.add_argument("--corpus", required=True, help="JSONL snippets {id, title, content}")
    b.add_argument("--out", required=True, help="index folder")
    b.set_defaults(handler=_usage_errors(_index_build))


def _substrate_checked(args: argparse.Namespace) -> int:
    if args.rounds > 1 and not args.index:
        raise ValueError("--index is required when --rounds > 1 (retrieval happens between rounds)")
    return _substrate(args)


def _usage_errors(handler):
    """Bad parameter values (ValueError) become one-line UsageErrors in the dispatcher."""
    def run(args: argparse.Namespace) -> int:
        from probeguard_core.cli import UsageError
        from probeguard_core.logs import LogFormatError

        try:
            return handler(args)
        except LogFormatError:
            raise
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    return run
