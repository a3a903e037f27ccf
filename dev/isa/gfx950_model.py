"""A performance model of the gfx950 kernel: ``python -m dev.isa.gfx950_model [--asm FILE]``.

A MODEL, not a measurement: no MI355X exists here. It compiles the kernel as the ISA check does (or
reads its assembly), takes every kernel's clean stage loop (the stage loop with the fewest VALU: no
masks), counts its instructions per class, runs Debian's llvm-mca-22 on it, and predicts the time of
the benchmark rows from the balanced plan of the host emulation (dev/gfx950), for the main
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
issue count, not a clock figure.

The -inf fill (clean_logits) is priced by what it issues and what it writes. A fill unit is
block_rows x fill_cols = kFillUnitElems elements (csrc/gfx950/tunables.h) written as 16-byte stores:
a row's chunks of the unit by whole waves (unit bytes / 8 KiB stores per wave where a row has a
wave's worth of chunks or more, one per row where it has fewer), each store with
FILL_VALU_PER_STORE VALU, plus FILL_VALU_PER_ROW VALU for each row a wave takes (its resource and
the -inf registers); both counted in the assembly (fill_run_loop checks the first, the first table
prints it). Every CU writes at its share of HBM, HBM_BYTES_PER_S / 256 CUs (13.0 bytes per clock), the
stages' logits (block_rows x stage_keys x 4 bytes a stage) and its fill alike. A workgroup with s
stages and f fill units, at c cycles a stage, takes
  fill written between its stages:  max(s c + f fill_issue, (s stage_bytes + f unit_bytes) / share)
  fill after its stages:            max(s c, s stage_bytes / share) + max(f fill_issue, f unit_bytes / share)
(fill_issue = 2 waves x the unit's VALU x 4 clocks, added to the VALU-bound and serialised columns,
not to the MFMA-bound one), and a row's prediction is its busiest workgroup in the balanced plan of
the host emulation (the kernel writes the fill between stages where geometry.fill_between_stages
says so, else after them). The compute bound beside it is the same plan without clean_logits (no
fill). The table also gives the workgroup with the most units and the most fill bytes at the
CU's share.
Not modelled: barriers, memory waits (the fill's stores also count in the loop's vmcnt waits),
the LDS-DMA latency, the partial 16-byte chunks at a row part's ends, an HBM that delivers less than
its peak or not evenly to every CU, clock droop under load.
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
WAVES_PER_WORKGROUP = 8
LANES = 64
CHUNK_BYTES = 16  # one buffer_store_dwordx4 lane
HBM_BYTES_PER_S = 8.0e12  # MI355X's peak HBM3E bandwidth
# VALU of the fill, counted in the assembly: the whole-chunk loop adds one v_add_u32 (the lane's
# offset) per buffer_store_dwordx4; outside it, a row's part of a unit takes about 7 (the -inf
# registers and the lane offset: v_mov). The partial-chunk path (about 12 more, at a part's ends
# only) is left out.
FILL_VALU_PER_STORE = 1
FILL_VALU_PER_ROW = 7
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


def cycles_us(cycles: float, clock_ghz: float = CLOCK_GHZ) -> float:
    return cycles / (clock_ghz * 1e3)


def cu_write_bytes_per_clock(clock_ghz: float = CLOCK_GHZ) -> float:
    """One CU's share of HBM: 8 TB/s over 256 CUs at 2.4 GHz, 13.0 bytes per clock."""
    return HBM_BYTES_PER_S / NUM_CUS / (clock_ghz * 1e9)


@dataclass
class FillUnit:
    bytes: int            # written by the workgroup
    stores_per_wave: int  # buffer_store_dwordx4 each wave issues
    rows_per_wave: int    # rows each wave takes (fill_row_threads, csrc/gfx950/layout.h)

    def valu_per_wave(self) -> int:
        return self.rows_per_wave * FILL_VALU_PER_ROW + self.stores_per_wave * FILL_VALU_PER_STORE


