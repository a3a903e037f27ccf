#!/bin/bash
# One device call: build the product and the measurement variants, check, time, profile.
# usage: bash tools/sm90_dev/session.sh ROWS HEADS   (ROWS: indices into run_dev.BENCH)
set -uo pipefail
export PYTHONUNBUFFERED=1
rows=${1:-0,1,5,9}; heads=${2:-32,64}
B=/tmp/sm90b
for v in 0 1 2; do bash tools/sm90_dev/build.sh $B/v$v -DAITER_SM90_VARIANT=$v > $OUT/build_v$v.log 2>&1 & done; wait
grep -h "Used\|spill" $OUT/build_v0.log | head -2
timeout 200 python tools/sm90_dev/run_dev.py --lib $B/v0/libsm90dev.so --out $OUT/check --skip-bench --quick-check 2>&1 | tail -5
ceil=$(timeout 100 python - <<'PY'
import torch, statistics
def t(fn, n=20):
    for _ in range(5): fn()
    ts=[]
    for _ in range(n):
        a,b=torch.cuda.Event(True),torch.cuda.Event(True); a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
n=8192; a=torch.randn(n,n,device='cuda').to(torch.float8_e4m3fn); b=torch.randn(n,n,device='cuda').to(torch.float8_e4m3fn).t(); one=torch.tensor(1.0,device='cuda')
ms=t(lambda: torch._scaled_mm(a,b,scale_a=one,scale_b=one,out_dtype=torch.bfloat16))
x=torch.empty(1<<31,dtype=torch.uint8,device='cuda'); y=torch.empty_like(x); mc=t(lambda: y.copy_(x))
print(f"{2*n**3/ms/1e9:.0f},{2*x.numel()/mc/1e6:.0f}")
PY
)
echo "ceilings $ceil"
for v in 0 1 2; do echo "== variant $v"; timeout 150 python tools/sm90_dev/run_dev.py --lib $B/v$v/libsm90dev.so --out $OUT/v$v --skip-check --rows $rows --heads $heads --ceilings $ceil 2>&1 | grep -v "^device"; done
