#!/bin/bash
# A/B of sm90 kernel variants through the package itself: each variant is built by the JIT into its
# own AITER_JIT_DIR, optionally checked with the GPU op tests, then timed one after another with
# `python -m aiter.bench.fp8_mqa_logits`; prints one table (µs per variant, each over the first).
#
#   bash dev/sm90/ab.sh NAME=SOURCE[:NVCC_FLAGS] ... [-- BENCH_OPTIONS]
#
#   SOURCE        "." (this checkout), a directory holding aiter/ and csrc/ (e.g. an exported
#                 revision: mkdir -p dev/sm90/_base && git archive HEAD~1 aiter csrc op_tests |
#                 tar -x -C dev/sm90/_base), or a git revision (exported here; needs .git)
#   NVCC_FLAGS    extra flags for the sm90 sources, e.g. -DSOME_HOOK=1; they reach nvcc through
#                 AITER_JIT_EXTRA_CUDA_CFLAGS, so the variant's aiter/jit/core.py must read it
#   BENCH_OPTIONS go to the bench unchanged, e.g. --shapes causal:1024x1024,multi_req:8192x8192
#                 --heads 32 --clean 1 --iters 20 (default: the bench's full GPU list)
#   AB_DIR        where JIT caches, exported trees, logs and bench outputs go (default /tmp/aiter_ab)
#   AB_CHECK=1    run the GPU op tests against each variant before timing
#   AB_PARALLEL=0 build the variants one after another (default: all at once)
#
# e.g. bash dev/sm90/ab.sh base=dev/sm90/_base new=. -- --shapes causal:4096x32768 --heads 32,64
set -uo pipefail
export PYTHONUNBUFFERED=1
root=$(cd "$(dirname "$0")/../.." && pwd)
ab=${AB_DIR:-/tmp/aiter_ab}
variants=() bench=()
while (($#)); do
  if [[ $1 == -- ]]; then shift; bench=("$@"); break; fi
  variants+=("$1"); shift
done
if ((${#variants[@]} == 0)); then sed -n '2,/^set /p' "$0" | sed '$d' | cut -c3-; exit 2; fi

names=()
for variant in "${variants[@]}"; do
  name=${variant%%=*} spec=${variant#*=}
  if [[ $name == "$variant" || -z $name || $name == */* ]]; then
    echo "ab.sh: '$variant' is not NAME=SOURCE[:NVCC_FLAGS]" >&2; exit 2
  fi
  source=${spec%%:*} flags=
  [[ $spec == *:* ]] && flags=${spec#*:}
  dir=$ab/$name
  # The JIT cache (dir/jit) stays: its keys hash every source and flag, so a rerun reuses a build.
  mkdir -p "$dir" && rm -rf "$dir/src" "$dir"/*.log "$dir"/bench.*
  if [[ -d $source ]]; then
    tree=$(cd "$source" && pwd)
  else
    tree=$dir/src
    mkdir -p "$tree"
    git -C "$root" archive "$source" aiter csrc op_tests | tar -x -C "$tree" ||
      { echo "ab.sh: $name: '$source' is neither a directory nor a git revision here" >&2; exit 2; }
  fi
  [[ -d $tree/aiter && -d $tree/csrc ]] || { echo "ab.sh: $name: $tree has no aiter/ and csrc/" >&2; exit 2; }
  if [[ -n $flags ]] && ! grep -q AITER_JIT_EXTRA_CUDA_CFLAGS "$tree/aiter/jit/core.py"; then
    echo "ab.sh: $name: $tree/aiter/jit/core.py does not read AITER_JIT_EXTRA_CUDA_CFLAGS; '$flags' would not reach nvcc" >&2
    exit 2
  fi
  echo "$tree" > "$dir/tree.path"
  echo "$flags" > "$dir/flags"
  names+=("$name")
done

# Runs a command in variant $1's tree with its own JIT cache and flags (never a prebuilt AOT module).
in_variant() {
  local dir=$ab/$1 tree; shift
  tree=$(cat "$dir/tree.path") || return 1
  (cd "$tree" && AITER_JIT_DIR=$dir/jit AITER_JIT_IGNORE_AOT=1 \
    AITER_JIT_EXTRA_CUDA_CFLAGS="$(cat "$dir/flags")" "$@")
}

echo "ab.sh: building ${names[*]} (logs in $ab/NAME/build.log)" >&2
pids=()
for name in "${names[@]}"; do
  in_variant "$name" python -c "from aiter.jit import core; core.get_module(); print(core.last_load_info)" \
    > "$ab/$name/build.log" 2>&1 &
  pids+=($!)
  [[ ${AB_PARALLEL:-1} == 0 ]] && wait "$!"
done
failed=0
for i in "${!names[@]}"; do
  wait "${pids[$i]}" || { echo "ab.sh: ${names[$i]}: build failed:" >&2; tail -20 "$ab/${names[$i]}/build.log" >&2; failed=1; }
done
((failed)) && exit 1

for name in "${names[@]}"; do
  if [[ ${AB_CHECK:-0} == 1 ]]; then
    echo "ab.sh: $name: GPU op tests" >&2
    in_variant "$name" python -m pytest -q -x op_tests/test_fp8_mqa_logits.py op_tests/test_gpu_integration.py \
      op_tests/test_validation.py -k "cuda or gpu" > "$ab/$name/check.log" 2>&1
    status=$?
    tail -1 "$ab/$name/check.log" >&2
    ((status == 0)) || { tail -30 "$ab/$name/check.log" >&2; exit 1; }
  fi
  echo "ab.sh: $name: bench" >&2
  in_variant "$name" python -m aiter.bench.fp8_mqa_logits "${bench[@]}" --out "$ab/$name/bench" \
    > "$ab/$name/bench.log" 2>&1 || { tail -20 "$ab/$name/bench.log" >&2; exit 1; }
done

python3 - "$ab" "${names[@]}" <<'PY'
import json, sys
ab, names = sys.argv[1], sys.argv[2:]
runs = [json.load(open(f"{ab}/{n}/bench.json")) for n in names]
print(runs[0]["header"])
print()
cols = ["shape", "mode", "H", "clean"] + [f"{n} µs" for n in names] + [f"{n} / {names[0]}" for n in names[1:]]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
key = lambda r: (r["shape"], r["mode"], r["H"], r["clean"])
by_run = [{key(r): r["us"] for r in run["rows"]} for run in runs]
for r in runs[0]["rows"]:
    k = key(r)
    us = [t.get(k) for t in by_run]
    cells = [r["shape"], r["mode"], str(r["H"]), "yes" if r["clean"] else "no"]
    cells += ["-" if u is None else f"{u:.1f}" for u in us]
    cells += ["-" if u is None or not us[0] else f"{u / us[0]:.3f}" for u in us[1:]]
    print("| " + " | ".join(cells) + " |")
PY
