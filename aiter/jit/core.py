"""Just-in-time build and on-disk cache of ``module_fp8_mqa_logits``.

Nothing here runs at ``import aiter``: the first call of ``get_module()`` (made by the op on first
use) picks the targets of this machine, and either loads a cached build or compiles one.

Cache layout, under ``$AITER_JIT_DIR`` (else ``$XDG_CACHE_HOME/aiter/jit``, else
``~/.cache/aiter/jit``)::

    <name>/<key>/<name>.so    one directory per key; it appears only by an atomic rename
    <name>/<key>.lock         held (fcntl.flock) by the one process building that key
    <name>/.tmp-<key>-<pid>-* where that process builds; removed on failure
    <name>/failed-<key>.log   the compiler output of the last failed build of that key

The key hashes the content of every source and header under csrc/, the flags, the targets, the
torch and Python versions and the compilers (path and ``--version`` of the host compiler, and of nvcc
or hipcc for a GPU target), so a changed input or an upgraded toolkit gets a new directory and a
stale build is never loaded. A cached build is loaded with importlib directly: no ninja check, no
compilation; asking each compiler for its version costs a few milliseconds.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import torch

from . import build_config

# Bump when the way this file builds changes, so old cache entries are not reused.
BUILDER_VERSION = 1
# A lock whose holder stopped heart-beating this long ago (or whose holder is dead) is stale.
DEFAULT_LOCK_TIMEOUT_S = 600.0
HEARTBEAT_S = 10.0
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".cuh", ".inc", ".inl")
ERROR_LINES = 12


class JitBuildError(RuntimeError):
    """The extension failed to compile or link; the message carries the compiler's first errors."""


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

    @property
    def label(self) -> str:
        return "+".join(self.targets)


# ------------------------------------------------------------------------------------------------
# Targets and flags
# ------------------------------------------------------------------------------------------------

KNOWN_TARGETS = ("cpu", "sm90", "gfx950")


def detect_targets() -> tuple:
    """cpu always; sm90 for a CUDA torch with a visible compute-capability-9.0 GPU; gfx950 for a
    ROCm torch with a visible gfx950 GPU. ``AITER_JIT_TARGETS=cpu,sm90`` overrides (AOT images)."""
    forced = os.environ.get("AITER_JIT_TARGETS", "").strip()
    if forced:
        wanted = [t.strip() for t in forced.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in KNOWN_TARGETS]
        if unknown:
            raise ValueError(f"AITER_JIT_TARGETS: unknown target(s) {unknown}; known: {KNOWN_TARGETS}")
        return tuple(["cpu"] + [t for t in KNOWN_TARGETS[1:] if t in wanted])
    targets = ["cpu"]
    if not torch.cuda.is_available():
        return tuple(targets)
    count = torch.cuda.device_count()
    if torch.version.hip:
        if any(_gcn_arch(i).startswith("gfx950") for i in range(count)):
            targets.append("gfx950")
    elif torch.version.cuda:
        if any(torch.cuda.get_device_capability(i) == (9, 0) for i in range(count)):
            targets.append("sm90")
    return tuple(targets)


def _gcn_arch(index: int) -> str:
    return getattr(torch.cuda.get_device_properties(index), "gcnArchName", "") or ""


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


