"""The gfx950 hazards the compiler does not guard, and the encodings it does not check.

The kernel's LDS DMAs (buffer_load ... lds) and row-pair swaps (v_permlane32_swap) are inline asm:
LLVM's hazard recognizer (GCNHazardRecognizer) neither sees what they read nor pads in front of
them, and its assembler encodes their immediates as written. This module checks, on every kernel's
assembly (dev/isa/gfx950.py calls it; the compiler's own instructions are checked the same way):

  permlane-exec  an EXEC write (v_cmpx, or any VALU or SALU instruction that writes EXEC) less
                 than 4 wait states before a v_permlane16_swap / v_permlane32_swap
                 (LLVM: checkPermlaneHazards, VCmpXWritesExecWaitStates = 4; it counts v_cmpx only,
                 this check every EXEC write);
  permlane-vgpr  a VALU write of a VGPR a permlane swap reads, less than 2 wait states before it
                 (checkPermlaneHazards, VALUWritesVDstWaitStates = 2);
  m0-lds-dma     an SALU write of M0 less than 1 wait state before an LDS DMA (buffer_load ... lds,
                 global_load_lds_*), which reads M0 for its LDS address (checkReadM0Hazards);
  vmem-sgpr      a VALU write of an SGPR (v_readfirstlane, v_readlane, v_cmp / v_cmpx with an SGPR
                 or VCC destination, the carry-out of v_*_co_*, v_div_scale, v_mad_*64) less than
                 5 wait states before a VMEM instruction that reads it: its resource, its soffset,
                 its saddr, M0 (LDS DMA) or EXEC (every VMEM) (checkVMEMHazards,
                 VmemSgprWaitStates = 5; rocRoller's VALUWriteSGPRVMEM observer has the same 5);
  mfma-asm       an MFMA's result VGPRs read or written by an inline-asm instruction less than 20
                 wait states later (checkMAIVALUHazards: a 16-pass XDL MFMA on gfx950 needs
                 NumPasses + 4 = 20 before a VALU or VMEM reads or overwrites its result; LLVM
                 pads compiler-placed consumers but not inline asm).

Wait states are counted as LLVM's recognizer and the ISA guide count them: every instruction
issued between the two counts 1, s_nop N counts N + 1; labels, directives and comments count 0.
Across labels and branches the count is the minimum over every path into the instruction: the
search walks back through every predecessor in the control-flow graph (fall-through and branch
edges alike, loop back edges included), so a branch target is checked against the worst of its
predecessors. A kernel's entry has no predecessor (nothing runs before it in the wave).

Encodings: the MUBUF instruction offset is 12 bits and the DS offset 16 bits; llvm-mc-22 encodes a
larger value without a word (buffer offset:4096 becomes 0 with the bit in OFFEN's place, 5000
becomes 904). Every VMEM and DS instruction's offsets are therefore checked twice: against the
field's range in the text, and after assembling the kernel's instructions (llvm-mc-22, the
assembler clang's integrated assembler is) and disassembling the object (llvm-objdump-22), offset
by offset against the source. The forms the kernel never means to emit are refused as well:
v_mfma_scale_* (the scale-0 builtin must fold to the plain MFMA) and an MFMA with abid, cbsz or
blgp other than 0 (E4M3 operands, no broadcast).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

PERMLANE_SWAPS = ("v_permlane16_swap", "v_permlane32_swap")
VMEM_PREFIXES = ("buffer_", "global_", "flat_", "scratch_")
MUBUF_OFFSET_MAX = (1 << 12) - 1
DS_OFFSET_MAX = (1 << 16) - 1
DS_OFFSET8_MAX = (1 << 8) - 1  # offset0 / offset1 of the ds_*2* forms
SEARCH_CAP = 24  # wait states the distance summary looks back (above every rule's need)


@dataclass(frozen=True)
class Rule:
    name: str
    wait_states: int
    text: str


RULES = (
    Rule("permlane-exec", 4, "an EXEC write less than 4 wait states before a permlane swap"),
    Rule("permlane-vgpr", 2, "a VALU write of a VGPR a permlane swap reads, less than 2 wait states before it"),
    Rule("m0-lds-dma", 1, "an SALU write of M0 less than 1 wait state before an LDS DMA"),
    Rule("vmem-sgpr", 5, "a VALU write of an SGPR less than 5 wait states before a VMEM instruction reading it"),
    Rule("mfma-asm", 20, "an MFMA's result registers used by inline asm less than 20 wait states after it"),
)
RULE = {r.name: r for r in RULES}


# ------------------------------------------------------------------------------------------------
# Operands
# ------------------------------------------------------------------------------------------------
def operands(args: str) -> list[str]:
    """Comma-separated operands; the modifiers after the last one (offen, offset:N, lds, ...) stay
    on it, split off by sgprs()/vgprs() which only match register tokens."""
    return [a.strip() for a in args.split(",")] if args.strip() else []


_SGPR_TOKEN = re.compile(r"\b(s\[(\d+):(\d+)\]|s(\d+)|vcc(?:_lo|_hi)?|exec(?:_lo|_hi)?|m0|ttmp\[?(\d+)(?::(\d+)\])?)")
_VGPR_TOKEN = re.compile(r"\bv(?:\[(\d+):(\d+)\]|(\d+)\b)")


def sgprs(text: str) -> set[str]:
    """Scalar registers a token list names, one name per 32-bit register."""
    out: set[str] = set()
    for m in _SGPR_TOKEN.finditer(text):
        tok = m.group(1)
        if m.group(2) is not None:
            out |= {f"s{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)}
        elif m.group(4) is not None:
            out.add(f"s{m.group(4)}")
        elif tok in ("vcc", "exec"):
            out |= {f"{tok}_lo", f"{tok}_hi"}
        elif tok.startswith("ttmp"):
            lo = int(m.group(5))
            hi = int(m.group(6)) if m.group(6) is not None else lo
            out |= {f"ttmp{i}" for i in range(lo, hi + 1)}
        else:
            out.add(tok)
    return out


def vgprs(text: str) -> set[str]:
    out: set[str] = set()
    for m in _VGPR_TOKEN.finditer(text):
        if m.group(1) is not None:
            out |= {f"v{i}" for i in range(int(m.group(1)), int(m.group(2)) + 1)}
        else:
            out.add(f"v{m.group(3)}")
    return out


EXEC = {"exec_lo", "exec_hi"}


def is_valu(op: str) -> bool:
    return op.startswith("v_")


def is_salu(op: str) -> bool:
    return op.startswith("s_") and not op.startswith(("s_load", "s_store", "s_buffer", "s_dcache", "s_memtime",
                                                       "s_memrealtime", "s_atomic", "s_scratch"))


def is_vmem(op: str) -> bool:
    return op.startswith(VMEM_PREFIXES)


def is_lds_dma(op: str, args: str) -> bool:
    return (op.startswith("buffer_load") and re.search(r"\blds\b", args) is not None) or \
        op.startswith("global_load_lds")


def is_permlane_swap(op: str) -> bool:
    return op.startswith(PERMLANE_SWAPS)


def valu_sgpr_writes(op: str, args: str) -> set[str]:
    """SGPRs (and VCC, EXEC) a VALU instruction writes."""
    if not is_valu(op):
        return set()
    ops = operands(args)
    out: set[str] = set()
    if ops:
        out |= sgprs(ops[0])  # sdst of v_readfirstlane / v_readlane / v_cmp*_e64, vcc of v_cmp*_e32
    if len(ops) > 1 and ("_co_" in op or "div_scale" in op or re.match(r"v_mad_[iu]64_[iu]32", op)):
        out |= sgprs(ops[1])  # carry-out / VCC-like second destination (VOP3b)
    if op.startswith("v_cmpx"):
        out |= EXEC
    return out


def salu_writes(op: str, args: str) -> set[str]:
    """Scalar registers an SALU instruction writes (its first operand; *_saveexec also EXEC)."""
    if not is_salu(op) or op in ("s_nop", "s_waitcnt", "s_barrier", "s_endpgm", "s_setprio", "s_sleep") or \
            op.startswith(("s_cbranch", "s_branch", "s_cmp", "s_bitcmp", "s_sendmsg", "s_waitcnt", "s_set_gpr",
                           "s_setreg", "s_trap", "s_ttrace", "s_icache", "s_setkill", "s_denorm", "s_round")):
        return set()
    ops = operands(args)
    out = sgprs(ops[0]) if ops else set()
    if "saveexec" in op or "wrexec" in op:
        out |= EXEC
    return out


def exec_writes(op: str, args: str) -> bool:
    return bool((valu_sgpr_writes(op, args) | salu_writes(op, args)) & EXEC)


def vmem_sgpr_reads(op: str, args: str) -> set[str]:
    """SGPRs a VMEM instruction reads: every scalar operand (resource, soffset, saddr), M0 for an LDS
    DMA, and EXEC, which every VMEM instruction reads."""
    out = sgprs(args) | EXEC
    if is_lds_dma(op, args):
        out.add("m0")
    return out


def wait_states(op: str, args: str) -> int:
    """What one instruction counts between a producer and its consumer."""
    if op.startswith("#"):
        return 0
    if op == "s_nop":
        m = re.match(r"\s*(0x[0-9a-fA-F]+|\d+)", args)
        return (int(m.group(1), 0) if m else 0) + 1
    return 1


# ------------------------------------------------------------------------------------------------
# The search
# ------------------------------------------------------------------------------------------------
def predecessors(blocks) -> list[list[int]]:
    preds: list[list[int]] = [[] for _ in blocks]
    for i, b in enumerate(blocks):
        for s in b.succ:
            preds[s].append(i)
    return preds


def distance_back(blocks, preds, block: int, index: int, is_producer, cap: int) -> int | None:
    """The fewest wait states between a producer (is_producer(inst) true) and instruction `index`
    of block `block`, over every path into it; None when no path has one within `cap`."""
    best: int | None = None
    seen: dict[tuple[int, int], int] = {}
    stack = [(block, index, 0)]
    while stack:
        b, k, acc = stack.pop()
        insts = blocks[b].insts
        stop = False
        for j in range(k - 1, -1, -1):
            inst = insts[j]
            if is_producer(inst):
                if best is None or acc < best:
                    best = acc
                stop = True
                break
            acc += wait_states(inst.op, inst.args)
            if acc >= cap or (best is not None and acc >= best):
                stop = True
                break
        if stop:
            continue
        for p in preds[b]:
            key = (p, len(blocks[p].insts))
            if seen.get(key, cap + 1) <= acc:
                continue
            seen[key] = acc
            stack.append((p, len(blocks[p].insts), acc))
    return best


@dataclass
class Site:
    """One consumer of a rule: where it is and its distance to the nearest producer."""
    rule: str
    block: str
    inst: str
    in_asm: bool
    distance: int | None  # None: no producer within SEARCH_CAP


def hazard_sites(blocks) -> list[Site]:
    """Every consumer of every rule in a kernel's blocks (dev/isa/gfx950.py's Block list)."""
    preds = predecessors(blocks)
    sites: list[Site] = []

    def add(rule, b, k, producer):
        inst = blocks[b].insts[k]
        d = distance_back(blocks, preds, b, k, producer, SEARCH_CAP)
        sites.append(Site(rule, blocks[b].label, f"{inst.op} {inst.args}".strip(), inst.in_asm, d))

    for b, block in enumerate(blocks):
        for k, inst in enumerate(block.insts):
            op, args = inst.op, inst.args
            if is_permlane_swap(op):
                add("permlane-exec", b, k, lambda i: exec_writes(i.op, i.args))
                read = vgprs(args)
                add("permlane-vgpr", b, k, lambda i, read=read: is_valu(i.op) and bool(
                    vgprs(operands(i.args)[0] if i.args else "") & read))
            if is_lds_dma(op, args):
                add("m0-lds-dma", b, k, lambda i: "m0" in salu_writes(i.op, i.args))
            if is_vmem(op):
                read = vmem_sgpr_reads(op, args)
                add("vmem-sgpr", b, k, lambda i, read=read: bool(valu_sgpr_writes(i.op, i.args) & read))
            if inst.in_asm and vgprs(args):
                used = vgprs(args)
                add("mfma-asm", b, k, lambda i, used=used: i.op.startswith("v_mfma") and bool(
                    vgprs(operands(i.args)[0] if i.args else "") & used))
    return sites


def violations(sites: list[Site]) -> list[Site]:
    return [s for s in sites if s.distance is not None and s.distance < RULE[s.rule].wait_states]


def summary_lines(kernel: str, sites: list[Site]) -> list[str]:
    """Per rule: consumers (inline asm / all) and the smallest distance to a producer, one line per
    rule, in a fixed order: two compilers' summaries diff line by line."""
    lines = []
    for rule in RULES:
        mine = [s for s in sites if s.rule == rule.name]
        for scope, group in (("asm", [s for s in mine if s.in_asm]), ("compiler", [s for s in mine if not s.in_asm])):
            ds = [s.distance for s in group if s.distance is not None]
            near = "-" if not ds else str(min(ds))
            lines.append(f"{kernel} {rule.name} {scope}: sites {len(group)}, with a producer within "
                         f"{SEARCH_CAP} {len(ds)}, nearest {near} (needs >= {rule.wait_states})")
    return lines


