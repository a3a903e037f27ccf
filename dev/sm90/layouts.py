"""The four logits formats against each other, same run, on the GPU present.

    python -m dev.sm90.layouts [--head-dims 128] [--rounds 4]

For each benchmark-like shape: aiter.fp8_mqa_logits with clean_logits False as float32 and bfloat16,
in the full [M, N] layout and in the compressed [M, W] one (W = the longest window, max_seqlen_k =
W), timed with the bench module's timer (CUDA events, cold L2, median of 10 per round). The formats
take turns in rounds, forward then backward (a b c d, d c b a, ...), so that clock and power drift
over a long run hit them alike (a long row in a fixed order measured the later formats up to 15%
slower, and DeepGEMM's in step with them); each cell is the median over the rounds.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import aiter
from aiter.bench.machine import GpuTimer
from aiter.testing.mqa_logits import make_inputs, make_windows

SHAPES = (("causal", 8192, 8192), ("causal", 4096, 32768), ("causal", 1024, 131072), ("multi_req", 4096, 32768),
          ("multi_req", 8192, 8192), ("causal", 128, 4096), ("causal", 1024, 1024))
FORMATS = (("f32", torch.float32, False), ("bf16", torch.bfloat16, False), ("compressed", torch.float32, True),
           ("compressed-bf16", torch.bfloat16, True))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="128")
    parser.add_argument("--heads", default="32,64")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    timer = GpuTimer(torch.device("cuda"), iters=10)
    names = [name for name, _, _ in FORMATS]
    print("| H | D | mode | M x N | " + " | ".join(f"{n} µs" for n in names) + " |")
    print("|---|---|---|---|" + "---|" * len(names))
    for D in (int(d) for d in args.head_dims.split(",")):
        for H in (int(h) for h in args.heads.split(",")):
            for mode, M, N in SHAPES:
                q, kv, s, w = make_inputs(M, N, H, D, "cuda", seed=1)
                ks, ke = make_windows(mode, M, N, "cuda")
                width = int((ke.clamp(0, N) - ks.clamp(0, N)).clamp(min=0).max())
                times = {name: [] for name in names}
                for round_index in range(args.rounds):
                    order = FORMATS if round_index % 2 == 0 else FORMATS[::-1]
                    for name, dtype, compressed in order:
                        options = dict(max_seqlen_k=width if compressed else 0, logits_dtype=dtype)
                        times[name].append(timer(lambda: aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, False, **options)))
                cells = " | ".join(f"{statistics.median(times[n]):.1f}" for n in names)
                print(f"| {H} | {D} | {mode} | {M}x{N} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
