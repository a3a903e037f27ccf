"""What each JIT module is built from: the CPU module, and one GPU module per (op family, target).

The CPU module (``module_fp8_mqa_logits``) holds the op schemas, the bindings and the CPU kernels; it
is the first one loaded. A GPU module (``module_fp8_mqa_logits_<target>_<family>``) holds the kernels
of one op family for one target and is built on the first call of that family on such a GPU, so a
prefill call never waits for the paged or top-k kernels:

    prefill   fp8_mqa_logits                                               sm90, gfx950
    paged     fp8_paged_mqa_logits, get_paged_mqa_logits_metadata,
              check_paged_block_table                                      sm90
    topk      top_k_per_row_prefill / _decode (and the fused top-k ops'
              selections; their logits come from prefill or paged)         sm90

A family's sources are picked from build_config's per-target lists by path pattern (FAMILY_SOURCES),
so a new kernel instance file lands in its family without an edit here. A GPU module's key hashes,
and its build stages, exactly its sources and the csrc files their quoted includes reach.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re

from . import build_config
from .errors import JitBuildError
from .toolchain import env_flags, link_flags

FAMILIES = ("prefill", "paged", "topk")
# The native ops whose GPU kernels each family's module holds (the Python side names the family of
# every GPU call: aiter/ops/native.py's ops(family, device); op_tests/test_jit_families.py checks).
FAMILY_OPS = {
    "prefill": ("fp8_mqa_logits",),
    "paged": ("fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata", "check_paged_block_table"),
    "topk": ("top_k_per_row_prefill", "top_k_per_row_decode"),
}

# The sources of each (family, target) among the target's build_config list; '*' also matches '/'.
FAMILY_SOURCES = {
    ("prefill", "sm90"): ("sm90/launcher.cu", "sm90/instances/*"),
    ("paged", "sm90"): ("sm90/paged/*",),
    ("topk", "sm90"): ("sm90/topk/*",),
    ("prefill", "gfx950"): ("gfx950/*",),
}
# The sources of a target that every family of it compiles (the device queries).
TARGET_SHARED_SOURCES = {"sm90": ("sm90/device.cu",), "gfx950": ()}
# The binding units of every GPU module: its Python module, and its backend entry (one file per
# family and target, so that the key hashes only that family's launcher header).
FAMILY_MODULE_SOURCE = "binding/gpu_family_module.cpp"


def family_entry_source(family: str, target: str) -> str:
    return f"binding/families/{target}_{family}.cpp"


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    """Everything that decides what a JIT module is; the cache key is a hash of it."""

    name: str
    sources: tuple  # absolute paths
    root: str  # the csrc directory: sources and headers are hashed relative to it
    targets: tuple  # ("cpu",) for the CPU module, (target,) for a GPU module
    extra_cflags: tuple = ()
    extra_cuda_cflags: tuple = ()
    extra_ldflags: tuple = ()
    include_dirs: tuple = ()  # absolute paths
    source_dirs: tuple = ()  # absolute paths: every file in them is part of the key
    headers: tuple = ()  # absolute paths: more files the sources read (hashed and staged)
    family: str | None = None  # the op family of a GPU module

    @property
    def label(self) -> str:
        return "+".join(self.targets) + (f" {self.family}" if self.family else "")


def _target_sources(target: str) -> tuple:
    return {"sm90": build_config.SM90_SOURCES, "gfx950": build_config.GFX950_SOURCES}[target]


def family_targets(family: str) -> tuple:
    """The GPU targets with kernels of ``family``."""
    return tuple(t for (f, t) in FAMILY_SOURCES if f == family)


def family_source_names(family: str, target: str) -> list:
    """The csrc-relative sources of ``family`` on ``target`` (shared device queries first)."""
    if (family, target) not in FAMILY_SOURCES:
        raise ValueError(f"aiter: no {family!r} kernels for target {target!r}; families per target:"
                         f" {sorted(FAMILY_SOURCES)}")
    patterns = FAMILY_SOURCES[(family, target)]
    names = list(TARGET_SHARED_SOURCES[target])
    names += [n for n in _target_sources(target)
              if n not in names and any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return names


INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def included_files(sources, root: str) -> list:
    """Every file under ``root`` that a quoted #include of ``sources`` reaches, transitively, looked
    up as the compiler does (the including file's folder, then ``root``, the one include dir). Every
    #include line counts, whatever #if it sits under: the set may be larger than what a build reads,
    never smaller."""
    root = os.path.abspath(root)
    found: set = set()
    pending = [os.path.abspath(s) for s in sources]
    seen: set = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            for base in (os.path.dirname(path), root):
                candidate = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(candidate):
                    if candidate.startswith(root + os.sep):
                        found.add(candidate)
                        pending.append(candidate)
                    break
    return sorted(found - {os.path.abspath(s) for s in sources})


def _extra_cuda_cflags() -> list:
    # A measurement variant of a kernel (dev/ab.py); in the key, so a variant never loads the plain build.
    return env_flags("AITER_JIT_EXTRA_CUDA_CFLAGS")


def _extra_cflags() -> list:
    # Debug and test hooks (e.g. "-include broken.h" to exercise the failure path); in the key.
    return env_flags("AITER_JIT_EXTRA_CFLAGS")


def module_spec(targets=("cpu",), cpu_simd=None) -> ModuleSpec:
    """The spec of the CPU module, module_fp8_mqa_logits: schemas, bindings, CPU kernels, holding the
    CPU SIMD variants ``cpu_simd`` (default: this machine's; the ahead-of-time build passes all). The
    variants are in the sources and the flags, so in the cache key: a cache shared by machines of
    different CPUs keeps one build per variant set."""
    targets = tuple(targets)
    if targets != ("cpu",):
        raise ValueError(f"aiter: module_spec builds the CPU module only (targets ('cpu',)), got {targets};"
                         " a GPU target's kernels are in family_spec(family, target)")
    cpu_simd = tuple(cpu_simd) if cpu_simd is not None else build_config.host_cpu_simd_variants()
    root = build_config.csrc_dir()
    return ModuleSpec(
        name=build_config.MODULE_NAME,
        sources=tuple(build_config.source_paths(build_config.cpu_sources(cpu_simd))),
        root=os.fspath(root),
        targets=targets,
        extra_cflags=tuple(list(build_config.CXX_FLAGS) + build_config.cpu_simd_flags(cpu_simd) + _extra_cflags()),
        extra_ldflags=tuple(link_flags()),
        include_dirs=tuple(os.fspath(root / d) for d in build_config.INCLUDE_DIRS),
        source_dirs=tuple(os.fspath(root / d) for d in build_config.COMMON_SOURCE_DIRS),
    )


def family_spec(family: str, target: str) -> ModuleSpec:
    """The spec of the GPU module of ``family`` on ``target``: its kernels and its binding units,
    compiled with that target's flag (the host compile of the entry must see it too)."""
    if family not in FAMILIES:
        raise ValueError(f"aiter: unknown op family {family!r}; known: {FAMILIES}")
    names = [FAMILY_MODULE_SOURCE, family_entry_source(family, target)] + family_source_names(family, target)
    root = build_config.csrc_dir()
    sources = tuple(build_config.source_paths(names))
    missing = [s for s in sources if not os.path.isfile(s)]
    if missing:
        raise JitBuildError(f"aiter: cannot build the {family} kernels for {target}: source file(s) missing:"
                            f" {missing}")
    target_flag = {"sm90": "-DAITER_WITH_SM90", "gfx950": "-DAITER_WITH_GFX950"}[target]
    gpu_flags = {"sm90": build_config.SM90_NVCC_FLAGS, "gfx950": build_config.GFX950_HIP_FLAGS}[target]
    return ModuleSpec(
        name=f"{build_config.MODULE_NAME}_{target}_{family}",
        sources=sources,
        root=os.fspath(root),
        targets=(target,),
        extra_cflags=tuple(list(build_config.CXX_FLAGS) + [target_flag] + _extra_cflags()),
        extra_cuda_cflags=tuple(list(gpu_flags) + _extra_cuda_cflags()),
        extra_ldflags=tuple(link_flags()),
        include_dirs=tuple(os.fspath(root / d) for d in build_config.INCLUDE_DIRS),
        headers=tuple(included_files(sources, os.fspath(root))),
        family=family,
    )


def all_specs(targets) -> list:
    """The CPU module's spec, then every GPU module's for ``targets`` (the AOT build's list)."""
    specs = [module_spec(cpu_simd=build_config.CPU_SIMD_VARIANTS)]  # every variant: wheels move
    for family in FAMILIES:
        specs += [family_spec(family, t) for t in family_targets(family) if t in targets]
    return specs
