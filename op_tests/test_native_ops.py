"""How module_fp8_mqa_logits exposes its ops: registered with torch's dispatcher from one file
(csrc/binding/module.cpp), called from Python only through aiter/ops/native.py.

The include rules keep a first build cheap: pybind11 and torch/extension.h (or torch/all.h) cost
tens of CPU seconds per translation unit, torch's registration header several; the binding files
include ATen's Tensor and what else they use, and only module.cpp registers.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import aiter
from aiter.jit import build_config, core, load

# The sources and package under test: the checkout's, or an installed wheel's (its aiter/_csrc).
CSRC = build_config.csrc_dir()
PACKAGE = Path(aiter.__file__).resolve().parent
# Headers that bring pybind11, the Python C API or all of torch's C++ API into a unit.
HEAVY = re.compile(r"^(pybind11/|torch/extension\.h|torch/all\.h|torch/torch\.h|torch/python\.h|ATen/ATen\.h|"
                   r"torch/csrc/(api|autograd|utils)/)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def _includes(path: Path, seen: set | None = None) -> dict:
    """Every #include reached from ``path``: angle includes as written, and the project's own quoted
    ones followed (resolved under csrc/). Maps each included name to the project file including it."""
    seen = set() if seen is None else seen
    found: dict = {}
    if path in seen:
        return found
    seen.add(path)
    for kind, name in INCLUDE.findall(path.read_text()):
        found.setdefault(name, path)
        if kind == '"':
            local = next((c for c in (path.parent / name, CSRC / name) if c.is_file()), None)
            if local is not None:
                for sub, where in _includes(local.resolve(), seen).items():
                    found.setdefault(sub, where)
    return found


def _host_sources() -> list:
    """The C++ units every build compiles (the CPU module's sources)."""
    return [CSRC / s for s in build_config.COMMON_SOURCES]


@pytest.mark.parametrize("source", [s.relative_to(CSRC).as_posix() for s in _host_sources()])
def test_no_unit_includes_pybind11_or_all_of_torch(source):
    includes = _includes((CSRC / source).resolve())
    heavy = {name: where.relative_to(CSRC).as_posix() for name, where in includes.items() if HEAVY.match(name)}
    assert not heavy, f"{source} reaches {heavy} (header: file including it); include what the unit uses"


@pytest.mark.parametrize("source", [s.relative_to(CSRC).as_posix() for s in _host_sources()])
def test_only_module_cpp_includes_the_registration_header(source):
    includes = _includes((CSRC / source).resolve())
    registers = "torch/library.h" in includes
    assert registers == (source == "binding/bindings_unit.cpp"), (
        f"{source}: torch/library.h belongs to binding/module.cpp alone, compiled in "
        "binding/bindings_unit.cpp (it costs seconds per unit); declare the op's function in "
        "binding/ops.h and register it there")


def test_gpu_binding_headers_stay_light():
    """The stream helper is the only vendor-runtime include of the bindings, under its target's macro."""
    for header in sorted((CSRC / "binding").glob("*.h")):
        heavy = [n for n in INCLUDE.findall(header.read_text()) if HEAVY.match(n[1])]
        assert not heavy, f"{header.name} includes {heavy}"


# ---- the ops Python calls are the ops the library registers -------------------------------------


def _called_ops() -> set:
    """Names called as native.ops(...).<name> anywhere in the package, or named as the native op of a
    custom op's description (aiter/ops/_boundary.py: Native("<name>"...))."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        names.update(re.findall(r"native\.ops\([^()]*\)\.(\w+)", text))
        names.update(re.findall(r"\bNative\(\s*\"(\w+)\"", text))
    return names


def _defined_ops() -> set:
    """Names module.cpp defines (m.def("name(...) -> ...")."""
    text = (CSRC / "binding" / "module.cpp").read_text()
    return set(re.findall(r'm\.def\(\s*"(\w+)\(', text))


def test_every_op_python_calls_is_defined_in_module_cpp():
    called, defined = _called_ops(), _defined_ops()
    assert {"fp8_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"} <= called
    assert called <= defined, f"called but not registered: {sorted(called - defined)}"


def test_the_loaded_module_registers_every_op():
    from aiter.ops import native

    module = core.get_module()
    namespace = module.ops_namespace
    assert namespace.startswith("aiter_native"), namespace
    for name in sorted(_defined_ops() | _called_ops()):
        schemas = torch._C._jit_get_schemas_for_operator(f"{namespace}::{name}")
        assert len(schemas) == 1, f"{namespace}::{name}: {schemas}"
    ops = native.ops()
    assert ops.compiled_backends()[0] == "cpu"
    assert ops.cpu_simd_variant() in ("generic", "avx2", "avx512", "avx512bf16")
    # The public ops of the package keep their own namespace: nothing native lands in torch.ops.aiter.
    assert not torch._C._jit_get_schemas_for_operator("aiter::cpu_simd_variant")


def test_the_native_op_releases_the_gil():
    """A long CPU call in one thread leaves the interpreter to the others, as the pybind11 binding's
    gil_scoped_release did: the dispatcher's Python entry runs the kernel without the GIL."""
    import threading
    import time

    from aiter.testing.mqa_logits import make_inputs, make_windows

    q, kv, s, w = make_inputs(256, 4096, 64, 128, seed=3)
    ks, ke = make_windows("causal", 256, 4096)
    ops = __import__("aiter.ops.native", fromlist=["ops"]).ops()
    ops.fp8_mqa_logits(q, kv, s, w, ks, ke, True, None, 0, 0, "")  # warm
    ticks = []
    done = threading.Event()

    def call():
        for _ in range(3):
            ops.fp8_mqa_logits(q, kv, s, w, ks, ke, True, None, 0, 0, "")
        done.set()

    worker = threading.Thread(target=call)
    t0 = time.perf_counter()
    worker.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    elapsed = time.perf_counter() - t0
    # With the GIL held through the call this thread would not tick while it runs (a few ticks at most).
    assert elapsed < 0.02 or len(ticks) > 10 * 3, (elapsed, len(ticks))


def test_a_second_copy_of_the_library_registers_its_own_namespace(tmp_path):
    """Two builds loaded in one process (a test that builds a variant, an AOT module next to a JIT
    one) must not collide in the dispatcher: the second takes aiter_native_<n>, and its ops run."""
    first = core.get_module()
    copy = tmp_path / Path(first.__file__).name
    shutil.copyfile(first.__file__, copy)
    second = load.import_library(build_config.MODULE_NAME, copy)
    assert second.ops_namespace != first.ops_namespace
    assert second.ops_namespace.startswith("aiter_native_")
    ops = getattr(torch.ops, second.ops_namespace)
    assert ops.compiled_backends() == getattr(torch.ops, first.ops_namespace).compiled_backends()
    context_lens = torch.tensor([5, 0, 9], dtype=torch.int32)
    got = ops.get_paged_mqa_logits_metadata(context_lens, 4, 3)
    want = getattr(torch.ops, first.ops_namespace).get_paged_mqa_logits_metadata(context_lens, 4, 3)
    assert torch.equal(got, want)
