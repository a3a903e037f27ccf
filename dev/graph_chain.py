"""Per-call µs of an op inside a CUDA graph, as a model's layers see it: no event between launches.

    python -m dev.graph_chain --op paged --rows 32x64x8192x1,64x256x8192x2 [--peer]
    python -m dev.graph_chain --op prefill --rows causal:1024x1024:32,causal:128x4096:64 [--peer]

A graph of 20 x [an elementwise kernel over 4 MiB, the op] is replayed 7 times; the op's time is the
median step minus that of a graph of the elementwise kernels alone. The bench's timer puts a cold-L2
flush and two events around every call, which adds 3.8-4.8 µs even to a tiny kernel (measured on the
H200); this shows what a decode or prefill step pays instead. Paged rows are H x B x context x next_n
(the bench's inputs: D = 128, block_kv 64); prefill rows mode:MxN:H (D = 128, clean_logits False).
--peer: DeepGEMM's same call beside ours (when deep_gemm is importable).
"""

from __future__ import annotations

import argparse
import statistics

import torch

STEPS = 20


def per_call_us(fn, other: torch.Tensor) -> float:
    """Median µs per step of a graph of STEPS x [other.mul_, fn] (fn None: the elementwise kernels only)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up outside the graph (JIT, allocator)
            other.mul_(1.0001)
            if fn is not None:
                fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(STEPS):
            other.mul_(1.0001)
            if fn is not None:
                fn()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / STEPS)
    return statistics.median(times)


def paged_calls(row: str, device, peer: bool, inputs: str = "make_inputs"):
    from aiter.bench.fp8_paged_mqa_logits import BLOCK_KV, deepgemm_paged, make_decode_step
    from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata

    H, B, context, next_n = (int(v) for v in row.split("x"))
    a, _ = make_decode_step(H, B, context, next_n, device, seed=1, inputs=inputs)
    meta = get_paged_mqa_logits_metadata(a["context_lens"], BLOCK_KV,
                                         torch.cuda.get_device_properties(device).multi_processor_count)
    calls = {"ours": lambda: fp8_paged_mqa_logits(**a, schedule_meta=meta)}
    if peer:
        logits, metadata, _ = deepgemm_paged()
        if logits is not None:
            peer_meta = metadata(a)
            calls["DeepGEMM"] = lambda: logits(a, peer_meta, torch.float32)
    return calls


def prefill_calls(row: str, device, peer: bool, inputs: str = "make_inputs"):
    from aiter.bench import baselines
    from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
    from aiter.testing.mqa_logits import make_input_set, make_windows

    mode, dims, heads = row.split(":")
    M, N = (int(v) for v in dims.split("x"))
    q, kv, scales, weights = make_input_set(inputs, M, N, int(heads), 128, device, seed=1)
    ks, ke = make_windows(mode, M, N, device)
    calls = {"ours": lambda: fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)}
    if peer:
        run, _ = baselines.deepgemm_logits()
        if run is not None:
            calls["DeepGEMM"] = lambda: run(q, kv, scales, weights, ks, ke, False)
    return calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", choices=("paged", "prefill"), required=True)
    p.add_argument("--rows", required=True, help="comma-separated rows (see the module docstring)")
    p.add_argument("--peer", action="store_true", help="DeepGEMM's same call beside ours")
    p.add_argument("--inputs", choices=("make_inputs", "engine"), default="make_inputs", help="input set")
    args = p.parse_args(argv)
    device = torch.device("cuda")
    other = torch.randn(1 << 20, device=device)
    make_calls = paged_calls if args.op == "paged" else prefill_calls
    for row in args.rows.split(","):
        base = per_call_us(None, other)
        for name, fn in make_calls(row, device, args.peer, args.inputs).items():
            print(f"{args.op} {row:20s} {name:9s} {per_call_us(fn, other) - base:8.2f} us per call in a graph", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
