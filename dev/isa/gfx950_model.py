"""A performance model of the gfx950 kernel: ``python -m dev.isa.gfx950_model [--asm FILE]``.

A MODEL, not a measurement: no MI355X exists here. It compiles the kernel as the ISA check does (or
reads its assembly), takes every kernel's clean stage loop (the stage loop with the fewest VALU: no
masks), counts its instructions per class, runs Debian's llvm-mca-22 on it, and predicts the time of
the benchmark rows from the balanced plan of the host emulation (op_tests/gfx950), for the main
float32 kernel of every served (H, D). A stage is the variant's own: each wave takes 64 keys of it at
any D, so a D = 64 stage (twice the key groups, half the rows per block) holds half a D = 128
stage's MFMA work per wave, and the plan counts its own stages.

Assumptions, each a number below: 256 CUs at 2.4 GHz; one 8-wave workgroup per CU, so 2 waves per
SIMD; one stage = one iteration of the clean loop per wave. The FP8 MFMA v_mfma_f32_32x32x64_f8f6f4
takes 16 passes x 4 clocks = 64 clocks of its SIMD's matrix core (LLVM's SISchedule.td; also MI355X's
5.0 PFLOP/s dense FP8 over 256 CUs x 4 SIMDs at 2.4 GHz); llvm-mca models it at 8 passes, so the
model feeds llvm-mca every FP8 MFMA twice (16 passes of port time, one extra issue slot each). A wave64
VALU instruction issues in 4 clocks. Per stage and SIMD (both waves):
  mfma_bound  = waves x mfma x 64
  valu_bound  = waves x (valu + mfma) x 4       VALU issue plus each MFMA's issue
  serialised  = waves x (valu x 4 + mfma x 64)  nothing overlaps
llvm-mca's own figure is printed beside them as it reports it: issue cycles per iteration of one wave
(one instruction per cycle), with the MFMA at its 8 passes and at 16; it is a cross-check of the
issue count, not a clock figure. A row's predicted time is the busiest workgroup's units (its stages, and fill units, which the plan
prices as a stage each) x the stage cycles / clock. Not modelled: barriers, memory waits, the LDS-DMA
latency, clock droop under load.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from dev.isa import gfx950 as isa

CLOCK_GHZ = 2.4
NUM_CUS = 256
WAVES_PER_SIMD = 2
MFMA_CLOCKS = 16 * 4
ISSUE_CLOCKS = 4
# Benchmark rows (mode, M, N) and H = 32 anchors on MI355X, µs: the design document's HIP kernel.
ROWS = (("causal", 8192, 8192, 142.0), ("causal", 4096, 32768, 423.0), ("causal", 1024, 131072, 430.0),
        ("multi_req", 4096, 32768, 156.0))


@dataclass
class StageCounts:
    mfma: int
    valu: int
    salu: int
    lds: int
    vmem: int


@dataclass
class Bounds:
    mfma: float
    valu: float
    serialised: float


def bounds(counts: StageCounts, waves: int = WAVES_PER_SIMD) -> Bounds:
    """Cycles per stage per SIMD (module docstring)."""
    return Bounds(mfma=waves * counts.mfma * MFMA_CLOCKS,
                  valu=waves * (counts.valu + counts.mfma) * ISSUE_CLOCKS,
                  serialised=waves * (counts.valu * ISSUE_CLOCKS + counts.mfma * MFMA_CLOCKS))


def predicted_us(units: int, stage_cycles: float, clock_ghz: float = CLOCK_GHZ) -> float:
    """A workgroup's `units` stages at `stage_cycles` each."""
    return units * stage_cycles / (clock_ghz * 1e3)


def clean_loop(kernel: isa.Kernel):
    """(counts, instruction lines) of the kernel's stage loop with the fewest VALU."""
    best = None
    for header, body in isa.stage_loops(kernel.blocks):
        insts = [i for b in sorted(body) for i in kernel.blocks[b].insts]
        kinds = [isa.classify(i.op) for i in insts]
        counts = StageCounts(mfma=kinds.count("mfma"), valu=kinds.count("valu") + kinds.count("permlane"),
                             salu=kinds.count("salu"), lds=kinds.count("ds_read") + kinds.count("ds_other"),
                             vmem=kinds.count("vmem_load") + kinds.count("vmem_store"))
        lines = [f"{i.op} {i.args}".strip() for i, kind in zip(insts, kinds) if kind != "branch"]
        if best is None or counts.valu < best[0].valu:
            best = (counts, lines)
    return best


