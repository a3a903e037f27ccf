"""Benchmark of fp8_mqa_logits against its baseline on the present device: ``python -m aiter.bench.fp8_mqa_logits``.

Per input set one table: shape (M x N), window mode, H, D, clean_logits, the logits variant, µs of ours
and of the baseline, ratio = baseline µs / ours (> 1: ours is faster), the A/A ratio (ours against
itself, timed the same way: how far a ratio moves with no change), each side's median when it ran
first and when it ran second, TFLOP/s = 2*H*D*in_window_pairs / t, % of the measured peak, floor µs =
max(FLOPs / peak, output bytes / copy bandwidth) (output bytes: rows * width * element size with
clean_logits, in-window pairs * element size without) and, for rows under 50 µs on a GPU, µs per call
inside a CUDA graph of 20 calls (both sides). The GPU's SM clock and power are read before and after
each table. Under each table: per H, the geomean ratio over the core-work rows beside the all-rows one.

Timing: per row, ours and the baseline in interleaved rounds (A B, B A, A B, B A, ...: --rounds, at
least 4 on a GPU); a turn on a GPU is >= 10 calls, each after a cold-L2 flush, timed by CUDA events,
its median kept; then the A/A control (ours against a second handle on the same call), interleaved alike.

Input sets (--inputs): "engine", as a serving engine makes them (q per query and head with a
power-of-two scale filling the e4m3 range, folded into the weights; kv per key at amax/448; weights of
both signs: aiter.testing.mqa_logits.make_engine_inputs), and "make_inputs" (the tests' inputs: q and kv
at 2 x randn, kv_scales spread over two decades).

Variants (--variants, default full): full (float32, [M, N]), bf16 (bfloat16 logits), compressed
([M, W] with W the longest window, max_seqlen_k = W), compressed-bf16. A variant the device's kernel
does not serve is skipped with the reason; the baseline runs the same variant.

GPU: the contract's shapes (docs/operator.md, "Benchmark"), H = 32 and 64, D = 128; the baseline is
DeepGEMM's op when the deep_gemm package is importable (aiter/bench/baselines.py), else none. CPU:
small shapes, no graph and no clock read; the baseline is the same computation in plain torch float32
(einsum + relu + weighted sum), which the op is also checked against.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from aiter.bench import baselines, cli, interleave, machine
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, is_supported
from aiter.testing.mqa_logits import (WINDOW_MODES, clamped_windows, compress_logits, in_window_pairs,
                                      make_input_set, make_windows, mode_applies, window_mask)

GPU_SHAPES = baselines.BENCHMARK_SHAPES
GPU_QUICK = (("causal", 4096, 32768), ("multi_req", 4096, 32768), ("causal", 128, 4096))
CPU_SHAPES = (("causal", 128, 4096), ("causal", 64, 8192), ("causal", 1024, 1024), ("causal", 1024, 8192))
CPU_QUICK = (("causal", 128, 4096), ("causal", 1024, 1024))
# name -> (compressed, logits dtype)
VARIANTS = {"full": (False, torch.float32), "bf16": (False, torch.bfloat16), "compressed": (True, torch.float32),
            "compressed-bf16": (True, torch.bfloat16)}
# Heads per CPU shape: the long 1024 x 8192 row runs at H = 32 only, to keep the CPU run short.
CPU_HEADS_LIMIT = {("causal", 1024, 8192): (32,)}
# The core work: rows the kernel spends its time on, without the -inf pass of clean_logits.
CORE_MIN_M, CORE_MIN_N = 1024, 8192
CORE_RULE = (f"core work = rows with clean_logits False, M >= {CORE_MIN_M} queries and N >= {CORE_MIN_N} keys "
             f"(the contract's long causal and multi_req rows)")
GRAPH_BELOW_US = 50.0
GRAPH_CALLS = 20
WINDOW_HELP = {
    "causal": "one request, the queries are its last M tokens: ks = 0, ke = N - M + m + 1",
    "cp": "context parallel (needs N % M == 0, M even): two halves of M/2 rows ending at two chunk offsets",
    "misaligned": "windows of N/3 keys starting at (53 m + 100) mod N/2",
    "empty": "rows m % 3 == 0 end before key 0, m % 3 == 1 are inverted (keys [100, 0)), the rest causal",
    "past_end": "even rows past the last key (empty), odd rows causal",
    "multi_req": "four requests (fewer if M or N < 8), each its own N/4 keys, causal within",
}


def is_core(row: dict) -> bool:
    return not row["clean"] and row["M"] >= CORE_MIN_M and row["N"] >= CORE_MIN_N


def torch_fp32_logits(q, kv, kv_scales, weights, ks, ke, clean, max_chunk_bytes=256 << 20):
    """The op in plain torch float32: dense scores, relu, weighted head sum, then the window mask.
    Rows go in chunks so the [rows, H, N] intermediate stays under ``max_chunk_bytes``."""
    M, H, _ = q.shape
    N = kv.shape[0]
    k = kv.float()
    s = kv_scales.reshape(-1)
    out = torch.empty(M, N, dtype=torch.float32, device=q.device)
    rows = max(1, max_chunk_bytes // max(1, H * N * 4))
    for m0 in range(0, M, rows):
        m1 = min(M, m0 + rows)
        scores = torch.einsum("mhd,nd->mhn", q[m0:m1].float(), k)
        out[m0:m1] = torch.einsum("mhn,mh->mn", torch.relu(scores * s), weights[m0:m1])
    if clean:
        out.masked_fill_(~window_mask(ks, ke, N), float("-inf"))
    return out


# ---- arguments -------------------------------------------------------------------------------------

def shape_list(text: str):
    """--shapes: comma-separated 'MxN' (every default row of that shape, else causal) or 'mode:MxN'."""
    wanted = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        mode, _, dims = item.rpartition(":")
        mode = mode.strip()
        if mode and mode not in WINDOW_MODES:
            raise argparse.ArgumentTypeError(
                f"unknown window mode {mode!r} in {item!r}; window modes: {', '.join(WINDOW_MODES)}")
        try:
            M, N = (int(x) for x in dims.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"cannot read {item!r}; use MxN or mode:MxN, e.g. causal:8192x8192")
        if M < 1 or N < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: M and N must be >= 1")
        if mode and not mode_applies(mode, M, N):
            raise argparse.ArgumentTypeError(f"{item!r}: cp windows need N % M == 0 and M even")
        wanted.append((mode or None, M, N))
    if not wanted:
        raise argparse.ArgumentTypeError("no shape given")
    return wanted


def name_list(choices):
    def parse(text: str):
        names = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in names if v not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return names
    return parse


def resolve_shapes(wanted, default):
    out = []
    for mode, M, N in wanted:
        matches = [s for s in default if (s[1], s[2]) == (M, N) and (mode is None or s[0] == mode)]
        out += matches or [(mode or "causal", M, N)]
    return tuple(dict.fromkeys(out))




# ---- the run ---------------------------------------------------------------------------------------

def _setup(args):
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    s = dict(device=device, on_gpu=on_gpu, name=machine.device_name(device))
    if on_gpu:
        timer = machine.GpuTimer(device, iters=args.iters or 10)
        s.update(timer=timer, sample=timer.samples, peak=machine.gpu_fp8_peak_tflops(device, timer) * 1e12,
                 bw=machine.gpu_copy_gbps(device, timer) * 1e9,
                 peak_how="FP8 peak (torch._scaled_mm 8192^3, e4m3, bf16 out)",
                 shapes=GPU_SHAPES, quick=GPU_QUICK, rounds=max(4, args.rounds or 4),
                 timing=f"CUDA events, cold L2, {timer.iters} calls per turn (median)")
        peer, s["baseline"] = baselines.deepgemm_logits() if not torch.version.hip else (None, "none on ROCm")
        s["peer"] = peer
    else:
        timer = machine.CpuTimer(iters=args.iters or 1, budget_s=0.0)
        # Every CPU row calls both sides once before its timing (the check against torch): no warm-up turn.
        s.update(timer=timer, sample=lambda fn, warm: timer.samples(fn, False, min_iters=timer.iters),
                 peak=machine.cpu_fp32_peak_gflops() * 1e9, bw=machine.cpu_copy_gbps() * 1e9,
                 peak_how="peak = best torch fp32 matmul (the CPU path's bf16 dot products can exceed it)",
                 shapes=CPU_SHAPES, quick=CPU_QUICK, rounds=args.rounds or 2,
                 timing=f"perf_counter, {timer.iters} call(s) per turn", peer=None,
                 baseline="plain torch float32 (einsum + relu + weighted sum), same inputs")
    return s


def _row_calls(s, q, kv, sc, w, ks, ke, clean, options, compressed, longest, label):
    """(ours, baseline or None, relative L2 between them on sampled rows or None): the two calls of one
    row; the baseline runs once first, so a variant it refuses gets no column rather than a failed timing,
    and its output is compared with ours."""
    ours = lambda: fp8_mqa_logits(q, kv, sc, w, ks, ke, clean, **options)  # noqa: E731
    if s["peer"] is not None:
        base = lambda: s["peer"](q, kv, sc, w, ks, ke, clean, **options)  # noqa: E731
        try:
            ref = base()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
            print(f"baseline skipped for {label}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                  file=sys.stderr)
            return ours, None, None
        err = _check_against(ours(), ref, ks, ke, kv.shape[0], compressed, what=f"baseline ({label})")
        return ours, base, err
    if s["on_gpu"]:
        return ours, None, None
    N = kv.shape[0]
    dtype = options["logits_dtype"]

    def naive():
        full = torch_fp32_logits(q, kv, sc, w, ks, ke, clean)
        return (compress_logits(full, ks, ke, longest) if compressed else full).to(dtype)

    err = _check_against(ours(), naive(), ks, ke, N, compressed)
    return ours, naive, err


def run(args) -> dict:
    s = _setup(args)
    device, on_gpu = s["device"], s["on_gpu"]
    shapes = resolve_shapes(args.shapes, s["shapes"]) if args.shapes else (s["quick"] if args.quick else s["shapes"])
    heads = args.heads or (32, 64)
    head_dims = args.head_dims or (128,)
    cleans = {"both": (True, False), "1": (True,), "0": (False,)}[args.clean]
    variants = args.variants or ["full"]
    input_sets = cli.input_sets(args.inputs, on_gpu)
    rounds = s["rounds"]
    control = not args.no_control
    header = (f"device: {s['name']} | {s['peak_how']}: {s['peak'] / 1e12:.3g} TFLOP/s | copy bandwidth "
              f"{s['bw'] / 1e9:.0f} GB/s (read + write) | timing: {s['timing']}, {rounds} rounds A B / B A"
              f"{', A/A control per row' if control else ''} | baseline: {s['baseline']} | ratio = baseline µs / ours"
              f" | {CORE_RULE}")
    print(header, file=sys.stderr, flush=True)  # progress goes to stderr; stdout gets the tables
    t_start = time.time()
    tables, skipped_for_time = [], 0
    for input_set in input_sets:
        clock_before = machine.gpu_clock_power(device) if on_gpu else None
        rows = []
        for mode, M, N, H, D in ((*shape, H, D) for shape in shapes for D in head_dims for H in heads):
            if not on_gpu and H not in CPU_HEADS_LIMIT.get((mode, M, N), (H,)) and not args.shapes:
                continue
            if not is_supported(H, D, device):
                print(f"skip {M}x{N} H={H}: no native kernel for H={H}, D={D} on {device}", file=sys.stderr)
                continue
            if args.time_limit and time.time() - t_start > args.time_limit:
                skipped_for_time += len(variants) * len(cleans)
                continue
            q, kv, sc, w = make_input_set(input_set, M, N, H, D, device, seed=M * 7 + N + H)
            ks, ke = make_windows(mode, M, N, device)
            pairs = in_window_pairs(ks, ke, N)
            flops = 2.0 * H * D * pairs
            starts, ends = clamped_windows(ks, ke, N)
            longest = max(1, int((ends - starts).clamp_min(0).max().item()))
            for variant, clean in ((v, c) for v in variants for c in cleans):
                compressed, dtype = VARIANTS[variant]
                if not is_supported(H, D, device, logits_dtype=dtype, compressed=compressed, clean_logits=clean):
                    print(f"skip {M}x{N} H={H} {variant} clean={clean}: not served on {device}", file=sys.stderr)
                    continue
                options = dict(max_seqlen_k=longest if compressed else 0, logits_dtype=dtype)
                label = f"{M}x{N} {mode} H={H} D={D} {variant} clean={clean} inputs={input_set}"
                ours, base, err = _row_calls(s, q, kv, sc, w, ks, ke, clean, options, compressed, longest, label)
                row = dict(shape=f"{M}x{N}", M=M, N=N, mode=mode, H=H, D=D, clean=clean, variant=variant,
                           inputs=input_set, in_window_pairs=pairs, rel_l2_vs_baseline=err)
                row.update(interleave.compare(ours, base, rounds, s["sample"], control=control))
                width = longest if compressed else N
                out_bytes = torch.empty((), dtype=dtype).element_size() * (M * width if clean else pairs)
                row.update(tflops=flops / (row["us"] * 1e-6) / 1e12,
                           pct_peak=100.0 * flops / (row["us"] * 1e-6) / s["peak"],
                           floor_us=max(flops / s["peak"], out_bytes / s["bw"]) * 1e6, core=is_core(row),
                           graph_us=None, baseline_graph_us=None)
                fastest = min(v for v in (row["us"], row["baseline_us"]) if v is not None)
                if on_gpu and fastest < GRAPH_BELOW_US and not args.no_graph:
                    calls = {"ours": ours} if base is None else {"ours": ours, "baseline": base}
                    g = machine.graph_per_call_us(calls, device, calls=GRAPH_CALLS)
                    row.update(graph_us=g["ours"], baseline_graph_us=g.get("baseline"))
                    for side, why in g["errors"].items():
                        print(f"graph skipped for {side} in {label}: {why}", file=sys.stderr)
                rows.append(row)
                print(_md_row(row), file=sys.stderr, flush=True)
            del q, kv, sc, w
        clock_after = machine.gpu_clock_power(device) if on_gpu else None
        tables.append(dict(inputs=input_set, rows=rows, clock_before=clock_before, clock_after=clock_after,
                           summary=summarise(rows, heads)))
    return {"header": header, "device": s["name"], "peak_flops": s["peak"], "copy_bytes_per_s": s["bw"],
            "baseline": s["baseline"], "rounds": rounds, "aa_control": control, "core_rule": CORE_RULE,
            "tables": tables, "rows": [r for t in tables for r in t["rows"]],
            "skipped_for_time_limit": skipped_for_time, "seconds": time.time() - t_start}


def summarise(rows, heads) -> list:
    """Per H: geomean ratio over the core-work rows and over all rows, and the A/A ratios' spread."""
    out = []
    for H in heads:
        mine = [r for r in rows if r["H"] == H]
        if not mine:
            continue
        core = [r["ratio"] for r in mine if r["core"] and r["ratio"]]
        every = [r["ratio"] for r in mine if r["ratio"]]
        aa = [r["aa_ratio"] for r in mine if r["aa_ratio"]]
        out.append(dict(H=H, core_geomean=interleave.geomean(core), core_rows=len(core),
                        all_geomean=interleave.geomean(every), all_rows=len(every),
                        aa_geomean=interleave.geomean(aa), aa_min=min(aa) if aa else None,
                        aa_max=max(aa) if aa else None))
    return out