def fill_unit(geometry: dict, element_bytes: int = 4) -> FillUnit:
    """A variant's fill unit (geometry: hostlib.geometry's dict): a row's chunks of the unit by its
    row threads (whole waves: the kernel's fill_row_threads, csrc/gfx950/layout.h), so a row with
    fewer chunks than a wave has lanes still takes a store."""
    rows = geometry["block_rows"]
    unit_bytes = rows * geometry["fill_cols"] * element_bytes
    row_threads = geometry["fill_row_threads"]
    rows_at_once = LANES * WAVES_PER_WORKGROUP // row_threads
    row_chunks = geometry["fill_cols"] * element_bytes // CHUNK_BYTES
    rows_per_wave = rows // rows_at_once
    return FillUnit(bytes=unit_bytes, stores_per_wave=rows_per_wave * -(-row_chunks // row_threads),
                    rows_per_wave=rows_per_wave)


@dataclass
class Work:
    """One workgroup's share of the plan."""
    stages: int
    fill: int


def workgroup_cycles(work: Work, stage_cycles: float, unit: FillUnit, stage_bytes: int, between: bool,
                     fill_valu: bool = True) -> float:
    """A workgroup's cycles (module docstring): its stages, and its fill units written between them
    (`between`) or after them; fill_valu: the fill's VALU counts against the stage cycles' bound."""
    compute = work.stages * stage_cycles
    issue = work.fill * WAVES_PER_SIMD * unit.valu_per_wave() * ISSUE_CLOCKS if fill_valu else 0.0
    share = cu_write_bytes_per_clock()
    if between:
        return max(compute + issue, (work.stages * stage_bytes + work.fill * unit.bytes) / share)
    return max(compute, work.stages * stage_bytes / share) + max(issue, work.fill * unit.bytes / share)


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


def _hostlib():
    from dev.gfx950 import hostlib  # the host emulation's build (compiled on first use)

    return hostlib


def plan_work(mode: str, M: int, N: int, H: int, clean: bool = True, D: int = 128) -> list[Work]:
    """Every workgroup's stages and fill units in the kernel's balanced plan (the host emulation's)."""
    from aiter.testing.mqa_logits import make_windows

    hostlib = _hostlib()
    lib = hostlib.load()
    ks, ke = make_windows(mode, M, N)
    units, segments, fill = [(ctypes.c_int32 * NUM_CUS)() for _ in range(3)]
    total = lib.gfx950_balanced_plan(hostlib.ptr(ks, ctypes.c_int32), hostlib.ptr(ke, ctypes.c_int32), M, N, H, D,
                                     int(clean), NUM_CUS, units, segments, fill)
    if total < 0:
        raise RuntimeError(f"no balanced plan for {mode} {M}x{N} H={H} D={D}")
    return [Work(stages=u - f, fill=f) for u, f in zip(units, fill)]


def busiest_units(mode: str, M: int, N: int, H: int, clean: bool = True, D: int = 128) -> int:
    """The busiest workgroup's units (stages and fill units) in the kernel's balanced plan."""
    return max(w.stages + w.fill for w in plan_work(mode, M, N, H, clean, D))


def fill_run_loop(kernel: isa.Kernel) -> tuple[int, int] | None:
    """(VALU, 16-byte stores) of the fill's whole-chunk loop, the innermost loop of
    buffer_store_dwordx4 without MFMA; None when the kernel has none."""
    best = None
    loops = isa.natural_loops(kernel.blocks)
    for header, body in loops.items():
        if any(h != header and inner < body for h, inner in loops.items()):
            continue
        ops = [i.op for b in body for i in kernel.blocks[b].insts]
        stores = ops.count("buffer_store_dwordx4")
        if stores == 0 or isa.MFMA in ops:
            continue
        valu = sum(isa.classify(op) in ("valu", "permlane") for op in ops)
        if best is None or valu * best[1] < best[0] * stores:
            best = (valu, stores)
    return best


def row_prediction(work: list[Work], stage_cycles: float, unit: FillUnit, stage_bytes: int, between: bool,
                   fill_valu: bool = True) -> float:
    """The busiest workgroup's cycles."""
    return max(workgroup_cycles(w, stage_cycles, unit, stage_bytes, between, fill_valu) for w in work)


# ------------------------------------------------------------------------------------------------
# Designs that remove a hardware-only assumption (docs/gfx950.md): what each would cost here.
# ------------------------------------------------------------------------------------------------
# Loaded latency of a K DMA, issue to LDS write, assumed (no MI355X measured it): the K ring's
# depth only matters once it exceeds what the prefetched stages cover.
DMA_LATENCY_US = (1.0, 2.0, 3.0)
M0_16_BITS = 1 << 16  # LDS bytes a 16-bit M0 reaches
PAIR_RECORDS_NOW = 0x7FFFFFFC  # csrc/gfx950/layout.h kPairRecords
PAIR_RECORDS_BIT31 = 0x80000000  # the alternative with bit 31 set (kOutOfRange)


def pipelined_stage_cycles(stage_cycles: float, depth: int, latency_cycles: float, stage_bytes: int) -> float:
    """A stage's cycles with `depth` stages prefetched: the DMA of stage i + depth is issued when
    stage i starts and must land before stage i + depth does (depth stage times), and one CU
    cannot take its K faster than its share of HBM."""
    return max(stage_cycles, latency_cycles / depth, stage_bytes / cu_write_bytes_per_clock())


def ring_top(geometry: dict, depth: int) -> int:
    """The LDS byte past the highest LDS-DMA target of a ring of depth + 1 slots at LDS 0."""
    return (depth + 1) * geometry["slot_bytes"]


def deepest_ring_below(geometry: dict, limit: int = M0_16_BITS) -> int:
    """The largest prefetch depth whose DMA targets all stay below `limit` (0: none fits)."""
    return max(0, limit // geometry["slot_bytes"] - 1)


@dataclass
class Alternative:
    name: str
    removes: str
    cost: list[str]      # one line per assumption the cost depends on
    favoured: bool       # the model favours the alternative over the kernel as built
    verdict: str


def small_m_ring_alternative(geometries: dict, stage_cycles: dict) -> Alternative:
    """Small-M kernels with every LDS-DMA target below 64 KiB: a shallower ring. geometries and
    stage_cycles map (H, D) of the small-M path to hostlib.geometry's dict and the clean loop's
    VALU-bound cycles per stage."""
    cost, worst = [], 0.0
    for (H, D), g in sorted(geometries.items()):
        now, alt = g["prefetch_stages"], deepest_ring_below(g)
        c = stage_cycles[(H, D)]
        cells = []
        for us in DMA_LATENCY_US:
            lat = us * CLOCK_GHZ * 1e3
            t_now = pipelined_stage_cycles(c, now, lat, g["stage_bytes"])
            t_alt = pipelined_stage_cycles(c, alt, lat, g["stage_bytes"]) if alt else float("inf")
            worst = max(worst, t_alt / t_now - 1.0)
            cells.append(f"{us:.0f} us: {t_now:.0f} -> {t_alt:.0f} cycles ({100 * (t_alt / t_now - 1):+.0f}%)")
        cost.append(f"H={H} D={D}: slot {g['slot_bytes']} B, depth {now} (DMA targets up to "
                    f"{ring_top(g, now):#x}) -> depth {alt} (up to {ring_top(g, alt):#x}); stage {c:.0f} cycles; "
                    + ", ".join(cells))
    return Alternative(
        name="small-M ring below 64 KiB",
        removes="M0 honouring 17 bits or more for the LDS DMA",
        cost=cost, favoured=worst <= 0.0,
        verdict=("the alternative: no assumed latency makes it slower" if worst <= 0.0 else
                 f"the kernel as built (depth 4): the shallower ring is never faster and up to "
                 f"{100 * worst:.0f}% slower per stage at the assumed latencies; the first-run probe "
                 f"(an LDS DMA at M0 = 0x12000) decides whether it is needed"))


def pair_records_alternative(stage_stores: dict[int, int] | None = None) -> Alternative:
    """The H = 16 pair resource's num_records: kPairRecords (2^31 - 4, the kernel as built) against
    0x80000000 (bit 31 set). Either is one SGPR constant; the cost is the reach the launcher
    allows a row pair (distance + a stage's columns), 4 bytes less. stage_stores: H -> stores
    per stage, the same for both (the resource does not change the instruction stream)."""
    lost = PAIR_RECORDS_BIT31 - PAIR_RECORDS_NOW
    cost = [f"reach of one pair resource: {PAIR_RECORDS_NOW} B against {PAIR_RECORDS_BIT31} B "
            f"({lost} B less: {lost // 4} float32 column(s), {lost / PAIR_RECORDS_BIT31:.1e} of it); "
            "instructions per stage: the same (one constant in an SGPR either way)"]
    if stage_stores:
        cost.append("stores per stage and wave: " + ", ".join(f"H={h}: {n}" for h, n in sorted(stage_stores.items())))
    return Alternative(
        name="pair resource num_records below 2^31",
        removes="the range check honouring bit 31 of num_records (a signed compare drops every H = 16 logit)",
        cost=cost, favoured=lost / PAIR_RECORDS_BIT31 < 1e-6,
        verdict="the alternative, which the kernel uses (kPairRecords = 2^31 - 4): it costs no instruction "
                "and 4 bytes of reach")


def print_alternatives(kernels: dict) -> None:
    from aiter import backends

    hostlib = _hostlib()
    served = backends.backends()["gfx950"]
    geometries, cycles = {}, {}
    for D in served.head_dims:
        for H in served.heads:
            name = isa.kernel_name(H, D, small=True)
            if name in kernels:
                geometries[(H, D)] = hostlib.geometry(H, True, D)
                cycles[(H, D)] = bounds(clean_loop(kernels[name])[0]).valu
    stores = {H: hostlib.geometry(H, False, 128)["stores_per_stage"] for H in served.heads}
    print("\nDesigns that remove a hardware-only assumption (a MODEL; assumed loaded DMA latencies "
          f"{', '.join(f'{u:.0f}' for u in DMA_LATENCY_US)} us):")
    for alt in (small_m_ring_alternative(geometries, cycles), pair_records_alternative(stores)):
        print(f"- {alt.name} (removes: {alt.removes})")
        for line in alt.cost:
            print(f"    {line}")
        print(f"    the model favours {alt.verdict}")


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
          "llvm-mca cycles/iter (8-pass, 16-pass) | VGPR+AGPR | LDS bytes | fill loop VALU / 16-byte stores |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
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
        run = fill_run_loop(kernels[name])
        print(f"| {name} | {counts.mfma} | {counts.valu} | {counts.salu} | {counts.lds} | {counts.vmem} | "
              f"{b.mfma:.0f} | {b.valu:.0f} | {b.serialised:.0f} | {mca_text} | "
              f"{meta.get('vgpr_count', 0)}+{meta.get('agpr_count', 0)} | {meta.get('group_segment_fixed_size', 0)} | "
              f"{'-' if run is None else f'{run[0]} / {run[1]}'} |")
    print(f"\nPredicted µs (clean_logits; main path, float32; the busiest workgroup of the balanced plan; "
          f"HBM {HBM_BYTES_PER_S / 1e12:.0f} TB/s, {cu_write_bytes_per_clock():.1f} bytes per clock per CU):")
    print("| H | D | mode, M x N | most units: stages + fill units | fill | compute bound (no fill) MFMA / VALU | "
          "fill written (busiest, at its share) | predicted MFMA-bound | VALU-bound | serialised | "
          "VALU-bound / compute bound | measured anchor (H=32 D=128, the design document's HIP kernel) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    from aiter import backends

    hostlib = _hostlib()
    served = backends.backends()["gfx950"]
    for D in sorted(served.head_dims, reverse=True):
        for H in served.heads:
            b = stage.get(isa.kernel_name(H, D))
            if b is None:
                continue
            geometry = hostlib.geometry(H, False, D)
            unit = fill_unit(geometry)
            stage_bytes = geometry["block_rows"] * geometry["stage_keys"] * 4
            between = bool(geometry["fill_between_stages"])
            for mode, M, N, anchor in ROWS:
                work = plan_work(mode, M, N, H, D=D)
                plain = plan_work(mode, M, N, H, clean=False, D=D)
                busiest = max(work, key=lambda w: w.stages + w.fill)
                bound = [row_prediction(plain, c, unit, stage_bytes, between) for c in (b.mfma, b.valu)]
                cells = [row_prediction(work, c, unit, stage_bytes, between, fill_valu=c != b.mfma)
                         for c in (b.mfma, b.valu, b.serialised)]
                written = max(w.fill * unit.bytes for w in work) / cu_write_bytes_per_clock()
                print(f"| {H} | {D} | {mode} {M}x{N} | {busiest.stages} + {busiest.fill} | "
                      f"{'between stages' if between else 'after the stages'} | "
                      f"{cycles_us(bound[0]):.0f} / {cycles_us(bound[1]):.0f} | {cycles_us(written):.0f} | " +
                      " | ".join(f"{cycles_us(c):.0f}" for c in cells) +
                      f" | {cells[1] / bound[1]:.2f} | {anchor if (H, D) == (32, 128) else '-'} |")
    print_alternatives(kernels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
