"""Building one module: stage its sources, compile them in a child process (``_build_child.py``)
with progress lines, and put the verified library in its cache entry.

The child takes its compilers down with it: when this process is interrupted (KeyboardInterrupt is
re-raised, nothing is recorded as a failure) and when it is killed. Only a failed compile writes
``failed-<key>.log``. A build stages only the files the key hashes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import build_progress, cache_dir, processes
from .build_lock import pid_alive
from .cache_entry import ENTRY_META, cache_writes, library_record, previous_build_seconds, rename_into_place
from .cache_key import library_name
from .errors import JitBuildError
from .module_specs import ModuleSpec
from .toolchain import build_arg, host_compiler

ERROR_LINES = 12
# ninja reads '$' (a variable), ':' and ' ' (separators) in a path as syntax, and torch's build file
# escapes only some of them: a cache path with anything outside this set is built in a temp dir.
NINJA_SAFE_PATH = re.compile(r"[\w./+,=@%~-]*")
# How long a build process may take to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE_S = 5.0


def max_jobs(spec: ModuleSpec) -> int:
    """One job per core, no more jobs than sources, and ~2 GiB (C++ with torch headers) or
    ~4 GiB (nvcc/hipcc) of available memory per job."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    per_job = 4 << 30 if spec.extra_cuda_cflags else 2 << 30
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))
        by_mem = max(1, avail // per_job)
    except (OSError, StopIteration, ValueError):
        by_mem = cores
    return max(1, min(cores, by_mem, len(spec.sources)))


def child_env(spec: ModuleSpec) -> dict:
    env = dict(os.environ)
    env["CXX"] = host_compiler()
    env["NINJA_STATUS"] = "[%f/%t] "  # finished/total: what the progress lines count
    env.setdefault("MAX_JOBS", str(max_jobs(spec)))
    # ninja from the interpreter's environment (a venv's bin/ is not on PATH unless activated).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def first_error_lines(log: str, limit: int = ERROR_LINES) -> list:
    pat = re.compile(r"(\berror\b|\bError\b|undefined reference|FAILED:)")
    lines = [l.rstrip() for l in log.splitlines() if pat.search(l) and not l.startswith("[")]
    if not lines:
        lines = [l.rstrip() for l in log.splitlines()[-limit:]]
    return lines[:limit]


def cleanup_orphans(module_dir: Path, key: str):
    """Temp dirs of this key left by a process that died mid-build or mid-removal."""
    places = [(module_dir, f".tmp-{key}-"), (module_dir, f".bad-{key}-"),
              (Path(tempfile.gettempdir()), f"aiter-jit-{key}-")]
    for parent, prefix in places:
        for d in parent.glob(prefix + "*"):
            try:
                pid = int(d.name[len(prefix):].split("-")[0])
                st = os.lstat(d)
            except (ValueError, OSError):
                continue
            # Only a real folder of ours: another user's look-alike in a shared TMPDIR stays.
            if st.st_uid == cache_dir.current_uid() and os.path.isdir(d) and not os.path.islink(d) \
                    and not pid_alive(pid):
                shutil.rmtree(d, ignore_errors=True)


def _processes_in_group(pgid: int) -> list:
    """The live processes of process group ``pgid`` other than its leader."""
    return [pid for pid, _, group in processes.live_processes() if group == pgid and pid != pgid]


def _exited(pid: int, timeout: float) -> bool:
    """Whether child ``pid`` exits within ``timeout``; it stays unreaped."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _stop_process_group(pgid: int):
    """Stop what is left in the build child's process group: ninja, when the child died without
    killing it. SIGTERM first: ninja then stops the compiles it started, each in a process group of
    its own, which SIGKILL of ninja would leave running."""
    if not _processes_in_group(pgid):
        return
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while _processes_in_group(pgid):
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            return
        time.sleep(0.02)


def run_build_child(spec: ModuleSpec, job_path: Path, work: Path, log_path: Path) -> int:
    """The build child's exit status (negative: killed by that signal). Whatever ends the wait,
    KeyboardInterrupt included, no compiler of the build survives it."""
    child = Path(__file__).with_name("_build_child.py")
    with open(cache_dir.open_nofollow(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, os.fspath(child), os.fspath(job_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env(spec),
            cwd=os.fspath(work),
            # Its own session: a Ctrl-C in this terminal interrupts this process only, which then
            # stops the build, instead of killing the compilers under a process that carries on.
            start_new_session=True,
        )
    progress = build_progress.Progress(spec, log_path)
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except BaseException:
        proc.send_signal(signal.SIGTERM)  # the child kills its process tree, then itself
        if not _exited(proc.pid, STOP_GRACE_S):
            proc.kill()
        raise
    finally:
        progress.stop()
        # Unreaped, the child's pid still names its process group: no other process can take it.
        _stop_process_group(proc.pid)
        proc.wait()
    return proc.returncode


def stage_sources(spec: ModuleSpec, src_copy: Path):
    """Copy what the build reads into ``src_copy``: the spec's source folders, sources and headers
    (exactly what the key hashes: a CPU build stages common/, binding/ and cpu/, no GPU folder; a
    GPU module its own sources and what they include)."""
    root = os.path.abspath(spec.root)
    os.mkdir(src_copy, 0o700)
    copied: list = []
    for path in sorted({os.path.abspath(p) for p in (*spec.source_dirs, *spec.sources, *spec.headers)}):
        rel = os.path.relpath(path, root)
        if rel.startswith("..") or any(path == c or path.startswith(c + os.sep) for c in copied):
            continue  # outside csrc (used in place), or inside a folder already copied
        dest = src_copy / rel
        os.makedirs(dest.parent, mode=0o700, exist_ok=True)
        if os.path.isdir(path):
            shutil.copytree(path, dest)
            copied.append(path)
        else:
            shutil.copy2(path, dest)
    for d in spec.include_dirs:
        rel = os.path.relpath(os.path.abspath(d), root)
        if not rel.startswith(".."):
            os.makedirs(src_copy / rel, mode=0o700, exist_ok=True)


def build_message(spec: ModuleSpec, module_dir: Path) -> str:
    units = len(spec.sources)
    previous = previous_build_seconds(spec, module_dir)
    took = f"; its last build here took {previous:.0f} s" if previous is not None else ""
    return (f"aiter: building {spec.name} for {spec.label} (once: {units} translation unit"
            f"{'s' if units != 1 else ''} to compile{took}; later calls load the cached build in"
            " milliseconds)...")


def build(spec: ModuleSpec, key: str, module_dir: Path, entry: Path):
    """Compile in a private temp dir; only a finished, verified library is renamed to ``entry``.
    Any failure of a file operation on the way is a JitBuildError naming the path."""
    cleanup_orphans(module_dir, key)
    t0 = time.time()
    with cache_writes(spec, "creating a build folder in", module_dir):
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{os.getpid()}-", dir=module_dir))
    work = staging / "build"
    try:
        if not NINJA_SAFE_PATH.fullmatch(os.fspath(work)):
            with cache_writes(spec, "creating a build folder in", tempfile.gettempdir()):
                work = Path(tempfile.mkdtemp(prefix=f"aiter-jit-{key}-{os.getpid()}-"))
            if not NINJA_SAFE_PATH.fullmatch(os.fspath(work)):
                raise JitBuildError(
                    f"aiter: cannot build {spec.name}: both the cache path {module_dir} and the temp"
                    f" dir {work.parent} contain characters ninja cannot take; set AITER_JIT_DIR or"
                    " TMPDIR to a plain path"
                )
        # Build from a private copy of the sources: on ROCm, cpp_extension hipifies the sources in
        # place (new *_hip files beside them), which would change the next key and fail on a
        # read-only install. The key is taken from the originals.
        src_copy = work / "src"
        with cache_writes(spec, "staging the sources into", src_copy):
            os.makedirs(work, mode=0o700, exist_ok=True)
            stage_sources(spec, src_copy)

        def in_copy(path: str) -> str:
            rel = os.path.relpath(os.path.abspath(path), spec.root)
            return path if rel.startswith("..") else os.fspath(src_copy / rel)

        job = {
            "name": spec.name,
            "sources": [in_copy(s) for s in spec.sources],
            "extra_cflags": [build_arg(f) for f in spec.extra_cflags],
            "extra_cuda_cflags": [build_arg(f) for f in spec.extra_cuda_cflags],
            "extra_ldflags": [build_arg(f) for f in spec.extra_ldflags],
            "include_dirs": [in_copy(d) for d in spec.include_dirs],
            "build_dir": os.fspath(work),
            "parent_pid": os.getpid(),
        }
        log_path = work / "build.log"
        with cache_writes(spec, "writing the build job", work / "job.json"):
            (work / "job.json").write_text(json.dumps(job, indent=1))
        with cache_writes(spec, "running the build in", work):
            rc = run_build_child(spec, work / "job.json", work, log_path)
            log_text = log_path.read_text(errors="replace")
        if rc < 0:
            # Killed from outside (out of memory, a supervisor): no compile failure, so nothing is
            # recorded for the processes waiting on this key; they build again.
            tail = "\n".join("  " + l for l in log_text.splitlines()[-ERROR_LINES:])
            raise JitBuildError(
                f"aiter: building {spec.name} for {spec.label} stopped: its build process was killed by"
                f" {signal.Signals(-rc).name}; last output:\n{tail}"
            )
        built_library = work / library_name(spec)
        if rc != 0 or not built_library.is_file():
            failed_log = module_dir / f"failed-{key}.log"
            try:
                with cache_writes(spec, "writing the compiler output to", failed_log):
                    cache_dir.replace_file(failed_log, log_text.encode())
                where = f"full log: {failed_log}"
            except JitBuildError as e:
                where = f"the full log is not kept: {e}"
            errors = "\n".join("  " + l for l in first_error_lines(log_text))
            raise JitBuildError(
                f"aiter: building {spec.name} for {spec.label} failed (exit {rc});"
                f" first errors:\n{errors}\n{where}"
            )
        library = staging / library_name(spec)
        with cache_writes(spec, "installing the build into", staging):
            shutil.move(os.fspath(built_library), os.fspath(library))
            os.chmod(library, 0o755)  # the linker's mode follows the umask: no one else may write it
            shutil.copyfile(log_path, staging / "build.log")
            seconds = time.time() - t0
            meta = {
                "key": key,
                "targets": list(spec.targets),
                "library": library_record(library),
                "seconds": round(seconds, 1),
                "torch": torch.__version__,
                "cxx": host_compiler(),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            (staging / ENTRY_META).write_text(json.dumps(meta, indent=1))
            shutil.rmtree(work)
            rename_into_place(spec, staging, entry)
        print(f"aiter: built {spec.name} for {spec.label} in {seconds:.1f} s ({entry})", file=sys.stderr, flush=True)
    finally:
        for d in (work, staging):
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)
