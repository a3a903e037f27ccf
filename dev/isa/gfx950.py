"""Compile the gfx950 kernel (device code only) and check its ISA.

    python -m dev.isa.check --arch gfx950 --asm-out FILE

Compiles every source of build_config.GFX950_SOURCES (the launcher and the kernel instances, one
file per H, in parallel) with clang (Debian's clang++-22 on CPU machines; AITER_GFX950_CLANG
overrides) and the JIT's GFX950_HIP_FLAGS, writes their assembly with its metadata to FILE (one
after the other), and fails when, for any kernel of KERNELS (every served H x D x path x logits
format, csrc/gfx950/instances.h: 48), or when one is missing:
  - the stage loop (each innermost loop holding MFMAs) lacks v_mfma_f32_32x32x64_f8f6f4 or
    v_permlane32_swap_b32, holds an s_nop, packed fp32 math (v_pk_fma/mul/add_f32, which does not
    co-issue with MFMA), or an s_waitcnt vmcnt the compiler placed (the loop's only vmcnt wait is
    the hand-placed one in inline asm);
  - a path through the stage loop issues a VMEM op count other than the one the hand-placed wait
    assumes (the kernel states it in an asm comment "gfx950-stage-vmem N");
  - a v_permlane32_swap reads a VGPR written by VALU less than 2 instructions earlier;
  - scratch is used (private segment, spills, scratch instructions);
  - VGPR+AGPR exceed 256 or LDS exceeds 160 KiB: the stated occupancy is one 512-thread workgroup
    per CU, i.e. 2 waves per SIMD, 512 / 2 = 256 registers per lane;
  - anywhere in the kernel, one of the hazards the compiler does not guard in front of inline asm
    (an EXEC write within 4 wait states or a VALU write of its VGPRs within 2 before a permlane
    swap; an SALU M0 write within 1 before an LDS DMA; a VALU SGPR write within 5 before a VMEM
    instruction reading it; an MFMA result used by inline asm within 20), a v_mfma_scale form, an MFMA with abid / cbsz / blgp other than 0,
    or an instruction offset that does not fit its field or does not survive assembly and
    disassembly (llvm-mc-22, llvm-objdump-22): dev/isa/gfx950_hazards.py has the rules and how
    wait states are counted.
Prints, per kernel, the registers, LDS bytes and the stage loop's instruction mix, and per kernel
and hazard rule the nearest producer's distance in wait states (--hazard-summary writes these
lines to a file, --diff-against compares them with another compiler's: --cxx amdclang++).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from aiter.jit import build_config
from dev.isa import gfx950_hazards as hazards

SOURCES = build_config.GFX950_SOURCES


def kernel_name(heads: int, head_dim: int, small: bool = False, bf16: bool = False, compressed: bool = False) -> str:
    """The instance's name, as csrc/gfx950/instances.h spells it (D = 128 has no suffix)."""
    return (f"fp8_mqa_logits_gfx950_h{heads}" + ("" if head_dim == 128 else f"_d{head_dim}") +
            ("_small" if small else "") + ("_bf16" if bf16 else "") + ("_compressed" if compressed else ""))


def _kernels() -> tuple[str, ...]:
    """Every instance the backend must have: capabilities.h's H x D, both paths, all four formats
    (format-major, then D = 128 before 64, then H)."""
    from aiter import backends

    gfx950 = backends.backends()["gfx950"]
    dims = sorted(gfx950.head_dims, reverse=True)
    return tuple(kernel_name(h, d, small, bf16, compressed)
                 for compressed in (False, True) for bf16 in (False, True) for small in (False, True)
                 for d in dims for h in gfx950.heads)


