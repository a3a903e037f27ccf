"""The JIT modules of this package, each loaded once per process: the CPU module
(``get_module``) and the GPU module of one op family on one target (``get_family_module``).

Nothing here runs at ``import aiter``: the first call of ``get_module()`` (made by the first op
call) loads the CPU module, from an AOT build, else a cached JIT build, else built now; the first
GPU call of an op family loads that family's module for the GPU's target the same way
(aiter/ops/native.py attaches it to the CPU module). What each module is built from:
module_specs.py.

Cache layout, under ``$AITER_JIT_DIR`` (else ``$XDG_CACHE_HOME/aiter/jit``, else
``~/.cache/aiter/jit``), for each module <name> (module_fp8_mqa_logits, and e.g.
module_fp8_mqa_logits_sm90_prefill)::

    <name>/<key>/<name>.so    one directory per key; it appears only by an atomic rename
    <name>/<key>/build.json   how it was built, with the size and sha256 of <name>.so
    <name>/<key>.lock         held (fcntl.flock) by the one process building that key
    <name>/.tmp-<key>-<pid>-* where that process builds; removed on failure
    <name>/.bad-<key>-<pid>-* an invalid entry set aside, being deleted
    <name>/failed-<key>.log   the compiler output of the last failed compile of that key
    $TMPDIR/aiter-jit-<key>-<pid>-*  where it builds when the cache path holds characters that
                              ninja reads as syntax ($, ':', ' '); the library is copied back

The jobs, one file each: targets.py (which targets this machine has), toolchain.py (compilers,
flags), module_specs.py (what a module is built from), cache_key.py (the key), cache_dir.py (the
trust rules of the cache's folders and files: nothing is read from a folder another user can write,
nothing is opened through a link), cache_entry.py (an entry's checks), build_lock.py (one builder
per key across processes), build.py and build_progress.py (the build child and what it prints),
load.py (load or build, then import), aot.py (packaged builds).
"""

from __future__ import annotations

import os
import threading
import time

from . import aot, build_config  # noqa: F401 (build_config: API)
from .build_lock import DEFAULT_LOCK_TIMEOUT_S, HEARTBEAT_S, lock_is_stale  # noqa: F401 (API)
from .cache_key import cache_key, cache_root  # noqa: F401 (API)
from .errors import JitBuildError
from .load import import_library, load_or_build
from .module_specs import FAMILIES, ModuleSpec, family_spec, module_spec  # noqa: F401 (API)
from .targets import detect_targets  # noqa: F401 (API)

__all__ = ["FAMILIES", "JitBuildError", "ModuleSpec", "cache_key", "cache_root", "detect_targets",
           "family_spec", "get_family_module", "get_module", "last_load_info", "load_or_build",
           "module_spec"]


class _Loaded:
    """One module of this process: loaded once; a failed build raises JitBuildError, and the same
    error again on later calls (a rebuild per call would cost minutes each time)."""

    def __init__(self, make_spec, info: dict, make_aot_spec=None):
        # make_aot_spec: the spec an ahead-of-time image of this module was built from, where it
        # differs from the JIT's (the CPU module's AOT image holds every SIMD variant).
        self.make_spec, self.info = make_spec, info
        self.make_aot_spec = make_aot_spec or make_spec
        self.module = None
        self.error = None
        self.lock = threading.Lock()

    def get(self):
        if self.module is not None:
            return self.module
        with self.lock:
            if self.module is not None:
                return self.module
            if self.error is not None:
                raise self.error
            t0 = time.time()
            try:
                aot_spec = self.make_aot_spec()
                library = aot.prebuilt(aot_spec)
                if library is not None:
                    spec = aot_spec
                    self.module = import_library(spec.name, library, trusted=True)
                    self.info.update(built=False, key="aot", path=os.fspath(library), targets=list(spec.targets),
                                     seconds=time.time() - t0)
                else:
                    spec = self.make_spec()
                    self.module = load_or_build(spec, self.info)
            except JitBuildError as e:
                self.error = e
                raise
            return self.module


# How the CPU module was loaded in this process (built, key, path, targets, seconds).
last_load_info: dict = {}
_cpu = _Loaded(module_spec, last_load_info, lambda: module_spec(cpu_simd=build_config.CPU_SIMD_VARIANTS))
# (family, target) -> its _Loaded; family_load_info[(family, target)]: how it was loaded.
family_load_info: dict = {}
_families: dict = {}
_families_lock = threading.Lock()


def get_module():
    """module_fp8_mqa_logits, the CPU module: the schemas of every op, their bindings and the CPU
    kernels. AOT build, else cached JIT build, else built now."""
    return _cpu.get()


def get_family_module(family: str, target: str):
    """module_fp8_mqa_logits_<target>_<family>: the GPU kernels of ``family`` for ``target``, built
    on first use (nothing of another family or target is compiled for it)."""
    key = (family, target)
    loaded = _families.get(key)
    if loaded is None:
        family_spec(family, target)  # an unknown family or target is a ValueError now, not cached
        with _families_lock:
            loaded = _families.get(key)
            if loaded is None:
                info = family_load_info.setdefault(key, {})
                loaded = _families[key] = _Loaded(lambda: family_spec(family, target), info)
    return loaded.get()


# The CPU module's file name, for callers that look for it (AOT packaging, dev tools).
MODULE_NAME = build_config.MODULE_NAME
AOT_META = aot.aot_meta_name(MODULE_NAME)
