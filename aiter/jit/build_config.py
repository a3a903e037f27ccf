"""What the JIT modules are built from, per target, and with which flags (module_specs.py splits the
GPU sources into one module per op family).

The single source of truth for the JIT builder, the ahead-of-time build in setup.py and the ISA
checker (``python -m dev.isa.check``), so that what CI checks is what users run.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

MODULE_NAME = "module_fp8_mqa_logits"


def csrc_dir() -> Path:
    """The C++/CUDA/HIP sources: packaged copy first (wheel installs), else the repository's csrc/."""
    packaged = Path(__file__).resolve().parent.parent / "_csrc"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "csrc"


# Sources every build compiles: the bindings (binding/bindings_unit.cpp: the Python module that
# registers the ops and each op's ATen binding, in one unit so torch's headers are parsed once) and
# each op's portable CPU path (prefill fp8_mqa_logits, decode fp8_paged_mqa_logits: the planning and
# dispatch units; their SIMD variants are CPU_SIMD_SOURCES). Costliest first: ninja starts the
# compiles in this order, so the longest one does not start last on two cores.
COMMON_SOURCES = (
    "binding/bindings_unit.cpp",
    "cpu/fp8_paged_mqa_logits_cpu.cpp",
    "cpu/indexer_topk_cpu.cpp",
    "cpu/fp8_mqa_logits_cpu.cpp",
)
# The CPU paths' SIMD variants, narrowest first (cpu/simd_level.h picks one at run time), and the
# units of each: one per op and variant, so ninja compiles them in parallel. A build holds a prefix
# of this list: the JIT the variants of the machine it runs on (host_cpu_simd_variants), the
# ahead-of-time build all of them. The paged path has no avx512bf16 variant (bf16 pairs are
# prefill's); its avx512 one serves that level.
CPU_SIMD_VARIANTS = ("generic", "avx2", "avx512", "avx512bf16")
CPU_SIMD_SOURCES = {
    "generic": ("cpu/fp8_paged_mqa_logits_cpu_generic.cpp", "cpu/fp8_mqa_logits_cpu_generic.cpp"),
    "avx2": ("cpu/fp8_paged_mqa_logits_cpu_avx2.cpp", "cpu/fp8_mqa_logits_cpu_avx2.cpp"),
    "avx512": ("cpu/fp8_paged_mqa_logits_cpu_avx512.cpp", "cpu/fp8_mqa_logits_cpu_avx512.cpp"),
    "avx512bf16": ("cpu/fp8_mqa_logits_cpu_avx512bf16.cpp",),
}


def cpu_sources(variants) -> list:
    """COMMON_SOURCES and the units of ``variants`` (a prefix of CPU_SIMD_VARIANTS), the widest
    variants first: they are the costliest units."""
    _check_cpu_simd_variants(variants)
    wide = [n for v in reversed(variants) if v in ("avx512", "avx512bf16") for n in CPU_SIMD_SOURCES[v]]
    narrow = [n for v in variants if v not in ("avx512", "avx512bf16") for n in CPU_SIMD_SOURCES[v]]
    return wide + list(COMMON_SOURCES) + narrow


def cpu_simd_flags(variants) -> list:
    """The host-compiler flag that tells the dispatch units which variants the build holds."""
    _check_cpu_simd_variants(variants)
    return [f"-DAITER_CPU_SIMD_WIDEST={len(variants) - 1}"]


def _check_cpu_simd_variants(variants) -> None:
    if tuple(variants) != CPU_SIMD_VARIANTS[:len(variants)] or not variants:
        raise ValueError(f"CPU SIMD variants {tuple(variants)!r} are not a prefix of {CPU_SIMD_VARIANTS}")


