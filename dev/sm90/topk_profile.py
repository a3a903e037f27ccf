"""Top-k calls for a profiler: aiter.top_k_per_row_prefill on float32 logits (randn), k = 2048,
causal and multi_req windows, each called three times (warm-up, then the calls to profile).

    ncu --kernel-name regex:select --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \\
        --section LaunchStats --section Occupancy python -m dev.sm90.topk_profile [--rows 4096] [--keys 32768]
"""

from __future__ import annotations

import argparse

import torch

import aiter
from aiter.testing.mqa_logits import make_windows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dev.sm90.topk_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--keys", type=int, default=32768)
    p.add_argument("--k", type=int, default=2048)
    args = p.parse_args(argv)
    M, N, k = args.rows, args.keys, args.k
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(M, N, device="cuda", generator=gen)
    out = torch.empty((M, k), dtype=torch.int32, device="cuda")
    for mode in ("causal", "multi_req"):
        ks, ke = make_windows(mode, M, N, device="cuda")
        for _ in range(3):
            aiter.top_k_per_row_prefill(logits, ks, ke, out, None, M, N, 1, k)
        torch.cuda.synchronize()
        print(f"{mode} {M}x{N} k={k}: 3 calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
