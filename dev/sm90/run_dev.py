"""Developer driver for the sm90 kernel on an H200, without the torch extension build.

Loads tools/sm90_dev/build/libsm90dev.so (see build.sh) through ctypes, checks the kernel against the
float64 reference of aiter.testing.mqa_logits on every window mode, and times the contract's
benchmark shapes (CUDA events, cold L2, median). Writes a log and a JSON of the timings to --out.

    bash tools/sm90_dev/build.sh && python tools/sm90_dev/run_dev.py --out $OUT
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from aiter.bench.baselines import BENCHMARK_SHAPES, deepgemm_h200_us  # noqa: E402
from aiter.testing.mqa_logits import (  # noqa: E402
    WINDOW_MODES,
    in_window_pairs,
    make_inputs,
    make_windows,
    mode_applies,
    reference_logits,
    window_mask,
)

LIB = None


def load(path):
    global LIB
    LIB = ctypes.CDLL(path)
    f = LIB.aiter_sm90_dev_launch
    f.restype = ctypes.c_char_p
    f.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                                          ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                                          ctypes.c_void_p]


NUM_SMS = None


def run(q, kv, scales, w, ks, ke, clean, out=None):
    M, H, D = q.shape
    N = kv.shape[0]
    if out is None:
        out = torch.empty(M, N, device=q.device, dtype=torch.float32)
    err = LIB.aiter_sm90_dev_launch(q.data_ptr(), kv.data_ptr(), scales.data_ptr(), w.data_ptr(), ks.data_ptr(),
                                    ke.data_ptr(), out.data_ptr(), M, N, H, D, w.stride(0), out.stride(0),
                                    int(clean), NUM_SMS, torch.cuda.current_stream().cuda_stream)
    if err is not None:
        raise RuntimeError(err.decode())
    return out


def check(M, N, H, mode, clean, seed, log, padded=False):
    q, kv, s, w = make_inputs(M, N, H, 128, "cuda", seed)
    ks, ke = make_windows(mode, M, N, "cuda", generator=torch.Generator().manual_seed(seed))
    out = None
    if padded:
        big = torch.full((M, N + 7), float("nan"), device="cuda")
        out = big[:, :N]
    else:
        out = torch.full((M, N), float("nan"), device="cuda")
    run(q, kv, s, w, ks, ke, clean, out)
    torch.cuda.synchronize()
    ref = reference_logits(q, kv, s, w, ks, ke, clean)
    inside = window_mask(ks, ke, N)
    ok = True
    msgs = []
    if clean:
        if not torch.equal(torch.isneginf(out), ~inside):
            ok = False
            msgs.append(f"-inf pattern differs at {int((torch.isneginf(out) != ~inside).sum())} places")
    o, r = out.double()[inside], ref[inside]
    if torch.isnan(o).any():
        ok = False
        msgs.append(f"{int(torch.isnan(o).sum())} NaN inside windows")
    rel = float(((o - r).norm() / r.norm().clamp_min(1e-30)).item()) if r.numel() else 0.0
    if rel > 5e-4:
        ok = False
    # per-row bound
    diff = torch.where(inside, (out.double() - ref).abs(), torch.zeros_like(ref))
    rowmax = torch.where(inside, ref.abs(), torch.zeros_like(ref)).amax(1)
    bad_rows = int((diff.amax(1) > 2e-3 * rowmax + 1e-6).sum())
    if bad_rows:
        ok = False
        msgs.append(f"{bad_rows} rows over the per-row bound")
    if padded and not torch.isnan(big[:, N:]).all():
        ok = False
        msgs.append("padding columns written")
    line = f"{'PASS' if ok else 'FAIL'} M={M} N={N} H={H} {mode:10s} clean={int(clean)} rel_l2={rel:.2e} {' '.join(msgs)}"
    log(line)
    return ok


def determinism(M, N, H, mode, log):
    q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 7)
    ks, ke = make_windows(mode, M, N, "cuda")
    first = run(q, kv, s, w, ks, ke, True).clone()
    same = all(torch.equal(first, run(q, kv, s, w, ks, ke, True)) for _ in range(19))
    log(f"{'PASS' if same else 'FAIL'} 20-run bitwise identity M={M} N={N} H={H} {mode}")
    return same


def topk_agreement(M, N, H, log):
    q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 11)
    ks, ke = make_windows("multi_req", M, N, "cuda")
    out = run(q, kv, s, w, ks, ke, True)
    ref = reference_logits(q, kv, s, w, ks, ke, True)
    rows = ((ke.long().clamp(0, N) - ks.long().clamp(0, N)) >= 2048).nonzero().flatten()
    a = out[rows].topk(2048, dim=1).indices.sort(1).values
    b = ref[rows].topk(2048, dim=1).indices.sort(1).values
    hit = 0
    for i in range(len(rows)):
        hit += int(torch.isin(b[i], a[i]).sum())
    frac = hit / max(1, len(rows) * 2048)
    ok = frac >= 0.999
    log(f"{'PASS' if ok else 'FAIL'} top-2048 agreement {frac:.5f} over {len(rows)} rows (M={M} N={N} H={H})")
    return ok


def cuda_time(fn, flush, iters=12, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def machine_ceilings(flush):
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    t = cuda_time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), flush, 20, 5)
    peak = 2 * n**3 / (t * 1e-6) / 1e12
    x = torch.empty(1 << 31, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    tc = cuda_time(lambda: y.copy_(x), flush, 20, 3)
    bw = 2 * x.numel() / (tc * 1e-6) / 1e9
    return peak, bw


BENCH = list(BENCHMARK_SHAPES)
def bench(peak, bw, flush, log, heads, cleans, rows):
    results = []
    log(f"{'shape':>14} {'mode':>9} {'H':>3} {'clean':>5} {'us':>9} {'TFLOP/s':>8} {'%peak':>6} {'floor':>8} {'x floor':>7} {'DeepGEMM':>8} {'vs DG':>6}")
    for mode, M, N in rows:
        for H in heads:
            q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 1)
            ks, ke = make_windows(mode, M, N, "cuda")
            pairs = in_window_pairs(ks, ke, N)
            out = torch.empty(M, N, device="cuda")
            for clean in cleans:
                t = cuda_time(lambda: run(q, kv, s, w, ks, ke, clean, out), flush)
                flops = 2 * H * 128 * pairs
                tflops = flops / (t * 1e-6) / 1e12
                out_bytes = 4 * (M * N if clean else pairs)
                floor = max(flops / (peak * 1e12), out_bytes / (bw * 1e9)) * 1e6
                dg = deepgemm_h200_us(mode, M, N, H, clean)
                log(f"{M:>6}x{N:<7} {mode:>9} {H:>3} {int(clean):>5} {t:9.1f} {tflops:8.1f} {100 * tflops / peak:6.1f} {floor:8.1f} {t / floor:7.2f} {dg:8.1f} {dg / t:6.2f}")
                results.append(dict(mode=mode, M=M, N=N, H=H, clean=clean, us=t, tflops=tflops, pct_peak=100 * tflops / peak,
                                    floor_us=floor, deepgemm_us=dg))
            del q, kv, s, w, out
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(ROOT, "tools/sm90_dev/build/libsm90dev.so"))
    ap.add_argument("--out", default=".")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--heads", default="32,64")
    ap.add_argument("--rows", default="all", help="all | comma list of indices into BENCH")
    ap.add_argument("--ceilings", default="", help="PEAK_TFLOPS,COPY_GBS: skip measuring them")
    ap.add_argument("--quick-check", action="store_true", help="a few sizes only")
    args = ap.parse_args()
    global NUM_SMS
    NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
    load(args.lib)
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "sm90_dev.log"), "w")

    def log(s):
        if not s.startswith("PASS"):  # the log file keeps every line; the console only what needs eyes
            print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    log(f"device {torch.cuda.get_device_name()} sms={NUM_SMS} torch {torch.__version__}")
    ok = True
    heads = [int(h) for h in args.heads.split(",")]
    if not args.skip_check:
        t0 = time.time()
        sizes = [(1, 1), (3, 17), (17, 61), (61, 127), (127, 129), (128, 1000), (129, 1560), (1000, 1560), (1560, 1000),
                 (256, 4096), (2048, 8192)]
        if args.quick_check:
            sizes = [(17, 61), (129, 1560), (2048, 8192)]
        for H in heads:
            for M, N in sizes:
                for mode in WINDOW_MODES + ("random",):
                    if not mode_applies(mode, M, N):
                        continue
                    for clean in (True, False):
                        ok &= check(M, N, H, mode, clean, seed=M * 31 + N + H, log=log)
            ok &= check(1000, 1560, H, "causal", True, 3, log, padded=True)
            ok &= check(1000, 1561, H, "random", False, 4, log, padded=True)
            ok &= determinism(2048, 8192, H, "causal", log)
            ok &= topk_agreement(1024, 16384, H, log)
        log(f"checks {'PASSED' if ok else 'FAILED'} in {time.time() - t0:.1f}s")
    if not args.skip_bench:
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        peak, bw = [float(x) for x in args.ceilings.split(",")] if args.ceilings else machine_ceilings(flush)
        log(f"measured FP8 peak (torch._scaled_mm 8192^3) {peak:.0f} TFLOP/s, copy {bw:.0f} GB/s")
        rows = BENCH if args.rows == "all" else [BENCH[int(i)] for i in args.rows.split(",")]
        res = bench(peak, bw, flush, log, heads, (True, False), rows)
        with open(os.path.join(args.out, "sm90_bench.json"), "w") as f:
            json.dump(dict(peak_tflops=peak, copy_gbs=bw, rows=res), f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
