"""Benchmark of fp8_mqa_logits on the present device: ``python -m aiter.bench.fp8_mqa_logits``.

One table: shape (M x N), window mode, H, D, clean_logits, the logits variant, µs, TFLOP/s = 2*H*D*in_window_pairs / t,
% of the measured peak, floor µs = max(FLOPs / peak, output bytes / copy bandwidth), and the
baseline's µs over ours (> 1: ours is faster). Output bytes are rows * width * element size with
clean_logits (every element is written), in-window pairs * element size without.

Variants (``--variants``, default full): full (float32, [M, N]), bf16 (bfloat16 logits), compressed
([M, W] with W the longest window, max_seqlen_k = W), compressed-bf16. A variant the device's kernel
does not serve is skipped with the reason; the baseline runs the same variant.

GPU: the contract's shapes (docs/operator.md), H = 32 and 64 (``--heads``), D = 128 (``--head-dims``), cold L2, median of
>= 10 CUDA-event timings; the baseline is DeepGEMM's op timed in the same run on the same inputs
when the deep_gemm package is importable (aiter/bench/baselines.py), else none. CPU: small shapes; the peak is torch's best float32 matmul rate and the baseline is the
same computation in plain torch float32 (einsum + relu + weighted sum), so the ratio says how much
the C++ CPU path beats naive torch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from aiter.bench import baselines, machine
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, is_supported
from aiter.testing.mqa_logits import (clamped_windows, compress_logits, in_window_pairs, make_inputs, make_windows,
                                      window_mask)

GPU_SHAPES = baselines.BENCHMARK_SHAPES
GPU_QUICK = (("causal", 4096, 32768), ("multi_req", 4096, 32768), ("causal", 128, 4096))
CPU_SHAPES = (("causal", 128, 4096), ("causal", 64, 8192), ("causal", 1024, 1024), ("causal", 1024, 8192))
CPU_QUICK = (("causal", 128, 4096), ("causal", 1024, 1024))
# name -> (compressed, logits dtype)
VARIANTS = {"full": (False, torch.float32), "bf16": (False, torch.bfloat16), "compressed": (True, torch.float32),
            "compressed-bf16": (True, torch.bfloat16)}
# Heads per CPU shape: the long 1024 x 8192 row runs at H = 32 only, to keep the CPU run short.
CPU_HEADS_LIMIT = {("causal", 1024, 8192): (32,)}


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


def _parse_shapes(text: str, default):
    """'MxN' (any mode with that shape) or 'mode:MxN', comma separated."""
    wanted = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        mode, _, dims = item.rpartition(":")
        try:
            M, N = (int(x) for x in dims.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: cannot read {item!r}; use MxN or mode:MxN (e.g. causal:8192x8192)")
        matches = [s for s in default if (s[1], s[2]) == (M, N) and (not mode or s[0] == mode)]
        wanted += matches or [(mode or "causal", M, N)]
    return tuple(dict.fromkeys(wanted))


def _fmt(x, digits=1):
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.{digits}f}"
    return f"{x:.3g}"


def run(args) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_gpu = device.type == "cuda"
    torch.manual_seed(0)
    if on_gpu:
        timer = machine.GpuTimer(device, iters=args.iters or 20)
        peak = machine.gpu_fp8_peak_tflops(device, timer) * 1e12
        bw = machine.gpu_copy_gbps(device, timer) * 1e9
        peak_how = "FP8 peak (torch._scaled_mm 8192^3, e4m3, bf16 out)"
        shapes_all, quick = GPU_SHAPES, GPU_QUICK
        name = machine.device_name(device)
        peer, baseline_name = baselines.deepgemm_logits() if not torch.version.hip else (None, "none on ROCm")
        timing = f"CUDA events, cold L2, median of {timer.iters}"
    else:
        timer = machine.CpuTimer(iters=args.iters or 10)
        peak = machine.cpu_fp32_peak_gflops() * 1e9
        bw = machine.cpu_copy_gbps() * 1e9
        peak_how = "peak = best torch fp32 matmul (the CPU path's bf16 dot products can exceed it)"
        shapes_all, quick = CPU_SHAPES, CPU_QUICK
        name = machine.device_name(device)
        peer = None
        baseline_name = "plain torch float32 (einsum + relu + weighted sum), same inputs"
        timing = "perf_counter, median of 3-10"
    shapes = _parse_shapes(args.shapes, shapes_all) if args.shapes else (quick if args.quick else shapes_all)
    heads = tuple(int(h) for h in args.heads.split(",")) if args.heads else (32, 64)
    head_dims = tuple(int(d) for d in args.head_dims.split(",")) if args.head_dims else (128,)
    cleans = {"both": (True, False), "1": (True,), "0": (False,)}[args.clean]
    variants = args.variants.split(",") if args.variants else ["full"]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    header = (
        f"device: {name} | {peak_how}: {peak / 1e12:.3g} TFLOP/s | copy bandwidth {bw / 1e9:.0f} GB/s"
        f" (read + write) | timing: {timing} | baseline: {baseline_name}"
    )
    print(header, file=sys.stderr, flush=True)  # progress goes to stderr; stdout gets one table
    rows = []
    for mode, M, N, H, D in ((*shape, H, D) for shape in shapes for D in head_dims for H in heads):
        if not on_gpu and H not in CPU_HEADS_LIMIT.get((mode, M, N), (H,)) and not args.shapes:
            continue
        if not is_supported(H, D, device):
            print(f"skip {M}x{N} H={H}: no native kernel for H={H}, D={D} on {device}", file=sys.stderr)
            continue
        q, kv, s, w = make_inputs(M, N, H, D, device, seed=M * 7 + N + H)
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
            us = timer(lambda: fp8_mqa_logits(q, kv, s, w, ks, ke, clean, **options))
            width = longest if compressed else N
            out_bytes = torch.empty((), dtype=dtype).element_size() * (M * width if clean else pairs)
            floor_us = max(flops / peak, out_bytes / bw) * 1e6
            label = f"{M}x{N} H={H} D={D} {variant}"
            if peer is not None:
                base_us = _time_peer(timer, peer, (q, kv, s, w, ks, ke, clean), label, **options)
            elif not on_gpu:
                def naive():
                    full = torch_fp32_logits(q, kv, s, w, ks, ke, clean)
                    return (compress_logits(full, ks, ke, longest) if compressed else full).to(dtype)
                base_us = timer(naive)
                _check_against(fp8_mqa_logits(q, kv, s, w, ks, ke, clean, **options), naive(), ks, ke, N,
                               compressed)
            else:
                base_us = None
            row = {
                "shape": f"{M}x{N}", "M": M, "N": N, "mode": mode, "H": H, "D": D, "clean": clean,
                "variant": variant,
                "us": us, "tflops": flops / (us * 1e-6) / 1e12, "pct_peak": 100.0 * flops / (us * 1e-6) / peak,
                "floor_us": floor_us, "baseline_us": base_us,
                "ratio": (base_us / us) if base_us else None, "in_window_pairs": pairs,
            }
            rows.append(row)
            print(_md_row(row), file=sys.stderr, flush=True)
    return {"header": header, "device": name, "peak_flops": peak, "copy_bytes_per_s": bw,
            "baseline": baseline_name, "rows": rows}


def _time_peer(timer, peer, args, label, **options):
    """The peer's time on the same inputs, or None (with the reason on stderr) where it refuses them."""
    try:
        return timer(lambda: peer(*args, **options))
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        print(f"baseline skipped for {label}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
        return None


def _check_against(ours, ref, ks, ke, N, compressed=False):
    if compressed:
        starts, ends = clamped_windows(ks, ke, N)
        inside = torch.arange(ours.shape[1], device=ours.device)[None, :] < (ends - starts).clamp_min(0)[:, None]
    else:
        inside = window_mask(ks, ke, N)
    if not inside.any():
        return
    bar = 4e-3 if torch.bfloat16 in (ours.dtype, ref.dtype) else 1e-4
    ours, ref = ours.double(), ref.double()
    err = ((ours - ref)[inside].norm() / ref[inside].norm().clamp_min(1e-30)).item()
    if err > bar:
        print(f"warning: op and torch baseline differ (relative L2 {err:.2e})", file=sys.stderr)


COLUMNS = ("shape", "mode", "H", "D", "clean", "variant", "µs", "TFLOP/s", "% peak", "floor µs", "baseline µs", "baseline / ours")


def _md_row(r) -> str:
    cells = (r["shape"], r["mode"], str(r["H"]), str(r["D"]), "yes" if r["clean"] else "no", r["variant"], _fmt(r["us"]),
             _fmt(r["tflops"], 2), _fmt(r["pct_peak"]), _fmt(r["floor_us"]), _fmt(r["baseline_us"]),
             _fmt(r["ratio"], 2))
    return "| " + " | ".join(cells) + " |"


def to_markdown(result: dict) -> str:
    lines = [result["header"], "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += [_md_row(r) for r in result["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m aiter.bench.fp8_mqa_logits", description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", help="comma-separated head counts (default 32,64)")
    p.add_argument("--head-dims", help="comma-separated head dims (default 128)")
    p.add_argument("--shapes", help="comma-separated MxN or mode:MxN (default: the device's list)")
    p.add_argument("--quick", action="store_true", help="a few shapes only")
    p.add_argument("--clean", choices=("both", "1", "0"), default="both", help="clean_logits values to run")
    p.add_argument("--variants", help=f"comma-separated logits variants (default full): {', '.join(VARIANTS)}")
    p.add_argument("--iters", type=int, help="timed calls per row (GPU: at least 10)")
    p.add_argument("--device", help="cpu or cuda[:i] (default: the GPU if visible)")
    p.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")
    args = p.parse_args(argv)
    t0 = time.time()
    result = run(args)
    table = to_markdown(result)
    print(table, end="")
    print(f"({len(result['rows'])} rows in {time.time() - t0:.0f} s)")
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
