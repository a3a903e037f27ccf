"""Benchmark of the decode op fp8_paged_mqa_logits: ``python -m aiter.bench.fp8_paged_mqa_logits``.

One table: H, batch B, context, next_n, µs with float32 and with bfloat16 logits, GB/s (K bytes
read plus the float32 logits written, over the float32 time), % of the measured copy bandwidth, the
floor (those bytes over the copy bandwidth) and the baseline's time over ours (> 1: ours is faster),
then the metadata call's µs. The op is bound by the K bytes: visible tokens x (D + 4).

Shapes (GPU): the contract's decode rows, D = 128, block_kv 64, each batch's context uniform in
[0.7, 1.3] x context, 2-D context lengths (row j of a batch sees its length - next_n + j + 1 keys),
clean_logits False, cold L2, median of CUDA-event timings. The baseline is DeepGEMM's
fp8_fp4_paged_mqa_logits on the same inputs, same run, when the deep_gemm package is importable.
CPU: a few small rows against the same computation in plain torch float32.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from aiter.bench import machine
from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from aiter.testing.paged_mqa_logits import pack_kv_cache, random_block_table, reference_paged_logits

FP8 = torch.float8_e4m3fn
D = 128
BLOCK_KV = 64
# (H, B, context, next_n): the rows of the contract's decode table.
GPU_ROWS = ((32, 64, 8192, 1), (32, 64, 8192, 2), (32, 64, 65536, 1), (32, 256, 8192, 1), (32, 256, 32768, 2),
            (32, 1024, 8192, 1), (32, 4096, 4096, 2), (64, 64, 8192, 1), (64, 64, 65536, 2), (64, 256, 8192, 2),
            (64, 256, 32768, 1), (64, 1024, 8192, 2), (64, 4096, 4096, 1))
CPU_ROWS = ((32, 4, 2048, 1), (64, 8, 1024, 2))


def make_decode_step(H, B, context, next_n, device, seed=0):
    """One decode step's inputs, built on `device`: lengths uniform in [0.7, 1.3] x context, a shuffled
    block table (garbage past each batch's blocks), random e4m3 q and keys, scales > 0."""
    g = torch.Generator().manual_seed(seed)
    lens = (context * (0.7 + 0.6 * torch.rand(B, generator=g))).long().clamp(min=next_n)
    max_len = int(lens.max())
    lens_2d = lens[:, None] - next_n + torch.arange(next_n)[None, :] + 1
    blocks = (-(-lens // BLOCK_KV)).tolist()
    num_blocks = sum(blocks) + 1
    table = random_block_table(blocks, -(-max_len // BLOCK_KV), num_blocks, generator=g)
    gd = torch.Generator(device=device).manual_seed(seed)
    keys = torch.randn(num_blocks, BLOCK_KV, D, generator=gd, device=device).to(FP8)
    scales = torch.rand(num_blocks, BLOCK_KV, generator=gd, device=device) * 0.1 + 0.01
    q = torch.randn(B, next_n, H, D, generator=gd, device=device).to(FP8)
    weights = torch.randn(B * next_n, H, generator=gd, device=device) * H ** -0.5
    return dict(q=q, kv_cache=pack_kv_cache(keys, scales), weights=weights,
                context_lens=lens_2d.to(torch.int32).to(device), block_table=table.to(device),
                max_context_len=max_len), int(lens.sum())


def deepgemm_paged():
    """DeepGEMM's decode op and metadata as (logits_fn, metadata_fn, name), or (None, None, why not)."""
    try:
        import deep_gemm
    except Exception as e:  # not installed, or built for another torch/CUDA
        return None, None, f"none (deep_gemm not importable: {type(e).__name__})"
    if not hasattr(deep_gemm, "fp8_fp4_paged_mqa_logits"):
        return None, None, "none (this deep_gemm has no fp8_fp4_paged_mqa_logits)"

    def logits(a, meta, dtype):
        return deep_gemm.fp8_fp4_paged_mqa_logits((a["q"], None), a["kv_cache"], a["weights"], a["context_lens"],
                                                  a["block_table"], meta, a["max_context_len"], clean_logits=False,
                                                  logits_dtype=dtype)

    def metadata(a):
        return deep_gemm.get_paged_mqa_logits_metadata(a["context_lens"], BLOCK_KV, deep_gemm.get_num_sms())

    return logits, metadata, f"DeepGEMM {getattr(deep_gemm, '__version__', '?')} fp8_fp4_paged_mqa_logits, same run"


def run(args) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    if on_gpu:
        timer = machine.GpuTimer(device, iters=args.iters or 20)
        bw = machine.gpu_copy_gbps(device, timer) * 1e9
        shares = torch.cuda.get_device_properties(device).multi_processor_count
        peer_logits, peer_metadata, baseline = deepgemm_paged() if not torch.version.hip else (None, None, "none")
        rows = GPU_ROWS
    else:
        timer = machine.CpuTimer(iters=args.iters or 5)
        bw = machine.cpu_copy_gbps() * 1e9
        shares, peer_logits, peer_metadata = 8, None, None
        baseline = "plain torch float32 (gather + einsum), same inputs"
        rows = CPU_ROWS
    if args.rows:
        rows = tuple(tuple(int(v) for v in r.split("x")) for r in args.rows.split(","))
    header = (f"device: {machine.device_name(device)} | copy bandwidth {bw / 1e9:.0f} GB/s (read + write) | D = {D}, "
              f"block_kv = {BLOCK_KV}, 2-D lengths, clean_logits False | baseline: {baseline}")
    print(header, file=sys.stderr, flush=True)
    results = []
    for H, B, context, next_n in rows:
        a, tokens = make_decode_step(H, B, context, next_n, device, seed=B + context + H)
        meta = get_paged_mqa_logits_metadata(a["context_lens"], BLOCK_KV, shares)
        call = dict(a, schedule_meta=meta)
        us = {dtype: timer(lambda: fp8_paged_mqa_logits(**call, logits_dtype=dtype))
              for dtype in (torch.float32, torch.bfloat16)}
        meta_us = timer(lambda: get_paged_mqa_logits_metadata(a["context_lens"], BLOCK_KV, shares))
        visible = int((a["context_lens"].long().clamp(0, a["max_context_len"])).sum())
        bytes_moved = tokens * (D + 4) + visible * 4
        base_us = base_meta_us = None
        if peer_logits is not None:
            try:
                peer_meta = peer_metadata(a)
                base_us = timer(lambda: peer_logits(a, peer_meta, torch.float32))
                base_meta_us = timer(lambda: peer_metadata(a))
            except (RuntimeError, ValueError, TypeError) as e:
                print(f"baseline skipped for H={H} B={B}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
        elif not on_gpu:
            base_us = timer(lambda: reference_paged_logits(a["q"], a["kv_cache"], a["weights"], a["context_lens"],
                                                           a["block_table"], a["max_context_len"], False))
        row = dict(H=H, B=B, context=context, next_n=next_n, us_f32=us[torch.float32], us_bf16=us[torch.bfloat16],
                   gbps=bytes_moved / (us[torch.float32] * 1e-6) / 1e9,
                   pct_copy=100.0 * bytes_moved / (us[torch.float32] * 1e-6) / bw, floor_us=bytes_moved / bw * 1e6,
                   baseline_us=base_us, ratio=(base_us / us[torch.float32]) if base_us else None,
                   metadata_us=meta_us, baseline_metadata_us=base_meta_us)
        results.append(row)
        print(_md_row(row), file=sys.stderr, flush=True)
    return {"header": header, "rows": results}


COLUMNS = ("H", "B", "context", "next_n", "f32 µs", "bf16 µs", "GB/s", "% copy", "floor µs", "baseline µs",
           "baseline / ours", "metadata µs", "baseline metadata µs")


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def _md_row(r) -> str:
    cells = (str(r["H"]), str(r["B"]), str(r["context"]), str(r["next_n"]), _fmt(r["us_f32"]), _fmt(r["us_bf16"]),
             _fmt(r["gbps"], 0), _fmt(r["pct_copy"]), _fmt(r["floor_us"]), _fmt(r["baseline_us"]),
             _fmt(r["ratio"], 2), _fmt(r["metadata_us"]), _fmt(r["baseline_metadata_us"]))
    return "| " + " | ".join(cells) + " |"


def to_markdown(result: dict) -> str:
    lines = [result["header"], "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + [_md_row(r) for r in result["rows"]]) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", help="comma-separated HxBxCONTEXTxNEXT_N (default: the device's list)")
    p.add_argument("--iters", type=int, help="timed calls per row")
    p.add_argument("--device", help="cpu or cuda[:i] (default: the GPU if visible)")
    p.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")
    args = p.parse_args(argv)
    start = time.time()
    result = run(args)
    text = to_markdown(result)
    print(text)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text)
    print(f"({len(result['rows'])} rows in {time.time() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
