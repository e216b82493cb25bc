"""Throughput of ``feature_table`` (vectorized) against a plain per-question Python loop.

Builds a synthetic execution log (DESIGN 2.1 shape: N = 8 candidates, up to T = 8 rounds,
stop at unanimity, retrieval of <= 8 documents after every non-final round, some null
answers), then times

* ``feature_table(logs)``            -- base quantities once, vectorized aggregations;
* ``feature_table_reference(logs)``  -- the per-log functions called question by question;

checks that both tables agree, and prints questions/second and the speed ratio.

    .venv/bin/python benchmarks/feature_table_throughput.py            # 100,000 questions
    .venv/bin/python benchmarks/feature_table_throughput.py --n 5000

Timings depend on the machine; nothing here asserts on wall time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from tqdm import tqdm

from probeguard_core import SEED
from probeguard_core.feature_reference import feature_table_reference
from probeguard_core.features import feature_table
from probeguard_core.logs import Candidate, QuestionLog, Retrieval, Round

OPTIONS = {k: f"option {k}" for k in "ABCDE"}


def synthetic_logs(n: int, seed: int = SEED, n_candidates: int = 8, max_rounds: int = 8) -> list[QuestionLog]:
    """Deterministic synthetic logs; records are built with ``model_construct`` (no validation
    cost) and a sample is validated to make sure they are well-formed."""
    rng = np.random.default_rng(seed)
    keys = np.array(list(OPTIONS))
    logs: list[QuestionLog] = []
    pool = {
        (a, v): Candidate.model_construct(
            answer=a, rationale="Therefore the answer is it.", logprob=-10.0 - 5.0 * v,
            n_tokens=200, mean_token_entropy=0.4,
        )
        for a in [*keys.tolist(), None]
        for v in range(8)
    }
    for i in tqdm(range(n), desc="synthesizing logs", unit="q", mininterval=2.0):
        gold = str(keys[rng.integers(len(keys))])
        p = rng.dirichlet(np.full(len(keys), 0.4))
        rounds = []
        pool_start = int(rng.integers(0, 5000))
        for t in range(1, max_rounds + 1):
            ans = rng.choice(keys, size=n_candidates, p=p).astype(object)
            ans[rng.random(n_candidates) < 0.02] = None
            # candidates are shared from a small pool (features read only their answers),
            # which keeps 100,000 questions within a few hundred MB
            cands = [pool[(a, int(v))] for a, v in zip(ans, rng.integers(0, 8, size=n_candidates))]
            unanimous = len(set(ans)) == 1 and ans[0] is not None
            last = unanimous or t == max_rounds
            retrieval = None
            if not last:
                docs = [f"doc{pool_start + int(d)}" for d in rng.integers(0, 30, size=int(rng.integers(0, 9)))]
                retrieval = Retrieval.model_construct(queries=[f"query {t}.{j}" for j in range(3)], doc_ids=docs)
            rounds.append(Round.model_construct(round=t, candidates=cands, retrieval=retrieval))
            if last:
                break
            p = 0.6 * p + 0.4 * np.eye(len(keys))[int(np.argmax(p))]  # drift toward the mode
        logs.append(
            QuestionLog.model_construct(
                schema_version=1, qid=f"syn{i:07d}", dataset="synthetic", backbone="none", question="?",
                options=OPTIONS, gold=gold, specialty=None, n_candidates=n_candidates, max_rounds=max_rounds,
                rounds=rounds, cost=None,
            )
        )
    for log in logs[:200]:  # the construction is valid DESIGN 2.1
        QuestionLog.model_validate(log.model_dump())
    return logs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="number of synthetic questions")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be >= 1")

    logs = synthetic_logs(args.n, args.seed)
    n_rounds = sum(len(log.rounds) for log in logs)
    print(f"{args.n} questions, {n_rounds} rounds, {8 * n_rounds} candidates")

    t0 = time.perf_counter()
    fast = feature_table(logs)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = feature_table_reference(logs)
    t_slow = time.perf_counter() - t0
    pd.testing.assert_frame_equal(fast, slow, check_exact=False, rtol=1e-9, atol=1e-12)

    print(f"feature_table (vectorized): {t_fast:8.2f} s  {args.n / t_fast:12,.0f} questions/s")
    print(f"per-question Python loop:   {t_slow:8.2f} s  {args.n / t_slow:12,.0f} questions/s")
    print(f"speed-up: {t_slow / t_fast:.1f}x   (tables agree on all {fast.shape[1]} features)")


if __name__ == "__main__":
    main()