KERNELS = _kernels()
MFMA = "v_mfma_f32_32x32x64_f8f6f4"
PERMLANE = "v_permlane32_swap_b32"
REG_BUDGET = 256  # 512 VGPR+AGPR per SIMD lane / 2 waves per SIMD (one 8-wave workgroup per CU)
LDS_BUDGET = 160 * 1024
WAVES_PER_SIMD = 2
STAGE_MARKER = re.compile(r"gfx950-stage-vmem\s+(\d+)\s+depth\s+(\d+)")
VMCNT = re.compile(r"vmcnt\((\d+)\)")
BRANCH = re.compile(r"^s_(c?branch\w*)$")
TERMINATORS = {"s_endpgm", "s_setpc_b64", "s_trap"}
PACKED_FP32 = {"v_pk_fma_f32", "v_pk_mul_f32", "v_pk_add_f32"}


CXX: str | None = None  # --cxx: the compiler to use instead of the default search


def clang_path() -> str:
    if CXX:
        if shutil.which(CXX):
            return shutil.which(CXX)
        raise FileNotFoundError(f"--cxx {CXX}: no such compiler (not on PATH, not an executable)")
    for cand in (os.environ.get("AITER_GFX950_CLANG"), "clang++-22", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    raise FileNotFoundError("no clang++-22 (set AITER_GFX950_CLANG to a clang with gfx950 support)")


def _base_command() -> list[str]:
    flags = [f for f in build_config.GFX950_HIP_FLAGS if not f.startswith("--offload-arch")]
    root = build_config.csrc_dir()
    return [clang_path(), "-x", "hip", "--offload-arch=gfx950", "-nogpulib",
            "-D__AMDGCN_WAVEFRONT_SIZE=64", *flags, *[f"-I{root / d}" for d in build_config.INCLUDE_DIRS]]


def compile_command(asm_out: str, source: str) -> list[str]:
    """Device code of one source (a name of GFX950_SOURCES), to assembly with its metadata."""
    return _base_command() + ["--cuda-device-only", "--no-gpu-bundle-output", "-S", "-o", asm_out,
                              os.fspath(build_config.csrc_dir() / source)]


def host_syntax_command(source: str) -> list[str]:
    """The host pass a real hipcc also runs: it parses the device code and compiles the launcher."""
    return _base_command() + ["--cuda-host-only", "-fsyntax-only", os.fspath(build_config.csrc_dir() / source)]


def compile_all(asm_out: str) -> tuple[bool, str, list[str]]:
    """Compiles every source's device code in parallel and writes their assembly to asm_out, one
    after the other. Returns (ok, the compilers' stderr, the command lines)."""
    Path(asm_out).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{i}.s") for i in range(len(SOURCES))]
        cmds = [compile_command(out, src) for out, src in zip(outs, SOURCES)]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in cmds]
        results = [(p.wait(), p.communicate()[1]) for p in procs]
        ok = all(rc == 0 for rc, _ in results)
        if ok:
            with open(asm_out, "w") as f:
                for out in outs:
                    f.write(Path(out).read_text())
    return ok, "".join(err for _, err in results), [" ".join(c) for c in cmds]


# ------------------------------------------------------------------------------------------------
# Parsing
# ------------------------------------------------------------------------------------------------
@dataclass
class Inst:
    op: str
    args: str
    in_asm: bool  # inside an inline-asm block

    def regs(self) -> list[str]:
        return [a.strip() for a in self.args.split(",")] if self.args else []


@dataclass
class Block:
    label: str
    insts: list[Inst] = field(default_factory=list)
    succ: list[int] = field(default_factory=list)


@dataclass
class Kernel:
    name: str
    blocks: list[Block]
    meta: dict[str, int]
    sets: dict[str, int]
    lines: list[str] = field(default_factory=list)  # the function's body, as written
    sites: list = field(default_factory=list)  # hazards.Site of every hazard rule's consumers


def parse_functions(text: str) -> dict[str, list[str]]:
    """Body lines of every kernel: from 'NAME:' to its '.Lfunc_end'."""
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_][\w.]*):", line)
        if m and not line.startswith(".L"):
            cur = m.group(1)
            funcs[cur] = []
            continue
        if cur is not None:
            if line.startswith(".Lfunc_end"):
                cur = None
                continue
            funcs[cur].append(line)
    return funcs


