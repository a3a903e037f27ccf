"""Small-shape latency of ``aiter.fp8_mqa_logits``: kernel time vs launch and host overhead.

Per shape (causal, clean_logits, H = 32 and 64): the median CUDA-event time of one call with a cold
L2 (what the bench reports), and the time per call of 20 back-to-back calls replayed from a CUDA
graph (warm L2, no host gaps). Close figures: the time is in the kernel; a large gap: launch or host.

    python -m dev.sm90.small_shapes [MxN ...]      (default 1024x1024 128x4096 64x8192)
"""

import statistics
import sys

import torch

import aiter
from aiter.bench.machine import GpuTimer
from aiter.testing.mqa_logits import make_inputs, make_windows

CALLS_PER_GRAPH = 20


def graph_us_per_call(fn, replays=10):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS_PER_GRAPH)
    return statistics.median(times)


def main(argv):
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in argv] or [(1024, 1024), (128, 4096), (64, 8192)]
    device = torch.device("cuda")
    timer = GpuTimer(device, iters=20)
    for M, N in shapes:
        for H in (32, 64):
            q, kv, s, w = make_inputs(M, N, H, 128, device, 1)
            ks, ke = make_windows("causal", M, N, device)
            out = torch.empty(M, N, device=device)

            def call():
                aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, clean_logits=True, out=out)

            cold = timer(call)
            warm = graph_us_per_call(call)
            print(f"{M}x{N} H={H}: cold event {cold:.1f} us, warm graph {warm:.1f} us per call")


if __name__ == "__main__":
    main(sys.argv[1:])
