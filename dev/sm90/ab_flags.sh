#!/bin/bash
# A/B of compile-time tunables. usage: ab_flags.sh ROWS HEADS CHECK_VARIANT "name:nvcc flags" ...
# Builds every variant, runs the full check on CHECK_VARIANT, times ROWS for each. Flags that
# start with src=DIR build that variant from DIR/csrc (e.g. "base:src=/tmp/base" for the last commit:
# git archive HEAD csrc | tar -x -C /tmp/base).
set -uo pipefail
export PYTHONUNBUFFERED=1
rows=$1; heads=$2; check=$3; shift 3
for v in "$@"; do
  name=${v%%:*}; flags=${v#*:}; src=
  if [[ $flags == src=* ]]; then src=${flags%% *}; src=${src#src=}; flags=${flags#src=$src}; fi
  SM90_DEV_SRC=$src bash tools/sm90_dev/build.sh /tmp/ab_$name $flags > $OUT/build_$name.log 2>&1 &
done; wait
grep -h "spill\|C75" $OUT/build_*.log | sort | uniq -c
timeout 200 python tools/sm90_dev/run_dev.py --lib /tmp/ab_$check/libsm90dev.so --out $OUT/check --skip-bench 2>&1 | tail -4
for v in "$@"; do name=${v%%:*}; echo "== $name"; timeout 120 python tools/sm90_dev/run_dev.py --lib /tmp/ab_$name/libsm90dev.so --out $OUT/$name --skip-check --rows $rows --heads $heads --ceilings 1450,4249 2>&1 | grep -v "^device\|^measured\|shape"; done
