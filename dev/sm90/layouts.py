"""The compressed logits layout against the full one, same run, on the GPU present.

    python -m dev.sm90.layouts

For each benchmark-like shape: aiter.fp8_mqa_logits with clean_logits False in the full [M, N]
layout and in the compressed [M, W] one (W = the longest window, max_seqlen_k = W), float32, timed
with the bench module's timer (CUDA events, cold L2, median of 20).
"""

from __future__ import annotations

import torch

import aiter
from aiter.bench.machine import GpuTimer
from aiter.testing.mqa_logits import make_inputs, make_windows

SHAPES = (("causal", 8192, 8192), ("causal", 4096, 32768), ("causal", 1024, 131072), ("multi_req", 4096, 32768),
          ("multi_req", 8192, 8192), ("causal", 128, 4096), ("causal", 1024, 1024))


def main():
    timer = GpuTimer(torch.device("cuda"), iters=20)
    print("| H | mode | M x N | full µs | compressed µs |")
    print("|---|---|---|---|---|")
    for H in (32, 64):
        for mode, M, N in SHAPES:
            q, kv, s, w = make_inputs(M, N, H, 128, "cuda", seed=1)
            ks, ke = make_windows(mode, M, N, "cuda")
            width = int((ke.clamp(0, N) - ks.clamp(0, N)).clamp(min=0).max())
            full = timer(lambda: aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, False))
            compressed = timer(lambda: aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, False, max_seqlen_k=width))
            print(f"| {H} | {mode} | {M}x{N} | {full:.1f} | {compressed:.1f} |", flush=True)


if __name__ == "__main__":
    main()
