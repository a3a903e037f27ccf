"""The JIT builder (aiter/jit/core.py): cache, key, lock, failure path, compiler choice.

Builds run in subprocesses with a fresh AITER_JIT_DIR, so they start from an empty cache and do not
touch the user's. The real module is built twice here (8 racing processes; one broken build);
everything else uses a tiny Python C-API extension that compiles in about two seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aiter.jit import aot, build, build_progress, cache_entry, cache_key, core, load, module_specs, toolchain

REPO = Path(__file__).resolve().parents[1]


def _env(cache: Path, **extra) -> dict:
    env = dict(os.environ)
    env["AITER_JIT_DIR"] = os.fspath(cache)
    env["PYTHONPATH"] = os.fspath(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    for k in ("AITER_JIT_EXTRA_CFLAGS", "AITER_JIT_EXTRA_CUDA_CFLAGS", "AITER_CXX", "AITER_JIT_TARGETS", "AITER_JIT_LOCK_TIMEOUT"):
        env.pop(k, None)
    env.update(extra)
    return env


# ------------------------------------------------------------------------------------------------
# The real module
# ------------------------------------------------------------------------------------------------

FIRST_USE = textwrap.dedent(
    """
    import json, sys, time, torch
    import aiter
    from aiter.jit import core
    from aiter.testing.mqa_logits import make_inputs, make_windows, reference_logits
    t0 = time.time()
    core.get_module()
    load_s = time.time() - t0
    q, kv, s, w = make_inputs(19, 70, 3, 16, seed=5)
    ks, ke = make_windows("misaligned", 19, 70)
    out = aiter.fp8_mqa_logits(q, kv, s, w, ks, ke)
    ref = reference_logits(q, kv, s, w, ks, ke)
    inside = torch.isfinite(ref)
    err = ((out.double() - ref)[inside].norm() / ref[inside].norm()).item()
    ok = bool(torch.equal(torch.isinf(out), torch.isinf(ref))) and err < 1e-6
    print(json.dumps(dict(core.last_load_info, load_s=load_s, ok=ok, err=err)))
    """
)


def _run_first_use(cache: Path, n: int, timeout: float = 900, **env_extra):
    env = _env(cache, **env_extra)
    procs = [
        subprocess.Popen([sys.executable, "-c", FIRST_USE], env=env, cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        results.append((p.returncode, out, err))
    return results


def test_eight_processes_build_once_then_load_from_cache(tmp_path):
    cache = tmp_path / "jit"
    results = _run_first_use(cache, 8)
    infos = []
    for rc, out, err in results:
        assert rc == 0, f"first-use process failed:\n{err[-3000:]}"
        infos.append(json.loads(out.strip().splitlines()[-1]))
    builders = [i for i in infos if i["built"]]
    print(f"\nfirst use: builder took {builders[0]['seconds'] if builders else '?'} s")
    assert len(builders) == 1, f"expected exactly one build, got {len(builders)}: {infos}"
    assert all(i["ok"] for i in infos), infos
    assert len({i["path"] for i in infos}) == 1
    stderr_all = "".join(err for _, _, err in results)
    assert stderr_all.count("aiter: building module_fp8_mqa_logits for cpu") == 1
    module_dir = cache / core.build_config.MODULE_NAME
    assert not list(module_dir.glob(".tmp-*")), "temp build dirs left behind"
    assert not list(module_dir.glob("*.lock")), "lock file left behind"

    # A later process loads the cached library: no build, well under a second.
    (rc, out, err), = _run_first_use(cache, 1)
    assert rc == 0, err
    info = json.loads(out.strip().splitlines()[-1])
    print(f"cached load: {info['load_s'] * 1e3:.1f} ms")
    assert not info["built"] and info["ok"]
    assert info["load_s"] < 1.0, info
    assert "building" not in err
    t0 = time.perf_counter()
    assert cache_entry.entry_problem(core.module_spec(("cpu",)), Path(info["path"]).parent) is None
    print(f"cached entry verified (size, sha256) in {(time.perf_counter() - t0) * 1e3:.2f} ms")


def test_broken_source_raises_and_leaves_no_module(tmp_path):
    cache = tmp_path / "jit"
    broken = tmp_path / "broken.h"
    # Force-included first in every translation unit: the #error names the failure, the missing
    # header stops the compiler at once (no torch headers parsed), so this takes seconds.
    broken.write_text('#error "aiter jit test: deliberately broken source"\n#include "aiter_no_such_header.h"\n')
    script = textwrap.dedent(
        """
        import aiter, torch
        from aiter.jit import core
        from aiter.testing.mqa_logits import make_inputs, make_windows
        q, kv, s, w = make_inputs(4, 8, 2, 16)
        ks, ke = make_windows("causal", 4, 8)
        for attempt in range(2):
            try:
                aiter.fp8_mqa_logits(q, kv, s, w, ks, ke)
            except core.JitBuildError as e:
                assert isinstance(e, RuntimeError)
                print("JITERROR", attempt, str(e).replace("\\n", " | "))
        """
    )
    t0 = time.time()
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                       env=_env(cache, AITER_JIT_EXTRA_CFLAGS=f"-include {broken}"), timeout=600)
    took = time.time() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [l for l in p.stdout.splitlines() if l.startswith("JITERROR")]
    assert len(lines) == 2, p.stdout  # the second call re-raises without rebuilding
    assert "deliberately broken source" in lines[0]
    assert p.stderr.count("aiter: building") == 1
    module_dir = cache / core.build_config.MODULE_NAME
    leftovers = sorted(x.name for x in module_dir.iterdir())
    assert all(x.startswith("failed-") and x.endswith(".log") for x in leftovers), leftovers
    assert not list(module_dir.rglob("*.so"))
    print(f"\nbroken build reported in {took:.1f} s")


# ------------------------------------------------------------------------------------------------
# A tiny extension for the mechanics (two-second builds)
# ------------------------------------------------------------------------------------------------

TINY_SOURCE = textwrap.dedent(
    """
    #include <Python.h>
    #include <sstream>
    #include "tiny.h"
    static PyObject* answer(PyObject*, PyObject*) {
      std::ostringstream s;  // exercises libstdc++'s iostream state
      s << TINY_VALUE;
      return PyLong_FromLong(std::stol(s.str()));
    }
    #ifndef TINY_TEXT
    #define TINY_TEXT ""
    #endif
    static PyObject* text(PyObject*, PyObject*) { return PyUnicode_FromString(TINY_TEXT); }
    static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, nullptr}, {"text", text, METH_NOARGS, nullptr},
                                    {nullptr, nullptr, 0, nullptr}};
    static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "tiny_jit_test", nullptr, -1, methods};
    PyMODINIT_FUNC PyInit_tiny_jit_test(void) { return PyModule_Create(&mod); }
    """
)

TINY_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from aiter.jit import build_progress, core, toolchain
    root = sys.argv[1]
    if os.environ.get("TINY_PROGRESS_S"):
        build_progress.PROGRESS_S = float(os.environ["TINY_PROGRESS_S"])
    flags = os.environ.get("TINY_CFLAGS", "-O1").split() + json.loads(os.environ.get("TINY_CFLAGS_JSON", "[]"))
    spec = core.ModuleSpec(
        name="tiny_jit_test", sources=(os.path.join(root, "tiny.cpp"),), root=root, targets=("cpu",),
        extra_cflags=tuple(flags),
        extra_ldflags=tuple(toolchain.link_flags()), include_dirs=(os.path.join(root, "include"),),
        source_dirs=(os.path.join(root, "include"),))
    if sys.argv[2] == "key":
        print(json.dumps({"key": core.cache_key(spec), "lock": str(core.cache_root() / spec.name / (core.cache_key(spec) + ".lock"))}))
    else:
        info = {}
        m = core.load_or_build(spec, info)
        print(json.dumps(dict(info, answer=m.answer(), text=m.text())))
    """
)