def _check_against(ours, ref, ks, ke, N, compressed=False, what="torch baseline", sampled_rows=64):
    """Relative L2 of ours against ref inside the windows, on up to ``sampled_rows`` evenly spaced rows;
    a warning on stderr when it exceeds the logits dtype's bar (1e-4 float32, 4e-3 bfloat16)."""
    rows = torch.linspace(0, ours.shape[0] - 1, min(sampled_rows, ours.shape[0]), device=ours.device).long()
    ks, ke = ks[rows], ke[rows]
    ours, ref = ours[rows].double(), ref[rows].double()
    if compressed:
        starts, ends = clamped_windows(ks, ke, N)
        inside = torch.arange(ours.shape[1], device=ours.device)[None, :] < (ends - starts).clamp_min(0)[:, None]
    else:
        inside = window_mask(ks, ke, N)
    if not inside.any():
        return 0.0
    bar = 4e-3 if torch.bfloat16 in (ours.dtype, ref.dtype) else 1e-4
    err = ((ours - ref)[inside].norm() / ref[inside].norm().clamp_min(1e-30)).item()
    if not err <= bar:
        print(f"warning: op and {what} differ (relative L2 {err:.2e})", file=sys.stderr)
    return err


# ---- output ----------------------------------------------------------------------------------------

