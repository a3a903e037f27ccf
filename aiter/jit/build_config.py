"""What the JIT modules are built from, per target, and with which flags (module_specs.py splits the
GPU sources into one module per op family).

The single source of truth for the JIT builder, the ahead-of-time build in setup.py and the ISA
checker (``python -m dev.isa.check``), so that what CI checks is what users run.
"""

from __future__ import annotations

import os
from pathlib import Path

MODULE_NAME = "module_fp8_mqa_logits"


def csrc_dir() -> Path:
    """The C++/CUDA/HIP sources: packaged copy first (wheel installs), else the repository's csrc/."""
    packaged = Path(__file__).resolve().parent.parent / "_csrc"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "csrc"


# Sources every build compiles: the Python module that registers the ops, each op's ATen binding and
# its portable CPU path (prefill fp8_mqa_logits, decode fp8_paged_mqa_logits). Costliest first:
# ninja starts the compiles in this order, so the longest one does not start last on two cores.
COMMON_SOURCES = (
    "cpu/fp8_mqa_logits_cpu.cpp",
    "binding/module.cpp",
    "binding/fp8_mqa_logits_binding.cpp",
    "binding/fp8_paged_mqa_logits_binding.cpp",
    "binding/indexer_topk_binding.cpp",
    "cpu/fp8_paged_mqa_logits_cpu.cpp",
    "cpu/indexer_topk_cpu.cpp",
)
# Per-target kernel sources, added when the target is present.
# sm90: the device queries every kernel family shares, then per family (aiter/jit/module_specs.py
# picks each family's by folder) the dispatch and the kernel instances one file per H (compiled in
# parallel): prefill, the paged decode kernel, the top-k kernel.
SM90_SOURCES = (
    "sm90/device.cu",
    "sm90/launcher.cu",
    "sm90/instances/heads_8.cu",
    "sm90/instances/heads_16.cu",
    "sm90/instances/heads_32.cu",
    "sm90/instances/heads_64.cu",
    "sm90/paged/paged_launcher.cu",
    "sm90/paged/instances/paged_heads_8.cu",
    "sm90/paged/instances/paged_heads_16.cu",
    "sm90/paged/instances/paged_heads_32.cu",
    "sm90/paged/instances/paged_heads_64.cu",
    "sm90/topk/topk_launcher.cu",
)
# gfx950: the host launcher, and the kernel instances one file per H (compiled in parallel).
GFX950_SOURCES = (
    "gfx950/fp8_mqa_logits_gfx950.hip",
    "gfx950/instances/gfx950_heads_16.hip",
    "gfx950/instances/gfx950_heads_32.hip",
    "gfx950/instances/gfx950_heads_64.hip",
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
# From the design document: -fno-honor-nans makes fmaxf(x, 0) one v_max; -fno-slp-vectorize keeps the
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
