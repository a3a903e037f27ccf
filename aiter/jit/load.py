"""Loading a module: its valid cache entry, else a build made once across processes, then the import.

A cached build is loaded with importlib directly: no ninja check, no compilation; asking each
compiler for its version costs a few milliseconds, hashing the library about 2 ms per MB. Processes
that want the same key wait on its lock (build_lock.py); a waiter whose builder failed to compile
reports that failure instead of repeating it, one whose builder was interrupted or killed builds.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

from . import build, cache_dir
from .build_lock import BuildLock
from .cache_entry import cache_writes, entry_problem, library_inode, set_aside
from .cache_key import cache_key, cache_root, library_name
from .errors import JitBuildError
from .module_specs import ModuleSpec


def import_library(name: str, path: Path, trusted: bool = False):
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
        errors = "\n".join("  " + l for l in build.first_error_lines(text))
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
    lock = BuildLock(module_dir / f"{key}.lock")
    with cache_writes(spec, "creating", module_dir):
        cache_dir.make_dirs(module_dir, module_dir.parent)
    wait_start = None  # when this process first found another one building

    def problem() -> str | None:
        found = entry_problem(spec, entry)
        if found is None and import_failure and library_inode(spec, entry) == import_failure[0]:
            return import_failure[1]
        return found

    while True:
        with cache_writes(spec):
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
                with cache_writes(spec):
                    set_aside(entry, reason)
            if wait_start is not None:
                _raise_if_failed_meanwhile(spec, failed_log, wait_start)
            print(build.build_message(spec, module_dir), file=sys.stderr, flush=True)
            build.build(spec, key, module_dir, entry)
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
    library = entry / library_name(spec)
    module = None
    import_failure = None
    # Trusted or refused, outside in: a folder that others could have written is never read.
    if cache_dir.check_root(root) and cache_dir.check_dir(module_dir) and cache_dir.check_dir(entry) \
            and entry_problem(spec, entry) is None:
        try:
            module = import_library(spec.name, library)
        except (ImportError, OSError) as e:
            import_failure = (library_inode(spec, entry), f"{library.name} does not import: {e}")
    built = False
    if module is None:
        built = _ensure_entry(spec, key, module_dir, import_failure)
        try:
            module = import_library(spec.name, library)
        except (ImportError, OSError) as e:
            # The build child imported this very library; failing here is this process's own (its
            # environment, its address space): rebuilding again would not help, so it is a build
            # error, which the caller keeps and repeats instead of replacing the entry on every call.
            raise JitBuildError(
                f"aiter: {library} verified and imported in the build process but does not import in"
                f" this one: {e}") from e
    if info is not None:
        info.update(
            built=built, key=key, path=os.fspath(library), targets=list(spec.targets),
            seconds=time.time() - t0,
        )
    return module