def parse_blocks(lines: list[str]) -> list[Block]:
    blocks = [Block("entry")]
    in_asm = False
    for raw in lines:
        line = raw.strip()
        if line.startswith(";;#ASMSTART"):
            in_asm = True
            continue
        if line.startswith(";;#ASMEND"):
            in_asm = False
            continue
        m = re.match(r"^(\.LBB\w+):", line)
        if m:
            blocks.append(Block(m.group(1)))
            continue
        if in_asm and STAGE_MARKER.search(line):
            blocks[-1].insts.append(Inst("#marker", line, True))
            continue
        if not line or line.startswith(";") or line.startswith(".") or line.startswith("#"):
            continue
        line = line.split(";", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        inst = Inst(parts[0], parts[1] if len(parts) > 1 else "", in_asm)
        blocks[-1].insts.append(inst)
        if BRANCH.match(inst.op) or inst.op in TERMINATORS:
            blocks.append(Block(f"{blocks[-1].label}+"))
    index = {b.label: i for i, b in enumerate(blocks)}
    for i, b in enumerate(blocks):
        last = b.insts[-1] if b.insts else None
        falls = True
        if last is not None and last.op in TERMINATORS:
            falls = False
        elif last is not None and BRANCH.match(last.op):
            target = last.args.split(",")[0].strip()
            if target in index:
                b.succ.append(index[target])
            falls = last.op != "s_branch"
        if falls and i + 1 < len(blocks):
            b.succ.append(i + 1)
    return blocks


def parse_metadata(text: str) -> dict[str, dict[str, int]]:
    """Kernel name -> its numeric metadata, from every .amdgpu_metadata block (one per source)."""
    meta: dict[str, dict[str, int]] = {}
    for block in re.findall(r"\.amdgpu_metadata(.*?)(?:\.end_amdgpu_metadata|\Z)", text, re.S):
        for entry in re.split(r"\n  - ", block)[1:]:
            fields = dict(re.findall(r"\.(\w+):\s+(\S+)", entry))
            if "name" in fields:
                meta[fields["name"]] = {k: int(v) for k, v in fields.items() if re.fullmatch(r"-?\d+", v)}
    return meta


def parse_sets(text: str, name: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(rf"\.set {re.escape(name)}\.(\w+), (\d+)", text)}


def parse(text: str) -> dict[str, Kernel]:
    meta = parse_metadata(text)
    kernels = {}
    for name, lines in parse_functions(text).items():
        if name in meta:
            kernels[name] = Kernel(name, parse_blocks(lines), meta[name], parse_sets(text, name), lines)
    return kernels


# ------------------------------------------------------------------------------------------------
# Loops
# ------------------------------------------------------------------------------------------------
def dominators(blocks: list[Block]) -> list[set[int]]:
    n = len(blocks)
    preds = [[] for _ in range(n)]
    for i, b in enumerate(blocks):
        for s in b.succ:
            preds[s].append(i)
    reach = {0}
    stack = [0]
    while stack:
        for s in blocks[stack.pop()].succ:
            if s not in reach:
                reach.add(s)
                stack.append(s)
    dom = [set(reach) if i in reach else set() for i in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for i in sorted(reach - {0}):
            ps = [dom[p] for p in preds[i] if p in reach]
            new = set.intersection(*ps) | {i} if ps else {i}
            if new != dom[i]:
                dom[i] = new
                changed = True
    return dom


def natural_loops(blocks: list[Block]) -> dict[int, set[int]]:
    """Header -> body (union over its back edges)."""
    dom = dominators(blocks)
    preds = [[] for _ in blocks]
    for i, b in enumerate(blocks):
        for s in b.succ:
            preds[s].append(i)
    loops: dict[int, set[int]] = {}
    for u, b in enumerate(blocks):
        for v in b.succ:
            if v in dom[u]:  # back edge u -> v
                body = loops.setdefault(v, {v})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(preds[x])
    return loops


def stage_loops(blocks: list[Block]) -> list[tuple[int, set[int]]]:
    """Innermost loops that hold MFMAs: the stage loops."""
    loops = natural_loops(blocks)
    with_mfma = {h: body for h, body in loops.items() if any(i.op == MFMA for x in body for i in blocks[x].insts)}
    inner = []
    for h, body in with_mfma.items():
        if not any(h2 != h and body2 < body for h2, body2 in with_mfma.items()):
            inner.append((h, body))
    return sorted(inner)


def _step(state: dict[str, int | str], inst: Inst) -> None:
    """Track the 64-bit SGPR flags (-1 / 0) that StructurizeCFG uses to chain the branches of an
    if/else, and vcc derived from them, so that infeasible loop paths can be pruned."""
    regs = inst.regs()
    dst = regs[0] if regs else ""
    if inst.op == "s_mov_b64" and len(regs) == 2 and regs[1] in ("-1", "0"):
        state[dst] = int(regs[1])
        return
    if inst.op in ("s_andn2_b64", "s_and_b64") and len(regs) == 3 and regs[1] == "exec":
        src = state.get(regs[2])
        if isinstance(src, int):
            zero = (src == -1) if inst.op == "s_andn2_b64" else (src == 0)
            state[dst] = 0 if zero else "nonzero"
            return
    writes_vcc = dst.startswith("vcc") or (inst.op.startswith("v_") and inst.op.endswith("_e32")
                                           and ("cmp" in inst.op or "_co_" in inst.op))
    for r in list(state):
        if r == dst or (r == "vcc" and writes_vcc):
            del state[r]


def _branch_outcomes(state: dict[str, int | str], inst: Inst) -> tuple[bool, bool]:
    """(may take the branch, may fall through)."""
    v = state.get("vcc")
    if inst.op == "s_cbranch_vccz" and v is not None:
        return (v == 0, v != 0)
    if inst.op == "s_cbranch_vccnz" and v is not None:
        return (v != 0, v == 0)
    if inst.op == "s_branch":
        return (True, False)
    return (True, True)


def loop_paths(blocks: list[Block], header: int, body: set[int], limit: int = 4096):
    """Feasible paths header -> back edge inside the loop, as block lists."""
    paths = []
    stack = [(header, [header], {})]
    while stack and len(paths) < limit:
        x, path, state = stack.pop()
        state = dict(state)
        for inst in blocks[x].insts:
            _step(state, inst)
        b = blocks[x]
        last = b.insts[-1] if b.insts else None
        succs = []
        if last is not None and BRANCH.match(last.op):
            target = last.args.split(",")[0].strip()
            take, fall = _branch_outcomes(state, last)
            succs = [s for s in b.succ if (blocks[s].label == target and take) or (blocks[s].label != target and fall)]
        else:
            succs = b.succ
        for s in succs:
            if s == header:
                paths.append(path)
            elif s in body and s not in path:
                stack.append((s, path + [s], state))
    return paths


# ------------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------------
def is_vmem(op: str) -> bool:
    return op.startswith(("buffer_", "global_", "flat_", "scratch_")) and "wbl2" not in op and "inv" not in op


def classify(op: str) -> str:
    if op.startswith("v_mfma"):
        return "mfma"
    if op.startswith("v_permlane"):
        return "permlane"
    if op.startswith("v_"):
        return "valu"
    if op.startswith("ds_read") or op.startswith("ds_load"):
        return "ds_read"
    if op.startswith("ds_"):
        return "ds_other"
    if op.startswith("buffer_load") or op.startswith("global_load"):
        return "vmem_load"
    if op.startswith("buffer_store") or op.startswith("global_store"):
        return "vmem_store"
    if op == "s_waitcnt":
        return "s_waitcnt"
    if op == "s_barrier":
        return "s_barrier"
    if op == "s_nop":
        return "s_nop"
    if BRANCH.match(op):
        return "branch"
    if op.startswith("s_"):
        return "salu"
    return "other"


def reg_set(tok: str) -> set[str]:
    m = re.fullmatch(r"v(\d+)", tok)
    if m:
        return {tok}
    m = re.fullmatch(r"v\[(\d+):(\d+)\]", tok)
    if m:
        return {f"v{i}" for i in range(int(m.group(1)), int(m.group(2)) + 1)}
    return set()


def permlane_hazards(blocks: list[Block], body: set[int]) -> list[str]:
    bad = []
    for x in sorted(body):
        insts = blocks[x].insts
        for k, inst in enumerate(insts):
            if inst.op != PERMLANE:
                continue
            read = set().union(*(reg_set(r) for r in inst.regs()))
            if k < 2:
                bad.append(f"{blocks[x].label}: {inst.op} {inst.args} at block start (cannot see its producers)")
                continue
            for back in (1, 2):
                prev = insts[k - back]
                if prev.op.startswith("v_") and prev.regs() and reg_set(prev.regs()[0]) & read:
                    bad.append(f"{inst.op} {inst.args}: {prev.op} {prev.args} writes it {back - 1} instr. before")
    return bad


def instruction_lines(lines: list[str]) -> list[tuple[str, str]]:
    """A function body's instructions as (op, args), its block labels as ("LABEL:", "")."""
    out = []
    for raw in lines:
        line = raw.strip()
        m = re.match(r"^(\.LBB\w+):", line)
        if m:
            out.append((m.group(1) + ":", ""))
            continue
        if not line or line.startswith((";", ".", "#")):
            continue
        line = line.split(";", 1)[0].strip()
        if line:
            parts = line.split(None, 1)
            out.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return out


def hazard_failures(k: Kernel) -> list[str]:
    """The hazard rules, the refused forms and the offsets' ranges (dev/isa/gfx950_hazards.py)."""
    fails = []
    k.sites = hazards.hazard_sites(k.blocks)
    for s in hazards.violations(k.sites):
        rule = hazards.RULE[s.rule]
        fails.append(f"{k.name}: hazard {s.rule}: {s.inst} ({'inline asm' if s.in_asm else 'compiler'}, "
                     f"block {s.block}) comes {s.distance} wait state(s) after its producer, needs "
                     f"{rule.wait_states}: {rule.text}")
    for b in k.blocks:
        for i in b.insts:
            fails += [f"{k.name}: {f}" for f in hazards.form_failures(i.op, i.args)]
    return fails


def check_kernel(k: Kernel) -> tuple[list[str], list[str]]:
    """(failures, summary lines) of one kernel."""
    fails: list[str] = []
    lines: list[str] = []
    meta, sets = k.meta, k.sets
    vgpr, agpr = sets.get("num_vgpr", meta.get("vgpr_count", 0)), sets.get("num_agpr", meta.get("agpr_count", 0))
    total = ((vgpr + 3) // 4) * 4 + agpr if agpr else vgpr
    total = max(total, meta.get("vgpr_count", 0))
    lds = meta.get("group_segment_fixed_size", 0)
    scratch = meta.get("private_segment_fixed_size", 0)
    all_ops = Counter(i.op for b in k.blocks for i in b.insts if i.op != "#marker")
    lines.append(
        f"{k.name}: VGPR {vgpr}, AGPR {agpr} (total {total}/{REG_BUDGET}), SGPR {meta.get('sgpr_count')}, "
        f"LDS {lds} B/{LDS_BUDGET}, scratch {scratch} B, spills VGPR {meta.get('vgpr_spill_count', 0)} "
        f"SGPR {meta.get('sgpr_spill_count', 0)} (to VGPR lanes); occupancy 1 workgroup/CU = "
        f"{WAVES_PER_SIMD} waves/SIMD; {sum(all_ops.values())} instructions"
    )
    if total > REG_BUDGET:
        fails.append(f"{k.name}: VGPR+AGPR {total} > {REG_BUDGET} (2 waves/SIMD)")
    if lds > LDS_BUDGET:
        fails.append(f"{k.name}: LDS {lds} > {LDS_BUDGET}")
    scratch_ops = [op for op in all_ops if op.startswith("scratch_")]
    vgpr_spills = meta.get("vgpr_spill_count", 0)
    if scratch or vgpr_spills or scratch_ops:
        fails.append(f"{k.name}: scratch used (private {scratch} B, VGPR spills {vgpr_spills}, ops {scratch_ops})")
    fails += hazard_failures(k)
    loops = stage_loops(k.blocks)
    if not loops:
        fails.append(f"{k.name}: no loop holding {MFMA}")
    for n, (h, body) in enumerate(loops):
        insts = [i for x in sorted(body) for i in k.blocks[x].insts if i.op != "#marker"]
        ops = Counter(i.op for i in insts)
        mix = Counter(classify(i.op) for i in insts)
        tag = f"{k.name} stage loop {n} ({k.blocks[h].label}, {len(body)} blocks, {len(insts)} instr.)"
        order = ("mfma", "valu", "permlane", "ds_read", "ds_other", "vmem_load", "vmem_store", "salu",
                 "s_waitcnt", "s_barrier", "branch", "s_nop", "other")
        lines.append("  " + tag + ": " + ", ".join(f"{c} {mix[c]}" for c in order if mix[c]))
        if ops[MFMA] == 0:
            fails.append(f"{tag}: no {MFMA}")
        if ops[PERMLANE] == 0:
            fails.append(f"{tag}: no {PERMLANE}")
        if ops["s_nop"]:
            fails.append(f"{tag}: {ops['s_nop']} s_nop")
        # SGPRs spilled into VGPR lanes are no scratch, but spill code in the loop is extra VALU.
        lane_spill = ops["v_writelane_b32"] + ops["v_readlane_b32"]
        if lane_spill:
            fails.append(f"{tag}: {lane_spill} SGPR spill/reload (v_writelane/v_readlane) in the loop")
        packed = sorted(op for op in ops if op in PACKED_FP32)
        if packed:
            fails.append(f"{tag}: packed fp32 math {packed}")
        compiler_vm = [i.args for i in insts if i.op == "s_waitcnt" and "vmcnt" in i.args and not i.in_asm]
        if compiler_vm:
            fails.append(f"{tag}: compiler-placed vmcnt wait(s) {compiler_vm}")
        for msg in permlane_hazards(k.blocks, body):
            fails.append(f"{tag}: permlane hazard: {msg}")
        paths = loop_paths(k.blocks, h, body)
        counts = set()
        for path in paths:
            pinsts = [i for x in path for i in k.blocks[x].insts]
            markers = [STAGE_MARKER.search(i.args).groups() for i in pinsts if i.op == "#marker"]
            loads = sum(1 for i in pinsts if is_vmem(i.op) and "load" in i.op)
            stores = sum(1 for i in pinsts if is_vmem(i.op) and "store" in i.op)
            vmem = sum(1 for i in pinsts if is_vmem(i.op))
            counts.add(vmem)
            if len(markers) != 1 or int(markers[0][0]) != vmem:
                fails.append(f"{tag}: a path issues {vmem} VMEM ops, the hand-placed wait assumes {markers}")
                break
            # The wait must retire exactly the stage about to be read: after its loads come its own
            # iteration's stores and depth-1 further iterations (loads + stores).
            depth = int(markers[0][1])
            waits = [int(m.group(1)) for i in pinsts if i.op == "s_waitcnt" and i.in_asm
                     for m in [VMCNT.search(i.args)] if m]
            expect = depth * stores + (depth - 1) * loads
            if waits != [expect]:
                fails.append(f"{tag}: hand-placed vmcnt waits {waits}, the loop's VMEM stream needs [{expect}]")
                break
        lines.append(f"    {len(paths)} paths, VMEM ops per stage {sorted(counts)}; "
                     f"MFMA {ops[MFMA]}, v_max {ops['v_max_f32_e32'] + ops['v_max_f32_e64']}, "
                     f"v_fma {sum(v for o, v in ops.items() if o.startswith(('v_fma_f32', 'v_fmac_f32')))}, "
                     f"permlane {ops[PERMLANE]}")
    return fails, lines


def check_text(text: str, summary: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(failures, per-kernel lines) of the assembly; `summary` receives the hazard-distance lines."""
    kernels = parse(text)
    fails, lines = [], []
    for name in KERNELS:
        if name not in kernels:
            fails.append(f"kernel {name} missing from the assembly")
            continue
        f, s = check_kernel(kernels[name])
        fails += f
        lines += s
        if summary is not None:
            summary += hazards.summary_lines(name, kernels[name].sites)
    return fails, lines


def encoding_failures(text: str) -> list[str]:
    """Every kernel's VMEM / DS offsets after llvm-mc-22 and llvm-objdump-22 against the source."""
    kernels = parse(text)
    functions = {name: instruction_lines(kernels[name].lines) for name in KERNELS if name in kernels}
    fails = hazards.encoded_offset_mismatches(functions)
    if fails is None:
        return ["llvm-mc-22 / llvm-objdump-22 not found (package llvm-22): the offsets' encodings are unchecked"]
    return fails


def diff_summaries(old: list[str], new: list[str]) -> list[str]:
    """The lines of two hazard summaries that differ, keyed by kernel, rule and scope."""
    def keyed(lines):
        return {line.split(":", 1)[0]: line for line in lines if ":" in line}

    a, b = keyed(old), keyed(new)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            out.append(f"- {a.get(key, key + ': (absent)')}")
            out.append(f"+ {b.get(key, key + ': (absent)')}")
    return out


def check(asm_out: str, cxx: str | None = None, hazard_summary: str | None = None,
          diff_against: str | None = None) -> int:
    """Compile (with `cxx` when given), check, and write / compare the hazard summary."""
    global CXX
    CXX = cxx
    t0 = time.time()
    try:
        clang_path()
    except FileNotFoundError as e:
        print(f"isa_gfx950: {e}", file=sys.stderr)
        return 2
    ok, stderr, cmds = compile_all(asm_out)
    if not ok:
        print("isa_gfx950: compile failed:\n  " + "\n  ".join(cmds), file=sys.stderr)
        print(stderr, file=sys.stderr)
        return 1
    if stderr.strip():
        print(stderr, file=sys.stderr)
    text = Path(asm_out).read_text()
    summary: list[str] = []
    fails, lines = check_text(text, summary)
    fails += encoding_failures(text)
    print(f"isa_gfx950: compiled {len(SOURCES)} sources in parallel in {time.time() - t0:.1f} s: " + "; ".join(cmds))
    for source in SOURCES:
        host = subprocess.run(host_syntax_command(source), capture_output=True, text=True)
        if host.returncode != 0:
            fails.append(f"the host pass of {source} does not compile:\n" + host.stderr)
    for line in lines:
        print(line)
    print(f"isa_gfx950: hazard distances ({clang_path()}; wait states to the nearest producer, "
          f"dev/isa/gfx950_hazards.py):")
    for line in summary:
        print("  " + line)
    if hazard_summary:
        Path(hazard_summary).write_text("\n".join(summary) + "\n")
        print(f"isa_gfx950: hazard summary in {hazard_summary}")
    if diff_against:
        diff = diff_summaries(Path(diff_against).read_text().splitlines(), summary)
        print(f"isa_gfx950: hazard summary against {diff_against}: {len(diff) // 2} line(s) differ")
        for line in diff:
            print("  " + line)
    for f in fails:
        print(f"FAIL: {f}")
    print(f"isa_gfx950: {'FAILED' if fails else 'passed'} ({len(fails)} failure(s), {len(KERNELS)} kernels); "
          f"assembly in {asm_out}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else "fp8_mqa_logits_gfx950.s"))
