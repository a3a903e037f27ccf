"""Smoke test of the installed op through the JIT on a GPU: first build, the windows of 1-3 keys
against float64 with the contract's per-row bound, then the cached load in a new process."""
import subprocess, sys, time
import torch
import aiter
from aiter.jit import core
from aiter.testing.mqa_logits import make_inputs, make_windows, reference_logits, window_mask

DEV = "cuda" if torch.cuda.is_available() else "cpu"

t = time.time()
core.get_module()
print(f"first use: {time.time() - t:.1f} s, built={core.last_load_info.get('built')}", flush=True)
ok = True
for H in (32, 64):
    for mode, M, N in (("misaligned", 1000, 3), ("empty", 1000, 3), ("past_end", 1000, 3), ("causal", 1560, 127)):
        q, kv, s, w = make_inputs(M, N, H, 128, DEV, 7)
        ks, ke = make_windows(mode, M, N, DEV)
        for clean in (True, False):
            out = torch.full((M, N), float("nan"), device=DEV)
            aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, clean_logits=clean, out=out)
            ref = reference_logits(q, kv, s, w, ks, ke, clean)
            inside = window_mask(ks, ke, N)
            diff = torch.where(inside, (out.double() - ref).abs(), torch.zeros_like(ref)).amax(1)
            bound = 2e-3 * torch.where(inside, ref.abs(), torch.zeros_like(ref)).amax(1) + 1e-6
            good = bool((diff <= bound).all()) and not bool(torch.isnan(out[inside]).any())
            if clean:
                good &= torch.equal(torch.isneginf(out), ~inside)
            ok &= good
            print(f"{'PASS' if good else 'FAIL'} H={H} {mode} {M}x{N} clean={int(clean)} worst/bound {float((diff / bound).max()):.3g}")
t = time.time()
r = subprocess.run([sys.executable, "-c", "import time; t=time.time(); from aiter.jit import core; core.get_module(); "
                    "print(round(time.time()-t, 3), core.last_load_info['built'])"], capture_output=True, text=True)
print("cached load in a new process (s, built):", r.stdout.strip(), r.stderr[-300:])
sys.exit(0 if ok else 1)
