"""Just-in-time build and on-disk cache of ``module_fp8_mqa_logits``.

Nothing here runs at ``import aiter``: the first call of ``get_module()`` (made by the op on first
use) picks the targets of this machine, and either loads a cached build or compiles one.

Cache layout, under ``$AITER_JIT_DIR`` (else ``$XDG_CACHE_HOME/aiter/jit``, else
``~/.cache/aiter/jit``)::

    <name>/<key>/<name>.so    one directory per key; it appears only by an atomic rename
    <name>/<key>/build.json   how it was built, with the size and sha256 of <name>.so
    <name>/<key>.lock         held (fcntl.flock) by the one process building that key
    <name>/.tmp-<key>-<pid>-* where that process builds; removed on failure
    <name>/.bad-<key>-<pid>-* an invalid entry set aside, being deleted
    <name>/failed-<key>.log   the compiler output of the last failed compile of that key
    $TMPDIR/aiter-jit-<key>-<pid>-*  where it builds when the cache path holds characters that
                              ninja reads as syntax ($, ':', ' '); the library is copied back

The key hashes the content of every file in the targets' folders under csrc/ (build_config's
*_SOURCE_DIRS), the flags, the targets, the torch and Python versions and the compilers (path and
``--version`` of the host compiler, and of nvcc or hipcc for a GPU target), so a changed input or an upgraded toolkit gets a new directory and a
stale build is never loaded. A cached build is loaded with importlib directly: no ninja check, no
compilation; asking each compiler for its version costs a few milliseconds, hashing the library
about 2 ms per MB (0.4 ms for the CPU module).

An entry is used only when its library has the size and sha256 that build.json recorded and it
imports. Anything else (a truncated or overwritten library, a key directory without one, an entry
from an older builder) is set aside under the key's lock and rebuilt, with one line on stderr. The
digest is checked before the import because dlopen of a truncated library dies with SIGBUS.

The cache trusts only folders and files of the current user that no one else can write, and opens
nothing in it through a symbolic link (cache_dir.py: the rules, and why nothing falls back to another
folder). Folders are created 0700. A build stages only the folders the key hashes.

A build runs in a child process (``_build_child.py``) that takes its compilers down with it: when
this process is interrupted (KeyboardInterrupt is re-raised, nothing is recorded as a failure) and
when it is killed. Only a failed compile writes ``failed-<key>.log``; processes that waited for an
interrupted or killed build build the key themselves. While it runs, a line every PROGRESS_S
seconds says how many of ninja's steps are done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import torch

from . import build_config, build_lock, cache_dir, processes
from .build_lock import DEFAULT_LOCK_TIMEOUT_S, HEARTBEAT_S, lock_is_stale  # noqa: F401 (API)
from .errors import JitBuildError

# Bump when the way this file builds changes, so old cache entries are not reused.
BUILDER_VERSION = 2
ERROR_LINES = 12
# Seconds between the progress lines of a running build.
PROGRESS_S = 10.0


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    """Everything that decides what a JIT module is; the cache key is a hash of it."""

    name: str
    sources: tuple  # absolute paths
    root: str  # the csrc directory: sources and headers are hashed relative to it
    targets: tuple  # e.g. ("cpu", "sm90")
    extra_cflags: tuple = ()
    extra_cuda_cflags: tuple = ()
    extra_ldflags: tuple = ()
    include_dirs: tuple = ()  # absolute paths
    source_dirs: tuple = ()  # absolute paths: every file in them is part of the key

    @property
    def label(self) -> str:
        return "+".join(self.targets)


# ------------------------------------------------------------------------------------------------
# Targets and flags
# ------------------------------------------------------------------------------------------------

KNOWN_TARGETS = ("cpu", "sm90", "gfx950")


def detect_targets() -> tuple:
    """cpu always, plus the backend of each visible GPU (sm90 for compute capability 9.0 under a
    CUDA torch, gfx950 for a gfx950 GPU under a ROCm torch: aiter/backends.py).
    ``AITER_JIT_TARGETS=cpu,sm90`` overrides (AOT images)."""
    forced = os.environ.get("AITER_JIT_TARGETS", "").strip()
    if forced:
        wanted = [t.strip() for t in forced.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in KNOWN_TARGETS]
        if unknown:
            raise ValueError(f"AITER_JIT_TARGETS: unknown target(s) {unknown}; known: {KNOWN_TARGETS}")
        return tuple(["cpu"] + [t for t in KNOWN_TARGETS[1:] if t in wanted])
    targets = ["cpu"]
    if torch.cuda.is_available():
        from aiter import backends  # what each backend runs on: its own capabilities.h

        for index in range(torch.cuda.device_count()):
            backend = backends.gpu_backend_for(torch, index)
            if backend is not None and backend.name not in targets:
                targets.append(backend.name)
    return tuple(t for t in KNOWN_TARGETS if t in targets)


def host_compiler() -> str:
    """The C++ compiler for host code and the final link.

    ``AITER_CXX`` wins when set. Otherwise the distribution's /usr/bin/g++ is preferred over a
    ``CXX`` that points elsewhere: torch's wheels are built with a gcc-toolset that does not exist at
    run time and load the system's shared libstdc++; a foreign ``CXX`` (conda or manylinux toolchains)
    may link libstdc++ statically, giving the extension a second copy of the iostream and locale
    state, which crashed at first iostream use on the GPU machine. The link flags in
    ``_link_flags`` guard against that as well, for an explicit ``AITER_CXX``.
    """
    explicit = os.environ.get("AITER_CXX")
    if explicit:
        return explicit
    if os.path.exists("/usr/bin/g++"):
        return "/usr/bin/g++"
    return os.environ.get("CXX") or "c++"


def _link_flags() -> list:
    # The explicit -lstdc++ comes before the driver's implicit libraries, so even a driver run with
    # -static-libstdc++ resolves the C++ runtime against the shared libstdc++.so (measured: NEEDED
    # libstdc++.so.6 and no embedded copy); -shared-libgcc keeps one unwinder for exceptions that
    # cross into torch (TORCH_CHECK's c10::Error).
    # --no-as-needed stays on for torch's own libraries that follow, as cpp_extension links them.
    return ["-shared-libgcc", "-Wl,--no-as-needed", "-lstdc++"]


def _env_flags(variable: str) -> list:
    """The flags in environment variable ``variable``, split as a POSIX shell splits words (quotes
    group, nothing is expanded or run). Each reaches the compiler as exactly that one argument
    (``_build_arg``)."""
    try:
        flags = shlex.split(os.environ.get(variable, ""))
    except ValueError as e:
        raise JitBuildError(f"aiter: {variable} cannot be split into flags: {e}") from e
    for flag in flags:
        _check_build_arg(flag, variable)
    return flags


def _check_build_arg(flag: str, origin: str):
    # A ninja variable is one line: a line break inside an argument cannot be written into it.
    if any(c in flag for c in "\n\r\0"):
        raise JitBuildError(f"aiter: {origin}: the flag {flag!r} holds a line break or NUL, which no"
                            " compiler command line of the build can carry")


def _build_arg(flag: str) -> str:
    """``flag`` as torch's build.ninja must hold it to reach the compiler unchanged: torch writes the
    flags into the file as they are and ninja runs each command through /bin/sh, so the flag is
    shell-quoted (no backtick, ``$(...)`` or glob acts) and its ``$`` doubled (ninja's escape)."""
    _check_build_arg(flag, "a build flag")
    return shlex.quote(flag).replace("$", "$$")


def module_spec(targets=None, cpu_simd=None) -> ModuleSpec:
    """The spec of module_fp8_mqa_logits for ``targets`` (default: this machine's), holding the CPU
    SIMD variants ``cpu_simd`` (default: this machine's; the ahead-of-time build passes all). The
    variants are in the sources and the flags, so in the cache key: a cache shared by machines of
    different CPUs keeps one build per variant set."""
    targets = tuple(targets) if targets is not None else detect_targets()
    cpu_simd = tuple(cpu_simd) if cpu_simd is not None else build_config.host_cpu_simd_variants()
    root = build_config.csrc_dir()
    names = build_config.cpu_sources(cpu_simd)
    dirs = list(build_config.COMMON_SOURCE_DIRS)
    cflags = list(build_config.CXX_FLAGS) + build_config.cpu_simd_flags(cpu_simd)
    cuda_cflags: list = []
    if "sm90" in targets:
        names += build_config.SM90_SOURCES
        dirs += build_config.SM90_SOURCE_DIRS
        cflags.append("-DAITER_WITH_SM90")  # the binding (host compiler) must see it too
        cuda_cflags += build_config.SM90_NVCC_FLAGS
    if "gfx950" in targets:
        names += build_config.GFX950_SOURCES
        dirs += build_config.GFX950_SOURCE_DIRS
        cflags.append("-DAITER_WITH_GFX950")
        cuda_cflags += build_config.GFX950_HIP_FLAGS
    # Debug, test and A/B hooks: extra host flags (e.g. "-include broken.h" to exercise the failure
    # path) and extra GPU-compiler flags (a measurement variant of a kernel, dev/ab.py). Both are in
    # the key, so a variant never loads the plain build.
    cflags += _env_flags("AITER_JIT_EXTRA_CFLAGS")
    if len(targets) > 1:
        cuda_cflags += _env_flags("AITER_JIT_EXTRA_CUDA_CFLAGS")
    return ModuleSpec(
        name=build_config.MODULE_NAME,
        sources=tuple(build_config.source_paths(names)),
        root=os.fspath(root),
        targets=targets,
        extra_cflags=tuple(cflags),
        extra_cuda_cflags=tuple(cuda_cflags),
        extra_ldflags=tuple(_link_flags()),
        include_dirs=tuple(os.fspath(root / d) for d in build_config.INCLUDE_DIRS),
        source_dirs=tuple(os.fspath(root / d) for d in dirs),
    )


# ------------------------------------------------------------------------------------------------
# Cache key
# ------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get("AITER_JIT_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "aiter" / "jit"


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _hashed_files(spec: ModuleSpec) -> list:
    """The sources and every file in the spec's source folders (its targets' folders under csrc/)."""
    files = set(os.path.abspath(s) for s in spec.sources)
    for d in spec.source_dirs:
        for dirpath, _, filenames in os.walk(d):
            files.update(os.path.join(dirpath, f) for f in filenames)
    return sorted(files)


def _gpu_compiler(target: str) -> str:
    """The nvcc (sm90) or hipcc (gfx950) torch's cpp_extension will use, found the way it finds
    CUDA_HOME / ROCM_HOME (environment, then PATH, then the default prefix), without importing it
    (that import alone costs ~0.1 s on every cached load)."""
    tool, envs, prefix = (("nvcc", ("CUDA_HOME", "CUDA_PATH"), "/usr/local/cuda") if target == "sm90"
                          else ("hipcc", ("ROCM_HOME", "ROCM_PATH"), "/opt/rocm"))
    for env in envs:
        if os.environ.get(env):
            return os.path.join(os.environ[env], "bin", tool)
    found = shutil.which(tool)
    return found if found else os.path.join(prefix, "bin", tool)


@functools.lru_cache(maxsize=None)
def _tool_version(path: str) -> str:
    """``path --version`` (its whole output: release and build), or why there is none."""
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {type(e).__name__}"


def toolchain_identity(spec: ModuleSpec) -> dict:
    """Path and version of every compiler that builds ``spec``: part of the cache key, so a
    toolkit upgrade (same paths, new compiler) does not load a build made by the old one."""
    tools = {"cxx": host_compiler()}
    for target in spec.targets:
        if target != "cpu":
            tools[target] = _gpu_compiler(target)
    return {name: [path, _tool_version(path)] for name, path in tools.items()}


def _rel(path: str, root: str) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def cache_key(spec: ModuleSpec) -> str:
    missing = [s for s in spec.sources if not os.path.isfile(s)]
    if missing:
        raise JitBuildError(f"aiter: cannot build {spec.name}: source file(s) missing: {missing}")
    desc = {
        "builder": BUILDER_VERSION,
        "name": spec.name,
        "targets": list(spec.targets),
        "files": [[_rel(p, spec.root), _file_digest(p)] for p in _hashed_files(spec)],
        "sources": [_rel(s, spec.root) for s in spec.sources],
        "include_dirs": [_rel(d, spec.root) for d in spec.include_dirs],
        "cflags": list(spec.extra_cflags),
        "cuda_cflags": list(spec.extra_cuda_cflags),
        "ldflags": list(spec.extra_ldflags),
        "torch": [torch.__version__, torch.version.git_version, torch.version.cuda, torch.version.hip],
        "python": [sys.version, sysconfig.get_config_var("EXT_SUFFIX")],
        "toolchain": toolchain_identity(spec),
    }
    blob = json.dumps(desc, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _library_name(spec: ModuleSpec) -> str:
    return spec.name + ".so"


# ------------------------------------------------------------------------------------------------
# Lock
# ------------------------------------------------------------------------------------------------


# The lock lives in build_lock.py; these names stay importable from here.
_BuildLock = build_lock.BuildLock
_lock_timeout = build_lock.lock_timeout
_pid_alive = build_lock.pid_alive


# ------------------------------------------------------------------------------------------------
# Cache entries
# ------------------------------------------------------------------------------------------------

ENTRY_META = "build.json"


def library_record(path: Path) -> dict:
    """What ``build.json`` records of a built library, to tell a damaged copy from the one built."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return {"size": size, "sha256": digest.hexdigest()}


def entry_problem(spec: ModuleSpec, entry: Path) -> str | None:
    """Why the cache entry ``entry`` must not be loaded, or None when its library is the one built.

    Checked before the import: dlopen of a truncated library dies with SIGBUS, which no exception
    handler in the process can catch."""
    library = entry / _library_name(spec)
    try:
        meta = json.loads((entry / ENTRY_META).read_text())
    except FileNotFoundError:
        return f"no {ENTRY_META}"
    except (OSError, ValueError) as e:
        return f"unreadable {ENTRY_META}: {e}"
    recorded = meta.get("library") if isinstance(meta, dict) else None
    if not isinstance(recorded, dict) or "size" not in recorded or "sha256" not in recorded:
        return f"{ENTRY_META} records no size and sha256 of the library (an older builder wrote it)"
    # A link or a file someone else can write is refused (JitBuildError), not read or replaced.
    if not cache_dir.check_file(library):
        return f"{library.name} is missing"
    size = library.stat().st_size
    if size != recorded["size"]:
        return f"{library.name} has {size} bytes, {recorded['size']} were built"
    if library_record(library)["sha256"] != recorded["sha256"]:
        return f"{library.name} differs from the library built (sha256)"
    return None


def _library_inode(spec: ModuleSpec, entry: Path) -> int | None:
    try:
        return os.stat(entry / _library_name(spec)).st_ino
    except OSError:
        return None


def _set_aside(entry: Path, reason: str):
    """Take an invalid entry out of its key's place (the caller holds the key's lock) and delete it.

    The rename is atomic, so a process reading the key sees either the entry or none; a removal
    cut short leaves a ``.bad-*`` dir that the next build of the key sweeps."""
    aside = entry.with_name(f".bad-{entry.name}-{os.getpid()}-{time.time_ns()}")
    os.rename(entry, aside)
    print(f"aiter: cache entry {entry} is invalid ({reason}); removed it, rebuilding", file=sys.stderr, flush=True)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _cache_writes(spec: ModuleSpec, doing: str = "writing", path=None):
    """Turn a failed file operation in the cache or the build dir (refused, disk full, anything the
    OS reports) into a JitBuildError that says which path, why, and what to do."""
    try:
        yield
    except shutil.Error as e:
        # copytree gathers its failures: (source, destination, reason) each.
        failures = e.args[0] if e.args and isinstance(e.args[0], list) else []
        first = failures[0] if failures else (None, path, str(e))
        raise JitBuildError(
            f"aiter: cannot build {spec.name}: {doing} {first[1]} failed: {first[2]}"
            + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else "")
        ) from e
    except OSError as e:
        err = cache_dir.write_error(e, path or cache_root(), doing)
        raise JitBuildError(f"aiter: cannot build {spec.name}: {str(err)[len('aiter: '):]}") from e


# ------------------------------------------------------------------------------------------------
# Build and load
# ------------------------------------------------------------------------------------------------

# ninja reads '$' (a variable), ':' and ' ' (separators) in a path as syntax, and torch's build file
# escapes only some of them: a cache path with anything outside this set is built in a temp dir.
NINJA_SAFE_PATH = re.compile(r"[\w./+,=@%~-]*")
# How long a build process may take to exit after SIGTERM before it gets SIGKILL.
STOP_GRACE_S = 5.0


def _max_jobs(spec: ModuleSpec) -> int:
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


def _child_env(spec: ModuleSpec) -> dict:
    env = dict(os.environ)
    env["CXX"] = host_compiler()
    env["NINJA_STATUS"] = "[%f/%t] "  # finished/total: what the progress lines count
    env.setdefault("MAX_JOBS", str(_max_jobs(spec)))
    # ninja from the interpreter's environment (a venv's bin/ is not on PATH unless activated).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def first_error_lines(log: str, limit: int = ERROR_LINES) -> list:
    pat = re.compile(r"(\berror\b|\bError\b|undefined reference|FAILED:)")
    lines = [l.rstrip() for l in log.splitlines() if pat.search(l) and not l.startswith("[")]
    if not lines:
        lines = [l.rstrip() for l in log.splitlines()[-limit:]]
    return lines[:limit]


def _cleanup_orphans(module_dir: Path, key: str):
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
                    and not _pid_alive(pid):
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


def _run_build_child(spec: ModuleSpec, job_path: Path, work: Path, log_path: Path) -> int:
    """The build child's exit status (negative: killed by that signal). Whatever ends the wait,
    KeyboardInterrupt included, no compiler of the build survives it."""
    child = Path(__file__).with_name("_build_child.py")
    with open(cache_dir.open_nofollow(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, os.fspath(child), os.fspath(job_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_child_env(spec),
            cwd=os.fspath(work),
            # Its own session: a Ctrl-C in this terminal interrupts this process only, which then
            # stops the build, instead of killing the compilers under a process that carries on.
            start_new_session=True,
        )
    progress = _Progress(spec, log_path)
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


NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\] ", re.MULTILINE)


def progress_line(spec: ModuleSpec, log_tail: bytes, seconds: float, total: int | None = None) -> str:
    """What a running build has done so far: the last ninja status line in its log (ninja prints
    one as each step ends), else 0 of the ``total`` steps of build.ninja once it is written."""
    steps = NINJA_STEP.findall(log_tail)
    if steps:
        done = f"{int(steps[-1][0])}/{int(steps[-1][1])} build steps done"
    elif total:
        done = f"0/{total} build steps done"
    else:
        done = "preparing"
    return f"aiter: {spec.name} for {spec.label}: {done}, {seconds:.0f} s"


class _Progress:
    """A line on stderr every PROGRESS_S seconds while the build runs (a build can take minutes:
    silence would look like a hang)."""

    def __init__(self, spec: ModuleSpec, log_path: Path):
        self.spec, self.log_path, self.t0 = spec, log_path, time.time()
        self._stop = threading.Event()
        self._thread = None
        if PROGRESS_S > 0:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self):
        while not self._stop.wait(PROGRESS_S):
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - (64 << 10)))
                    tail = f.read()
            except OSError:
                tail = b""
            print(progress_line(self.spec, tail, time.time() - self.t0, self._total()), file=sys.stderr,
                  flush=True)

    def _total(self) -> int | None:
        """The number of steps in the build.ninja torch writes beside the log, once it is there."""
        try:
            text = (self.log_path.parent / "build.ninja").read_text(errors="replace")
        except OSError:
            return None
        return sum(1 for line in text.splitlines() if line.startswith("build ")) or None

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _rename_into_place(spec: ModuleSpec, staging: Path, entry: Path):
    try:
        os.rename(staging, entry)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        # An entry appeared during this build (another process broke a stale lock and finished
        # first): keep it when valid, else replace it.
        problem = entry_problem(spec, entry)
        if problem is None:
            return
        _set_aside(entry, problem)
        os.rename(staging, entry)


def _stage_sources(spec: ModuleSpec, src_copy: Path):
    """Copy what the build reads into ``src_copy``: the spec's source folders and sources (exactly
    what the key hashes: a CPU build stages common/, binding/ and cpu/, no GPU folder)."""
    root = os.path.abspath(spec.root)
    os.mkdir(src_copy, 0o700)
    copied: list = []
    for path in sorted({os.path.abspath(p) for p in (*spec.source_dirs, *spec.sources)}):
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


def _previous_build_seconds(spec: ModuleSpec, module_dir: Path) -> float | None:
    """How long the newest other build of this module for the same targets took here, if any."""
    newest = None
    try:
        entries = list(module_dir.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            if entry.name.startswith(".") or not cache_dir.check_dir(entry):
                continue
            meta = json.loads(cache_dir.read_file(entry / ENTRY_META, 1 << 16))
            if meta.get("targets") == list(spec.targets) and isinstance(meta.get("seconds"), (int, float)):
                if newest is None or meta.get("built_at", "") > newest[0]:
                    newest = (meta.get("built_at", ""), float(meta["seconds"]))
        except (OSError, ValueError, AttributeError, JitBuildError):
            continue
    return newest[1] if newest else None


def _build_message(spec: ModuleSpec, module_dir: Path) -> str:
    units = len(spec.sources)
    previous = _previous_build_seconds(spec, module_dir)
    took = f"; its last build here took {previous:.0f} s" if previous is not None else ""
    return (f"aiter: building {spec.name} for {spec.label} (once: {units} translation unit"
            f"{'s' if units != 1 else ''} to compile{took}; later calls load the cached build in"
            " milliseconds)...")


def _build(spec: ModuleSpec, key: str, module_dir: Path, entry: Path):
    """Compile in a private temp dir; only a finished, verified library is renamed to ``entry``.
    Any failure of a file operation on the way is a JitBuildError naming the path."""
    _cleanup_orphans(module_dir, key)
    t0 = time.time()
    with _cache_writes(spec, "creating a build folder in", module_dir):
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{os.getpid()}-", dir=module_dir))
    work = staging / "build"
    try:
        if not NINJA_SAFE_PATH.fullmatch(os.fspath(work)):
            with _cache_writes(spec, "creating a build folder in", tempfile.gettempdir()):
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
        with _cache_writes(spec, "staging the sources into", src_copy):
            os.makedirs(work, mode=0o700, exist_ok=True)
            _stage_sources(spec, src_copy)

        def in_copy(path: str) -> str:
            rel = os.path.relpath(os.path.abspath(path), spec.root)
            return path if rel.startswith("..") else os.fspath(src_copy / rel)

        job = {
            "name": spec.name,
            "sources": [in_copy(s) for s in spec.sources],
            "extra_cflags": [_build_arg(f) for f in spec.extra_cflags],
            "extra_cuda_cflags": [_build_arg(f) for f in spec.extra_cuda_cflags],
            "extra_ldflags": [_build_arg(f) for f in spec.extra_ldflags],
            "include_dirs": [in_copy(d) for d in spec.include_dirs],
            "build_dir": os.fspath(work),
            "parent_pid": os.getpid(),
        }
        log_path = work / "build.log"
        with _cache_writes(spec, "writing the build job", work / "job.json"):
            (work / "job.json").write_text(json.dumps(job, indent=1))
        with _cache_writes(spec, "running the build in", work):
            rc = _run_build_child(spec, work / "job.json", work, log_path)
            log_text = log_path.read_text(errors="replace")
        if rc < 0:
            # Killed from outside (out of memory, a supervisor): no compile failure, so nothing is
            # recorded for the processes waiting on this key; they build again.
            tail = "\n".join("  " + l for l in log_text.splitlines()[-ERROR_LINES:])
            raise JitBuildError(
                f"aiter: building {spec.name} for {spec.label} stopped: its build process was killed by"
                f" {signal.Signals(-rc).name}; last output:\n{tail}"
            )
        built_library = work / _library_name(spec)
        if rc != 0 or not built_library.is_file():
            failed_log = module_dir / f"failed-{key}.log"
            try:
                with _cache_writes(spec, "writing the compiler output to", failed_log):
                    cache_dir.replace_file(failed_log, log_text.encode())
                where = f"full log: {failed_log}"
            except JitBuildError as e:
                where = f"the full log is not kept: {e}"
            errors = "\n".join("  " + l for l in first_error_lines(log_text))
            raise JitBuildError(
                f"aiter: building {spec.name} for {spec.label} failed (exit {rc});"
                f" first errors:\n{errors}\n{where}"
            )
        library = staging / _library_name(spec)
        with _cache_writes(spec, "installing the build into", staging):
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
            _rename_into_place(spec, staging, entry)
        print(f"aiter: built {spec.name} for {spec.label} in {seconds:.1f} s ({entry})", file=sys.stderr, flush=True)
    finally:
        for d in (work, staging):
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)


def _import_library(name: str, path: Path, trusted: bool = False):
    """Import the extension module at ``path``; unless ``trusted`` (a packaged AOT build), only a
    library of the cache's rules (cache_dir.check_file): ours and written by no one else."""
    if not trusted:
        cache_dir.check_file(path)
    spec = importlib.util.spec_from_file_location(name, os.fspath(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"aiter: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raise_if_failed_meanwhile(spec: ModuleSpec, failed_log: Path, since: float):
    """The build this process waited for failed to compile: report that failure instead of
    repeating it (a dozen processes started together would otherwise each spend a minute on the
    same error). A later process, which did not wait, builds again; so does a waiter whose builder
    was interrupted or killed, which records no failure."""
    try:
        failed_at = failed_log.lstat().st_mtime
    except OSError:
        return
    if failed_at >= since - 1.0:  # mtime granularity
        try:
            text = cache_dir.read_file(failed_log).decode(errors="replace")
        except OSError:
            return
        errors = "\n".join("  " + l for l in first_error_lines(text))
        raise JitBuildError(
            f"aiter: building {spec.name} for {spec.label} failed in another process while this one"
            f" waited; first errors:\n{errors}\nfull log: {failed_log}"
        )


def _ensure_entry(spec: ModuleSpec, key: str, module_dir: Path, import_failure: tuple | None) -> bool:
    """Make ``module_dir/key`` a valid entry, once across processes: wait while another process
    holds the key's lock, then check the entry under the lock, set an invalid one aside and build.
    ``import_failure``: (inode, reason) of a library that verified but did not import here.
    Returns whether this process built it."""
    entry = module_dir / key
    failed_log = module_dir / f"failed-{key}.log"
    lock = _BuildLock(module_dir / f"{key}.lock")
    with _cache_writes(spec, "creating", module_dir):
        cache_dir.make_dirs(module_dir, module_dir.parent)
    wait_start = None  # when this process first found another one building

    def problem() -> str | None:
        found = entry_problem(spec, entry)
        if found is None and import_failure and _library_inode(spec, entry) == import_failure[0]:
            return import_failure[1]
        return found

    while True:
        with _cache_writes(spec):
            acquired = lock.try_acquire()
        if not acquired:
            if cache_dir.check_dir(entry) and problem() is None:
                return False  # built by the process that still holds the lock
            if wait_start is None:
                wait_start = time.time()
                print(
                    f"aiter: waiting for another process to build {spec.name} ({lock.path})...",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(0.25)
            continue
        try:
            if cache_dir.check_dir(entry):
                reason = problem()
                if reason is None:
                    return False  # built by another process meanwhile
                with _cache_writes(spec):
                    _set_aside(entry, reason)
            if wait_start is not None:
                _raise_if_failed_meanwhile(spec, failed_log, wait_start)
            print(_build_message(spec, module_dir), file=sys.stderr, flush=True)
            _build(spec, key, module_dir, entry)
            return True
        finally:
            lock.release()


def load_or_build(spec: ModuleSpec, info: dict | None = None):
    """Load ``spec``'s cached build, building it first (once across processes) if it is absent or
    invalid: an entry is used only when its library matches build.json and imports."""
    t0 = time.time()
    key = cache_key(spec)
    root = cache_root()
    module_dir = root / spec.name
    entry = module_dir / key
    library = entry / _library_name(spec)
    module = None
    import_failure = None
    # Trusted or refused, outside in: a folder that others could have written is never read.
    if cache_dir.check_root(root) and cache_dir.check_dir(module_dir) and cache_dir.check_dir(entry) \
            and entry_problem(spec, entry) is None:
        try:
            module = _import_library(spec.name, library)
        except (ImportError, OSError) as e:
            import_failure = (_library_inode(spec, entry), f"{library.name} does not import: {e}")
    built = False
    if module is None:
        built = _ensure_entry(spec, key, module_dir, import_failure)
        try:
            module = _import_library(spec.name, library)
        except (ImportError, OSError) as e:
            # The build child imported this very library; failing here is this process's own (its
            # environment, its address space): rebuilding again would not help, so it is a build
            # error, which get_module keeps and repeats instead of replacing the entry on every call.
            raise JitBuildError(
                f"aiter: {library} verified and imported in the build process but does not import in"
                f" this one: {e}") from e
    if info is not None:
        info.update(
            built=built, key=key, path=os.fspath(library), targets=list(spec.targets),
            seconds=time.time() - t0,
        )
    return module


# ------------------------------------------------------------------------------------------------
# Ahead-of-time build (setup.py with AITER_BUILD_AOT=1)
# ------------------------------------------------------------------------------------------------

AOT_META = "module_fp8_mqa_logits.aot.json"


def aot_fingerprint(spec: ModuleSpec) -> dict:
    """What an ahead-of-time build must match to be used instead of a JIT build."""
    files = [[_rel(p, spec.root), _file_digest(p)] for p in _hashed_files(spec)]
    digest = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:24]
    # The flags too: AITER_JIT_EXTRA_CFLAGS at run time asks for a build the AOT image is not.
    flags = [list(spec.extra_cflags), list(spec.extra_cuda_cflags), list(spec.extra_ldflags)]
    flag_digest = hashlib.sha256(json.dumps(flags).encode()).hexdigest()[:24]
    return {"sources": digest, "flags": flag_digest, "torch": torch.__version__, "builder": BUILDER_VERSION}


def _prebuilt(targets: tuple, here: Path | None = None):
    """The AOT module next to this file, if it matches the sources and torch and covers targets."""
    if os.environ.get("AITER_JIT_IGNORE_AOT"):
        return None
    here = here or Path(__file__).resolve().parent
    meta_path = here / AOT_META
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    candidates = [here / (build_config.MODULE_NAME + s) for s in importlib.machinery.EXTENSION_SUFFIXES]
    library = next((c for c in candidates if c.is_file()), None)
    if library is None or not set(targets) <= set(meta.get("targets", ())):
        return None
    spec = module_spec(tuple(meta["targets"]), build_config.CPU_SIMD_VARIANTS)
    if meta.get("fingerprint") != aot_fingerprint(spec):
        return None
    return library


# ------------------------------------------------------------------------------------------------
# The module of this package
# ------------------------------------------------------------------------------------------------

_module = None
_module_error = None
_module_lock = threading.Lock()
last_load_info: dict = {}


def get_module():
    """module_fp8_mqa_logits for this machine: AOT build, else cached JIT build, else built now.

    A failed build raises JitBuildError, and the same error again on later calls in this process
    (a rebuild per call would cost a minute each time)."""
    global _module, _module_error
    if _module is not None:
        return _module
    with _module_lock:
        if _module is not None:
            return _module
        if _module_error is not None:
            raise _module_error
        t0 = time.time()
        targets = detect_targets()
        library = _prebuilt(targets)
        try:
            if library is not None:
                _module = _import_library(build_config.MODULE_NAME, library, trusted=True)
                last_load_info.update(
                    built=False, key="aot", path=os.fspath(library), targets=list(targets),
                    seconds=time.time() - t0,
                )
            else:
                _module = load_or_build(module_spec(targets), last_load_info)
        except JitBuildError as e:
            _module_error = e
            raise
        return _module
