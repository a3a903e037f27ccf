"""Build and load the host test library of the gfx950 kernel: emulator.cpp + layout_shim.cpp,
compiled with g++ from the kernel's own host + device headers (csrc/gfx950/*.h, csrc/common/*.h; a
few seconds; cached by content hash). build_library() also builds other host shims of csrc headers
(op_tests/test_work_scheduler.py)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
SOURCES = (HERE / "emulator.cpp", HERE / "layout_shim.cpp")
HEADERS = tuple(sorted(p for d in ("common", "gfx950") for p in (CSRC / d).iterdir() if p.suffix == ".h"))
FLAGS = ["-std=c++17", "-O2", "-shared", "-fPIC"]

i32p = ctypes.POINTER(ctypes.c_int32)
u8p = ctypes.POINTER(ctypes.c_uint8)
f32p = ctypes.POINTER(ctypes.c_float)


def compiler() -> str | None:
    for cand in (os.environ.get("CXX"), "/usr/bin/g++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_int, c_ll, c_double = ctypes.c_int, ctypes.c_longlong, ctypes.c_double
    lib.gfx950_emulate.argtypes = [u8p, u8p, f32p, f32p, i32p, i32p, ctypes.c_void_p, c_int, c_int, c_int, c_int,
                                   c_ll, c_ll, c_int, c_int, c_int, c_int, c_int, c_int, i32p]
    lib.gfx950_emulate.restype = c_int
    lib.gfx950_balanced_plan.argtypes = [i32p, i32p, c_int, c_int, c_int, c_int, c_int, c_int, i32p, i32p, i32p]
    lib.gfx950_balanced_plan.restype = c_int
    lib.gfx950_fp8_to_float.argtypes = [c_int]
    lib.gfx950_fp8_to_float.restype = ctypes.c_float
    lib.gfx950_geometry.argtypes = [c_int, c_int, c_int, i32p]
    lib.gfx950_plan_launch.argtypes = [c_ll, c_ll, c_int, c_int, c_ll, c_int, c_int, c_int, c_int, i32p]
    lib.gfx950_plan_launch.restype = None
    lib.gfx950_pair_stores_reach.argtypes = [c_int, c_int, c_ll, c_ll, c_ll, c_int]
    lib.gfx950_fixed_grid_makespan.argtypes = [c_int, c_int, c_int, c_ll, c_ll, c_int, c_int, c_int]
    lib.gfx950_fixed_grid_makespan.restype = c_double
    lib.gfx950_choose_fixed_grid_splits.argtypes = [c_int, c_int, c_int, c_ll, c_ll, c_int, c_int]
    lib.gfx950_fixed_grid_costs.argtypes = [c_int] * 6 + [i32p, i32p, c_int, ctypes.POINTER(c_double)]
    lib.gfx950_tail.argtypes = [c_int] * 4 + [i32p]
    lib.gfx950_store_offset.restype = ctypes.c_uint
    lib.gfx950_fill_chunks.argtypes = [c_int] * 5
    # The shim functions that take `ints` int arguments and write their results into an int32 array.
    for name, ints in (("block_facts", 7), ("dma", 6), ("tile", 5), ("pair_chain", 5), ("tail_group", 4),
                       ("fill_position", 6), ("partial_chunks", 4), ("unit_positions", 7), ("block_parts", 5),
                       ("fill_schedule", 5)):
        function = getattr(lib, f"gfx950_{name}")
        function.argtypes = [c_int] * ints + [i32p]
        function.restype = None
    return lib


def build_library(name: str, sources, headers=HEADERS, flags=FLAGS) -> Path:
    """Compile `sources` (paths) with g++ against csrc/ into a shared library, cached under the
    temporary directory by the content hash of the sources, the headers and the command."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError(f"no host C++ compiler (g++) to build {name}")
    digest = hashlib.sha256()
    for p in tuple(sources) + tuple(headers):
        digest.update(Path(p).read_bytes())
    digest.update(" ".join([cxx] + list(flags)).encode())
    out_dir = Path(tempfile.gettempdir()) / "aiter_gfx950_hosttests"
    out_dir.mkdir(parents=True, exist_ok=True)
    lib_path = out_dir / f"lib{name}_{digest.hexdigest()[:16]}.so"
    if not lib_path.exists():
        tmp = lib_path.with_suffix(f".{os.getpid()}.tmp")
        cmd = [cxx, *flags, f"-I{CSRC}", "-o", str(tmp), *map(str, sources)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(tmp, lib_path)  # atomic: concurrent builders agree on the file
    return lib_path


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    return _declare(ctypes.CDLL(str(build_library("gfx950_host", SOURCES))))


def ptr(t, ctype):
    """ctypes pointer to a contiguous CPU tensor's data."""
    assert t.is_contiguous() and t.device.type == "cpu"
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctype))


GEOMETRY_FIELDS = (
    "heads", "head_dim", "steps", "chunks_per_key", "rows_per_tile", "head_tiles", "rows_per_wave",
    "chain_sets", "pairs_per_wave", "row_groups", "key_groups", "block_rows", "stage_keys",
    "stage_bytes", "dmas_per_wave", "wave_part_bytes", "slot_bytes", "prefetch_stages", "slots",
    "loads_per_stage", "stores_per_stage", "vmcnt_wait", "fill_cols", "plan_rows", "plan_blocks",
    "fill_between_stages", "fill_row_threads",
)


def _served() -> tuple:
    from aiter import backends

    gfx950 = backends.backends()["gfx950"]
    return tuple((h, d) for h in gfx950.heads for d in sorted(gfx950.head_dims, reverse=True))


# Every (H, D) the kernel serves (csrc/gfx950/capabilities.h, which aiter.backends parses).
SERVED = _served()


def geometry(heads: int, small: bool, head_dim: int = 128) -> dict:
    lib = load()
    buf = (ctypes.c_int32 * 32)()
    n = lib.gfx950_geometry(heads, int(small), head_dim, buf)
    assert n > 0, f"geometry_ok failed for heads={heads} small={small} head_dim={head_dim}"
    return dict(zip(GEOMETRY_FIELDS, buf[:n]))


def plan_launch(M, N, heads, fixed_grid_splits, num_cus, clean, head_dim=128, out_stride=None,
                element_bytes=4) -> dict:
    """The launcher's plan; out_stride defaults to N (a dense float32 result)."""
    buf = (ctypes.c_int32 * 8)()
    load().gfx950_plan_launch(M, N, heads, head_dim, N if out_stride is None else out_stride, element_bytes,
                              fixed_grid_splits, num_cus, int(clean), buf)
    keys = ("small", "balanced", "blocks", "grid_x", "grid_y", "fixed_grid_splits", "reverse_blocks")
    return dict(zip(keys, buf[:7]))
