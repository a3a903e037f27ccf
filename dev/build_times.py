"""What a first build of module_fp8_mqa_logits costs: the whole build's wall time and compiler CPU
seconds, then each translation unit compiled alone with the exact command the JIT's build.ninja
runs (user + sys CPU seconds of the compiler and its children, and wall seconds).

    python -m dev.build_times                      # the CPU module, jobs as the JIT picks them
    python -m dev.build_times --targets cpu,sm90   # a GPU module (needs nvcc)
    python -m dev.build_times --jobs 2 --keep /tmp/b
    python -m dev.build_times --cpu-simd all       # every CPU SIMD variant, as the AOT build

CPU seconds are the figure to compare on a shared machine: wall time depends on what else runs.
The build runs in a fresh directory through torch's cpp_extension, as aiter/jit/_build_child.py
does, so the commands are those of a real first use.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd, **kw) -> tuple:
    """(wall s, user+sys s of the command and everything it started)."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    return time.perf_counter() - t0, _children_cpu() - cpu0


def _ninja_edges(build_dir: str) -> list:
    """(output, command) of every edge of build.ninja, compiles first, the link last."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "commands"], capture_output=True, text=True,
                         check=True).stdout
    edges = []
    for line in out.splitlines():
        words = shlex.split(line)
        target = words[words.index("-o") + 1] if "-o" in words else "?"
        edges.append((target, line))
    return edges


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev.build_times", description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="cpu", help="comma-separated JIT targets (default: cpu)")
    parser.add_argument("--cpu-simd", default="host", metavar="host|all|V1,V2,..",
                        help="CPU SIMD variants to build (default: this machine's, as the JIT does)")
    parser.add_argument("--jobs", type=int, default=0, help="ninja jobs for the whole build (default: the JIT's)")
    parser.add_argument("--keep", metavar="DIR", help="build in DIR and keep it (default: a temp dir, removed)")
    parser.add_argument("--units-only", action="store_true", help="skip the whole build (DIR must hold one)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args(argv)

    from aiter.jit import core

    targets = tuple(t for t in args.targets.split(",") if t)
    from aiter.jit import build_config

    cpu_simd = {"host": None, "all": build_config.CPU_SIMD_VARIANTS}.get(
        args.cpu_simd, tuple(v for v in args.cpu_simd.split(",") if v))
    spec = core.module_spec(targets, cpu_simd)
    build_dir = args.keep or tempfile.mkdtemp(prefix="aiter-build-times-")
    os.makedirs(build_dir, exist_ok=True)
    env = core._child_env(spec)
    if args.jobs:
        env["MAX_JOBS"] = str(args.jobs)
    job = {
        "name": spec.name, "sources": list(spec.sources), "extra_cflags": list(spec.extra_cflags),
        "extra_cuda_cflags": list(spec.extra_cuda_cflags), "extra_ldflags": list(spec.extra_ldflags),
        "include_dirs": list(spec.include_dirs), "build_dir": build_dir, "parent_pid": os.getpid(),
    }
    job_path = os.path.join(build_dir, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    child = os.path.join(os.path.dirname(core.__file__), "_build_child.py")
    figures: dict = {"targets": list(targets), "jobs": env["MAX_JOBS"], "units": {},
                     "cpu_simd_flags": [f for f in spec.extra_cflags if "AITER_CPU_SIMD" in f]}
    print(f"CPU SIMD variants: {figures['cpu_simd_flags']} ({len(spec.sources)} units)")
    if not args.units_only:
        wall, cpu = _timed([sys.executable, child, job_path], env=env, stdout=subprocess.DEVNULL)
        figures["build"] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
        print(f"whole build ({spec.label}, MAX_JOBS={env['MAX_JOBS']}): {wall:.1f} s wall, {cpu:.1f} s CPU "
              "(user+sys, all compilers and the Python child)")
    library = os.path.join(build_dir, spec.name + ".so")
    if os.path.exists(library):
        figures["so_bytes"] = os.path.getsize(library)
        print(f"{spec.name}.so: {figures['so_bytes']} bytes")
    for target, command in _ninja_edges(build_dir):
        path = os.path.join(build_dir, target)
        if os.path.exists(path):
            os.remove(path)
        wall, cpu = _timed(["/bin/sh", "-c", command], cwd=build_dir, env=env)
        figures["units"][target] = {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}
        print(f"  {target:45s} {cpu:7.2f} s CPU  {wall:7.2f} s wall")
    total = sum(u["cpu_s"] for u in figures["units"].values())
    print(f"  {'sum':45s} {total:7.2f} s CPU")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
