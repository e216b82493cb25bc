#!/usr/bin/env bash
# One GPU check (issue 26) for a machine with torch + CUDA and no network, run from a copy of the
# repository with its wheels installed (docs/pipeline.md lists what a CUDA image lacks):
#   1. the tiny-model pipeline tests on CUDA (the engines and classifiers pick cuda:0 themselves),
#   2. benchmarks/engine_vs_generate.py on the random Qwen3-1.7B (bf16) of gpu_vllm_vs_transformers.py,
#   3. benchmarks/gpu_probe_batching.py,
#   4. benchmarks/gpu_vllm_vs_transformers.py when vllm imports,
#   5. step 2 again with --compile (the static-cache and compiled decode columns beside the
#      batched engine and plain generate), in the time the steps above left of the 8 minutes
#      (at least 60 s, else it says it did not run).
# Each step has its own timeout (8 minutes in all); the summary goes to $SUMMARY
# (default gpu_check_summary.txt).  `--cpu`: a dry run on CPU with small sizes, to know it runs.
#   bash benchmarks/gpu_check.sh [--cpu]
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
SUMMARY=${SUMMARY:-gpu_check_summary.txt}
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
CPU=0; [ "${1:-}" = "--cpu" ] && CPU=1
TMP=$(mktemp -d)
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$TMP/$name.log" 2>&1; local rc=$?
  note "== $name: exit $rc in $((SECONDS - t0)) s (limit $limit s)"
  tail -n "${TAIL:-4}" "$TMP/$name.log" | tee -a "$SUMMARY"
}
note "gpu_check $(date -u +%FT%TZ) cpu_dry_run=$CPU commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
note "$($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1)"
TESTS="tests/test_pipeline_gpu_free_import.py tests/test_pipeline_batched.py tests/test_cpu_engine.py tests/test_pipeline_e2e.py tests/test_pipeline_scale.py"
if [ $CPU = 1 ]; then
  step tests 240 $PY -m pytest -q -p no:cacheprovider -x tests/test_pipeline_gpu_free_import.py tests/test_pipeline_batched.py
  step engine_vs_generate 120 $PY benchmarks/engine_vs_generate.py --prompts 4 --n 4 --tokens 16
  step probe_batching 120 $PY benchmarks/gpu_probe_batching.py --questions 4
  TAIL=6 step engine_compiled 180 $PY benchmarks/engine_vs_generate.py --prompts 4 --n 4 --tokens 16 --compile --no-invariant
else
  step tests 150 $PY -m pytest -q -p no:cacheprovider $TESTS tests/test_pipeline_resume.py
  step build_1p7b 60 $PY -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; \
from gpu_vllm_vs_transformers import build_model; build_model(Path('$TMP/m17'), '1.7b')"
  step engine_vs_generate 120 $PY benchmarks/engine_vs_generate.py --model "$TMP/m17" --device cuda --dtype bfloat16 \
    --prompts 16 --n 8 --tokens 128
  step probe_batching 60 $PY benchmarks/gpu_probe_batching.py
  if $PY -c "import vllm" 2>/dev/null; then
    step vllm_vs_transformers 90 $PY benchmarks/gpu_vllm_vs_transformers.py --folder "$TMP/m17v" --max-new-tokens 128
  else
    note "== vllm_vs_transformers: not run (vllm does not import)"
  fi
  left=$((480 - SECONDS))
  if [ $left -ge 60 ]; then
    TAIL=6 step engine_compiled $left $PY benchmarks/engine_vs_generate.py --model "$TMP/m17" --device cuda \
      --dtype bfloat16 --prompts 16 --n 8 --tokens 128 --compile --no-invariant
  else
    note "== engine_compiled: not run (${left} s left of the 8 minutes; run it alone: engine_vs_generate.py ... --compile)"
  fi
fi
note "logs: $TMP"