@pytest.fixture
def tiny(tmp_path):
    root = tmp_path / "tiny"
    (root / "include").mkdir(parents=True)
    (root / "tiny.cpp").write_text(TINY_SOURCE)
    (root / "include" / "tiny.h").write_text("#define TINY_VALUE 42\n")
    (tmp_path / "driver.py").write_text(TINY_DRIVER)

    def run(mode="build", timeout=300, **env_extra):
        p = subprocess.run([sys.executable, os.fspath(tmp_path / "driver.py"), os.fspath(root), mode],
                           cwd=REPO, capture_output=True, text=True, timeout=timeout,
                           env=_env(tmp_path / "jit", **env_extra))
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    run.root = root
    run.cache = tmp_path / "jit"
    return run


def test_build_writes_nothing_into_the_source_tree(tiny):
    """The build runs on a private copy of the sources (ROCm's hipify writes *_hip files beside
    the sources it converts; a read-only install could not build, and the next key would change)."""
    before = sorted(p.relative_to(tiny.root) for p in tiny.root.rglob("*"))
    info, _ = tiny()
    assert info["answer"] == 42
    assert sorted(p.relative_to(tiny.root) for p in tiny.root.rglob("*")) == before


def test_changed_header_rebuilds_and_unchanged_reuses(tiny):
    first, _ = tiny()
    assert first["built"] and first["answer"] == 42
    again, err = tiny()
    assert not again["built"] and again["key"] == first["key"] and "building" not in err
    (tiny.root / "include" / "tiny.h").write_text("#define TINY_VALUE 7\n")
    changed, _ = tiny()
    assert changed["built"] and changed["answer"] == 7 and changed["key"] != first["key"]
    flags, _ = tiny(TINY_CFLAGS="-O2")
    assert flags["built"] and flags["key"] not in (first["key"], changed["key"])
    assert Path(first["path"]).is_file()  # each key keeps its own directory