COLUMNS = ("shape", "mode", "H", "D", "clean", "variant", "µs ours", "µs baseline", "ratio", "A/A",
           "ours 1st / 2nd µs", "baseline 1st / 2nd µs", "TFLOP/s", "% peak", "floor µs", "graph µs ours / baseline")


def _pair(a, b):
    return "-" if a is None and b is None else f"{cli.fmt(a)} / {cli.fmt(b)}"


def _md_row(r) -> str:
    cells = (r["shape"], r["mode"], str(r["H"]), str(r["D"]), "yes" if r["clean"] else "no", r["variant"],
             cli.fmt(r["us"]), cli.fmt(r["baseline_us"]), cli.fmt(r["ratio"], 2), cli.fmt(r["aa_ratio"], 3),
             _pair(r["ours_first_us"], r["ours_second_us"]), _pair(r["baseline_first_us"], r["baseline_second_us"]),
             cli.fmt(r["tflops"], 2), cli.fmt(r["pct_peak"]), cli.fmt(r["floor_us"]),
             _pair(r["graph_us"], r["baseline_graph_us"]))
    return "| " + " | ".join(cells) + " |"


def summary_lines(table: dict) -> list:
    lines = []
    for sm in table["summary"]:
        aa = ("" if sm["aa_geomean"] is None else
              f" | A/A geomean {sm['aa_geomean']:.3f} (range {sm['aa_min']:.3f}-{sm['aa_max']:.3f})")
        lines.append(f"- H={sm['H']}, inputs {table['inputs']}: core-work geomean ratio {cli.fmt(sm['core_geomean'], 3)} "
                     f"({sm['core_rows']} rows) | all-rows geomean {cli.fmt(sm['all_geomean'], 3)} ({sm['all_rows']} rows){aa}")
    return lines


