"""The fused prefill top-k's time against its logits workspace (dev tree, H200): which chunk size the
default ``aiter.ops.indexer_topk.WORKSPACE_BYTES`` should be. A chunk that fits the L2 (50 MB on an
H200) lets the top-k read the logits the logits kernel just wrote from the L2 instead of HBM, but
more chunks mean more, smaller logits launches.

    cd <worktree> && AITER_JIT_DIR=... python -m dev.sm90.topk_fused_sweep [--iters N] [--mib 8,16,...]

Prints, per (mode, M x N, H): our logits alone, the top-k alone on them (GB/s of the windows' logits),
and fp8_mqa_topk_indices at each workspace size (µs, the ratio to our logits alone: the goal is <= 1.10,
the peak extra memory in MiB). Cold L2 before each call (aiter/bench/machine.py), median.
"""

from __future__ import annotations

import argparse

import torch

from aiter.bench import machine
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from aiter.ops.indexer_topk import fp8_mqa_topk_indices, top_k_per_row_prefill
from aiter.testing.mqa_logits import in_window_pairs, make_inputs, make_windows

SHAPES = (("causal", 4096, 32768, 32), ("causal", 1024, 131072, 32), ("multi_req", 4096, 32768, 32),
          ("causal", 4096, 32768, 64), ("causal", 1024, 131072, 64))


def peak_extra(device, fn):
    fn()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--mib", default="8,16,24,32,48,64", help="workspace sizes to try, MiB")
    ap.add_argument("--k", type=int, default=2048)
    args = ap.parse_args()
    device = torch.device("cuda")
    timer = machine.GpuTimer(device, iters=args.iters)
    sizes = [int(m) for m in args.mib.split(",")]
    print(f"device: {machine.device_name(device)} | k = {args.k} | cold L2, median of {args.iters}")
    print("| mode | M x N | H | logits µs | top-k µs | top-k GB/s | " +
          " | ".join(f"fused {m} MiB µs (x logits, MiB)" for m in sizes) + " |")
    print("|---" * (6 + len(sizes)) + "|")
    for mode, M, N, H in SHAPES:
        q, kv, scales, weights = make_inputs(M, N, H, 128, device=device, seed=M + N + H)
        ks, ke = make_windows(mode, M, N, device=device)
        out = torch.empty((M, args.k), dtype=torch.int32, device=device)
        logits_us = timer(lambda: fp8_mqa_logits(q, kv, scales, weights, ks, ke, False))
        lg = fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)
        topk_us = timer(lambda: top_k_per_row_prefill(lg, ks, ke, out, None, M, lg.stride(0), 1, args.k))
        gbps = in_window_pairs(ks, ke, N) * 4 / (topk_us * 1e-6) / 1e9
        del lg
        cells = []
        for m in sizes:
            fn = lambda: fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, args.k, out=out,  # noqa: E731
                                              workspace_bytes=m << 20)
            us = timer(fn)
            cells.append(f"{us:.1f} ({us / logits_us:.2f}, {peak_extra(device, fn):.0f})")
        print(f"| {mode} | {M}x{N} | {H} | {logits_us:.1f} | {topk_us:.1f} | {gbps:.0f} | " + " | ".join(cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