def test_stale_lock_is_broken(tiny):
    keyinfo, _ = tiny("key")
    lock = Path(keyinfo["lock"])
    lock.parent.mkdir(parents=True, exist_ok=True)
    # An orphaned temp dir of a dead builder, to be swept.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = lock.parent / f".tmp-{keyinfo['key']}-{int(dead.stdout)}-x"
    orphan.mkdir()
    holder_src = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from aiter.jit import build_lock
        lk = build_lock.BuildLock(Path({str(lock)!r}))
        assert lk.try_acquire()
        print("held", flush=True)
        time.sleep(600)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", holder_src], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=_env(tiny.cache))
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)  # alive but frozen: no more heartbeats
        old = time.time() - 3600
        os.utime(lock, (old, old))
        t0 = time.time()
        info, err = tiny(AITER_JIT_LOCK_TIMEOUT="5")
        assert info["built"] and info["answer"] == 42
        assert "removed stale JIT lock" in err
        assert time.time() - t0 < 120
        assert not orphan.exists()
    finally:
        holder.kill()
        holder.wait()


def test_waiters_report_a_failed_build_instead_of_repeating_it(tiny):
    keyinfo, _ = tiny("key")
    lock = Path(keyinfo["lock"])
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder_src = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from aiter.jit import build_lock
        assert build_lock.BuildLock(Path({str(lock)!r})).try_acquire()
        print("held", flush=True)
        time.sleep(600)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", holder_src], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=_env(tiny.cache))
    waiter = None
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen([sys.executable, os.fspath(tiny.root.parent / "driver.py"), os.fspath(tiny.root),
                                   "build"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=_env(tiny.cache))
        assert "waiting for another process" in waiter.stderr.readline()
        # The holder's build fails (its log appears), then it lets go of the lock.
        (lock.parent / f"failed-{keyinfo['key']}.log").write_text("tiny.cpp:3:1: error: simulated failure\n")
        holder.kill()
        holder.wait()
        _, err = waiter.communicate(timeout=120)
        assert waiter.returncode != 0
        assert "failed in another process while this one waited" in err and "simulated failure" in err
        assert "aiter: building tiny_jit_test for cpu (" not in err  # reported, not repeated
    finally:
        holder.kill()
        holder.wait()
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
    info, _ = tiny()  # a later process, which did not wait, builds again
    assert info["built"] and info["answer"] == 42


def test_lock_staleness_rules():
    host = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert core.lock_is_stale({"pid": dead.pid, "host": host}, age_s=0.0, timeout_s=600)
    assert not core.lock_is_stale({"pid": os.getpid(), "host": host}, age_s=1.0, timeout_s=600)
    assert core.lock_is_stale({"pid": os.getpid(), "host": host}, age_s=601.0, timeout_s=600)
    # A pid on another host cannot be probed: only age decides.
    assert not core.lock_is_stale({"pid": dead.pid, "host": host + "-elsewhere"}, age_s=5.0, timeout_s=600)
    assert not core.lock_is_stale({}, age_s=5.0, timeout_s=600)


def test_static_libstdcxx_compiler_still_links_shared_libstdcxx(tiny, tmp_path):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) not installed: cannot inspect the library's NEEDED entries")
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on PATH to wrap")
    wrapper = tmp_path / "static-g++"
    wrapper.write_text(f'#!/bin/sh\nexec {gxx} -static-libstdc++ "$@"\n')
    wrapper.chmod(0o755)
    # Without the link flags, this wrapper's library would not need libstdc++.so at all.
    info, _ = tiny(AITER_CXX=os.fspath(wrapper))
    assert info["built"] and info["answer"] == 42
    needed = subprocess.run([readelf, "-d", info["path"]], capture_output=True, text=True).stdout
    assert "libstdc++.so.6" in needed, needed


def test_foreign_cxx_is_not_used_by_default(monkeypatch):
    monkeypatch.delenv("AITER_CXX", raising=False)
    monkeypatch.setenv("CXX", "/opt/some-toolchain/bin/g++")
    if os.path.exists("/usr/bin/g++"):
        assert toolchain.host_compiler() == "/usr/bin/g++"
    else:
        assert toolchain.host_compiler() == "/opt/some-toolchain/bin/g++"
    monkeypatch.setenv("AITER_CXX", "/usr/local/bin/my-g++")
    assert toolchain.host_compiler() == "/usr/local/bin/my-g++"


