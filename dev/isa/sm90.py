"""ISA check of the sm_90a kernel: compile with the JIT's own flags, dump the SASS, fail on a slow path.

Fails unless, for every kernel instance: ptxas reports no stack frame, no spills and the SASS no local
memory (LDL/STL); the logits kernels' SASS holds QGMMA (fp8 wgmma); and ptxas printed no "wgmma serialized"
warning (C7514/C7515/C7518/C7520: the tensor cores would wait on every MMA). Prints a summary: per
kernel its registers, shared memory, QGMMA count and the instruction mix of its math loop, then the
math warps' instruction budget of the prefill kernels (float32, full layout; H 32 and 64, D 64 and
128): per K tile and thread, the steady path's SASS instructions by kind against the essential 128
and the tensor cores' 2D clocks (math_loop_budget, budget_table).

CI has no GPU and the toolkit here has no cuobjdump: it is taken from PATH, $CUOBJDUMP, or the PyPI
packages nvidia-cuda-cuobjdump + nvidia-cuda-nvdisasm (site-packages/nvidia/cu*/bin).
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from aiter.jit import build_config as bc

SERIALISED_WGMMA = ("C7514", "C7515", "C7518", "C7520")


def _find_tool(name: str) -> str | None:
    env = os.environ.get(name.upper())
    if env and Path(env).is_file():
        return env
    found = shutil.which(name)
    if found:
        return found
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}
    for root in roots:
        for cand in glob.glob(os.path.join(root, "nvidia", "cu*", "bin", name)):
            return cand
    return None


def _kernel_sections(sass: str) -> dict:
    """Function name -> its SASS text."""
    parts = re.split(r"\n\s*Function : (\S+)\n", sass)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _ptxas_report(log: str) -> dict:
    """Mangled name -> dict(regs, stack, spill_st, spill_ld) from `ptxas -v`."""
    out = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = {}
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            out[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, {})
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur]["regs"] = int(m.group(1))
    return out


def _math_loop_mix(text: str) -> collections.Counter:
    """Opcode counts of one math-loop iteration: from the wgmma wait after the first QGMMA to the
    branch back to (or the next) QGMMA."""
    lines = [ln for ln in text.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", ln)]
    addr = [int(re.match(r"\s+/\*([0-9a-f]+)\*/", ln).group(1), 16) for ln in lines]
    first_mma = next((i for i, ln in enumerate(lines) if "QGMMA" in ln), None)
    if first_mma is None:
        return collections.Counter()
    start = next((i for i in range(first_mma, len(lines)) if "WARPGROUP.DEPBAR" in lines[i]), None)
    if start is None:
        return collections.Counter()
    end = len(lines)
    for i in range(start + 1, len(lines)):
        if "QGMMA" in lines[i]:
            end = i
            break
        m = re.search(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)", lines[i])
        if m and int(m.group(1), 16) <= addr[first_mma]:
            end = i + 1
            break
    mix = collections.Counter()
    for ln in lines[start:end]:
        tokens = ln.split("*/", 1)[1].split()
        op = tokens[1] if tokens and tokens[0].startswith("@") else (tokens[0] if tokens else "")
        mix[op.split(".")[0]] += 1
    return mix


def _relu_before_release(text: str):
    """(relu FADDs issued before the first instruction after the wgmma wait that is not an FADD, an
    ISETP or a MOV, total relu FADDs in that iteration) for the math loop, or None. A relu here is an
    FADD with an |x| operand; the first other instruction is the stage release or the first-tile
    branch. Reported, not enforced: at H=64, with them first the rows measured 3-6% faster than with
    them interleaved after the branch (docs/performance.md, issues 9 and 10); H=32 has always
    interleaved them without that cost."""
    lines = [ln.split("*/", 1)[1].split(";")[0].strip() for ln in text.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", ln)]
    first_mma = next((i for i, ln in enumerate(lines) if "QGMMA" in ln), None)
    if first_mma is None:
        return None
    start = next((i for i in range(first_mma, len(lines)) if "WARPGROUP.DEPBAR" in lines[i]), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if "QGMMA" in lines[i]), len(lines))
    body = lines[start + 1:end]
    relu = [i for i, ln in enumerate(body) if ln.startswith("FADD") and "|" in ln]
    if not relu:
        return None
    first_other = next((i for i, ln in enumerate(body) if not ln.split()[0].split(".")[0] in ("FADD", "ISETP", "MOV")),
                       len(body))
    return sum(i < first_other for i in relu), len(relu)


# ---- the instruction budget of the math warps ----------------------------------------------------
#
# Per K tile, each math thread runs one iteration of the math loop: the wgmma issue and wait, then the
# epilogue of its 64 accumulator values. Only the relu (one FADD x + |x|) and the weight FMA of each
# value are essential: 128 instructions per thread and tile, at any H (2H lane-instructions per
# (query, key) pair). The tensor cores need 64 x 128 x 2D FLOP per warpgroup and tile at ~8192 dense
# FP8 FLOP per SM clock: 2D clocks, while the four schedulers issue one warp-instruction each per clock,
# i.e. a warpgroup's tile of N instructions per thread costs N issue clocks on each of them. So the
# epilogue fits under the MMA only if N <= 2D, and the essential 128 is half of that at D = 128 and all
# of it at D = 64. The split instances (csrc/sm90/linear_term.cuh: H = 64, D <= 64) fold the relu into
# the FMA (one FFMA with an |x| operand, counted as weight_fma) and add one FFMA per piece column (4
# per thread at H = 64), so their relu column is 0; the table keeps 128 as the essential for all.

BUDGET_KINDS = ("mma", "relu", "weight_fma", "head_reduction", "kv_scale", "stores", "barriers", "bookkeeping")
BUDGET_LABELS = {
    "mma": "MMA issue + waits (QGMMA/HGMMA, WARPGROUP.ARRIVE/DEPBAR)",
    "relu": "relu (FADD x + |x|, FMNMX with 0)",
    "weight_fma": "weight FMA (FFMA)",
    "head_reduction": "head reduction (SHFL, FADD, the keep/send FSEL)",
    "kv_scale": "kv_scale (FMUL)",
    "stores": "stores + integer/address math (STG/ST, the -inf FSEL, IMAD/IADD3/LEA/VIADD)",
    "barriers": "barriers (BAR, SYNCS mbarrier waits and arrives, ARRIVES)",
    "bookkeeping": "bookkeeping (everything else: uniform datapath, ISETP/LOP3/SEL, loads, moves, branches)",
}
_INT_MATH = ("IMAD", "IADD3", "IADD", "LEA", "VIADD", "IABS", "ISCADD")


def _sass_instructions(text: str):
    """[(address, predicate or '', opcode with modifiers, operand text)] of a function's SASS."""
    out = []
    for ln in text.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);", ln)
        if not m:
            continue
        body = m.group(2).strip()
        pred = ""
        if body.startswith("@"):
            pred, _, body = body.partition(" ")
            body = body.strip()
        op, _, operands = body.partition(" ")
        out.append((int(m.group(1), 16), pred, op, operands.strip()))
    return out


