"""What one eager prefill call costs the host, ours against DeepGEMM, and which layer of ours pays it.

    python -m dev.host_cost [--rows causal:1024x1024:32,causal:128x4096:64] [--calls 200] [--layers]
                            [--device cuda]

Per row and side: the host's µs for the call alone (the device synchronised before each call, so the
launch queue is empty; p10 / p50 / p90 of --calls calls), the µs per call of 1000 calls back to back
(20 on the CPU; one synchronisation at the end: the larger of host and device time), and on a GPU the
bench's timer (aiter/bench/machine.py: GpuTimer, each call after a cold-L2 flush; p10 / p50 / p90 of
60), which reads the host's time instead of the kernel's when the host takes longer to issue the call
than the GPU takes to flush. --layers splits ours (first row only): the public function, the
registered op torch.ops.aiter.fp8_mqa_logits (without the public function's argument checks), the
C++ module's native op, and two bare allocations. Rows are mode:MxN:H (D = 128, clean_logits False,
the make_inputs set). DeepGEMM joins when importable. On the CPU (the default without a GPU) only the
host columns are printed.
"""

from __future__ import annotations

import argparse
import time

import torch


def percentiles(samples: list) -> str:
    s = sorted(samples)
    return " / ".join(f"{s[int(q * (len(s) - 1))]:.1f}" for q in (0.1, 0.5, 0.9))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def host_us(fn, device: torch.device, calls: int) -> list:
    for _ in range(20):
        fn()
    samples = []
    for _ in range(calls):
        sync(device)
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    return samples


def back_to_back_us(fn, device: torch.device, calls: int = 1000) -> float:
    sync(device)
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - t) / calls * 1e6


def parse_rows(text: str) -> list:
    rows = []
    for item in text.split(","):
        mode, shape, heads = item.split(":")
        M, N = (int(x) for x in shape.split("x"))
        rows.append((mode, M, N, int(heads)))
    return rows


def main(argv=None) -> None:
    import aiter
    from aiter.bench import baselines, machine
    from aiter.ops import native
    from aiter.testing.mqa_logits import make_input_set, make_windows

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="causal:1024x1024:32,causal:1024x1024:64,causal:128x4096:32",
                   type=parse_rows, help="mode:MxN:H,...")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=200, help="host-timed calls per row and side")
    p.add_argument("--layers", action="store_true", help="split ours into its layers (first row)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    dg = baselines.deepgemm_logits()[0] if on_gpu else None
    timer = machine.GpuTimer(device, iters=60) if on_gpu else None  # the bench's own timer

    for index, (mode, M, N, H) in enumerate(args.rows):
        q, kv, scales, weights = make_input_set("make_inputs", M, N, H, 128, device)
        ks, ke = make_windows(mode, M, N, device)
        sides = {"ours": lambda: aiter.fp8_mqa_logits(q, kv, scales, weights, ks, ke, clean_logits=False)}
        if dg is not None:
            sides["DeepGEMM"] = lambda: dg(q, kv, scales, weights, ks, ke, False)
        for name, fn in sides.items():
            host = host_us(fn, device, args.calls)  # warms fn up first (module loads, a peer's JIT)
            chain = back_to_back_us(fn, device, 1000 if on_gpu else 20)
            line = (f"{mode} {M}x{N} H={H} {name}: host p10/p50/p90 {percentiles(host)} µs"
                    f" | back to back {chain:.1f} µs/call")
            if on_gpu:
                line += f" | bench timer p10/p50/p90 {percentiles(timer.samples(fn))} µs"
            print(line, flush=True)
        if args.layers and index == 0:
            native_op = native.ops("prefill", device).fp8_mqa_logits.default
            registered = torch.ops.aiter.fp8_mqa_logits.default
            layers = {
                "public aiter.fp8_mqa_logits": sides["ours"],
                "torch.ops.aiter.fp8_mqa_logits": lambda: registered(q, kv, scales, weights, ks, ke, False, 0, 0, None),
                "native op (C++ binding)": lambda: native_op(q, kv, scales, weights, ks, ke, False, None, 0, 0, ""),
                "torch.empty logits + workspace": lambda: (torch.empty(M, N, device=device),
                                                           torch.empty(4096, dtype=torch.uint8, device=device)),
            }
            for name, fn in layers.items():
                print(f"  {name}: host p10/p50/p90 {percentiles(host_us(fn, device, args.calls))} µs", flush=True)


if __name__ == "__main__":
    main()