def test_key_covers_targets_flags_and_headers(tmp_path, monkeypatch):
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    monkeypatch.delenv("AITER_JIT_EXTRA_CUDA_CFLAGS", raising=False)
    cpu = core.module_spec(("cpu",))
    host_simd = core.build_config.host_cpu_simd_variants()
    assert cpu.sources == tuple(core.build_config.source_paths(core.build_config.cpu_sources(host_simd)))
    assert core.cache_key(cpu) == core.cache_key(core.module_spec(("cpu",)))
    monkeypatch.setenv("AITER_JIT_EXTRA_CFLAGS", "-DAITER_SOMETHING")
    assert core.cache_key(core.module_spec(("cpu",))) != core.cache_key(cpu)
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS")
    sm90 = core.family_spec("prefill", "sm90")
    assert "-DAITER_WITH_SM90" in sm90.extra_cflags and "-DAITER_WITH_SM90" in sm90.extra_cuda_cflags
    assert any(s.endswith(".cu") for s in sm90.sources)
    gfx = core.family_spec("prefill", "gfx950")
    assert "-DAITER_WITH_GFX950" in gfx.extra_cflags and "--offload-arch=gfx950" in gfx.extra_cuda_cflags
    # The CPU module's key covers its folders, and only those: an sm90 edit does not rebuild it.
    csrc = core.build_config.csrc_dir()
    hashed = cache_key.hashed_files(cpu)
    for folder in core.build_config.COMMON_SOURCE_DIRS:
        assert all(os.fspath(p) in hashed for p in (csrc / folder).rglob("*") if p.is_file()), folder
    assert not any("/sm90/" in p or "/gfx950/" in p for p in hashed)
    assert any("/sm90/" in p for p in cache_key.hashed_files(sm90))
    # A header a GPU module includes is in its key.
    assert os.fspath(csrc / "sm90" / "kernel.cuh") in cache_key.hashed_files(sm90)
    monkeypatch.setenv("AITER_JIT_EXTRA_CUDA_CFLAGS", "-DAITER_SOMETHING")
    assert core.cache_key(core.family_spec("prefill", "sm90")) != core.cache_key(sm90)
    assert core.family_spec("prefill", "sm90").extra_cuda_cflags[-1] == "-DAITER_SOMETHING"
    assert core.cache_key(core.module_spec()) == core.cache_key(cpu)  # the CPU module has no GPU compile


def test_cpu_simd_variants_are_in_the_sources_flags_and_key(monkeypatch):
    """The JIT compiles the CPU SIMD variants this machine runs, one unit per op and variant; the
    variant set is in the sources and the flags, so a cache shared by machines of different CPUs
    keeps one build per set; the AOT spec holds every variant."""
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    bc = core.build_config
    host = bc.host_cpu_simd_variants()
    assert host == bc.CPU_SIMD_VARIANTS[:len(host)] and host[0] == "generic"
    assert core.module_spec(("cpu",)) == core.module_spec(("cpu",), host)
    specs = {v: core.module_spec(("cpu",), bc.CPU_SIMD_VARIANTS[:n]) for n, v in enumerate(bc.CPU_SIMD_VARIANTS, 1)}
    assert len({core.cache_key(s) for s in specs.values()}) == len(specs)
    for n, (widest, spec) in enumerate(specs.items()):
        assert f"-DAITER_CPU_SIMD_WIDEST={n}" in spec.extra_cflags
        units = {os.path.basename(s) for s in spec.sources}
        for variant, names in bc.CPU_SIMD_SOURCES.items():
            held = bc.CPU_SIMD_VARIANTS.index(variant) <= n
            assert all((os.path.basename(name) in units) == held for name in names), (widest, variant)
        assert {os.path.basename(c) for c in bc.COMMON_SOURCES} <= units
    # Every variant unit is listed once, and every cpu/*_<variant>.cpp file is a listed unit.
    listed = [n for names in bc.CPU_SIMD_SOURCES.values() for n in names]
    assert len(listed) == len(set(listed))
    on_disk = {f"cpu/{p.name}" for p in (bc.csrc_dir() / "cpu").glob("*_cpu_*.cpp")}
    assert on_disk == set(listed)
    with pytest.raises(ValueError, match="prefix"):
        bc.cpu_sources(("generic", "avx512"))
    with pytest.raises(ValueError, match="prefix"):
        bc.cpu_simd_flags(())


def test_host_cpu_simd_variants_follow_the_cpu_flags(monkeypatch, tmp_path):
    bc = core.build_config
    real_open = open

    def cpuinfo(flags):
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        return lambda name, *a, **k: real_open(path if name == "/proc/cpuinfo" else name, *a, **k)

    monkeypatch.setattr(bc.platform, "machine", lambda: "x86_64")
    for flags, want in [("sse2 avx", 1), ("avx2", 1), ("avx2 fma", 2), ("avx2 fma avx512f", 3),
                        ("avx512f avx512_bf16", 1), ("fma avx2 avx512f avx512_bf16", 4)]:
        monkeypatch.setattr("builtins.open", cpuinfo(flags))
        assert bc.host_cpu_simd_variants() == bc.CPU_SIMD_VARIANTS[:want], flags
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    assert bc.host_cpu_simd_variants() == bc.CPU_SIMD_VARIANTS
    monkeypatch.setattr(bc.platform, "machine", lambda: "aarch64")
    assert bc.host_cpu_simd_variants() == ("generic",)


