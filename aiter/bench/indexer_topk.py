"""Benchmark of the indexer top-k: ``python -m aiter.bench.indexer_topk``.

Two tables, k = 2048 unless --k says otherwise:
  - prefill rows (mode, M, N, H): ours fused (fp8_fp4_mqa_topk_indices), ours unfused (our logits, then
    our top_k_per_row_prefill), our logits alone, the baseline's logits alone and the baseline's logits +
    torch.topk; the fused time over our logits alone (the goal: <= 1.10) and the baseline + topk over
    ours fused (the goal: >= 2.3); the peak extra memory of each form (torch.cuda.max_memory_allocated
    over what was allocated before the call); and the top-k's GB/s (window logits bytes read over the
    unfused top-k's own time);
  - decode rows (H, B, context, next_n): the same columns for fp8_fp4_paged_mqa_topk_indices and
    top_k_per_row_decode (the baseline's goal: ours fused <= its logits alone), plus the fused op's
    per-step time replayed in a CUDA graph.
The baseline on an NVIDIA GPU is DeepGEMM (fp8_fp4_mqa_logits with clean_logits, and
fp8_fp4_paged_mqa_logits) when the deep_gemm package is importable, same run, same inputs; on the CPU
it is our own logits + torch.topk. Timing: every column of a row in interleaved rounds (the sides in
order, then reversed, ...; aiter/bench/interleave.py), each turn CUDA events over calls after a cold-L2
flush (aiter/bench/machine.py), the median per side; "fused A/A" is the fused call against itself
timed the same way (how far a ratio in the row moves by chance). ``--quick`` (the default on the
CPU) runs a few small rows.
"""

from __future__ import annotations

import argparse
import sys

import torch

from aiter.bench import cli, interleave, machine
from aiter.bench.baselines import deepgemm_logits
from aiter.bench.fp8_paged_mqa_logits import deepgemm_paged, make_decode_step
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from aiter.ops.indexer_topk import (fp8_fp4_mqa_topk_indices, fp8_fp4_paged_mqa_topk_indices, top_k_per_row_decode,
                                    top_k_per_row_prefill)
from aiter.testing.mqa_logits import in_window_pairs, make_inputs, make_windows

D = 128
GPU_PREFILL = (("causal", 4096, 32768, 32), ("causal", 1024, 131072, 32), ("causal", 4096, 32768, 64),
               ("causal", 1024, 131072, 64), ("multi_req", 4096, 32768, 32), ("multi_req", 4096, 32768, 64))
GPU_DECODE = ((32, 1, 8192, 1), (32, 64, 8192, 1), (32, 256, 8192, 1), (32, 64, 65536, 1), (32, 256, 32768, 2),
              (64, 64, 8192, 1), (64, 256, 65536, 1))
CPU_PREFILL = (("causal", 64, 4096, 32), ("multi_req", 64, 4096, 32))
CPU_DECODE = ((32, 4, 4096, 1), (32, 2, 3000, 2))
ROUNDS = 4  # interleaved rounds per row (2 on the CPU)


def _timed(sides, timer, rounds):
    """Median µs of each side (name -> callable), timed in interleaved rounds, with the fused call
    timed twice (its A/A control)."""
    fns = dict(sides)
    fns["fused_again"] = fns["fused"]
    res = interleave.run(fns, rounds, lambda fn, first: timer.samples(fn, first))
    return {name: r["median"] for name, r in res.items()}


def _works(fn, what):
    """fn, or None when the baseline refuses the row (said on stderr)."""
    try:
        fn()
        return fn
    except (RuntimeError, ValueError, TypeError) as e:
        print(f"baseline skipped for {what}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
        return None


def _peak_extra(device, fn):
    """Bytes fn() allocates beyond what is live before it, at its peak (GPU), or None (CPU)."""
    if device.type != "cuda":
        return None
    fn()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def _graph_us(device, fn, iters=20):
    """Per-call µs of fn() replayed from a CUDA graph (warm L2: the steady state of a decode loop)."""
    fn()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) * 1e3 / iters