def host_cpu_simd_variants() -> tuple:
    """The variants this machine runs, as cpu/simd_level.h tests them (avx2 with fma, then avx512f,
    then avx512bf16): x86-64 Linux reads /proc/cpuinfo's flags; another architecture has only the
    generic variant; an x86-64 machine whose flags cannot be read gets every variant (a longer
    build; the run-time pick still decides). Where the two disagree, the run-time pick takes the
    widest variant both allow, so the answer costs time, never correctness."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "x64"):
        return CPU_SIMD_VARIANTS[:1]
    try:
        with open("/proc/cpuinfo") as f:
            line = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return CPU_SIMD_VARIANTS
    flags = set(line.split(":", 1)[-1].split())
    count = 1
    if {"avx2", "fma"} <= flags:
        count = 2
        if "avx512f" in flags:
            count = 3
            if "avx512_bf16" in flags:
                count = 4
    return CPU_SIMD_VARIANTS[:count]


# Per-target kernel sources, added when the target is present: each backend's launchers, and its
# kernel instances one file per served H (compiled in parallel), listed from the backend's support
# table (csrc/<backend>/capabilities.h) so that an H added there is built with no edit here.
_INT_LIST = re.compile(r"constexpr\s+int\s+(k\w+)\[\]\s*=\s*\{([^}]*)\};")
_STRING = re.compile(r"constexpr\s+const\s+char\s+(k\w+)\[\]\s*=\s*\"([^\"]*)\";")
_INT = re.compile(r"constexpr\s+int\s+(k\w+)\s*=\s*(-?\d+);")
_BOOL = re.compile(r"constexpr\s+bool\s+(k\w+)\s*=\s*(true|false);")


def read_capabilities(backend: str) -> dict:
    """The facts of csrc/<backend>/capabilities.h (the forms common/capabilities.h names), by name."""
    text = (csrc_dir() / backend / "capabilities.h").read_text()
    facts: dict = {name: tuple(int(v) for v in body.split(",") if v.strip()) for name, body in _INT_LIST.findall(text)}
    facts.update((name, int(value)) for name, value in _INT.findall(text))
    facts.update(_STRING.findall(text))
    facts.update((name, value == "true") for name, value in _BOOL.findall(text))
    return facts


_SM90 = read_capabilities("sm90")
_GFX950 = read_capabilities("gfx950")
# sm90: the instance files are by position in the table (heads_slot_<i>.cu holds kServedHeads[i]).
SM90_SOURCES = (
    "sm90/device.cu",
    "sm90/launcher.cu",
    *(f"sm90/instances/heads_slot_{i}.cu" for i in range(len(_SM90["kServedHeads"]))),
    "sm90/paged/paged_launcher.cu",
    *(f"sm90/paged/instances/paged_heads_slot_{i}.cu" for i in range(len(_SM90["kServedPagedHeads"]))),
    "sm90/topk/topk_launcher.cu",
)
# gfx950: the instance files are by H (instances.h names each kernel after its H).
GFX950_SOURCES = (
    "gfx950/fp8_mqa_logits_gfx950.hip",
    *(f"gfx950/instances/gfx950_heads_{h}.hip" for h in _GFX950["kServedHeads"]),
)
# Includes name their folder from csrc/: "common/...", "cpu/...", "sm90/...", "gfx950/...".
INCLUDE_DIRS = (".",)
# The folders whose files make up each target: the JIT's cache key hashes these (and nothing else
# under csrc/), so an edit to one backend does not rebuild a module without it. Every quoted
# #include of a target's sources resolves inside them (op_tests/test_jit.py checks).
COMMON_SOURCE_DIRS = ("common", "binding", "cpu")
SM90_SOURCE_DIRS = ("sm90",)
GFX950_SOURCE_DIRS = ("gfx950",)

CXX_FLAGS = ["-O3", "-std=c++17"]
# -gencode form: nvcc 13.0's -arch=sm_90a shorthand also runs a plain sm_90 pass that rejects wgmma.
SM90_NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-DAITER_WITH_SM90",
]
# -fno-honor-nans makes fmaxf(x, 0) one v_max; -fno-slp-vectorize keeps the
# epilogue scalar (packed v_pk_* does not co-issue with MFMA); -disable-machine-sink keeps the last
# MFMA pair inside the loop.
GFX950_HIP_FLAGS = [
    "-O3",
    "-std=c++17",
    "--offload-arch=gfx950",
    "-fno-honor-nans",
    "-fno-slp-vectorize",
    "-mllvm",
    "-disable-machine-sink",
    "-DAITER_WITH_GFX950",
]


def source_paths(names) -> list[str]:
    root = csrc_dir()
    return [os.fspath(root / n) for n in names]
