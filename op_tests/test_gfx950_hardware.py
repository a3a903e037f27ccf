"""The gfx950 first-run suite: what only an MI355X settles. Everything else about the gfx950 kernel
is compiled and ISA-checked here (dev/isa/gfx950.py) or predicted by the model
(dev/isa/gfx950_model.py); these tests run the assumptions the audit found no test could see.

  python -m pytest op_tests/test_gfx950_hardware.py -rs -v

Here (no gfx950 device) only the compile tests run; the rest skip with the reason. On an MI355X
with ROCm (libamdhip64; torch with ROCm for the op's cases; amdclang++ for the compiler diff):
  - test_probes_compile: the probe kernels (dev/gfx950/hardware_probes.hip) build with
    clang++-22 (CI builds them), their MFMA is the plain one and their asm passes the hazard rules;
  - test_lds_dma_at_m0: the 16-byte LDS DMA at M0 = 0, 0x12000 and 0x15F00 (the small-M kernels'
    largest) lands at M0, not at M0 & 0xFFFF;
  - test_pair_resource_stores: buffer_store_dword through the H = 16 pair resource (num_records
    kPairRecords = 2^31 - 4) lands at offsets 0 and 2^31 - 8 and is dropped at 2^31 - 4, at
    2^31 (kOutOfRange, the offset every store uses for a lane it drops) and at 2^31 + 4: the range
    check compares offset + 4 with num_records unsigned;
  - test_mfma_scale0_known_answer: the scale builtin with every scale and opsel 0 equals the exact
    product of E4M3 blocks (a compiler that stops folding it to the plain MFMA gives ~0);
  - test_op_every_window_mode: fp8_mqa_logits on the device against the float64 reference, every
    window mode, both paths (small-M and main), every served H and D, clean_logits both ways;
  - test_isa_check_with_amdclang: the ISA check with ROCm's amdclang++ (the compiler that builds
    the deployed module), its hazard distances written and diffed against clang++-22's.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dev.isa import gfx950 as isa
from dev.isa import gfx950_hazards as hazards
from dev.gfx950.hip_module import HipRuntime, Unavailable

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "dev" / "gfx950" / "hardware_probes.hip"
PAIR_NUM_RECORDS = 0x7FFFFFFC  # csrc/gfx950/layout.h: kPairRecords, the pair resource's num_records
PROBE_SENTINEL = 0x5EED5EED


def _compile(out: Path, *mode: str) -> subprocess.CompletedProcess:
    cmd = isa._base_command() + ["--cuda-device-only", "--no-gpu-bundle-output", *mode, "-o", str(out), str(PROBES)]
    return subprocess.run(cmd, capture_output=True, text=True)


needs_clang = pytest.mark.skipif(shutil.which("clang++-22") is None and not os.environ.get("AITER_GFX950_CLANG"),
                                 reason="needs clang++-22 (Debian package clang-22) or AITER_GFX950_CLANG")


@needs_clang
def test_probes_compile(tmp_path):
    obj, asm = tmp_path / "probes.hsaco", tmp_path / "probes.s"
    for out, mode in ((obj, "-c"), (asm, "-S")):
        r = _compile(out, mode)
        assert r.returncode == 0, r.stderr
    assert obj.read_bytes()[:4] == b"\x7fELF"
    text = asm.read_text()
    funcs = isa.parse_functions(text)
    assert set(funcs) >= {"probe_lds_dma", "probe_store", "probe_mfma_scale0"}, sorted(funcs)
    mfma = [line.split()[0] for line in funcs["probe_mfma_scale0"] if line.strip().startswith("v_mfma")]
    assert mfma == [isa.MFMA], mfma
    for name in ("probe_lds_dma", "probe_store", "probe_mfma_scale0"):
        blocks = isa.parse_blocks(funcs[name])
        assert hazards.violations(hazards.hazard_sites(blocks)) == [], name
        assert [f for b in blocks for i in b.insts for f in hazards.form_failures(i.op, i.args)] == [], name
    dma = [line.strip() for line in funcs["probe_lds_dma"] if "buffer_load_dwordx4" in line]
    assert len(dma) == 1 and dma[0].endswith("lds"), dma


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    """(runtime, module) of the probes on a gfx950 device, or a skip with the reason."""
    if shutil.which("clang++-22") is None and not os.environ.get("AITER_GFX950_CLANG"):
        pytest.skip("needs clang++-22 or AITER_GFX950_CLANG to build the probes")
    try:
        runtime = HipRuntime.open()
    except Unavailable as e:
        pytest.skip(f"needs a gfx950 (MI355X) device: {e}")
    obj = tmp_path_factory.mktemp("probes") / "probes.hsaco"
    r = _compile(obj, "-c")
    assert r.returncode == 0, r.stderr
    try:
        module = runtime.load(obj.read_bytes())
    except Unavailable as e:
        pytest.skip(str(e))
    return runtime, module


@pytest.mark.parametrize("m0", [0x0, 0x12000, 0x15F00], ids=["m0_0", "m0_0x12000", "m0_0x15F00"])
def test_lds_dma_at_m0(gpu, m0):
    runtime, module = gpu
    g = torch.Generator().manual_seed(m0)
    src_words = torch.randint(0, 2**31 - 1, (256,), generator=g, dtype=torch.int64)
    src_words[src_words == PROBE_SENTINEL] += 1
    data = struct.pack("<256I", *src_words.tolist())
    src, out = runtime.malloc(1024), runtime.malloc(2048)
    try:
        runtime.upload(src, data)
        runtime.memset(out, 0xFF, 2048)
        runtime.launch(module, "probe_lds_dma", 1, 64, [src, out, ctypes.c_uint32(m0)])
        words = struct.unpack("<512I", runtime.download(out, 2048))
    finally:
        runtime.free(src)
        runtime.free(out)
    at, alias = list(words[:256]), list(words[256:])
    assert at == src_words.tolist(), f"the DMA at M0 = {m0:#x} did not land at M0"
    if m0 >= 0x10000:
        assert alias == [PROBE_SENTINEL] * 256, f"the DMA at M0 = {m0:#x} also wrote M0 & 0xFFFF = {m0 & 0xFFFF:#x}"


def test_pair_resource_stores(gpu):
    runtime, module = gpu
    offsets = [0, PAIR_NUM_RECORDS - 4, PAIR_NUM_RECORDS, 2**31, 2**31 + 4]
    nbytes = 2**31 + 4096
    base, offs = runtime.malloc(nbytes), runtime.malloc(4 * len(offsets))
    try:
        for off in offsets:
            runtime.upload(base, b"\0" * 4, off)
        runtime.upload(offs, struct.pack(f"<{len(offsets)}I", *offsets))
        runtime.launch(module, "probe_store", 1, 64,
                       [base, ctypes.c_uint32(PAIR_NUM_RECORDS), offs, ctypes.c_int(len(offsets))])
        got = [struct.unpack("<f", runtime.download(base, 4, off))[0] for off in offsets]
    finally:
        runtime.free(base)
        runtime.free(offs)
    assert got == [1.0, 2.0, 0.0, 0.0, 0.0], (
        f"stores at {offsets} with num_records {PAIR_NUM_RECORDS:#x}: {got}; expected the first two to land "
        "and the others to be dropped (an unsigned range check of offset + 4 against num_records)")


def _e4m3(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float8_e4m3fn).view(torch.uint8)


def test_mfma_scale0_known_answer(gpu):
    runtime, module = gpu
    g = torch.Generator().manual_seed(7)
    choices = torch.tensor([-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0])
    A = choices[torch.randint(len(choices), (32, 64), generator=g)]
    B = choices[torch.randint(len(choices), (64, 32), generator=g)]
    # Lane l holds row (A) / column (B) l % 32 and k = 32 (l / 32) + byte (csrc/gfx950/layout.h).
    a = torch.stack([A[l % 32, 32 * (l // 32):32 * (l // 32) + 32] for l in range(64)])
    b = torch.stack([B[32 * (l // 32):32 * (l // 32) + 32, l % 32] for l in range(64)])
    want = A.double() @ B.double()
    pa, pb, out = runtime.malloc(64 * 32), runtime.malloc(64 * 32), runtime.malloc(64 * 16 * 4)
    try:
        runtime.upload(pa, _e4m3(a).contiguous().numpy().tobytes())
        runtime.upload(pb, _e4m3(b).contiguous().numpy().tobytes())
        runtime.memset(out, 0xFF, 64 * 16 * 4)
        runtime.launch(module, "probe_mfma_scale0", 1, 64, [pa, pb, out])
        c = struct.unpack(f"<{64 * 16}f", runtime.download(out, 64 * 16 * 4))
    finally:
        for p in (pa, pb, out):
            runtime.free(p)
    got = torch.empty(32, 32, dtype=torch.float64)
    for lane in range(64):
        for v in range(16):
            got[8 * (v // 4) + 4 * (lane // 32) + v % 4, lane % 32] = c[lane * 16 + v]
    assert torch.equal(got, want), f"max |D - A B| = {(got - want).abs().max().item()}"


def _gfx950_torch() -> str | None:
    """Why torch cannot run the op on a gfx950 device, or None when it can."""
    if not torch.cuda.is_available() or torch.version.hip is None:
        return f"needs torch with ROCm and a GPU (torch {torch.__version__}, hip {torch.version.hip})"
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or ""
    if not arch.startswith("gfx950"):
        return f"needs a gfx950 (MI355X) device, device 0 is {arch or 'unknown'}"
    return None


# (M, N) of the small-M path (M <= 128) and the main path, per mode (cp: N % M == 0, M even).
OP_SIZES = {"small": ((61, 1000), (64, 1024)), "main": ((1000, 1560), (256, 1024))}


@pytest.mark.skipif(_gfx950_torch() is not None, reason=_gfx950_torch() or "")
@pytest.mark.parametrize("path", sorted(OP_SIZES))
@pytest.mark.parametrize("mode", ["causal", "cp", "misaligned", "empty", "past_end", "multi_req", "random"])
def test_op_every_window_mode(mode, path):
    import test_fp8_mqa_logits as t
    from aiter import backends

    served = backends.backends()["gfx950"]
    M, N = OP_SIZES[path][1 if mode == "cp" else 0]
    for H in served.heads:
        for D in served.head_dims:
            for clean in (True, False):
                t.run_case(M, N, H, D, mode, clean, "cuda", seed=H + D + int(clean))


def _amdclang() -> str | None:
    for cand in ("amdclang++", os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "llvm", "bin", "amdclang++")):
        if shutil.which(cand):
            return shutil.which(cand)
    return None


@pytest.mark.skipif(_amdclang() is None, reason="needs ROCm's amdclang++ (on PATH or $ROCM_PATH/llvm/bin)")
def test_isa_check_with_amdclang(tmp_path):
    """The 48 kernels through amdclang++: every rule holds, and the hazard distances are printed
    against clang++-22's (AITER_GFX950_CLANG22_HAZARDS: a summary CI wrote; else clang++-22 when
    installed here too). The diff is what to read, not a failure."""
    run = [sys.executable, "-m", "dev.isa.check", "--arch", "gfx950"]
    ref = os.environ.get("AITER_GFX950_CLANG22_HAZARDS")  # CI's .ci-out/fp8_mqa_logits_gfx950.hazards.txt
    if ref is None and shutil.which("clang++-22"):
        ref = tmp_path / "clang22.txt"
        r = subprocess.run(run + ["--asm-out", str(tmp_path / "clang22.s"), "--hazard-summary", str(ref)],
                           cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    extra = ["--diff-against", str(ref)] if ref else []
    r = subprocess.run(run + ["--asm-out", str(tmp_path / "amdclang.s"), "--cxx", _amdclang(),
                              "--hazard-summary", str(tmp_path / "amdclang.txt"), *extra],
                       cwd=ROOT, capture_output=True, text=True)
    print(r.stdout[-8000:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