def test_key_covers_the_toolchain(tmp_path, monkeypatch):
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    for env in ("CUDA_HOME", "CUDA_PATH", "ROCM_HOME", "ROCM_PATH"):
        monkeypatch.delenv(env, raising=False)
    real_version = toolchain.tool_version
    cpu, sm90 = core.module_spec(("cpu",)), core.family_spec("paged", "sm90")
    assert set(toolchain.toolchain_identity(cpu.targets)) == {"cxx"}  # a CPU build does not ask nvcc
    ident = toolchain.toolchain_identity(sm90.targets)
    assert set(ident) == {"cxx", "sm90"} and os.path.basename(ident["sm90"][0]) == "nvcc"
    assert core.cache_key(sm90) == core.cache_key(core.family_spec("paged", "sm90"))

    def versions(nvcc: str):
        return lambda path: nvcc if path.endswith("nvcc") else "g++ (Debian 12.2.0) 12.2.0"

    monkeypatch.setattr(toolchain, "tool_version", versions("Cuda compilation tools, release 13.0"))
    before_upgrade = core.cache_key(sm90)
    monkeypatch.setattr(toolchain, "tool_version", versions("Cuda compilation tools, release 13.1"))
    assert core.cache_key(sm90) != before_upgrade  # same nvcc path, new toolkit: a new build
    cpu_key = core.cache_key(cpu)
    monkeypatch.setattr(toolchain, "tool_version", versions("Cuda compilation tools, release 13.2"))
    assert core.cache_key(cpu) == cpu_key  # the CPU module does not depend on nvcc
    monkeypatch.setenv("CUDA_HOME", os.fspath(tmp_path))
    assert toolchain.gpu_compiler("sm90") == os.path.join(os.fspath(tmp_path), "bin", "nvcc")
    monkeypatch.setenv("ROCM_PATH", os.fspath(tmp_path))
    assert toolchain.gpu_compiler("gfx950") == os.path.join(os.fspath(tmp_path), "bin", "hipcc")
    assert real_version(os.fspath(tmp_path / "no-such-compiler")).startswith("unavailable")


def test_targets_override_and_jobs(monkeypatch):
    monkeypatch.setenv("AITER_JIT_TARGETS", "sm90")
    assert core.detect_targets() == ("cpu", "sm90")
    monkeypatch.setenv("AITER_JIT_TARGETS", "sm80")
    with pytest.raises(ValueError, match="AITER_JIT_TARGETS"):
        core.detect_targets()
    monkeypatch.delenv("AITER_JIT_TARGETS")
    import torch

    if not torch.cuda.is_available():
        assert core.detect_targets() == ("cpu",)
    spec = core.module_spec(("cpu",))
    assert 1 <= build.max_jobs(spec) <= len(spec.sources)


def test_aot_build_is_used_only_when_it_matches(tmp_path, monkeypatch):
    monkeypatch.delenv("AITER_JIT_IGNORE_AOT", raising=False)
    monkeypatch.delenv("AITER_JIT_EXTRA_CFLAGS", raising=False)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    # The CPU module's AOT image holds every CPU SIMD variant (wheels move between machines).
    cpu = core.module_spec(cpu_simd=core.build_config.CPU_SIMD_VARIANTS)
    prefill = core.family_spec("prefill", "sm90")
    library = tmp_path / (core.build_config.MODULE_NAME + suffix)
    library.write_bytes(b"")  # only its presence matters to the lookup
    assert aot.prebuilt(cpu, tmp_path) is None  # no metadata: not an AOT build
    meta = {"targets": ["cpu"], "fingerprint": aot.aot_fingerprint(cpu)}
    (tmp_path / core.AOT_META).write_text(json.dumps(meta))
    assert aot.prebuilt(cpu, tmp_path) == library
    assert aot.prebuilt(prefill, tmp_path) is None  # each module has its own library and metadata
    (tmp_path / (prefill.name + suffix)).write_bytes(b"")
    (tmp_path / aot.aot_meta_name(prefill.name)).write_text(json.dumps(
        {"targets": ["sm90"], "fingerprint": aot.aot_fingerprint(prefill)}))
    assert aot.prebuilt(prefill, tmp_path) == tmp_path / (prefill.name + suffix)
    (tmp_path / aot.aot_meta_name(prefill.name)).write_text(json.dumps(
        {"targets": ["sm90"], "fingerprint": aot.aot_fingerprint(core.family_spec("paged", "sm90"))}))
    assert aot.prebuilt(prefill, tmp_path) is None  # another family's sources
    monkeypatch.setenv("AITER_JIT_IGNORE_AOT", "1")
    assert aot.prebuilt(cpu, tmp_path) is None
    monkeypatch.delenv("AITER_JIT_IGNORE_AOT")
    stale = dict(meta, fingerprint=dict(meta["fingerprint"], sources="0" * 24))  # other sources
    (tmp_path / core.AOT_META).write_text(json.dumps(stale))
    assert aot.prebuilt(cpu, tmp_path) is None
    other_torch = dict(meta, fingerprint=dict(meta["fingerprint"], torch="0.0"))
    (tmp_path / core.AOT_META).write_text(json.dumps(other_torch))
    assert aot.prebuilt(cpu, tmp_path) is None
    (tmp_path / core.AOT_META).write_text(json.dumps(dict(meta, targets=["cpu", "sm90"])))
    assert aot.prebuilt(cpu, tmp_path) is None  # another module's targets
    (tmp_path / core.AOT_META).write_text(json.dumps(meta))
    monkeypatch.setenv("AITER_JIT_EXTRA_CFLAGS", "-DAITER_SOMETHING")  # asks for another build
    assert aot.prebuilt(core.module_spec(), tmp_path) is None


def test_first_error_lines_pick_compiler_errors():
    log = "ninja: ...\n[1/2] c++ -c x.cpp\nFAILED: x.o\nx.cpp:3:1: error: expected ';'\nnote: fluff\n"
    assert build.first_error_lines(log) == ["FAILED: x.o", "x.cpp:3:1: error: expected ';'"]
    assert build.first_error_lines("nothing useful\nat all\n") == ["nothing useful", "at all"]


