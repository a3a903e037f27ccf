#!/bin/bash
# Builds the dev shim (kernel + launcher, no torch headers) into $1 (default tools/sm90_dev/build);
# further arguments go to nvcc (e.g. -DAITER_SM90_VARIANT=1 for the measurement variants).
# SM90_DEV_SRC=DIR builds the kernel from DIR/csrc instead (e.g. an older commit, for an A/B).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/tools/sm90_dev/build}
shift || true
src=${SM90_DEV_SRC:-$root}
mkdir -p "$out"
flags=$(python3 -c "import sys; sys.path.insert(0, '$root'); from aiter.jit import build_config as b; print(' '.join(b.SM90_NVCC_FLAGS))" 2>/dev/null || echo "-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a")
nvcc $flags "$@" -Xptxas -v -Xcompiler -fPIC -shared -I"$src/csrc/include" -I"$src/csrc/kernels" \
  "$src/csrc/kernels/fp8_mqa_logits_sm90.cu" "$root/tools/sm90_dev/shim.cu" -o "$out/libsm90dev.so" 2>&1 | grep -E "error|warning|C75|spill|Used" || true
test -f "$out/libsm90dev.so"
