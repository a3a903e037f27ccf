"""One GPU module per (op family, target): each is built from its own sources, hashed and staged
alone, and loaded only by a GPU call of its family (aiter/jit/module_specs.py, aiter/ops/native.py).

Everything here but the last test runs without CUDA: the specs and keys are read from the sources,
and the loader is driven with a stand-in for the GPU's target. The last one runs the real first
calls on an sm90 GPU in a fresh cache and lists what was built.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import aiter
from aiter.jit import build_config, cache_key, core, module_specs, targets, toolchain
from aiter.ops import native

REPO = Path(__file__).resolve().parents[1]
CSRC = build_config.csrc_dir()
GPU_MODULES = sorted(module_specs.FAMILY_SOURCES)  # (family, target)


def _rel(paths) -> set:
    return {os.path.relpath(p, CSRC) for p in paths}


def test_every_gpu_source_belongs_to_exactly_one_family():
    """A new source of a target lands in one family by its path (or is shared by all), never in
    none: build_config's lists are split by pattern, not by name."""
    for target, sources in (("sm90", build_config.SM90_SOURCES), ("gfx950", build_config.GFX950_SOURCES)):
        for name in sources:
            owners = [f for (f, t), patterns in module_specs.FAMILY_SOURCES.items()
                      if t == target and any(fnmatch.fnmatchcase(name, p) for p in patterns)]
            shared = name in module_specs.TARGET_SHARED_SOURCES[target]
            assert (len(owners) == 1) != shared, (name, owners, shared)


def test_a_prefill_module_holds_no_paged_or_topk_file():
    spec = core.family_spec("prefill", "sm90")
    files = _rel(cache_key.hashed_files(spec))
    assert "sm90/launcher.cu" in files and any(f.startswith("sm90/instances/") for f in files)
    assert not [f for f in files if f.startswith(("sm90/paged/", "sm90/topk/", "gfx950/", "cpu/"))]
    assert not [s for s in _rel(spec.sources) if "paged" in s or "topk" in s]
    assert spec.name == "module_fp8_mqa_logits_sm90_prefill" and spec.targets == ("sm90",)


@pytest.mark.parametrize("family,target", GPU_MODULES)
def test_a_module_hashes_only_its_own_sources_and_what_they_include(family, target):
    spec = core.family_spec(family, target)
    sources = _rel(spec.sources)
    own = set(module_specs.family_source_names(family, target))
    assert sources == own | {module_specs.FAMILY_MODULE_SOURCE, module_specs.family_entry_source(family, target)}
    included = _rel(module_specs.included_files(spec.sources, os.fspath(CSRC)))
    assert _rel(cache_key.hashed_files(spec)) == sources | included
    other_sources = set()
    for (f, t) in GPU_MODULES:
        if (f, t) != (family, target):
            other_sources |= set(module_specs.family_source_names(f, t)) - set(module_specs.TARGET_SHARED_SOURCES[t])
    assert not (_rel(cache_key.hashed_files(spec)) & other_sources)
    assert f"-DAITER_WITH_{target.upper()}" in spec.extra_cflags
    assert not any(f.startswith("-DAITER_WITH_") and f != f"-DAITER_WITH_{target.upper()}" for f in spec.extra_cflags)


def test_an_edit_rebuilds_only_the_modules_that_read_the_file(tmp_path, monkeypatch):
    """Keys over a copy of csrc/: a paged header edit changes the paged key alone; a shared sm90
    header changes every sm90 module's; a CPU kernel edit changes the CPU module's alone."""
    copy = tmp_path / "csrc"
    shutil.copytree(CSRC, copy)
    monkeypatch.setattr(build_config, "csrc_dir", lambda: copy)
    monkeypatch.setattr(toolchain, "toolchain_identity", lambda targets: {})
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    monkeypatch.delenv("AITER_JIT_EXTRA_CUDA_CFLAGS", raising=False)

    def keys() -> dict:
        out = {("cpu", "cpu"): core.cache_key(core.module_spec())}
        out.update({m: core.cache_key(core.family_spec(*m)) for m in GPU_MODULES})
        return out

    def changed_by(relpath: str) -> set:
        before = keys()
        with open(copy / relpath, "a") as f:
            f.write("\n// an edit\n")
        after = keys()
        return {m for m in before if before[m] != after[m]}

    assert changed_by("sm90/paged/kernel.cuh") == {("paged", "sm90")}
    assert changed_by("sm90/topk/radix_select.cuh") == {("topk", "sm90")}
    assert changed_by("sm90/instances/heads_slot_0.cu") == {("prefill", "sm90")}
    assert changed_by("sm90/device.h") == {("prefill", "sm90"), ("paged", "sm90"), ("topk", "sm90")}
    assert changed_by("gfx950/kernel.h") == {("prefill", "gfx950")}
    assert changed_by("cpu/indexer_topk_cpu.cpp") == {("cpu", "cpu")}


