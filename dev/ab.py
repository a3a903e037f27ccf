"""Same-run A/B of two checkouts of this package (e.g. the previous main against this tree).

    python dev/ab.py --tree base=/tmp/base_checkout --tree new=. [--heads 32,64] [--head-dim 128] [--out PREFIX]
    python dev/ab.py --tree plain=. --tree hook=.:-DSOME_HOOK=1     (a kernel build flag as the variant)
    python dev/ab.py ... --variant compressed-bf16     (a logits variant of the benchmark; default full)
    python dev/ab.py ... --inputs engine               (the engine-quantised input set; default make_inputs)

Each tree runs in its own worker process (PYTHONPATH = that tree, its own JIT cache), through its
public op `aiter.fp8_mqa_logits`, on inputs drawn from the same seed. A tree may carry extra flags
for the GPU compiler (NAME=DIR:FLAGS, passed as AITER_JIT_EXTRA_CUDA_CFLAGS), which is how a
measurement variant is built without shipping its hook. The driver asks the two
workers in turn, row by row and repetition by repetition (never both at once), so clock and power
drift hit A and B alike (A B, then B A); each answer is a median of CUDA-event timings with a cold L2. Before the
timings of a row the two outputs are compared on a sample of rows, in-window elements only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# A long chunk of short windows: 65536 rows of 64 keys each, where any per-row cost of the plan is
# largest next to the compute (before the sm90 pricing kernel, every CTA scanned all rows).
SHORT_WINDOWS = ("short64", 65536, 65536)
SAMPLED_ROWS = 64


# ---- worker: one tree's package, answering one JSON request per line ---------------------------

def _windows(mode, M, N, device):
    import torch
    from aiter.testing.mqa_logits import make_windows

    if mode == "short64":
        ke = (torch.arange(M, dtype=torch.int64) + 1).clamp(max=N)
        return (ke - 64).clamp(min=0).to(torch.int32).to(device), ke.to(torch.int32).to(device)
    return make_windows(mode, M, N, device)


def worker(device_name: str) -> None:
    import torch

    import aiter
    from aiter.bench import machine
    from aiter.bench.fp8_mqa_logits import VARIANTS
    from aiter.testing.mqa_logits import make_input_set

    device = torch.device(device_name)
    timer = machine.CpuTimer(iters=3) if device.type == "cpu" else None
    cached = {}
    for line in sys.stdin:
        request = json.loads(line)
        key = (request["mode"], request["M"], request["N"], request["H"], request["D"], request["inputs"])
        compressed, dtype = VARIANTS[request["variant"]]
        if key not in cached:
            cached.clear()
            mode, M, N, H, D, _ = key
            q, kv, scales, weights = make_input_set(request["inputs"], M, N, H, D, device, seed=M * 7 + N + H)
            cached[key] = (q, kv, scales, weights, *_windows(mode, M, N, device))
        inputs, clean = cached[key], request["clean"]
        longest = int((inputs[5] - inputs[4]).clamp(min=0).max()) if compressed else 0
        options = dict(max_seqlen_k=max(longest, 1) if compressed else 0, logits_dtype=dtype)
        if request["what"] == "sample":
            out = aiter.fp8_mqa_logits(*inputs, clean, **options).float()
            rows = torch.linspace(0, out.shape[0] - 1, min(SAMPLED_ROWS, out.shape[0])).long().to(device)
            torch.save(out[rows].cpu(), request["path"])
            reply = {"ok": True}
        else:
            if timer is None:
                timer = machine.GpuTimer(device, iters=request["iters"])
            reply = {"us": timer(lambda: aiter.fp8_mqa_logits(*inputs, clean, **options))}
        print(json.dumps(reply), flush=True)


# ---- driver --------------------------------------------------------------------------------------

class Worker:
    def __init__(self, name: str, tree: Path, flags: str, cache: Path, device: str):
        self.name = name
        env = dict(os.environ, PYTHONPATH=os.fspath(tree), AITER_JIT_DIR=os.fspath(cache), PYTHONUNBUFFERED="1",
                   AITER_JIT_EXTRA_CUDA_CFLAGS=flags)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", device],
                                     cwd=os.fspath(tree), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def ask(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.name} died (exit {self.proc.wait()})")
        return json.loads(line)


def compare_samples(paths, ks, ke, N, clean, compressed=False):
    """Relative L2 between the two builds' sampled rows, inside the windows; and the -inf masks."""
    import torch

    a, b = (torch.load(p) for p in paths)
    rows = torch.linspace(0, ks.shape[0] - 1, min(SAMPLED_ROWS, ks.shape[0])).long()
    cols = torch.arange(a.shape[1])
    start = ks.cpu()[rows].clamp(0, N).unsqueeze(1)
    end = ke.cpu()[rows].clamp(0, N).unsqueeze(1)
    if compressed:  # row m's keys sit in columns [0, end - start)
        start, end = torch.zeros_like(start), (end - start).clamp(min=0)
    inside = (cols >= start) & (cols < end)
    same_mask = bool(torch.equal(torch.isinf(a), torch.isinf(b))) if clean else True
    if not inside.any():
        return 0.0, same_mask
    diff = (a - b)[inside].double().norm() / a[inside].double().norm().clamp_min(1e-30)
    return diff.item(), same_mask


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return 0
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from aiter.bench.baselines import BENCHMARK_SHAPES
    from aiter.bench.fp8_mqa_logits import VARIANTS

    parser = argparse.ArgumentParser(prog="python dev/ab.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=DIR[:FLAGS]", help="exactly two")
    parser.add_argument("--heads", default="32,64")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--variant", choices=tuple(VARIANTS), default="full",
                        help="logits variant (aiter.bench.fp8_mqa_logits): dtype and layout")
    parser.add_argument("--shapes", help="mode:MxN,... (default: the benchmark's shapes and short64:65536x65536)")
    parser.add_argument("--inputs", choices=("make_inputs", "engine"), default="make_inputs",
                        help="input set (aiter.testing.mqa_logits.make_input_set)")
    parser.add_argument("--clean", choices=("both", "1", "0"), default="both")
    parser.add_argument("--reps", type=int, default=4, help="A/B rounds per row, in A B / B A order")
    parser.add_argument("--iters", type=int, default=10, help="timed calls per round")
    parser.add_argument("--out", metavar="PREFIX")
    parser.add_argument("--jit-root", metavar="DIR", help="JIT caches DIR/jit-NAME (default: a new temp dir)")
    parser.add_argument("--smoke", action="store_true", help="CPU, two tiny shapes: checks the script itself")
    args = parser.parse_args(argv)
    trees = [t.split("=", 1) for t in args.tree]
    if len(trees) != 2 or any(len(t) != 2 for t in trees):
        raise SystemExit("--tree: give exactly two, NAME=DIR[:FLAGS]")
    trees = [(name, *spec.partition(":")[::2]) for name, spec in trees]
    device = "cpu" if args.smoke else "cuda"
    shapes = (("causal", 64, 256), ("short64", 200, 300)) if args.smoke else BENCHMARK_SHAPES + (SHORT_WINDOWS,)
    if args.shapes:
        shapes = tuple((mode, *map(int, dims.lower().split("x")))
                       for mode, dims in (item.split(":") for item in args.shapes.split(",")))
    scratch = Path(tempfile.mkdtemp(prefix="aiter_ab_"))
    jit_root = Path(args.jit_root) if args.jit_root else scratch
    workers = [Worker(name, Path(tree).resolve(), flags, jit_root / f"jit-{name}", device) for name, tree, flags in trees]
    names = [w.name for w in workers]
    heads = tuple(int(h) for h in args.heads.split(","))
    cleans = {"both": (True, False), "1": (True,), "0": (False,)}[args.clean]
    rows = []
    print(f"| shape | mode | H | clean | {names[0]} µs | {names[1]} µs | {names[1]} / {names[0]} |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    for mode, M, N in shapes:
        for H in heads:
            for clean in cleans:
                request = dict(mode=mode, M=M, N=N, H=H, D=args.head_dim, clean=clean, iters=args.iters,
                               variant=args.variant, inputs=args.inputs)
                paths = [os.fspath(scratch / f"sample-{w.name}.pt") for w in workers]
                for w, path in zip(workers, paths):
                    w.ask(what="sample", path=path, **request)
                ks, ke = _windows(mode, M, N, "cpu")
                diff, same_mask = compare_samples(paths, ks, ke, N, clean, VARIANTS[args.variant][0])
                if diff > 1e-6 or not same_mask:
                    print(f"warning: {M}x{N} {mode} H={H} clean={clean}: builds differ (rel L2 {diff:.2e},"
                          f" same -inf mask {same_mask})", file=sys.stderr)
                times = [[], []]
                for rep in range(args.reps):
                    # A B, then B A: the second of two back-to-back runs can find the chip hotter (700 W
                    # cap), so neither tree is always second.
                    for i in ((0, 1) if rep % 2 == 0 else (1, 0)):
                        times[i].append(workers[i].ask(what="time", **request)["us"])
                us = [statistics.median(t) for t in times]
                row = dict(shape=f"{M}x{N}", mode=mode, H=H, clean=clean, a_us=us[0], b_us=us[1],
                           ratio=us[1] / us[0], rel_l2_between=diff, same_mask=same_mask)
                rows.append(row)
                print(f"| {row['shape']} | {mode} | {H} | {'yes' if clean else 'no'} | {us[0]:.1f} | {us[1]:.1f}"
                      f" | {row['ratio']:.3f} |", flush=True)
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"worst {names[1]} / {names[0]}: {worst['ratio']:.3f} ({worst['shape']} {worst['mode']} H={worst['H']}"
          f" clean={worst['clean']}); rows over 1.03: {sum(r['ratio'] > 1.03 for r in rows)} of {len(rows)};"
          f" rows whose outputs differ: {sum(r['rel_l2_between'] > 1e-6 or not r['same_mask'] for r in rows)}")
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(dict(trees=trees, rows=rows), indent=1))
    for w in workers:
        w.proc.stdin.close()
        w.proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