def mca_cycles(lines: list[str], mfma_twice: bool = True) -> float | None:
    """llvm-mca-22's cycles per iteration of the loop (FP8 MFMAs fed twice: 16 passes), or None."""
    text = []
    for line in lines:
        text.append(line)
        if mfma_twice and line.startswith(isa.MFMA):
            text.append(line)
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        f.write("\n".join(text) + "\n")
    try:
        r = subprocess.run(["llvm-mca-22", "-mtriple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-iterations=100", f.name],
                           capture_output=True, text=True)
    except FileNotFoundError:
        return None
    finally:
        os.unlink(f.name)
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    try:
        return float(fields["Total Cycles"]) / float(fields["Iterations"])
    except (KeyError, ValueError):
        return None


def busiest_units(mode: str, M: int, N: int, H: int, clean: bool = True, D: int = 128) -> int:
    """The busiest workgroup's units in the kernel's balanced plan (the host emulation's)."""
    sys.path.insert(0, os.fspath(isa.Path(__file__).resolve().parents[2] / "op_tests"))
    from gfx950 import hostlib  # noqa: E402  (the test tree's build of the emulation)

    from aiter.testing.mqa_logits import make_windows

    lib = hostlib.load()
    ks, ke = make_windows(mode, M, N)
    units, segments = (ctypes.c_int32 * NUM_CUS)(), (ctypes.c_int32 * NUM_CUS)()
    total = lib.gfx950_balanced_plan(hostlib.ptr(ks, ctypes.c_int32), hostlib.ptr(ke, ctypes.c_int32), M, N, H, D,
                                     int(clean), NUM_CUS, units, segments)
    if total < 0:
        raise RuntimeError(f"no balanced plan for {mode} {M}x{N} H={H} D={D}")
    return max(units)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asm", help="the kernel's assembly (default: compile it as the ISA check does)")
    args = parser.parse_args(argv)
    if args.asm:
        text = open(args.asm).read()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "k.s")
            ok, stderr, _ = isa.compile_all(out)
            if not ok:
                print(stderr[-2000:], file=sys.stderr)
                return 1
            text = open(out).read()
    kernels = isa.parse(text)
    print("gfx950 stage-loop model (A MODEL: no MI355X was run; assumptions in dev/isa/gfx950_model.py)")
    print(f"{CLOCK_GHZ} GHz, {NUM_CUS} CUs, {WAVES_PER_SIMD} waves/SIMD, FP8 MFMA {MFMA_CLOCKS} clocks, "
          f"VALU {ISSUE_CLOCKS} clocks; cycles per stage per SIMD\n")
    print("| kernel | MFMA | VALU | SALU | LDS | VMEM | MFMA-bound | VALU-bound | serialised | "
          "llvm-mca cycles/iter (8-pass, 16-pass) | VGPR+AGPR | LDS bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    stage = {}
    for name in isa.KERNELS:
        if name not in kernels:
            print(f"| {name} | (not in the assembly) |")
            continue
        counts, lines = clean_loop(kernels[name])
        b = bounds(counts)
        mca = [mca_cycles(lines, mfma_twice=twice) for twice in (False, True)]
        stage[name] = b
        mca_text = "-" if None in mca else f"{mca[0]:.0f}, {mca[1]:.0f}"
        meta = kernels[name].meta
        print(f"| {name} | {counts.mfma} | {counts.valu} | {counts.salu} | {counts.lds} | {counts.vmem} | "
              f"{b.mfma:.0f} | {b.valu:.0f} | {b.serialised:.0f} | {mca_text} | "
              f"{meta.get('vgpr_count', 0)}+{meta.get('agpr_count', 0)} | {meta.get('group_segment_fixed_size', 0)} |")
    print("\nPredicted µs (busiest workgroup's units x cycles per stage; clean_logits; main path, float32):")
    print("| H | D | mode, M x N | units | MFMA-bound | VALU-bound | serialised | measured anchor (H=32 D=128, "
          "the design document's HIP kernel) |")
    print("|---|---|---|---|---|---|---|---|")
    from aiter import backends

    served = backends.backends()["gfx950"]
    for D in sorted(served.head_dims, reverse=True):
        for H in served.heads:
            b = stage.get(isa.kernel_name(H, D))
            if b is None:
                continue
            for mode, M, N, anchor in ROWS:
                units = busiest_units(mode, M, N, H, D=D)
                cells = [predicted_us(units, c) for c in (b.mfma, b.valu, b.serialised)]
                print(f"| {H} | {D} | {mode} {M}x{N} | {units} | " + " | ".join(f"{c:.0f}" for c in cells) +
                      f" | {anchor if (H, D) == (32, 128) else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