def to_markdown(result: dict) -> str:
    lines = [result["header"], ""]
    for t in result["tables"]:
        lines += cli.table_head(t, COLUMNS)
        lines += [_md_row(r) for r in t["rows"]]
        lines += [""] + summary_lines(t) + [""]
    if result.get("skipped_for_time_limit"):
        lines.append(f"(time limit reached: {result['skipped_for_time_limit']} rows not run)")
    return "\n".join(lines) + "\n"


# ---- run-time estimate -----------------------------------------------------------------------------

def estimate_row_s(mode, M, N, H, D, clean, rounds=4, iters=10, control=True, peak=1.2e15, bw=3.8e12,
                   flush_us=80.0, overhead_us=25.0, row_overhead_s=0.3):
    """Seconds one GPU row costs (an estimate for planning a session): every timed call is its kernel
    time (FLOPs / peak or bytes / bandwidth, whichever is longer, for both sides alike) plus the L2 flush
    and launch overhead; warm-ups, the check against the baseline and the graph rows; row_overhead_s of
    Python per row (windows, pair count, comparison). The inputs are estimated by print_estimate."""
    ks, ke = make_windows(mode, M, N)
    pairs = in_window_pairs(ks, ke, N)
    kernel_us = max(2.0 * H * D * pairs / peak, 4.0 * (M * N if clean else pairs) / bw) * 1e6 + 6.0
    turns = rounds * 2 * (2 if control else 1)
    calls = turns * (iters + 1) + 4 + 2
    total_us = calls * (kernel_us + flush_us + overhead_us)
    if kernel_us < GRAPH_BELOW_US:
        total_us += 2 * (2 + GRAPH_CALLS * 5) * kernel_us
    return total_us * 1e-6 + row_overhead_s