# ------------------------------------------------------------------------------------------------
# Damaged cache entries
# ------------------------------------------------------------------------------------------------


def _damage(library: Path, how: str):
    data = library.read_bytes()
    if how == "truncated-to-half":  # dlopen of a cut ELF dies with SIGBUS: must be caught before it
        library.write_bytes(data[: len(data) // 2])
    elif how == "truncated-to-zero":
        library.write_bytes(b"")
    elif how == "garbage":
        library.write_bytes(os.urandom(len(data)))
    elif how == "garbage-recorded":  # digest matches, import fails: the load itself must be checked
        garbage = os.urandom(len(data))
        library.write_bytes(garbage)
        meta_path = library.parent / "build.json"
        meta = json.loads(meta_path.read_text())
        meta["library"] = {"size": len(garbage), "sha256": hashlib.sha256(garbage).hexdigest()}
        meta_path.write_text(json.dumps(meta))
    elif how == "no-digest":  # an entry written by an older builder
        meta_path = library.parent / "build.json"
        meta = json.loads(meta_path.read_text())
        meta.pop("library", None)
        meta_path.write_text(json.dumps(meta))
    elif how == "library-deleted":  # the key folder stays
        library.unlink()
    else:
        raise ValueError(how)


@pytest.mark.parametrize(
    "how",
    ["truncated-to-half", "truncated-to-zero", "garbage", "garbage-recorded", "no-digest", "library-deleted"],
)
def test_damaged_cache_entry_is_replaced_by_a_rebuild(tiny, how):
    first, _ = tiny()
    assert first["built"]
    _damage(Path(first["path"]), how)
    rebuilt, err = tiny()
    assert rebuilt["built"] and rebuilt["answer"] == 42 and rebuilt["path"] == first["path"]
    notices = [l for l in err.splitlines() if "is invalid" in l]
    assert len(notices) == 1 and str(Path(first["path"]).parent) in notices[0], err
    again, err = tiny()
    assert not again["built"] and again["answer"] == 42 and "invalid" not in err
    module_dir = tiny.cache / "tiny_jit_test"
    assert sorted(p.name for p in module_dir.iterdir()) == [first["key"]], "set-aside entries left behind"
    meta = json.loads((Path(first["path"]).parent / "build.json").read_text())
    library = Path(first["path"]).read_bytes()
    assert meta["library"] == {"size": len(library), "sha256": hashlib.sha256(library).hexdigest()}


# ------------------------------------------------------------------------------------------------
# Interrupted and killed builds
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def slow_cxx(tmp_path):
    """A host compiler that, when TINY_COMPILE_SLEEP is set, waits that long before each compile
    (the sleeper's command line carries the compiler's, so it names the build's temp dir)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on PATH to wrap")
    wrapper = tmp_path / "slow-g++"
    wrapper.write_text(textwrap.dedent(
        f"""\
        #!/bin/sh
        case " $* " in
          *" -c "*) if [ -n "$TINY_COMPILE_SLEEP" ]; then
                      {sys.executable} -c 'import sys, time; time.sleep(float(sys.argv[1]))' "$TINY_COMPILE_SLEEP" "$@"
                    fi ;;
        esac
        exec {gxx} "$@"
        """
    ))
    wrapper.chmod(0o755)
    return os.fspath(wrapper)


def _processes_mentioning(text: str) -> list:
    """(pid, command line) of the live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry.name), cmdline))
    return found


