#!/bin/bash
# One GPU session's checks, in the order a change needs them (run from the repository root on the
# GPU machine; logs under $OUT):
#   bash dev/gpu_session.sh tests [BASE_DIR]  first-use JIT build (timed), cached reload, the GPU op
#                                        tests (prefill and decode), the vLLM-style example and the
#                                        few-key precision probe;
#                                        BASE_DIR's module builds meanwhile, for the A/B
#   bash dev/gpu_session.sh ab BASE_DIR  same-run A/B of BASE_DIR against this tree (dev/ab.py), every
#                                        benchmark row, then the bench module's table
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/aiter_gpu_session}
mkdir -p "$OUT"
JIT_ROOT=/tmp/aiter_jit
case ${1:-} in
tests)
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$OUT/gpu.txt"
  if [ -n "${2:-}" ]; then
    (cd "$2" && PYTHONPATH=. AITER_JIT_DIR=$JIT_ROOT/jit-base python -c "from aiter.jit import core; core.get_module()" \
      > "$OUT/base_build.txt" 2>&1 &)
  fi
  export AITER_JIT_DIR=$JIT_ROOT/jit-new
  python -c "import time, json; t = time.time(); from aiter.jit import core; core.get_module(); \
print('first use:', round(time.time() - t, 1), 's', json.dumps(core.last_load_info))" 2>&1 | tee "$OUT/jit.txt"
  # The GPU modules, one per op family (each builds on its family's first call otherwise).
  python -c "import time; t = time.time(); from aiter.jit import __main__ as jit; jit.main([]); \
print('GPU family modules:', round(time.time() - t, 1), 's')" 2>&1 | tee -a "$OUT/jit.txt"
  python -c "import time; t = time.time(); from aiter.jit import core; core.get_module(); \
print('cached load in a new process:', round(time.time() - t, 3), 's (the import of torch and aiter included)')" 2>&1 | tee -a "$OUT/jit.txt"
  python -m pytest op_tests/test_fp8_mqa_logits.py op_tests/test_gpu_integration.py op_tests/test_validation.py \
    op_tests/test_api.py op_tests/test_logits_options.py op_tests/test_paged_mqa_logits.py -k "cuda or gpu" -q -rs 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -15
  # The peers' case lists at their own sizes (op_tests/test_peer_criteria.py): pass / skip counts.
  AITER_PEER_SCALE=1 python -m pytest op_tests/test_peer_criteria.py -k cuda -q 2>&1 | tee "$OUT/peer_criteria.txt" | tail -3
  PYTHONPATH=. python examples/vllm_indexer_chunk.py --heads 64 2>&1 | tail -3 | tee "$OUT/example.txt"
  python -m dev.sm90.precision 2>&1 | tail -12 | tee "$OUT/precision.txt"
  AITER_JIT_DIR=$JIT_ROOT/jit-new python -m dev.sm90.plan_cost 2>&1 | tee "$OUT/plan_cost.txt" | tail -22
  ;;
ab)
  python dev/ab.py --tree base="$2" --tree new=. --jit-root $JIT_ROOT --out "$OUT/ab" 2>&1 | tee "$OUT/ab.txt"
  AITER_JIT_DIR=$JIT_ROOT/jit-new python -m aiter.bench.fp8_mqa_logits --out "$OUT/bench" 2>"$OUT/bench.err" | tail -60
  AITER_JIT_DIR=$JIT_ROOT/jit-new python -m aiter.bench.fp8_paged_mqa_logits --out "$OUT/paged_bench" 2>"$OUT/paged_bench.err" | tail -20
  ;;
*)
  sed -n '2,9p' "$0" | cut -c3-; exit 2 ;;
esac