def print_estimate(args) -> None:
    shapes = resolve_shapes(args.shapes, GPU_SHAPES) if args.shapes else (GPU_QUICK if args.quick else GPU_SHAPES)
    heads, dims = args.heads or (32, 64), args.head_dims or (128,)
    cleans = {"both": (True, False), "1": (True,), "0": (False,)}[args.clean]
    n_sets = 2 if (args.inputs or "both") == "both" else 1
    n_var = len(args.variants or ["full"])
    rounds = max(4, args.rounds or 4)
    total = 0.0
    print("| shape | mode | H | D | clean | est. s per row (x input sets x variants) |\n|---|---|---|---|---|---|")
    for mode, M, N in shapes:
        for D in dims:
            for H in heads:
                for clean in cleans:
                    sec = estimate_row_s(mode, M, N, H, D, clean, rounds, args.iters or 10, not args.no_control)
                    # make_inputs draws on the CPU (~1e8 elements/s with the fp8 cast), once per shape and H.
                    inputs_s = (M * H * D + N * D) / 1e8
                    total += sec * n_var * n_sets + inputs_s / len(cleans)
                    print(f"| {M}x{N} | {mode} | {H} | {D} | {'yes' if clean else 'no'} | {sec:.2f} |")
    print(f"estimated total: {total:.0f} s for {n_sets} input set(s), {n_var} variant(s) (plus ~5 s of machine "
          f"figures, and the baseline's first-use JIT build of each kernel it has not built before)")