def classify(op: str, operands: str) -> str:
    """The budget kind (BUDGET_KINDS) of one SASS instruction."""
    base = op.split(".")[0]
    if base in ("QGMMA", "HGMMA", "WGMMA", "IGMMA", "BGMMA") or op.startswith("WARPGROUP."):
        return "mma"
    if base == "FADD" and "|" in operands:
        return "relu"
    if base == "FMNMX" and re.search(r"(\bRZ\b|[ ,]0(\.0)?\b)", operands):
        return "relu"
    if base == "FFMA":
        return "weight_fma"
    if base in ("SHFL", "FADD") or (base == "FSEL" and "INF" not in operands):
        return "head_reduction"
    if base == "FMUL":
        return "kv_scale"
    if base in ("STG", "ST", "STS", "RED", "REDG", "ATOM", "ATOMG") or (base == "FSEL" and "INF" in operands):
        return "stores"
    if base in _INT_MATH and not (op.startswith("IMAD.MOV") or (op == "IMAD.U32" and operands.count("RZ") >= 2)):
        return "stores"
    if base in ("BAR", "SYNCS", "ARRIVES", "MEMBAR", "WARPSYNC", "ERRBAR", "DEPBAR", "CCTL"):
        return "barriers"
    return "bookkeeping"


def _branch_target(op: str, operands: str):
    if op.split(".")[0] != "BRA":
        return None
    m = re.search(r"0x([0-9a-f]+)", operands)
    return int(m.group(1), 16) if m else None