# ------------------------------------------------------------------------------------------------
# Forms and offsets
# ------------------------------------------------------------------------------------------------
_OFFSET = re.compile(r"\b(offset\d?):(-?(?:0x[0-9a-fA-F]+|\d+))")
_MFMA_FIELD = re.compile(r"\b(abid|cbsz|blgp):(\d+)")


def offset_fields(args: str) -> list[tuple[str, int]]:
    return [(m.group(1), int(m.group(2), 0)) for m in _OFFSET.finditer(args)]


def form_failures(op: str, args: str) -> list[str]:
    """The forms the kernel must not emit, and offsets outside their encoding's range."""
    fails = []
    if op.startswith("v_mfma_scale"):
        fails.append(f"{op} {args}: a scaled MFMA (the scale-0 builtin must fold to the plain MFMA)")
    if op.startswith("v_mfma"):
        for field, value in _MFMA_FIELD.findall(args):
            if int(value) != 0:
                fails.append(f"{op} {args}: {field}:{value} (the kernel's MFMAs take E4M3 operands unbroadcast)")
    if op.startswith("buffer_"):
        for field, value in offset_fields(args):
            if not 0 <= value <= MUBUF_OFFSET_MAX:
                fails.append(f"{op} {args}: {field}:{value} does not fit the 12-bit MUBUF offset "
                             f"(0..{MUBUF_OFFSET_MAX})")
    elif op.startswith("ds_"):
        two = re.match(r"ds_[a-z]+2(st64)?_", op) is not None
        for field, value in offset_fields(args):
            top = DS_OFFSET8_MAX if two else DS_OFFSET_MAX
            if not 0 <= value <= top:
                fails.append(f"{op} {args}: {field}:{value} does not fit the DS offset (0..{top})")
    return fails