def prefill_row(mode, M, N, H, k, device, timer, peer, rounds=ROUNDS):
    q, kv, scales, weights = make_inputs(M, N, H, D, device=device, seed=M + N + H)
    ks, ke = make_windows(mode, M, N, device=device)
    out = torch.empty((M, k), dtype=torch.int32, device=device)
    logits_buf = fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)

    def fused():
        fp8_fp4_mqa_topk_indices((q, None), (kv, scales), weights, ks, ke, out)

    def unfused():
        lg = fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)
        top_k_per_row_prefill(lg, ks, ke, out, None, M, lg.stride(0), lg.stride(1), k)

    def topk_only():
        top_k_per_row_prefill(logits_buf, ks, ke, out, None, M, logits_buf.stride(0), 1, k)

    sides = dict(fused=fused, unfused=unfused, topk=topk_only,
                 logits=lambda: fp8_mqa_logits(q, kv, scales, weights, ks, ke, False))
    peer_topk = None
    if peer is not None:
        peer_logits = _works(lambda: peer(q, kv, scales, weights, ks, ke, True), f"{mode} {M}x{N} H={H}")
        if peer_logits is not None:
            sides["peer_logits"] = peer_logits
            peer_topk = lambda: torch.topk(peer_logits(), min(k, N), dim=1)  # noqa: E731
    elif device.type != "cuda":
        def peer_topk():
            return torch.topk(fp8_mqa_logits(q, kv, scales, weights, ks, ke, True), min(k, N), dim=1)
    if peer_topk is not None:
        sides["peer_topk"] = peer_topk
    us = _timed(sides, timer, rounds)
    del logits_buf
    row = dict(mode=mode, M=M, N=N, H=H, k=k)
    _fill(row, us)
    row["topk_gbps"] = in_window_pairs(ks, ke, N) * 4 / (row["topk_us"] * 1e-6) / 1e9
    row["fused_mib"] = _mib(_peak_extra(device, fused))
    row["unfused_mib"] = _mib(_peak_extra(device, unfused))
    row["peer_mib"] = _mib(_peak_extra(device, peer_topk)) if peer_topk is not None else None
    return row


def _fill(row, us):
    """The row's timed columns from the interleaved medians."""
    row["fused_us"], row["unfused_us"], row["logits_us"], row["topk_us"] = (
        us["fused"], us["unfused"], us["logits"], us["topk"])
    row["fused_aa"] = us["fused"] / us["fused_again"]
    row["peer_logits_us"], row["peer_topk_us"] = us.get("peer_logits"), us.get("peer_topk")
    row["fused_over_logits"] = row["fused_us"] / row["logits_us"]
    row["peer_over_fused"] = row["peer_topk_us"] / row["fused_us"] if row["peer_topk_us"] else None