def math_loop_budget(text: str):
    """The math loop's budget: dict(steady=Counter of kinds on the shortest path through one iteration
    (a K tile that neither opens nor closes a Q block), cold=extra instructions on the longest path (a
    block's last tile: the next slot's wait, its rows' loads), ops=Counter of bookkeeping opcodes on the
    steady path), or None when the function has no wgmma loop.

    The loop runs from the target of the first backward branch after the first QGMMA/HGMMA to that
    branch. Inside it, forward branches may be taken or not; backward ones (retry and vote loops) and
    branches out of the loop (mbarrier retries placed out of line) are taken as not taken, i.e. the
    wait succeeds at once. The epilogue has no branch (stores are predicated), so the shortest path
    is the steady K tile's."""
    ins = _sass_instructions(text)
    addr = [a for a, *_ in ins]
    first_mma = next((i for i, (_, _, op, _) in enumerate(ins) if op.split(".")[0] in ("QGMMA", "HGMMA")), None)
    if first_mma is None:
        return None
    back = next((i for i in range(first_mma + 1, len(ins))
                 if (_branch_target(ins[i][2], ins[i][3]) or 1 << 62) <= addr[first_mma]), None)
    if back is None:
        return None
    head_addr = _branch_target(ins[back][2], ins[back][3])
    if head_addr not in addr:
        return None
    head = addr.index(head_addr)
    # A branch back over an unconditional exit is an out-of-line retry's return, not the loop's edge.
    if any(op == "EXIT" and not pred for _, pred, op, _ in ins[head:back]):
        return None
    index = {a: i for i, a in enumerate(addr)}
    n = back - head + 1
    inf = float("inf")
    # Shortest / longest instruction counts from each instruction to the back edge (inclusive),
    # over forward edges only: a DAG walked from the end.
    short, long_, nxt_short = [inf] * (n + 1), [-inf] * (n + 1), [None] * n
    short[n - 1] = long_[n - 1] = 1
    for k in range(n - 2, -1, -1):
        _, pred, op, operands = ins[head + k]
        target = _branch_target(op, operands)
        succ = []
        if target is None or pred:  # falls through (a predicated branch, or no branch)
            succ.append(k + 1)
        if target is not None and target in index and head_addr < target <= addr[back] and index[target] > head + k:
            succ.append(index[target] - head)
        if not succ:
            continue  # an unconditional branch out of the loop or backwards: no path to the back edge
        best = min(succ, key=lambda j: short[j])
        short[k], nxt_short[k] = 1 + short[best], best
        long_[k] = 1 + max(long_[j] for j in succ)
    if short[0] == inf:
        return None
    steady, ops = collections.Counter(), collections.Counter()
    k = 0
    while k is not None and k < n:
        _, _, op, operands = ins[head + k]
        kind = classify(op, operands)
        steady[kind] += 1
        if kind == "bookkeeping":
            ops[op.split(".")[0]] += 1
        k = nxt_short[k] if k < n - 1 else None
    return dict(steady=steady, cold=int(long_[0] - short[0]), ops=ops)


_LOGITS_KERNEL = re.compile(r"fp8_mqa_logits_sm90_kernelILi(\d+)ELi(\d+)ENS_12LogitsFormatI(f|13__nv_bfloat16)Lb([01])E")


def budget_table(kernels: dict, heads=(32, 64), head_dims=(64, 128)) -> list:
    """Markdown lines: the math warps' budget per K tile and thread, float32 full-layout kernels."""
    found = {}
    for name, text in kernels.items():
        m = _LOGITS_KERNEL.search(name)
        if m and m.group(3) == "f" and m.group(4) == "0":
            found[(int(m.group(1)), int(m.group(2)))] = text
    lines = ["  math-warp instruction budget per K tile (64 keys x 128 Q-tile columns per warpgroup) and per thread,",
             "  float32 logits, full layout; the steady tile's path (a block's last tile adds 'last +'); essential =",
             "  one relu and one FMA per accumulator value = 128 (split instances: one FFMA |x| x w, relu 0);",
             "  tensor clocks per warpgroup tile = 2D (8192 FP8",
             "  FLOP/clock/SM), issue clocks = the total (one warp-instruction per scheduler per clock); per",
             "  (query, key) pair: lane-instructions = total x H / 64 (essential 2H), SM clocks of tensor work",
             "  2HD / 8192, of essential issue 2H / 128, of issue total x H / 8192.",
             "  | H | D | " + " | ".join(BUDGET_KINDS) + " | total | last + | total / essential"
             " | issue / tensor clk per tile | lane-instr per pair (essential) | clk per pair: tensor / essential"
             " / issue | top bookkeeping |",
             "  |" + "---|" * (len(BUDGET_KINDS) + 9)]
    for H in heads:
        for D in head_dims:
            text = found.get((H, D))
            budget = math_loop_budget(text) if text else None
            if budget is None:
                lines.append(f"  | {H} | {D} | " + " | ".join("?" for _ in BUDGET_KINDS) + " | no math loop found |"
                             + " |" * 7)
                continue
            steady = budget["steady"]
            total = sum(steady.values())
            top = ", ".join(f"{op} {c}" for op, c in budget["ops"].most_common(5))
            lines.append(f"  | {H} | {D} | " + " | ".join(str(steady[k]) for k in BUDGET_KINDS) +
                         f" | {total} | {budget['cold']} | {total / 128:.2f} | {total} / {2 * D} = {total / (2 * D):.2f}"
                         f" | {total * H / 64:.0f} ({2 * H}) | {2 * H * D / 8192:.2f} / {2 * H / 128:.2f} / "
                         f"{total * H / 8192:.2f} | {top} |")
    lines.append("  kinds: " + "; ".join(f"{k} = {v}" for k, v in BUDGET_LABELS.items()))
    return lines