def test_every_gpu_call_names_its_family():
    """Each native op called from aiter/ops names the family whose module holds its GPU kernels, and
    the device its tensors are on: a direct call native.ops("<family>", <device>).<op>, or a custom
    op's description (aiter/ops/_boundary.py) Native("<op>", "<family>", "<argument>")."""
    package = Path(aiter.__file__).resolve().parent
    calls = []
    for path in package.rglob("*.py"):
        text = path.read_text()
        calls += [(family, op) for family, op in re.findall(r'native\.ops\(("\w+"), \S+\)\.(\w+)', text)]
        calls += [(f'"{family}"', op) for op, family in re.findall(r'\bNative\(\s*"(\w+)",\s*"(\w+)",\s*"\w+"', text)]
        # A call that names no family would load no GPU module.
        assert not re.search(r'native\.ops\(\)\.', text), path
    op_family = {op: family for family, ops in module_specs.FAMILY_OPS.items() for op in ops}
    assert {op for _, op in calls} >= set(op_family)
    for family, op in calls:
        if op in op_family:
            assert family == f'"{op_family[op]}"', (op, family)


class _FakeCpuModule:
    def __init__(self):
        self.attached = []

    def attach_gpu_family(self, capsule):
        self.attached.append(capsule)


@pytest.fixture
def loader(monkeypatch):
    """native.ops with a stand-in CPU module and GPU target; records each GPU module asked for."""
    cpu = _FakeCpuModule()
    asked = []

    class FamilyModule:
        def __init__(self, family, target):
            self.gpu_family = (family, target)

    def get_family_module(family, target):
        asked.append((family, target))
        return FamilyModule(family, target)

    monkeypatch.setattr(native, "_cpu_ops", lambda: (cpu, "namespace"))
    monkeypatch.setattr(native, "_attached", set())
    monkeypatch.setattr(native, "_resolved", {})
    monkeypatch.setattr(core, "get_family_module", get_family_module)
    monkeypatch.setattr(targets, "device_target", lambda device: "sm90" if torch.device(device).type == "cuda" else None)
    return cpu, asked


def test_a_prefill_gpu_call_loads_the_prefill_module_alone(loader):
    cpu, asked = loader
    assert native.ops("prefill", torch.device("cuda", 0)) == "namespace"
    assert native.ops("prefill", "cuda:0") == "namespace"  # once per process and device
    assert asked == [("prefill", "sm90")] and cpu.attached == [("prefill", "sm90")]
    native.ops("prefill", "cuda:1")  # another device of the same target: attached again, same module
    assert asked == [("prefill", "sm90")] * 2
    native.ops("topk", "cuda:0")
    assert asked[-1] == ("topk", "sm90")


def test_a_repeated_call_is_resolved_once_per_device(loader, monkeypatch):
    cpu, asked = loader
    for _ in range(3):
        assert native.ops("prefill", torch.device("cuda", 0)) == "namespace"
    assert asked == [("prefill", "sm90")]
    assert (("prefill", torch.device("cuda", 0))) in native._resolved
    # "cuda" alone is the current device, which can change: never kept.
    native.ops("prefill", torch.device("cuda"))
    assert ("prefill", torch.device("cuda")) not in native._resolved
    # A failed attach is not kept either: the next call asks again.
    def fail(family, target):
        raise RuntimeError("no compiler")
    monkeypatch.setattr(core, "get_family_module", fail)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no compiler"):
            native.ops("paged", torch.device("cuda", 3))
    assert ("paged", torch.device("cuda", 3)) not in native._resolved


def test_a_cpu_call_or_a_gpu_without_a_backend_loads_no_gpu_module(loader, monkeypatch):
    cpu, asked = loader
    for family in module_specs.FAMILIES:
        native.ops(family, "cpu")
        native.ops(family, torch.device("cpu"))
        native.ops(family, "meta")
    native.ops()
    assert asked == [] and cpu.attached == []
    monkeypatch.setattr(targets, "device_target", lambda device: None)  # a GPU no backend runs on
    native.ops("prefill", "cuda:0")
    monkeypatch.setattr(targets, "device_target", lambda device: "gfx950")  # gfx950 has no paged kernel
    native.ops("paged", "cuda:1")
    assert asked == [] and cpu.attached == []
    with pytest.raises(ValueError, match="unknown op family 'decode'"):
        native.ops("decode", "cuda:2")