def decode_row(H, B, context, next_n, k, device, timer, peer_logits, peer_metadata, rounds=ROUNDS):
    a, _ = make_decode_step(H, B, context, next_n, device, seed=B + context + H)
    rows = B * next_n
    shares = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8
    out = torch.empty((rows, k), dtype=torch.int32, device=device)
    meta = get_paged_mqa_logits_metadata(a["context_lens"], 64, shares)
    width = a["max_context_len"]

    def fused():
        fp8_fp4_paged_mqa_topk_indices((a["q"], None), a["kv_cache"], a["weights"], a["context_lens"],
                                       a["block_table"], width, out)

    def logits():
        return fp8_paged_mqa_logits(a["q"], a["kv_cache"], a["weights"], a["context_lens"], a["block_table"], meta,
                                    width, False)

    def unfused():
        lg = logits()
        top_k_per_row_decode(lg, next_n, a["context_lens"], out, rows, lg.stride(0), 1, k)

    lg = logits()
    sides = dict(fused=fused, unfused=unfused, logits=logits,
                 topk=lambda: top_k_per_row_decode(lg, next_n, a["context_lens"], out, rows, lg.stride(0), 1, k))
    peer_topk = None
    if peer_logits is not None:
        try:
            peer_meta = peer_metadata(a)
        except (RuntimeError, ValueError, TypeError) as e:
            print(f"baseline skipped for H={H} B={B}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
        else:
            peer_only = _works(lambda: peer_logits(a, peer_meta, torch.float32), f"H={H} B={B}")
            if peer_only is not None:
                sides["peer_logits"] = peer_only
                peer_topk = lambda: torch.topk(peer_only(), min(k, width), dim=1)  # noqa: E731
    elif device.type != "cuda":
        peer_topk = lambda: torch.topk(logits(), min(k, width), dim=1)  # noqa: E731
    if peer_topk is not None:
        sides["peer_topk"] = peer_topk
    us = _timed(sides, timer, rounds)
    del lg, sides
    row = dict(H=H, B=B, context=context, next_n=next_n, k=k)
    _fill(row, us)
    visible = int(a["context_lens"].long().clamp(0, width).sum())
    row["topk_gbps"] = visible * 4 / (row["topk_us"] * 1e-6) / 1e9
    row["fused_mib"] = _mib(_peak_extra(device, fused))
    row["unfused_mib"] = _mib(_peak_extra(device, unfused))
    row["peer_mib"] = _mib(_peak_extra(device, peer_topk)) if peer_topk is not None else None
    row["graph_us"] = _graph_us(device, fused) if device.type == "cuda" else None
    return row


def _mib(nbytes):
    return None if nbytes is None else nbytes / 2**20


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


COMMON = ("fused µs", "unfused µs", "our logits µs", "our top-k µs", "top-k GB/s", "fused / our logits",
          "baseline logits µs", "baseline logits + topk µs", "baseline+topk / fused", "fused A/A", "fused MiB",
          "unfused MiB", "baseline MiB")


def _common_cells(r):
    return (_fmt(r["fused_us"]), _fmt(r["unfused_us"]), _fmt(r["logits_us"]), _fmt(r["topk_us"]),
            _fmt(r["topk_gbps"], 2), _fmt(r["fused_over_logits"], 2), _fmt(r["peer_logits_us"]),
            _fmt(r["peer_topk_us"]), _fmt(r["peer_over_fused"], 2), _fmt(r["fused_aa"], 3), _fmt(r["fused_mib"]),
            _fmt(r["unfused_mib"]), _fmt(r["peer_mib"]))


def _prefill_md(r):
    return "| " + " | ".join((r["mode"], f"{r['M']}x{r['N']}", str(r["H"]), str(r["k"])) + _common_cells(r)) + " |"


def _decode_md(r):
    cells = (str(r["H"]), str(r["B"]), str(r["context"]), str(r["next_n"]), str(r["k"])) + _common_cells(r)
    return "| " + " | ".join(cells + (_fmt(r["graph_us"]),)) + " |"


def to_markdown(result):
    pre_cols = ("mode", "M x N", "H", "k") + COMMON
    dec_cols = ("H", "B", "context", "next_n", "k") + COMMON + ("fused in a CUDA graph µs",)
    lines = [result["header"], "", "| " + " | ".join(pre_cols) + " |", "|" + "---|" * len(pre_cols)]
    lines += [_prefill_md(r) for r in result["prefill"]]
    lines += ["", "| " + " | ".join(dec_cols) + " |", "|" + "---|" * len(dec_cols)]
    lines += [_decode_md(r) for r in result["decode"]]
    return "\n".join(lines) + "\n"


def run(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    quick = args.quick or not on_gpu
    if on_gpu:
        timer = machine.GpuTimer(device, iters=args.iters or 20)
        peer, baseline = deepgemm_logits() if not torch.version.hip else (None, "none")
        peer_logits, peer_metadata, _ = deepgemm_paged() if not torch.version.hip else (None, None, "none")
        prefill, decode = GPU_PREFILL, GPU_DECODE
        if quick:
            prefill, decode = prefill[:1], decode[:2]
    else:
        timer = machine.CpuTimer(iters=args.iters or 3, budget_s=1.0)
        peer = peer_logits = peer_metadata = None
        baseline = "our logits + torch.topk, same run"
        prefill, decode = CPU_PREFILL, CPU_DECODE
    rounds = args.rounds or (ROUNDS if on_gpu else 2)
    header = (f"device: {machine.device_name(device)} | D = {D}, k = {args.k} | baseline: {baseline}"
              f" | {rounds} interleaved rounds"
              + (" | quick" if quick else ""))
    print(header, file=sys.stderr, flush=True)
    result = {"header": header, "prefill": [], "decode": []}
    for mode, M, N, H in prefill:
        r = prefill_row(mode, M, N, H, args.k, device, timer, peer, rounds)
        result["prefill"].append(r)
        print(_prefill_md(r), file=sys.stderr, flush=True)
    for H, B, context, next_n in decode:
        r = decode_row(H, B, context, next_n, args.k, device, timer, peer_logits, peer_metadata, rounds)
        result["decode"].append(r)
        print(_decode_md(r), file=sys.stderr, flush=True)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=2048, help="keys per row (default 2048)")
    p.add_argument("--quick", action="store_true", help="a few small rows (the default on the CPU)")
    p.add_argument("--iters", type=int, help="timed calls per turn")
    p.add_argument("--rounds", type=int, help=f"interleaved rounds per row (default {ROUNDS} on a GPU, 2 on the CPU)")
    p.add_argument("--device", help="cpu or cuda[:i] (default: the GPU if visible)")
    p.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds: must be >= 1")
    return cli.run_and_report(args, run, to_markdown, lambda result: len(result["prefill"]) + len(result["decode"]))


if __name__ == "__main__":
    sys.exit(main())
