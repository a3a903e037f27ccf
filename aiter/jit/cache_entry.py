"""One cache entry, ``<root>/<name>/<key>/``: the library, its ``build.json``, and how an entry is
checked, set aside, put in place, and how a failed file operation on it is reported.

An entry is used only when its library has the size and sha256 that build.json recorded (and, in
load.py, imports). Anything else is set aside under the key's lock and rebuilt. The digest is
checked before the import because dlopen of a truncated library dies with SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from . import cache_dir
from .cache_key import cache_root, library_name
from .errors import JitBuildError
from .module_specs import ModuleSpec

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
    library = entry / library_name(spec)
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


def library_inode(spec: ModuleSpec, entry: Path) -> int | None:
    try:
        return os.stat(entry / library_name(spec)).st_ino
    except OSError:
        return None


def set_aside(entry: Path, reason: str):
    """Take an invalid entry out of its key's place (the caller holds the key's lock) and delete it.

    The rename is atomic, so a process reading the key sees either the entry or none; a removal
    cut short leaves a ``.bad-*`` dir that the next build of the key sweeps."""
    aside = entry.with_name(f".bad-{entry.name}-{os.getpid()}-{time.time_ns()}")
    os.rename(entry, aside)
    print(f"aiter: cache entry {entry} is invalid ({reason}); removed it, rebuilding", file=sys.stderr, flush=True)
    shutil.rmtree(aside, ignore_errors=True)


def rename_into_place(spec: ModuleSpec, staging: Path, entry: Path):
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
        set_aside(entry, problem)
        os.rename(staging, entry)


def previous_build_seconds(spec: ModuleSpec, module_dir: Path) -> float | None:
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


@contextlib.contextmanager
def cache_writes(spec: ModuleSpec, doing: str = "writing", path=None):
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
