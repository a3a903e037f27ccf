"""What a first build of a JIT module costs: the whole build's wall time and compiler CPU seconds,
then each translation unit compiled alone with the exact command the JIT's build.ninja runs (user +
sys CPU seconds of the compiler and its children, and wall seconds).

    python -m dev.build_times                                 # the CPU module, jobs as the JIT picks them
    python -m dev.build_times --target sm90 --family prefill  # one GPU module (needs nvcc)
    python -m dev.build_times --cpu-simd all       # every CPU SIMD variant, as the AOT build
    python -m dev.build_times --jobs 2 --keep /tmp/b

A GPU module built on a machine without its GPU's torch (a CPU torch) compiles and links, but the
build child's import fails: the figures are those of the compile and link all the same.

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


def _timed(cmd, check=True, **kw) -> tuple:
    """(wall s, user+sys s of the command and everything it started, its exit status)."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    rc = subprocess.run(cmd, check=check, **kw).returncode
    return time.perf_counter() - t0, _children_cpu() - cpu0, rc


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
    parser.add_argument("--target", default="cpu", help="cpu (the CPU module, default), sm90 or gfx950")
    parser.add_argument("--family", help="the op family of a GPU module: prefill, paged or topk")
    parser.add_argument("--cpu-simd", default="host", metavar="host|all|V1,V2,..",
                        help="CPU SIMD variants of the CPU module (default: this machine's, as the JIT builds)")
    parser.add_argument("--jobs", type=int, default=0, help="ninja jobs for the whole build (default: the JIT's)")
    parser.add_argument("--keep", metavar="DIR", help="build in DIR and keep it (default: a temp dir, removed)")
    parser.add_argument("--units-only", action="store_true", help="skip the whole build (DIR must hold one)")
    parser.add_argument("--no-units", action="store_true", help="time the whole build only")
    parser.add_argument("--cuda-home", metavar="DIR",
                        help="the CUDA toolkit for a GPU module under a CPU torch (whose cpp_extension knows none);"
                             " the library then links but does not import")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args(argv)

    from aiter.jit import build, module_specs

    from aiter.jit import build_config

    cpu_simd = {"host": None, "all": build_config.CPU_SIMD_VARIANTS}.get(
        args.cpu_simd, tuple(v for v in args.cpu_simd.split(",") if v))
    spec = (module_specs.module_spec(cpu_simd=cpu_simd) if args.target == "cpu"
            else module_specs.family_spec(args.family, args.target))
    build_dir = args.keep or tempfile.mkdtemp(prefix="aiter-build-times-")
    os.makedirs(build_dir, exist_ok=True)
    env = build.child_env(spec)
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
    child = os.path.join(os.path.dirname(build.__file__), "_build_child.py")
    figures: dict = {"module": spec.name, "jobs": env["MAX_JOBS"], "units": {}}
    if not args.units_only:
        command = [sys.executable, child, job_path]
        if args.cuda_home:
            command = [sys.executable, "-c", "import runpy, sys, torch.utils.cpp_extension as c; c.CUDA_HOME = sys.argv[1];"
                       " sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')", args.cuda_home,
                       child, job_path]
        wall, cpu, rc = _timed(command, check=False, env=env, stdout=subprocess.DEVNULL)
        figures["build"] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit": rc}
        print(f"whole build ({spec.label}, MAX_JOBS={env['MAX_JOBS']}): {wall:.1f} s wall, {cpu:.1f} s CPU "
              f"(user+sys, all compilers and the Python child; exit {rc})")
    library = os.path.join(build_dir, spec.name + ".so")
    if os.path.exists(library):
        figures["so_bytes"] = os.path.getsize(library)
        print(f"{spec.name}.so: {figures['so_bytes']} bytes")
    for target, command in [] if args.no_units else _ninja_edges(build_dir):
        path = os.path.join(build_dir, target)
        if os.path.exists(path):
            os.remove(path)
        wall, cpu, _ = _timed(["/bin/sh", "-c", command], cwd=build_dir, env=env)
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
