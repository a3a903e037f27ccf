#!/bin/bash
# Clocks under load for each variant, then ncu stall reasons and pipe use of the product kernel.
set -uo pipefail
B=/tmp/sm90b
for v in 0 1 2; do timeout 60 python tools/sm90_dev/clocks.py $B/v$v/libsm90dev.so 3; done
timeout 240 ncu --clock-control none -k regex:fp8_mqa_logits_sm90 -c 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,regex:sm__pipe_.*_cycles_active\\.avg\\.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
  python tools/sm90_dev/run_dev.py --lib $B/v0/libsm90dev.so --skip-check --rows 1 --heads 32 --ceilings 1340,4130 --out /tmp/ncu > $OUT/ncu_stalls.txt 2>&1
grep -E "stalled|pipe_|per_second|issue_active|inst_executed" $OUT/ncu_stalls.txt | awk '$NF+0 > 0.05 || /per_second|issue_active|inst_exec/' | sed 's/  */ /g' | head -60
