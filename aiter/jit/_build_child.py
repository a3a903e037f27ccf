"""Builds one JIT module in its own process: ``python _build_child.py JOB.json``.

Run as a script (not ``-m``) so that it needs torch only, not the aiter package. A separate process
keeps torch's in-process extension versioning and a half-loaded failed build out of the user's
process; the parent loads the finished library from its final place. Importing the module here
checks that it links and loads before the parent renames it into the cache.

The compilers must not outlive the build. On SIGTERM (sent by the parent when it is interrupted, and
by the kernel when the parent dies: PR_SET_PDEATHSIG) this process kills all its descendants, then
itself. It walks the process tree rather than signalling its process group because ninja starts
each compile in a process group of its own.
"""

import ctypes
import importlib.util
import json
import os
import signal
import sys
import time

# A script's own directory comes first on sys.path: drop it, so that no file in aiter/jit/ (core.py,
# ...) can shadow a module that torch imports.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _load_processes_module():
    # By path: aiter/jit/ is off sys.path here (above), and the package need not be importable.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "processes.py")
    spec = importlib.util.spec_from_file_location("aiter_jit_processes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


processes = _load_processes_module()


def descendants(root: int) -> list:
    """The live (not zombie) processes below ``root``."""
    children: dict = {}
    for pid, parent, _ in processes.live_processes():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def kill_descendants():
    # A process forked between a scan and the kills is orphaned by them and, this process being a
    # child subreaper, re-parented here: the next scan finds it.
    for _ in range(100):
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def on_sigterm(signum, frame):
    kill_descendants()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # exit by the signal, so the parent sees what happened


def die_with_parent(parent_pid: int):
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # The signal comes when the thread that started this process ends: that thread waits for this
    # process, so it ends first only when the whole parent dies.
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        on_sigterm(signal.SIGTERM, None)


def main(job_path: str) -> int:
    with open(job_path) as f:
        job = json.load(f)
    signal.signal(signal.SIGTERM, on_sigterm)
    die_with_parent(job["parent_pid"])

    from torch.utils.cpp_extension import load

    load(
        name=job["name"],
        sources=job["sources"],
        extra_cflags=job["extra_cflags"],
        extra_cuda_cflags=job["extra_cuda_cflags"],
        extra_ldflags=job["extra_ldflags"],
        extra_include_paths=job["include_dirs"],
        build_directory=job["build_dir"],
        verbose=True,
        is_python_module=True,
    )
    print(f"aiter: built {job['name']} in {job['build_dir']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