def tool(name: str) -> str | None:
    return shutil.which(name)


def _offset_ops(lines: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(op, offset_fields(args)) for op, args in lines if op.startswith(VMEM_PREFIXES + ("ds_",))]


def encoded_offset_mismatches(functions: dict[str, list[tuple[str, str]]], mcpu: str = "gfx950") -> list[str] | None:
    """Assembles every function's instructions (op, args) with llvm-mc-22, disassembles the object
    with llvm-objdump-22 and compares each VMEM / DS instruction's offsets with the source's, in
    order. Returns the mismatches, or None when the tools are missing."""
    mc, objdump = tool("llvm-mc-22"), tool("llvm-objdump-22")
    if mc is None or objdump is None:
        return None
    text = ["\t.text"]
    for n, (name, lines) in enumerate(functions.items()):
        # Block labels restart in every source file: made unique per function.
        local = lambda s, n=n: re.sub(r"\.LBB(\w+)", rf".Lf{n}_BB\1", s)  # noqa: E731
        text += [f"\t.globl {name}", "\t.p2align 8", f"{name}:"]
        for op, args in lines:
            if op.startswith("#"):
                continue
            text.append(local(op) if op.endswith(":") else local(f"\t{op} {args}".rstrip()))
    fails: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = os.path.join(tmp, "k.s"), os.path.join(tmp, "k.o")
        with open(src, "w") as f:
            f.write("\n".join(text) + "\n")
        r = subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj", "-o", obj, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return [f"llvm-mc-22 does not assemble the kernels' instructions:\n{r.stderr[-3000:]}"]
        d = subprocess.run([objdump, "-d", f"--mcpu={mcpu}", "--no-show-raw-insn", "--no-leading-addr", obj],
                           capture_output=True, text=True)
        if d.returncode != 0:
            return [f"llvm-objdump-22 fails on the assembled kernels:\n{d.stderr[-3000:]}"]
    decoded: dict[str, list[tuple[str, str]]] = {}
    cur = None
    for line in d.stdout.splitlines():
        m = re.match(r"^<([^>]+)>:", line.strip())
        if m:
            cur = m.group(1)
            decoded[cur] = []
            continue
        body = line.split("//", 1)[0].strip()
        if cur is None or not body or body.endswith(":"):
            continue
        parts = body.split(None, 1)
        decoded[cur].append((parts[0], parts[1] if len(parts) > 1 else ""))
    for name, lines in functions.items():
        want = _offset_ops([(op, a) for op, a in lines if not op.startswith("#")])
        got = _offset_ops(decoded.get(name, []))
        if len(want) != len(got):
            fails.append(f"{name}: {len(want)} VMEM/DS instructions in the source, {len(got)} decoded")
            continue
        for (op, w), (dop, g) in zip(want, got):
            # The disassembler leaves a zero offset out.
            wd = {k: v for k, v in w if v != 0}
            gd = {k: v for k, v in g if v != 0}
            if dop != op or wd != gd:
                fails.append(f"{name}: {op} with offsets {w or 'none'} encodes as {dop} with offsets {g or 'none'}")
    return fails
