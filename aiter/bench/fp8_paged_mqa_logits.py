"""Benchmark of the decode op fp8_paged_mqa_logits against its baseline: ``python -m aiter.bench.fp8_paged_mqa_logits``.

Per input set one table: H, D, block_kv, batch B, context, next_n, logits dtype, µs of ours and of the
baseline, ratio = baseline µs / ours (> 1: ours is faster), the A/A ratio (ours against itself, timed
the same way), each side's median when it ran first and when it ran second, GB/s (K bytes read plus
the logits written, over our time), % of the measured copy bandwidth, the floor (those bytes over the
copy bandwidth), µs per call inside a CUDA graph of 20 calls for rows under 50 µs (both sides), then
the metadata call's µs (ours / the baseline's). The op is bound by the K bytes: tokens x (D + 4).
The GPU's SM clock and power are read before and after each table.

Timing: per row, ours and the baseline in interleaved rounds (A B, B A, ...: --rounds, at least 4 on a
GPU), a turn being >= 10 calls each after a cold-L2 flush, timed by CUDA events (median); then the A/A
control, interleaved alike.

Rows (GPU): the contract's decode rows, D = 128, block_kv 64 (--head-dims, --block-kv), each batch's
context uniform in [0.7, 1.3] x context, 2-D context lengths (row j of a batch sees its length -
next_n + j + 1 keys), clean_logits False. Input sets (--inputs): "engine" (q per token and head with
a power-of-two scale filling the e4m3 range, folded into the weights; keys per token at amax/448;
weights of both signs) and "make_inputs" (the project's random inputs: q and keys at randn, scales in
[0.01, 0.11]). The baseline is DeepGEMM's fp8_fp4_paged_mqa_logits on the same inputs when the
deep_gemm package is importable. CPU: a few small rows against the float64 reference in plain torch.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from aiter.bench import cli, interleave, machine
from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata, is_supported
from aiter.testing.mqa_logits import INPUT_SETS, quantize_amax_scaled, quantize_pow2_scaled
from aiter.testing.paged_mqa_logits import (pack_kv_cache, random_block_table, reference_paged_logits,
                                            visible_mask)

FP8 = torch.float8_e4m3fn
D = 128
BLOCK_KV = 64
# (H, B, context, next_n): the rows of the contract's decode table.
GPU_ROWS = ((32, 64, 8192, 1), (32, 64, 8192, 2), (32, 64, 65536, 1), (32, 256, 8192, 1), (32, 256, 32768, 2),
            (32, 1024, 8192, 1), (32, 4096, 4096, 2), (64, 64, 8192, 1), (64, 64, 65536, 2), (64, 256, 8192, 2),
            (64, 256, 32768, 1), (64, 1024, 8192, 2), (64, 4096, 4096, 1))
CPU_ROWS = ((32, 4, 2048, 1), (64, 8, 1024, 2))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
GRAPH_BELOW_US = 50.0
GRAPH_CALLS = 20
_CHUNK_BLOCKS = 8192  # blocks quantised at a time: bounds the engine set's float temporaries


def make_decode_step(H, B, context, next_n, device, seed=0, head_dim=D, block_kv=BLOCK_KV, inputs="make_inputs"):
    """One decode step's inputs, built on `device`: lengths uniform in [0.7, 1.3] x context, a shuffled
    block table (garbage past each batch's blocks), q, the packed K cache and weights of one input set
    (the module docstring). Returns (the op's keyword arguments less schedule_meta, tokens)."""
    if inputs not in INPUT_SETS:
        raise ValueError(f"unknown input set {inputs!r}; expected one of {INPUT_SETS}")
    g = torch.Generator().manual_seed(seed)
    lens = (context * (0.7 + 0.6 * torch.rand(B, generator=g))).long().clamp(min=next_n)
    max_len = int(lens.max())
    lens_2d = lens[:, None] - next_n + torch.arange(next_n)[None, :] + 1
    blocks = (-(-lens // block_kv)).tolist()
    num_blocks = sum(blocks) + 1
    table = random_block_table(blocks, -(-max_len // block_kv), num_blocks, generator=g)
    gd = torch.Generator(device=device).manual_seed(seed)
    if inputs == "engine":
        keys = torch.empty(num_blocks, block_kv, head_dim, dtype=FP8, device=device)
        scales = torch.empty(num_blocks, block_kv, dtype=torch.float32, device=device)
        for b0 in range(0, num_blocks, _CHUNK_BLOCKS):
            b1 = min(num_blocks, b0 + _CHUNK_BLOCKS)
            act = torch.randn(b1 - b0, block_kv, head_dim, generator=gd, device=device, dtype=torch.bfloat16)
            keys[b0:b1], scales[b0:b1] = quantize_amax_scaled(act)
        q_act = torch.randn(B, next_n, H, head_dim, generator=gd, device=device, dtype=torch.bfloat16)
        q, q_scale = quantize_pow2_scaled(q_act)
        raw = torch.randn(B * next_n, H, generator=gd, device=device)
        weights = raw * q_scale.reshape(B * next_n, H) * (head_dim ** -0.5) * (H ** -0.5)
    else:
        keys = torch.randn(num_blocks, block_kv, head_dim, generator=gd, device=device).to(FP8)
        scales = torch.rand(num_blocks, block_kv, generator=gd, device=device) * 0.1 + 0.01
        q = torch.randn(B, next_n, H, head_dim, generator=gd, device=device).to(FP8)
        weights = torch.randn(B * next_n, H, generator=gd, device=device) * H ** -0.5
    cache = pack_kv_cache(keys, scales)
    del keys, scales
    return dict(q=q, kv_cache=cache, weights=weights.contiguous(), context_lens=lens_2d.to(torch.int32).to(device),
                block_table=table.to(device), max_context_len=max_len), int(lens.sum())


def deepgemm_paged(block_kv=BLOCK_KV):
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
        return deep_gemm.get_paged_mqa_logits_metadata(a["context_lens"], block_kv, deep_gemm.get_num_sms())

    return logits, metadata, f"DeepGEMM {getattr(deep_gemm, '__version__', '?')} fp8_fp4_paged_mqa_logits, same run"


# ---- arguments -------------------------------------------------------------------------------------

def row_list(text: str):
    """--rows: comma-separated HxBxCONTEXTxNEXT_N."""
    rows = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            values = tuple(int(v) for v in item.lower().split("x"))
        except ValueError:
            values = ()
        if len(values) != 4 or any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"cannot read {item!r}; use HxBxCONTEXTxNEXT_N with integers >= 1, "
                                             "e.g. 64x256x8192x2")
        rows.append(values)
    if not rows:
        raise argparse.ArgumentTypeError("no row given")
    return tuple(rows)


def dtype_list(text: str):
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names or any(n not in DTYPES for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(DTYPES)}")
    return names




# ---- the run ---------------------------------------------------------------------------------------

def _visible_rel_l2(ours, ref, context_lens, next_n, max_len):
    visible = visible_mask(context_lens, next_n, max_len)
    if not visible.any():
        return 0.0
    a, b = ours.double()[visible], ref.double()[visible]
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run(args) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    block_kvs = args.block_kv or (BLOCK_KV,)
    head_dims = args.head_dims or (D,)
    if on_gpu:
        timer = machine.GpuTimer(device, iters=args.iters or 10)
        sample = timer.samples
        bw = machine.gpu_copy_gbps(device, timer) * 1e9
        shares = torch.cuda.get_device_properties(device).multi_processor_count
        baseline = deepgemm_paged()[2] if not torch.version.hip else "none on ROCm"
        rows, rounds = GPU_ROWS, max(4, args.rounds or 4)
        timing = f"CUDA events, cold L2, {timer.iters} calls per turn (median)"
    else:
        timer = machine.CpuTimer(iters=args.iters or 1, budget_s=0.0)
        # Both sides run once before a row's timing (the check against the reference): no warm-up turn.
        sample = lambda fn, warm: timer.samples(fn, False, min_iters=timer.iters)  # noqa: E731
        bw = machine.cpu_copy_gbps() * 1e9
        shares = 8
        baseline = "the float64 reference in plain torch (gather + einsum), same inputs"
        rows, rounds = CPU_ROWS, args.rounds or 2
        timing = f"perf_counter, {timer.iters} call(s) per turn"
    rows = args.rows or rows
    dtypes = args.logits_dtypes or list(DTYPES)
    input_sets = cli.input_sets(args.inputs, on_gpu)
    control = not args.no_control
    header = (f"device: {machine.device_name(device)} | copy bandwidth {bw / 1e9:.0f} GB/s (read + write) | "
              f"2-D lengths, clean_logits False | timing: {timing}, {rounds} rounds A B / B A"
              f"{', A/A control per row' if control else ''} | baseline: {baseline} | ratio = baseline µs / ours")
    print(header, file=sys.stderr, flush=True)
    t_start = time.time()
    tables, skipped = [], 0
    for input_set in input_sets:
        clock_before = machine.gpu_clock_power(device) if on_gpu else None
        results = []
        for (H, B, context, next_n), head_dim, block_kv in ((r, d, b) for r in rows for d in head_dims for b in block_kvs):
            if not is_supported(H, head_dim, device, block_kv=block_kv, next_n=next_n):
                print(f"skip H={H} D={head_dim} block_kv={block_kv} next_n={next_n}: not served on {device}",
                      file=sys.stderr)
                continue
            if args.time_limit and time.time() - t_start > args.time_limit:
                skipped += len(dtypes)
                continue
            a, tokens = make_decode_step(H, B, context, next_n, device, seed=B + context + H, head_dim=head_dim,
                                         block_kv=block_kv, inputs=input_set)
            meta = get_paged_mqa_logits_metadata(a["context_lens"], block_kv, shares)
            call = dict(a, schedule_meta=meta)
            visible = int((a["context_lens"].long().clamp(0, a["max_context_len"])).sum())
            meta_us = timer(lambda: get_paged_mqa_logits_metadata(a["context_lens"], block_kv, shares))
            peer_logits, peer_meta, base_meta_us = None, None, None
            if on_gpu and not torch.version.hip:
                peer_logits, peer_metadata, _ = deepgemm_paged(block_kv)
                if peer_logits is not None:
                    try:
                        peer_meta = peer_metadata(a)
                        base_meta_us = timer(lambda: peer_metadata(a))
                    except (RuntimeError, ValueError, TypeError) as e:
                        print(f"baseline skipped for H={H} B={B}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
                        peer_logits = None
            for dtype_name in dtypes:
                dtype = DTYPES[dtype_name]
                if not is_supported(H, head_dim, device, block_kv=block_kv, next_n=next_n, logits_dtype=dtype):
                    print(f"skip H={H} D={head_dim} {dtype_name}: not served on {device}", file=sys.stderr)
                    continue
                label = f"H={H} D={head_dim} block_kv={block_kv} B={B} context={context} next_n={next_n} {dtype_name}"
                ours = lambda: fp8_paged_mqa_logits(**call, logits_dtype=dtype)  # noqa: E731
                base, err = None, None
                if peer_logits is not None:
                    base = lambda: peer_logits(a, peer_meta, dtype)  # noqa: E731
                    try:
                        err = _visible_rel_l2(ours(), base(), a["context_lens"], next_n, a["max_context_len"])
                    except (RuntimeError, ValueError, TypeError) as e:
                        print(f"baseline skipped for {label}: {str(e).splitlines()[0][:160]}", file=sys.stderr)
                        base = None
                elif not on_gpu:
                    base = lambda: reference_paged_logits(a["q"], a["kv_cache"], a["weights"],  # noqa: E731
                                                          a["context_lens"], a["block_table"], a["max_context_len"],
                                                          False)
                    err = _visible_rel_l2(ours(), base(), a["context_lens"], next_n, a["max_context_len"])
                bar = 4e-3 if dtype == torch.bfloat16 else 1e-4
                if err is not None and not err <= bar:
                    print(f"warning: {label}: ours and the baseline differ (relative L2 {err:.2e})", file=sys.stderr)
                row = dict(H=H, D=head_dim, block_kv=block_kv, B=B, context=context, next_n=next_n, dtype=dtype_name,
                           inputs=input_set, tokens=tokens, visible=visible, rel_l2_vs_baseline=err)
                row.update(interleave.compare(ours, base, rounds, sample, control=control))
                bytes_moved = tokens * (head_dim + 4) + visible * torch.empty((), dtype=dtype).element_size()
                row.update(bytes=bytes_moved, gbps=bytes_moved / (row["us"] * 1e-6) / 1e9,
                           pct_copy=100.0 * bytes_moved / (row["us"] * 1e-6) / bw, floor_us=bytes_moved / bw * 1e6,
                           metadata_us=meta_us, baseline_metadata_us=base_meta_us, graph_us=None,
                           baseline_graph_us=None)
                fastest = min(v for v in (row["us"], row["baseline_us"]) if v is not None)
                if on_gpu and fastest < GRAPH_BELOW_US and not args.no_graph:
                    g = machine.graph_per_call_us({"ours": ours} if base is None else {"ours": ours, "baseline": base},
                                                  device, calls=GRAPH_CALLS)
                    row.update(graph_us=g["ours"], baseline_graph_us=g.get("baseline"))
                    for side, why in g["errors"].items():
                        print(f"graph skipped for {side} in {label}: {why}", file=sys.stderr)
                results.append(row)
                print(_md_row(row), file=sys.stderr, flush=True)
            del a, call
        clock_after = machine.gpu_clock_power(device) if on_gpu else None
        tables.append(dict(inputs=input_set, rows=results, clock_before=clock_before, clock_after=clock_after,
                           summary=summarise(results)))
    return {"header": header, "copy_bytes_per_s": bw, "baseline": baseline, "rounds": rounds, "aa_control": control,
            "tables": tables, "rows": [r for t in tables for r in t["rows"]], "skipped_for_time_limit": skipped,
            "seconds": time.time() - t_start}


def summarise(rows) -> list:
    out = []
    for H in sorted({r["H"] for r in rows}):
        mine = [r for r in rows if r["H"] == H]
        ratios = [r["ratio"] for r in mine if r["ratio"]]
        aa = [r["aa_ratio"] for r in mine if r["aa_ratio"]]
        out.append(dict(H=H, geomean=interleave.geomean(ratios), rows=len(ratios),
                        below_1=sum(r < 1.0 for r in ratios), aa_geomean=interleave.geomean(aa),
                        aa_min=min(aa) if aa else None, aa_max=max(aa) if aa else None))
    return out


COLUMNS = ("H", "D", "block_kv", "B", "context", "next_n", "logits", "µs ours", "µs baseline", "ratio", "A/A",
           "ours 1st / 2nd µs", "baseline 1st / 2nd µs", "GB/s", "% copy", "floor µs", "graph µs ours / baseline",
           "metadata µs ours / baseline")


def _pair(a, b):
    return "-" if a is None and b is None else f"{cli.fmt(a)} / {cli.fmt(b)}"


def _md_row(r) -> str:
    cells = (str(r["H"]), str(r["D"]), str(r["block_kv"]), str(r["B"]), str(r["context"]), str(r["next_n"]), r["dtype"],
             cli.fmt(r["us"]), cli.fmt(r["baseline_us"]), cli.fmt(r["ratio"], 2), cli.fmt(r["aa_ratio"], 3),
             _pair(r["ours_first_us"], r["ours_second_us"]), _pair(r["baseline_first_us"], r["baseline_second_us"]),
             cli.fmt(r["gbps"]), cli.fmt(r["pct_copy"]), cli.fmt(r["floor_us"]), _pair(r["graph_us"], r["baseline_graph_us"]),
             _pair(r["metadata_us"], r["baseline_metadata_us"]))
    return "| " + " | ".join(cells) + " |"


def to_markdown(result: dict) -> str:
    lines = [result["header"], ""]
    for t in result["tables"]:
        lines += cli.table_head(t, COLUMNS)
        lines += [_md_row(r) for r in t["rows"]] + [""]
        for sm in t["summary"]:
            aa = ("" if sm["aa_geomean"] is None else
                  f" | A/A geomean {sm['aa_geomean']:.3f} (range {sm['aa_min']:.3f}-{sm['aa_max']:.3f})")
            lines.append(f"- H={sm['H']}, inputs {t['inputs']}: geomean ratio {cli.fmt(sm['geomean'], 3)} ({sm['rows']} rows,"
                         f" {sm['below_1']} below 1){aa}")
        lines.append("")
    if result.get("skipped_for_time_limit"):
        lines.append(f"(time limit reached: {result['skipped_for_time_limit']} rows not run)")
    return "\n".join(lines) + "\n"


def estimate_row_s(H, B, context, next_n, head_dim=D, dtypes=2, rounds=4, iters=10, control=True, bw=3.8e12,
                   flush_us=60.0, overhead_us=25.0):
    """Seconds one GPU row costs (an estimate for planning a session): per logits dtype, every timed call
    is the K bytes over the bandwidth plus the flush and launch overhead, warm-ups and the graph rows;
    the inputs are drawn on the GPU, the block table on the CPU (~20 µs per batch)."""
    tokens = B * context
    kernel_us = (tokens * (head_dim + 4) + tokens * next_n * 4) / bw * 1e6 + 6.0
    calls = rounds * 2 * (2 if control else 1) * (iters + 1) + 4
    per_dtype = calls * (kernel_us + flush_us + overhead_us)
    if kernel_us < GRAPH_BELOW_US:
        per_dtype += 2 * (2 + GRAPH_CALLS * 5) * kernel_us
    return (dtypes * per_dtype) * 1e-6 + 0.05 + B * 2e-5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m aiter.bench.fp8_paged_mqa_logits", description=__doc__.splitlines()[0],
                                epilog="Row syntax: --rows 64x256x8192x2,32x64x65536x1 (H x B x context x next_n).")
    p.add_argument("--rows", type=row_list, metavar="HxBxCONTEXTxNEXT_N,...",
                   help="comma-separated rows (default: the device's list)")
    p.add_argument("--head-dims", type=cli.int_list("64,128"), help=f"comma-separated head dims D (default {D})")
    p.add_argument("--block-kv", type=cli.int_list("64,128"),
                   help=f"comma-separated keys per cache block (default {BLOCK_KV})")
    p.add_argument("--logits-dtypes", type=dtype_list, help="comma-separated logits dtypes (default float32,bfloat16)")
    return cli.parse_with_shared_options(p, argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.estimate:
        rows = args.rows or GPU_ROWS
        n_sets = 2 if (args.inputs or "both") == "both" else 1
        n_dt = len(args.logits_dtypes or DTYPES)
        total = 0.0
        print("| H | D | B | context | next_n | est. s per row (x input sets) |\n|---|---|---|---|---|---|")
        for (H, B, context, next_n) in rows:
            for head_dim in args.head_dims or (D,):
                sec = estimate_row_s(H, B, context, next_n, head_dim, n_dt, max(4, args.rounds or 4), args.iters or 10,
                                     not args.no_control) * len(args.block_kv or (BLOCK_KV,))
                total += sec * n_sets
                print(f"| {H} | {head_dim} | {B} | {context} | {next_n} | {sec:.2f} |")
        print(f"estimated total: {total:.0f} s for {n_sets} input set(s), {n_dt} logits dtype(s) (plus ~2 s of "
              f"machine figures, and the baseline's first-use JIT build of each kernel it has not built before)")
        return 0
    return cli.run_and_report(args, run, to_markdown, lambda result: len(result["rows"]))


if __name__ == "__main__":
    sys.exit(main())