def test_cpu_calls_of_every_family_load_no_gpu_module(monkeypatch):
    """The real ops on CPU tensors: prefill, paged (metadata and logits) and the fused top-k."""
    from aiter.testing.mqa_logits import make_inputs, make_windows

    def refuse(family, target):
        raise AssertionError(f"a CPU call loaded the {family} module for {target}")

    monkeypatch.setattr(core, "get_family_module", refuse)
    q, kv, s, w = make_inputs(8, 64, 4, 32, seed=1)
    ks, ke = make_windows("causal", 8, 64)
    logits = aiter.fp8_mqa_logits(q, kv, s, w, ks, ke)
    indices = torch.empty(8, 16, dtype=torch.int32)
    aiter.top_k_per_row_prefill(logits, ks, ke, indices, None, 8, logits.stride(0), logits.stride(1), k=16)
    meta = aiter.get_paged_mqa_logits_metadata(torch.tensor([5, 9], dtype=torch.int32), 64, 4)
    assert meta.device.type == "cpu"
    from aiter.ops.fp8_paged_mqa_logits import check_block_table

    check_block_table("cpu")


def _capsule(pointer: int, name: bytes):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(pointer, name, None)


def test_the_cpu_module_refuses_what_is_not_a_gpu_module_of_its_layout():
    module = core.get_module()
    backends_before = getattr(torch.ops, module.ops_namespace).compiled_backends()
    assert backends_before[0] == "cpu"
    with pytest.raises((TypeError, ValueError)):
        module.attach_gpu_family(object())
    other = ctypes.create_string_buffer(256)
    name = ctypes.c_char_p(b"not.aiter")
    with pytest.raises(ValueError):
        module.attach_gpu_family(_capsule(ctypes.addressof(other), name.value))
    # The right name, another layout: uint32 layout 999, then the sizes and pointers (all zero).
    ctypes.c_uint32.from_buffer(other).value = 999
    target = ctypes.create_string_buffer(b"sm90")
    ctypes.c_void_p.from_buffer(other, 24).value = ctypes.addressof(target)  # after layout + 4 sizes + padding
    ctypes.c_void_p.from_buffer(other, 32).value = ctypes.addressof(target)
    right = ctypes.c_char_p(b"aiter.gpu_family")
    with pytest.raises(ImportError, match="another layout of binding/gpu_backends.h"):
        module.attach_gpu_family(_capsule(ctypes.addressof(other), right.value))
    assert module.ops_namespace.startswith("aiter_native")
    # Nothing refused was attached (earlier tests in the process may have attached real modules).
    assert getattr(torch.ops, module.ops_namespace).compiled_backends() == backends_before


FIRST_CALLS = textwrap.dedent(
    """
    import os, sys, torch
    import aiter
    from aiter.testing.mqa_logits import make_inputs, make_windows
    q, kv, s, w = make_inputs(64, 512, 64, 128, seed=2)
    ks, ke = make_windows("causal", 64, 512)
    q, kv, s, w, ks, ke = (t.cuda() for t in (q, kv, s, w, ks, ke))
    logits = aiter.fp8_mqa_logits(q, kv, s, w, ks, ke)
    torch.cuda.synchronize()
    print("after prefill:", sorted(os.listdir(os.environ["AITER_JIT_DIR"])), flush=True)
    if sys.argv[1] == "topk":
        idx = torch.empty(64, 64, dtype=torch.int32, device="cuda")
        aiter.top_k_per_row_prefill(logits, ks, ke, idx, None, 64, logits.stride(0), logits.stride(1), k=64)
        torch.cuda.synchronize()
        print("after topk:", sorted(os.listdir(os.environ["AITER_JIT_DIR"])), flush=True)
    """
)


def test_a_first_prefill_call_on_sm90_builds_the_prefill_module_alone(tmp_path):
    """The real first use in a fresh cache: after a prefill call the cache holds the CPU module and
    the sm90 prefill module, nothing else; a top-k call then adds the top-k module."""
    if not torch.cuda.is_available() or targets.device_target("cuda:0") != "sm90":
        pytest.skip("needs an sm90 GPU (compute capability 9.0) under a CUDA torch")
    env = dict(os.environ, AITER_JIT_DIR=os.fspath(tmp_path / "jit"), AITER_JIT_IGNORE_AOT="1",
               PYTHONPATH=os.fspath(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", FIRST_CALLS, "topk"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-4000:]
    lines = dict(l.split(": ", 1) for l in p.stdout.splitlines() if l.startswith("after "))
    assert lines["after prefill"] == "['module_fp8_mqa_logits', 'module_fp8_mqa_logits_sm90_prefill']", p.stdout
    assert lines["after topk"] == ("['module_fp8_mqa_logits', 'module_fp8_mqa_logits_sm90_prefill',"
                                   " 'module_fp8_mqa_logits_sm90_topk']"), p.stdout