def evaluate(sass: str, ptxas_log: str):
    """(failures, summary lines) for the SASS of the sm90 sources and ptxas's -v log."""
    failures, summary = [], []
    for line in ptxas_log.splitlines():
        if any(code in line for code in SERIALISED_WGMMA):
            failures.append(f"ptxas: {line.strip()}")
    report = _ptxas_report(ptxas_log)
    kernels = _kernel_sections(sass)
    if not any("fp8_mqa_logits" in name for name in kernels):
        failures.append("no fp8_mqa_logits kernel in the SASS")
    if any(_LOGITS_KERNEL.search(name) for name in kernels):
        budget_lines = budget_table(kernels)
    else:
        budget_lines = []
    for name, text in kernels.items():
        info = report.get(name, {})
        qgmma = len(re.findall(r"\bQGMMA\.", text))
        local = len(re.findall(r"\b(LDL|STL)\b", text))
        mix = _math_loop_mix(text)
        summary.append(f"  {name}: {info.get('regs', '?')} registers at entry, stack {info.get('stack', '?')} B, "
                       f"spills {info.get('spill_st', '?')}/{info.get('spill_ld', '?')} B, QGMMA x{qgmma}, LDL/STL x{local}")
        if mix:
            top = ", ".join(f"{op} {n}" for op, n in mix.most_common(10))
            summary.append(f"    one math-loop iteration (code, incl. the per-block branch): {sum(mix.values())} "
                           f"instructions ({top})")
        order = _relu_before_release(text)
        if order:
            summary.append(f"    epilogue relu FADDs before the stage release: {order[0]} of {order[1]}")
        budget = math_loop_budget(text) if qgmma else None
        if budget:
            steady = budget["steady"]
            summary.append(f"    math loop per K tile and thread: {sum(steady.values())} instructions on the steady "
                           f"path (" + ", ".join(f"{k} {steady[k]}" for k in BUDGET_KINDS) +
                           f"); a block's last tile +{budget['cold']}")
        if qgmma == 0 and "fp8_mqa_logits" in name:
            failures.append(f"{name}: no QGMMA")
        if local:
            failures.append(f"{name}: local memory (LDL/STL) x{local}")
        if "stack" not in info:
            failures.append(f"{name}: ptxas printed no resource report")
        elif info["stack"] or info["spill_st"] or info["spill_ld"]:
            failures.append(f"{name}: stack {info['stack']} B, spills {info['spill_st']}/{info['spill_ld']} B")
    return failures, summary + budget_lines


def check(asm_out: str) -> int:
    nvcc = _find_tool("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
    if nvcc is None:
        print("isa_sm90: nvcc not found", file=sys.stderr)
        return 2
    cuobjdump = _find_tool("cuobjdump")
    if cuobjdump is None:
        print("isa_sm90: cuobjdump not found; pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm", file=sys.stderr)
        return 2
    env = dict(os.environ)
    nvdisasm = _find_tool("nvdisasm")
    if nvdisasm:
        env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + env.get("PATH", "")
    root = bc.csrc_dir()
    includes = [f"-I{root / d}" for d in bc.INCLUDE_DIRS]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        log = ""
        for src in bc.source_paths(bc.SM90_SOURCES):
            obj = os.path.join(tmp, Path(src).stem + ".o")
            cmd = [nvcc, *bc.SM90_NVCC_FLAGS, *includes, "-Xptxas", "-v", "-c", src, "-o", obj]
            r = subprocess.run(cmd, capture_output=True, text=True)
            log += r.stdout + r.stderr
            if r.returncode != 0:
                print(log, file=sys.stderr)
                print(f"isa_sm90: compile failed: {' '.join(cmd)}", file=sys.stderr)
                return 1
            objs.append(obj)
        sass = ""
        for obj in objs:
            r = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
            sass += r.stdout
    Path(asm_out).write_text(sass)
    failures, summary = evaluate(sass, log)
    print(f"isa_sm90: flags: {' '.join(bc.SM90_NVCC_FLAGS)}")
    for line in summary:
        print(line)
    print(f"  SASS written to {asm_out}")
    for f in failures:
        print(f"isa_sm90: FAIL: {f}", file=sys.stderr)
    print("isa_sm90: " + ("FAILED" if failures else "ok"))
    return 1 if failures else 0
