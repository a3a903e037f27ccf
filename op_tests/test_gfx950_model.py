"""The gfx950 performance model's arithmetic (dev/isa/gfx950_model.py; a model, not a measurement):
its three bounds per stage, the µs of a row, the busiest workgroup's units from the emulation's
balanced plan, and the clean-loop pick on the kernel's real assembly when clang-22 is here."""

from __future__ import annotations

import ctypes
import shutil

import pytest

from dev.isa import gfx950 as isa
from dev.isa import gfx950_model as model
from gfx950 import hostlib


def test_bounds_per_stage():
    # The h32 clean loop: 16 MFMA, 283 VALU (permlanes included).
    b = model.bounds(model.StageCounts(mfma=16, valu=283, salu=120, lds=9, vmem=10))
    assert (b.mfma, b.valu, b.serialised) == (2 * 16 * 64, 2 * (283 + 16) * 4, 2 * (283 * 4 + 16 * 64))
    assert (b.mfma, b.valu) == (2048, 2392)  # the figures of the issue's own count


def test_predicted_us_is_units_times_cycles_over_clock():
    assert model.predicted_us(244, 2048) == pytest.approx(244 * 2048 / 2400.0)
    assert model.predicted_us(0, 2048) == 0.0
    assert model.predicted_us(10, 1000, clock_ghz=1.0) == pytest.approx(10.0)


@pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++) for the emulation")
def test_busiest_units_is_a_share_of_the_plan():
    from aiter.testing.mqa_logits import make_windows

    units = model.busiest_units("causal", 1024, 8192, 32)
    ks, ke = make_windows("causal", 1024, 8192)
    per_wg, segs = (ctypes.c_int32 * model.NUM_CUS)(), (ctypes.c_int32 * model.NUM_CUS)()
    total = hostlib.load().gfx950_balanced_plan(hostlib.ptr(ks, ctypes.c_int32), hostlib.ptr(ke, ctypes.c_int32),
                                                1024, 8192, 32, 128, 1, model.NUM_CUS, per_wg, segs)
    assert units == max(per_wg) and 0 < units and units * model.NUM_CUS >= sum(per_wg)
    assert total >= sum(per_wg)  # the plan's total also counts the virtual start-up units


@pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++) for the emulation")
def test_busiest_units_of_the_new_shapes():
    """H = 16 blocks hold twice H = 32's rows (half the stages per row); D = 64 stages twice the keys
    of half the rows (about the same stages): the model's units follow the variant's own stages."""
    h32 = model.busiest_units("causal", 4096, 32768, 32)
    assert abs(model.busiest_units("causal", 4096, 32768, 16) - h32 / 2) <= 0.05 * h32
    assert abs(model.busiest_units("causal", 4096, 32768, 32, D=64) - h32) <= 0.05 * h32


def _have_clang() -> bool:
    try:
        return shutil.which(isa.clang_path()) is not None
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not _have_clang(), reason="needs Debian's clang-22 (the ISA check's)")
def test_clean_loop_of_the_real_kernel(tmp_path):
    out = tmp_path / "k.s"
    ok, stderr, _ = isa.compile_all(str(out))
    assert ok, stderr
    kernels = isa.parse(out.read_text())
    assert set(isa.KERNELS) <= set(kernels)
    counts, lines = model.clean_loop(kernels["fp8_mqa_logits_gfx950_h32"])
    assert counts.mfma == 16 and counts.valu > 0 and any(line.startswith(isa.MFMA) for line in lines)
    # D = 64: one MFMA step per tile-step, so half the MFMAs of a stage; H = 16: D = 128's 16
    assert model.clean_loop(kernels[isa.kernel_name(32, 64)])[0].mfma == 8
    assert model.clean_loop(kernels[isa.kernel_name(16, 128)])[0].mfma == 16
    # The clean loop is the stage loop with the fewest VALU (no masks).
    for header, body in isa.stage_loops(kernels["fp8_mqa_logits_gfx950_h32"].blocks):
        valu = sum(isa.classify(i.op) in ("valu", "permlane") for b in body for i in
                   kernels["fp8_mqa_logits_gfx950_h32"].blocks[b].insts)
        assert valu >= counts.valu
