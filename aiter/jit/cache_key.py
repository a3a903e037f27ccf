"""Where the cache is, and the key of a module in it: a hash of everything that decides the build.

The key hashes the content of every file the spec names (its sources, the files in its source
folders and its headers), the flags, the targets, the torch and Python versions and the compilers
(path and ``--version`` of the host compiler, and of nvcc or hipcc for a GPU target), so a changed
input or an upgraded toolkit gets a new directory and a stale build is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path

import torch

from . import toolchain
from .errors import JitBuildError
from .module_specs import ModuleSpec

# Bump when the way a module is built changes, so old cache entries are not reused.
BUILDER_VERSION = 3


def cache_root() -> Path:
    env = os.environ.get("AITER_JIT_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "aiter" / "jit"


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def hashed_files(spec: ModuleSpec) -> list:
    """The sources, the headers and every file in the spec's source folders: all a build reads under
    csrc/ (op_tests/test_jit.py follows the includes to check it)."""
    files = set(os.path.abspath(s) for s in (*spec.sources, *spec.headers))
    for d in spec.source_dirs:
        for dirpath, _, filenames in os.walk(d):
            files.update(os.path.join(dirpath, f) for f in filenames)
    return sorted(files)


def relative(path: str, root: str) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def library_name(spec: ModuleSpec) -> str:
    return spec.name + ".so"


def cache_key(spec: ModuleSpec) -> str:
    missing = [s for s in spec.sources if not os.path.isfile(s)]
    if missing:
        raise JitBuildError(f"aiter: cannot build {spec.name}: source file(s) missing: {missing}")
    desc = {
        "builder": BUILDER_VERSION,
        "name": spec.name,
        "targets": list(spec.targets),
        "files": [[relative(p, spec.root), file_digest(p)] for p in hashed_files(spec)],
        "sources": [relative(s, spec.root) for s in spec.sources],
        "include_dirs": [relative(d, spec.root) for d in spec.include_dirs],
        "cflags": list(spec.extra_cflags),
        "cuda_cflags": list(spec.extra_cuda_cflags),
        "ldflags": list(spec.extra_ldflags),
        "torch": [torch.__version__, torch.version.git_version, torch.version.cuda, torch.version.hip],
        "python": [sys.version, sysconfig.get_config_var("EXT_SUFFIX")],
        "toolchain": toolchain.toolchain_identity(spec.targets),
    }
    blob = json.dumps(desc, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]
