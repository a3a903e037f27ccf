#!/bin/bash
# A/B of the math-warpgroup count (tunables: AITER_SM90_MATH_WARPGROUPS): builds both, checks the
# candidate, times ROWS (indices into run_dev.BENCH). usage: ab.sh ROWS [HEADS]
set -uo pipefail
export PYTHONUNBUFFERED=1
rows=${1:-0,1,5,8,9,11}; heads=${2:-32,64}
for w in 2 3; do bash tools/sm90_dev/build.sh /tmp/wg$w -DAITER_SM90_MATH_WARPGROUPS=$w > $OUT/build_wg$w.log 2>&1 & done; wait
grep -h "spill\|C75" $OUT/build_wg*.log | sort | uniq -c
timeout 200 python tools/sm90_dev/run_dev.py --lib /tmp/wg3/libsm90dev.so --out $OUT/check3 --skip-bench 2>&1 | tail -4
for w in 2 3; do echo "== $w math warpgroups"; timeout 150 python tools/sm90_dev/run_dev.py --lib /tmp/wg$w/libsm90dev.so --out $OUT/wg$w --skip-check --rows $rows --heads $heads --ceilings 1450,4249 2>&1 | grep -v "^device\|^measured\|shape"; done