def module_spec(targets=None) -> ModuleSpec:
    """The spec of module_fp8_mqa_logits for ``targets`` (default: this machine's)."""
    targets = tuple(targets) if targets is not None else detect_targets()
    root = build_config.csrc_dir()
    names = list(build_config.COMMON_SOURCES)
    cflags = list(build_config.CXX_FLAGS)
    cuda_cflags: list = []
    if "sm90" in targets:
        names += build_config.SM90_SOURCES
        cflags.append("-DAITER_WITH_SM90")  # the binding (host compiler) must see it too
        cuda_cflags += build_config.SM90_NVCC_FLAGS
    if "gfx950" in targets:
        names += build_config.GFX950_SOURCES
        cflags.append("-DAITER_WITH_GFX950")
        cuda_cflags += build_config.GFX950_HIP_FLAGS
    # Debug/test hook: extra host flags (e.g. "-include broken.h" to exercise the failure path).
    cflags += shlex.split(os.environ.get("AITER_JIT_EXTRA_CFLAGS", ""))
    return ModuleSpec(
        name=build_config.MODULE_NAME,
        sources=tuple(build_config.source_paths(names)),
        root=os.fspath(root),
        targets=targets,
        extra_cflags=tuple(cflags),
        extra_cuda_cflags=tuple(cuda_cflags),
        extra_ldflags=tuple(_link_flags()),
        include_dirs=tuple(os.fspath(root / d) for d in build_config.INCLUDE_DIRS),
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
    """The sources, every file in the include dirs and every header anywhere under the root."""
    files = set(os.path.abspath(s) for s in spec.sources)
    for d in spec.include_dirs:
        for dirpath, _, filenames in os.walk(d):
            files.update(os.path.join(dirpath, f) for f in filenames)
    for dirpath, _, filenames in os.walk(spec.root):
        files.update(os.path.join(dirpath, f) for f in filenames if f.endswith(HEADER_SUFFIXES))
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


def _lock_timeout() -> float:
    try:
        return float(os.environ.get("AITER_JIT_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_is_stale(holder: dict, age_s: float, timeout_s: float, host: str | None = None) -> bool:
    """A held lock is stale when its holder (on this host) is dead, or when it has not been
    touched for ``timeout_s`` (the holder heart-beats the file's mtime while it builds)."""
    host = host or socket.gethostname()
    pid = holder.get("pid")
    if isinstance(pid, int) and holder.get("host") == host and not _pid_alive(pid):
        return True
    return age_s > timeout_s


class _BuildLock:
    """An exclusive fcntl.flock on ``path`` with stale-lock recovery and a heartbeat."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = None
        self._stop = threading.Event()
        self._beat = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            self._break_if_stale(fd)
            os.close(fd)
            return False
        # The file may have been unlinked (released, or broken as stale) after we opened it:
        # then our lock is on a dead inode and someone else may hold the live one.
        try:
            same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        info = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        self.fd = fd
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()
        return True

    def _heartbeat(self):
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self.fd)
            except OSError:
                return

    def _break_if_stale(self, fd: int):
        try:
            st = os.fstat(fd)
            raw = os.pread(fd, 4096, 0)
            holder = json.loads(raw.decode() or "{}")
        except (OSError, ValueError):
            holder = {}
            st = os.fstat(fd)
        if not lock_is_stale(holder, time.time() - st.st_mtime, _lock_timeout()):
            return
        try:
            # Only unlink the inode we judged; another waiter may already have replaced it.
            if os.stat(self.path).st_ino == st.st_ino:
                os.unlink(self.path)
                print(
                    f"aiter: removed stale JIT lock {self.path} (holder {holder or 'unknown'})",
                    file=sys.stderr,
                )
        except FileNotFoundError:
            pass

    def release(self):
        if self.fd is None:
            return
        self._stop.set()
        try:
            os.unlink(self.path)  # tidy; waiters re-check the inode and then find the build
        except FileNotFoundError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


# ------------------------------------------------------------------------------------------------
# Build and load
# ------------------------------------------------------------------------------------------------


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
    """Temp build dirs of this key left by a process that died mid-build."""
    for d in module_dir.glob(f".tmp-{key}-*"):
        try:
            pid = int(d.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)


def _build(spec: ModuleSpec, key: str, module_dir: Path, final_dir: Path):
    """Compile into a private temp dir, then rename it to ``final_dir`` only on success."""
    _cleanup_orphans(module_dir, key)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{os.getpid()}-", dir=module_dir))
    try:
        # Build from a private copy of the source tree: on ROCm, cpp_extension hipifies the sources
        # in place (new *_hip files beside them), which would change the next key and fail on a
        # read-only install. The key is taken from the originals.
        src_copy = tmp / "src"
        shutil.copytree(spec.root, src_copy)

        def in_copy(path: str) -> str:
            rel = os.path.relpath(os.path.abspath(path), spec.root)
            return path if rel.startswith("..") else os.fspath(src_copy / rel)

        job = {
            "name": spec.name,
            "sources": [in_copy(s) for s in spec.sources],
            "extra_cflags": list(spec.extra_cflags),
            "extra_cuda_cflags": list(spec.extra_cuda_cflags),
            "extra_ldflags": list(spec.extra_ldflags),
            "include_dirs": [in_copy(d) for d in spec.include_dirs],
            "build_dir": os.fspath(tmp),
        }
        (tmp / "job.json").write_text(json.dumps(job, indent=1))
        child = Path(__file__).with_name("_build_child.py")
        log_path = tmp / "build.log"
        t0 = time.time()
        with open(log_path, "wb") as log:
            rc = subprocess.call(
                [sys.executable, os.fspath(child), os.fspath(tmp / "job.json")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_child_env(spec),
                cwd=os.fspath(tmp),
            )
        log_text = log_path.read_text(errors="replace")
        if rc != 0 or not (tmp / _library_name(spec)).is_file():
            failed_log = module_dir / f"failed-{key}.log"
            shutil.copyfile(log_path, failed_log)
            errors = "\n".join("  " + l for l in first_error_lines(log_text))
            raise JitBuildError(
                f"aiter: building {spec.name} for {spec.label} failed (exit {rc});"
                f" first errors:\n{errors}\nfull log: {failed_log}"
            )
        for obj in tmp.glob("*.o"):
            obj.unlink()
        shutil.rmtree(src_copy, ignore_errors=True)
        meta = {
            "key": key,
            "targets": list(spec.targets),
            "seconds": round(time.time() - t0, 1),
            "torch": torch.__version__,
            "cxx": host_compiler(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        (tmp / "build.json").write_text(json.dumps(meta, indent=1))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            os.rename(tmp, final_dir)
        except OSError as e:
            # Someone else's build of the same key won (only after a stale-lock break): use theirs.
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (final_dir / _library_name(spec)).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _import_library(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, os.fspath(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"aiter: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raise_if_failed_meanwhile(spec: ModuleSpec, failed_log: Path, since: float):
    """The build this process waited for failed: report that failure instead of repeating it (a
    dozen processes started together would otherwise each spend a minute on the same error). A
    later process, which did not wait, builds again."""
    try:
        failed_at = failed_log.stat().st_mtime
    except OSError:
        return
    if failed_at >= since - 1.0:  # mtime granularity
        errors = "\n".join("  " + l for l in first_error_lines(failed_log.read_text(errors="replace")))
        raise JitBuildError(
            f"aiter: building {spec.name} for {spec.label} failed in another process while this one"
            f" waited; first errors:\n{errors}\nfull log: {failed_log}"
        )


def load_or_build(spec: ModuleSpec, info: dict | None = None):
    """Load ``spec``'s cached build, building it first (once across processes) if absent."""
    t0 = time.time()
    key = cache_key(spec)
    module_dir = cache_root() / spec.name
    final_dir = module_dir / key
    library = final_dir / _library_name(spec)
    built = False
    if not library.is_file():
        module_dir.mkdir(parents=True, exist_ok=True)
        lock = _BuildLock(module_dir / f"{key}.lock")
        failed_log = module_dir / f"failed-{key}.log"
        wait_start = None  # when this process first found another one building
        while not library.is_file():
            if lock.try_acquire():
                try:
                    if not library.is_file() and wait_start is not None:
                        _raise_if_failed_meanwhile(spec, failed_log, wait_start)
                    if not library.is_file():
                        hint = "~1 min" if spec.targets == ("cpu",) else "~2 min"
                        print(
                            f"aiter: building {spec.name} for {spec.label} (first use, {hint})...",
                            file=sys.stderr,
                            flush=True,
                        )
                        _build(spec, key, module_dir, final_dir)
                        built = True
                finally:
                    lock.release()
            else:
                if wait_start is None:
                    wait_start = time.time()
                    print(
                        f"aiter: waiting for another process to build {spec.name} ({lock.path})...",
                        file=sys.stderr,
                        flush=True,
                    )
                time.sleep(0.25)
    module = _import_library(spec.name, library)
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
    spec = module_spec(tuple(meta["targets"]))
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
                _module = _import_library(build_config.MODULE_NAME, library)
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