def _wait_for_compile(module_dir: Path, timeout: float = 60.0) -> str:
    """The temp dir of the build under way in ``module_dir``, once its compiler runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for tmp in module_dir.glob(".tmp-*"):
            if any("time.sleep" in cmd for _, cmd in _processes_mentioning(os.fspath(tmp))):
                return os.fspath(tmp)
        time.sleep(0.1)
    raise AssertionError(f"no compile started under {module_dir} within {timeout} s")


def _wait_until_gone(text: str, timeout: float) -> list:
    deadline = time.time() + timeout
    while True:
        left = _processes_mentioning(text)
        if not left or time.time() > deadline:
            return left
        time.sleep(0.05)


def _sigint_default():
    # A process started in the background by a non-interactive shell inherits SIGINT ignored; the
    # builder stands for one in a terminal, where Ctrl-C raises KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tiny_process(tiny, **env_extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.fspath(tiny.root.parent / "driver.py"), os.fspath(tiny.root), "build"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(tiny.cache, **env_extra), start_new_session=True, preexec_fn=_sigint_default)


def test_killed_builder_takes_its_compilers_with_it(tiny, slow_cxx):
    builder = _tiny_process(tiny, AITER_CXX=slow_cxx, TINY_COMPILE_SLEEP="60")
    try:
        build_tmp = _wait_for_compile(tiny.cache / "tiny_jit_test")
        builder.kill()  # SIGKILL: no Python cleanup runs in the builder
        builder.wait()
        left = _wait_until_gone(build_tmp, timeout=3.0)
        assert not left, f"compiler processes of the killed build still run: {left}"
    finally:
        builder.kill()
        builder.communicate()
        for pid, _ in _processes_mentioning(os.fspath(tiny.cache)):
            os.kill(pid, signal.SIGKILL)
    info, _ = tiny(AITER_CXX=slow_cxx)  # the next process builds; the dead one's temp dir is swept
    assert info["built"] and info["answer"] == 42
    assert not list((tiny.cache / "tiny_jit_test").glob(".tmp-*"))


@contextlib.contextmanager
def _builder_and_waiter(tiny, slow_cxx):
    """A slow build in one process and a second process waiting for it, both started: yields
    (builder, waiter, the build's temp dir). Afterwards every process left is killed, their
    compilers included."""
    builder = _tiny_process(tiny, AITER_CXX=slow_cxx, TINY_COMPILE_SLEEP="60")
    waiter = None
    try:
        build_tmp = _wait_for_compile(tiny.cache / "tiny_jit_test")
        waiter = _tiny_process(tiny, AITER_CXX=slow_cxx)
        assert "waiting for another process" in waiter.stderr.readline()
        yield builder, waiter, build_tmp
    finally:
        for p in (builder, waiter):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
        for pid, _ in _processes_mentioning(os.fspath(tiny.cache)):
            os.kill(pid, signal.SIGKILL)


def _assert_waiter_built(tiny, keyinfo, waiter, build_tmp):
    """No failure log, the dead build's temp dir swept, and the waiter built the module itself."""
    assert not (tiny.cache / "tiny_jit_test" / f"failed-{keyinfo['key']}.log").exists()
    assert not _wait_until_gone(build_tmp, timeout=3.0)
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err[-3000:]
    info = json.loads(out.strip().splitlines()[-1])
    assert info["built"] and info["answer"] == 42


@pytest.mark.parametrize("to", ["process", "group"])  # kill -INT; Ctrl-C in the builder's terminal
def test_interrupted_builder_raises_keyboardinterrupt_and_the_waiter_builds(tiny, slow_cxx, to):
    keyinfo, _ = tiny("key", AITER_CXX=slow_cxx)
    with _builder_and_waiter(tiny, slow_cxx) as (builder, waiter, build_tmp):
        (os.kill if to == "process" else os.killpg)(builder.pid, signal.SIGINT)
        _, builder_err = builder.communicate(timeout=30)
        assert builder_err.rstrip().splitlines()[-1] == "KeyboardInterrupt", builder_err[-3000:]
        assert "JitBuildError" not in builder_err
        _assert_waiter_built(tiny, keyinfo, waiter, build_tmp)


def test_waiter_builds_when_the_build_process_is_killed(tiny, slow_cxx):
    """A build that died (here: its process killed from outside) is no compile failure: the process
    that waited for it builds instead of reporting one."""
    keyinfo, _ = tiny("key", AITER_CXX=slow_cxx)
    with _builder_and_waiter(tiny, slow_cxx) as (builder, waiter, build_tmp):
        child, = [pid for pid, cmd in _processes_mentioning(build_tmp) if "_build_child.py" in cmd]
        os.kill(child, signal.SIGKILL)
        _, builder_err = builder.communicate(timeout=30)
        assert builder.returncode != 0 and "killed by SIGKILL" in builder_err, builder_err[-3000:]
        _assert_waiter_built(tiny, keyinfo, waiter, build_tmp)


# ------------------------------------------------------------------------------------------------
# Where the cache lives, and what the build says
# ------------------------------------------------------------------------------------------------


def _without_dac_override():
    # Root writes anywhere regardless of mode bits: drop that capability in the child.
    import ctypes

    PR_CAPBSET_DROP, CAP_DAC_OVERRIDE = 24, 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0)


