#!/bin/bash
# The benchmark tables of one GPU session, under a total time limit (run from the repository root on
# the GPU machine, a DeepGEMM build on PYTHONPATH; markdown + JSON under $OUT):
#   OUT=... PYTHONPATH=<deep_gemm build>:$PYTHONPATH bash dev/gpu_bench.sh [TOTAL_S] [d64]
# In order, each started only if its estimate fits the time left, each with its own --time-limit
# (a bench starts no row past it and still writes its tables):
#   1. prefill, D = 128, H = 32 and 64, both input sets, clean both (aiter.bench.fp8_mqa_logits):
#      ~55 s estimated (96 rows; the long H = 64 rows ~1 s each, every small row ~0.3 s)
#   2. paged decode, D = 128, the contract's rows (H 32 and 64), both input sets, float32 and bfloat16
#      (aiter.bench.fp8_paged_mqa_logits): ~15 s estimated (52 rows, 0.1-0.4 s each)
#   3. with "d64": prefill, D = 64, H = 32 and 64, both input sets: ~45 s estimated
# Not in the estimates: our module's first build when $AITER_JIT_DIR is cold (the default is
# gpu_session.sh's cache, so run `bash dev/gpu_session.sh tests` first, or budget minutes for nvcc),
# and DeepGEMM's JIT build of each kernel it has not built on this machine (one call per row happens
# before the timing, so only the wall time grows). `python -m aiter.bench.fp8_mqa_logits --estimate`
# prints the per-row estimate for any selection. TOTAL_S defaults to 420.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/aiter_gpu_bench}
mkdir -p "$OUT"
export AITER_JIT_DIR=${AITER_JIT_DIR:-/tmp/aiter_jit/jit-new}
TOTAL=${1:-420}
WITH_D64=${2:-}
START=$(date +%s)
left() { echo $((TOTAL - ($(date +%s) - START))); }

{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  python -c "import deep_gemm; print('deep_gemm', getattr(deep_gemm, '__version__', '?'), deep_gemm.__file__)" \
    || echo "deep_gemm not importable: the tables get no baseline column"
  python -c "import pynvml" 2>/dev/null && echo "clock/power: NVML" || echo "clock/power: nvidia-smi"
  git log -1 --format='commit %H %cd' 2>/dev/null
  date -u '+run %Y-%m-%d %H:%M UTC'
} 2>&1 | tee "$OUT/bench_env.txt"

t=$(date +%s)
python -m aiter.jit > "$OUT/bench_module_load.txt" 2>&1
echo "our module loaded in $(($(date +%s) - t)) s (AITER_JIT_DIR=$AITER_JIT_DIR)" | tee -a "$OUT/bench_env.txt"

# run NAME ESTIMATE_S COMMAND...: runs the bench with --time-limit = what is left less a reserve for
# the later steps, killed 60 s past that; skipped when even its estimate does not fit.
run() {
  local name=$1 estimate=$2 reserve=$3
  shift 3
  local budget=$(($(left) - reserve))
  if [ "$budget" -lt "$estimate" ]; then
    echo "skip $name: ${budget} s left for it, estimated ${estimate} s" | tee -a "$OUT/bench_env.txt"
    return
  fi
  local t0=$(date +%s)
  # The bench starts no new row after --time-limit; rows in flight finish, the tables are written.
  timeout $((budget + 60)) "$@" --time-limit $((budget - 10)) --out "$OUT/$name" >"$OUT/$name.stdout" 2>"$OUT/$name.err"
  echo "$name: exit $?, $(($(date +%s) - t0)) s" | tee -a "$OUT/bench_env.txt"
  grep -E "geomean|time limit" "$OUT/$name.stdout" | tee -a "$OUT/bench_env.txt"
}

reserve_paged=40
reserve_d64=0
[ -n "$WITH_D64" ] && reserve_d64=60
run prefill_d128 60 $((reserve_paged + reserve_d64)) \
  python -m aiter.bench.fp8_mqa_logits --heads 32,64 --head-dims 128 --inputs both --clean both
run paged_d128 20 $reserve_d64 \
  python -m aiter.bench.fp8_paged_mqa_logits --head-dims 128 --inputs both
if [ -n "$WITH_D64" ]; then
  run prefill_d64 45 0 python -m aiter.bench.fp8_mqa_logits --heads 32,64 --head-dims 64 --inputs both --clean both
fi
echo "total $(($(date +%s) - START)) s of $TOTAL; tables: $OUT/*.md, JSON: $OUT/*.json" | tee -a "$OUT/bench_env.txt"