def parse_args(argv=None) -> argparse.Namespace:
    modes = "\n".join(f"  {m:10s} {d}" for m, d in WINDOW_HELP.items())
    p = argparse.ArgumentParser(
        prog="python -m aiter.bench.fp8_mqa_logits", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"window modes (row m of M, keys [ks, ke) of N):\n{modes}\n\n"
               "shape syntax: --shapes causal:8192x8192,multi_req:4096x32768 (MODE:MxN), or MxN for every\n"
               "default row of that size (causal if none).\n\n"
               f"{CORE_RULE}.")
    p.add_argument("--heads", type=cli.int_list("32,64"), help="comma-separated head counts (default 32,64)")
    p.add_argument("--head-dims", type=cli.int_list("32,64"), help="comma-separated head dims (default 128)")
    p.add_argument("--shapes", type=shape_list, metavar="[MODE:]MxN,...",
                   help=f"rows to run, comma-separated [mode:]MxN; modes: {', '.join(WINDOW_MODES)} "
                        "(default: the device's list)")
    p.add_argument("--quick", action="store_true", help="a few shapes only")
    p.add_argument("--clean", choices=("both", "1", "0"), default="both", help="clean_logits values to run")
    p.add_argument("--variants", type=name_list(tuple(VARIANTS)),
                   help=f"comma-separated logits variants (default full): {', '.join(VARIANTS)}")
    return cli.parse_with_shared_options(p, argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.estimate:
        print_estimate(args)
        return 0
    return cli.run_and_report(args, run, to_markdown, lambda result: len(result["rows"]), table_end="",
                              count_to_stdout=True)


if __name__ == "__main__":
    sys.exit(main())