@pytest.mark.parametrize("layout", ["cache-dir-read-only", "module-dir-read-only"])
def test_unwritable_cache_dir_is_a_clear_error(tiny, layout):
    tiny.cache.mkdir()
    read_only = tiny.cache
    if layout == "module-dir-read-only":
        read_only = tiny.cache / "tiny_jit_test"
        read_only.mkdir()
    read_only.chmod(0o555)
    try:
        p = subprocess.run([sys.executable, os.fspath(tiny.root.parent / "driver.py"), os.fspath(tiny.root), "build"],
                           cwd=REPO, capture_output=True, text=True, timeout=120, env=_env(tiny.cache),
                           preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
    finally:
        read_only.chmod(0o755)
    assert p.returncode != 0
    last = p.stderr.rstrip().splitlines()[-1]
    assert last.startswith("aiter.jit.core.JitBuildError:"), p.stderr[-3000:]
    assert os.fspath(read_only) in last and "AITER_JIT_DIR" in last and "not writable" in last, last


def test_cache_path_with_ninja_special_characters_builds(tiny, tmp_path):
    cache = tmp_path / "cache $HOME: a b"  # $ starts a ninja variable, ':' and ' ' separate paths
    info, err = tiny(AITER_JIT_DIR=os.fspath(cache))
    assert info["built"] and info["answer"] == 42
    assert Path(info["path"]).is_relative_to(cache)
    again, _ = tiny(AITER_JIT_DIR=os.fspath(cache))
    assert not again["built"] and again["path"] == info["path"]
    module_dir = cache / "tiny_jit_test"
    assert sorted(p.name for p in module_dir.iterdir()) == [info["key"]]


def test_build_says_what_it_builds_and_how_long_it_took(tiny):
    info, err = tiny()
    assert info["built"]
    lines = err.strip().splitlines()
    assert lines[0].startswith("aiter: building tiny_jit_test for cpu (") and "~1 min" not in lines[0]
    assert "1 translation unit to compile;" in lines[0] and "about" not in lines[0], lines[0]
    done = re.fullmatch(r"aiter: built tiny_jit_test for cpu in (\d+\.\d) s \((.+)\)", lines[-1])
    assert done and Path(done[2]) == Path(info["path"]).parent, err
    assert 0 < float(done[1]) < 300


def _quoted_includes(path: Path, targets) -> list:
    """The file's quoted #include names, skipping those under #ifdef AITER_WITH_<TARGET> of a target
    the build does not have (other conditionals count as taken)."""
    names, taken = [], [True]
    for line in path.read_text().splitlines():
        directive = line.strip()
        guard = re.match(r"#\s*ifdef\s+AITER_WITH_(\w+)", directive)
        if guard:
            taken.append(taken[-1] and guard.group(1).lower() in targets)
        elif re.match(r"#\s*if", directive):
            taken.append(taken[-1])
        elif re.match(r"#\s*endif", directive):
            taken.pop()
        else:
            include = re.match(r'#\s*include\s+"([^"]+)"', directive)
            if include and taken[-1]:
                names.append(include.group(1))
    return names


ALL_MODULES = [("cpu", None)] + [(target, family) for family, target in module_specs.FAMILY_SOURCES]


def _spec_of(target, family):
    return core.module_spec() if target == "cpu" else core.family_spec(family, target)


@pytest.mark.parametrize("target,family", ALL_MODULES, ids=lambda v: str(v))
def test_every_include_of_a_module_lies_in_what_its_key_hashes(target, family):
    """What the key hashes is all a build reads: every quoted #include reachable from the module's
    sources resolves to a file its key hashes (else an edit there would load a stale build)."""
    spec = _spec_of(target, family)
    targets = ("cpu",) if target == "cpu" else ("cpu", target)
    csrc = Path(spec.root)
    hashed = set(cache_key.hashed_files(spec))
    pending, seen = [Path(s) for s in spec.sources], set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _quoted_includes(path, targets):
            candidates = [path.parent / name, csrc / name]
            found = next((c for c in candidates if c.is_file()), None)
            assert found is not None, f"{path}: #include \"{name}\" not found under csrc/"
            assert os.fspath(found.resolve()) in hashed, f"{path} includes {found}, which the key does not hash"
            pending.append(found.resolve())


@pytest.mark.parametrize("target,family", ALL_MODULES, ids=lambda v: str(v))
def test_source_file_names_are_unique_per_module(target, family):
    """torch's ninja build names each object after its source's file name: two sources of one module
    with the same name (sm90/launcher.cu and sm90/paged/launcher.cu) make it fail with "multiple rules
    generate launcher.cuda.o"."""
    import collections

    stems = collections.Counter(os.path.splitext(os.path.basename(n))[0] for n in _spec_of(target, family).sources)
    assert not [stem for stem, count in stems.items() if count > 1]


def test_flags_with_shell_and_ninja_syntax_reach_the_compiler_unchanged(tiny, tmp_path):
    """torch writes the flags into build.ninja as they are and ninja runs each command through
    /bin/sh: a backtick or $(...) would run, a '$' would be eaten by ninja."""
    marker = tmp_path / "ran"
    text = f"a`touch {marker}`$(touch {marker})$HOME $$ b'c"
    flag = "-DTINY_TEXT=" + json.dumps(text)  # a C string literal of the text
    info, _ = tiny(TINY_CFLAGS_JSON=json.dumps([flag]))
    assert info["built"] and info["answer"] == 42
    assert info["text"] == text
    assert not marker.exists(), "a flag's command substitution ran"


def test_slow_build_prints_progress(tiny, slow_cxx):
    t0 = time.time()
    info, err = tiny(AITER_CXX=slow_cxx, TINY_COMPILE_SLEEP="4", TINY_PROGRESS_S="1")
    took = time.time() - t0
    assert info["built"] and info["answer"] == 42
    progress = [l for l in err.splitlines() if l.startswith("aiter: tiny_jit_test for cpu: ")]
    assert len(progress) >= 3, err
    for line in progress:
        assert re.fullmatch(r"aiter: tiny_jit_test for cpu: (preparing|\d+/\d+ build steps done), \d+ s", line), line
    assert any(re.search(r": 0/2 build steps done", l) for l in progress), err  # ninja's [0/2] while compiling
    assert len(progress) <= took + 1  # about one a second, no more
    lines = err.strip().splitlines()
    assert lines[0].startswith("aiter: building") and lines[-1].startswith("aiter: built")
