"""ISA check of the sm_90a kernel: compile with the JIT's own flags, dump the SASS, fail on a slow path.

Fails unless, for every kernel instance: ptxas reports no stack frame, no spills and the SASS no local
memory (LDL/STL); the logits kernels' SASS holds QGMMA (fp8 wgmma); and ptxas printed no "wgmma serialized"
warning (C7514/C7515/C7518/C7520: the tensor cores would wait on every MMA). Prints a summary: per
kernel its registers, shared memory, QGMMA count and the instruction mix of its math loop.

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
        if qgmma == 0 and "fp8_mqa_logits" in name:
            failures.append(f"{name}: no QGMMA")
        if local:
            failures.append(f"{name}: local memory (LDL/STL) x{local}")
        if "stack" not in info:
            failures.append(f"{name}: ptxas printed no resource report")
        elif info["stack"] or info["spill_st"] or info["spill_ld"]:
            failures.append(f"{name}: stack {info['stack']} B, spills {info['spill_st']}/{info['spill_ld']} B")
    return failures, summary


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
