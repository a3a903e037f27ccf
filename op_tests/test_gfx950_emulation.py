"""The gfx950 kernel's algorithm, emulated on the CPU, against the float64 reference.

dev/gfx950/emulator.cpp runs every workgroup of the grid with the kernel's own host + device
code (csrc/gfx950/launch_plan.h, plan.h, layout.h and the shared csrc/common/work_scheduler.h):
launch plan, device-side balanced plan (row compaction, block unions, unit prefix sums), shares,
segments, LDS-DMA ring with the swizzle (D = 128 and 64) and the per-wave kv_scale areas, ds_read B
fragments, MFMA steps on 64-lane fragments in the CDNA4 A/B/C layouts (H = 16: two rows per tile),
even/odd epilogue chains, the software pipeline with deferred epilogue and tails, the permlane32
row-pair reductions, clean/masked stage runs, per-row buffer stores with range checks (H = 16: one
store per row pair), -inf fill. Every served (H, D) runs here, in every logits format.
It does not model timing, hazards, waitcnts or the compiler: the ISA checker covers those.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

from aiter.testing.mqa_logits import (
    WINDOW_MODES,
    compress_logits,
    make_inputs,
    make_windows,
    mode_applies,
    reference_logits,
    window_mask,
)
from dev.gfx950 import hostlib

pytestmark = pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++)")

PAD = 5  # out row stride = N + PAD: the padding must stay untouched


def emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits=0, num_cus=256, kmap=0,
            logits_dtype=torch.float32, max_seqlen_k=0, base_offset=0):
    """The emulated launch's output: [M, W + PAD] NaN-poisoned, W = N or max_seqlen_k (compressed),
    starting base_offset elements into its NaN-poisoned storage (a view off 16 bytes)."""
    lib = hostlib.load()
    M, H, D = q.shape
    N = kv.shape[0]
    width = max_seqlen_k if max_seqlen_k > 0 else N
    storage = torch.full((base_offset + M * (width + PAD),), float("nan"), dtype=logits_dtype)
    out = storage[base_offset:].view(M, width + PAD)
    plan = (ctypes.c_int32 * 8)()
    P = hostlib.ptr
    rc = lib.gfx950_emulate(
        P(q.view(torch.uint8), ctypes.c_uint8), P(kv.view(torch.uint8), ctypes.c_uint8),
        P(scales, ctypes.c_float), P(w, ctypes.c_float), P(ks, ctypes.c_int32), P(ke, ctypes.c_int32),
        out.data_ptr(), M, N, H, D, w.stride(0), out.stride(0), int(clean), fixed_grid_splits, num_cus,
        kmap, int(logits_dtype == torch.bfloat16), max_seqlen_k, plan,
    )
    assert rc != -2, "a 16-byte fill store was off 16 bytes or partly past its resource's end"
    assert rc >= 0, "emulator rejected its arguments"
    assert torch.isnan(storage[:base_offset].float()).all(), "wrote before the output"
    keys = ("small", "balanced", "grid_x", "grid_y", "fixed_grid_splits")
    return out, dict(zip(keys, plan[:5]))


def check(out, ref, ks, ke, N, clean, tag):
    body, pad = out[:, :N], out[:, N:]
    assert torch.isnan(pad).all(), f"{tag}: wrote into the row padding (columns >= N)"
    inside = window_mask(ks, ke, N)
    if clean:
        assert torch.equal(torch.isneginf(body), ~inside), f"{tag}: -inf pattern differs from the windows"
        assert not torch.isnan(body).any(), f"{tag}: NaN survived"
    else:
        assert torch.isnan(body[~inside]).all(), f"{tag}: wrote outside the windows with clean_logits=False"
    got, exp = body[inside].double(), ref[inside]
    assert not torch.isnan(got).any(), f"{tag}: an in-window element was never written"
    if exp.numel() == 0:
        return 0.0
    rel_l2 = ((got - exp).norm() / exp.norm().clamp_min(1e-30)).item()
    # Per row: max|out - ref| <= 2e-3 * max|ref of that row| + 1e-6 (operator.md).
    err = torch.where(inside, (body.double() - ref).abs(), torch.zeros_like(ref))
    row_max = torch.where(inside, ref.abs(), torch.zeros_like(ref)).amax(dim=1)
    assert (err.amax(dim=1) <= 2e-3 * row_max + 1e-6).all(), f"{tag}: a row exceeds the per-row bound"
    # fp32 MFMA-order accumulation: far inside the contract's 5e-4.
    assert rel_l2 <= 1e-5, f"{tag}: relative L2 error {rel_l2:.2e}"
    return rel_l2


def run_case(M, N, H, mode, clean, fixed_grid_splits=0, num_cus=256, kmap=0, seed=0, D=128):
    if not mode_applies(mode, M, N):
        pytest.skip(f"{mode} windows need N % M == 0 and M even (M={M}, N={N})")
    q, kv, scales, w = make_inputs(M, N, H, D, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    ks, ke = make_windows(mode, M, N, generator=gen)
    out, plan = emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits, num_cus, kmap)
    ref = reference_logits(q, kv, scales, w, ks, ke, clean_logits=clean)
    tag = f"M={M} N={N} H={H} D={D} {mode} clean={clean} fixed_grid_splits={fixed_grid_splits} cus={num_cus} plan={plan}"
    err = check(out, ref, ks, ke, N, clean, tag)
    print(f"{tag}: rel L2 {err:.2e}")
    return plan


def check_options(out, ref, ks, ke, N, clean, logits_dtype, width, tag):
    """bfloat16 and compressed results: the compressed layout of the reference (a -inf tail with
    clean_logits, untouched without), the padding untouched; bfloat16 within the contract's 4e-3,
    and bit for bit the RNE rounding of what the float32 kernel computes where that is exact."""
    body, pad = out[:, :width], out[:, width:]
    assert torch.isnan(pad).all(), f"{tag}: wrote into the row padding"
    if width != N:
        ref = compress_logits(ref, ks, ke, width)
        s, e = ks.clamp(0, N), ke.clamp(0, N)
        inside = torch.arange(width)[None, :] < (e - s).clamp_min(0)[:, None]
    else:
        inside = window_mask(ks, ke, N)
    if clean:
        assert torch.equal(torch.isneginf(body), ~inside), f"{tag}: -inf pattern differs"
    else:
        assert torch.isnan(body[~inside]).all(), f"{tag}: wrote outside the windows"
    got, exp = body[inside].double(), ref[inside]
    assert not torch.isnan(got).any(), f"{tag}: an in-window element was never written"
    if exp.numel():
        rel_l2 = ((got - exp).norm() / exp.norm().clamp_min(1e-30)).item()
        bar = 4e-3 if logits_dtype == torch.bfloat16 else 1e-5
        assert rel_l2 <= bar, f"{tag}: relative L2 {rel_l2:.2e} > {bar:.0e}"


# bfloat16 logits and the compressed layout, through every path: main and small-M, balanced and
# fixed grid, with and without clean_logits (the compressed -inf tails), H 32 and 64.
OPTION_CASES = [(61, 300, 32, 0), (160, 180, 64, 0), (150, 200, 32, 3), (40, 200, 64, 1), (200, 97, 32, 0)]


# (logits dtype, layout) besides float32 full, which every other test here runs.
FORMATS = [(torch.bfloat16, "full"), (torch.float32, "compressed"), (torch.bfloat16, "compressed")]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("logits_dtype,layout", FORMATS, ids=["bf16", "compressed", "compressed-bf16"])
@pytest.mark.parametrize("mode", ["causal", "multi_req", "random"])
@pytest.mark.parametrize("M,N,H,splits", OPTION_CASES, ids=[f"{m}x{n}-h{h}-grid{g}" for m, n, h, g in OPTION_CASES])
def test_logits_options(M, N, H, splits, mode, logits_dtype, layout, clean):
    q, kv, scales, w = make_inputs(M, N, H, 128, seed=M + N + H)
    ks, ke = make_windows(mode, M, N, generator=torch.Generator().manual_seed(M + N))
    longest = int((ke.clamp(0, N) - ks.clamp(0, N)).clamp_min(0).max())
    width = longest + 7 if layout == "compressed" else N  # a tail on every row
    out, plan = emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits=splits, logits_dtype=logits_dtype,
                        max_seqlen_k=width if layout == "compressed" else 0)
    ref = reference_logits(q, kv, scales, w, ks, ke, clean_logits=True)
    tag = f"M={M} N={N} H={H} {mode} {logits_dtype} {layout} clean={clean} plan={plan}"
    check_options(out, ref, ks, ke, N, clean, logits_dtype, width, tag)
    if logits_dtype == torch.bfloat16:  # rounded once, at the store: the float32 run, rounded
        f32, _ = emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits=splits,
                         max_seqlen_k=width if layout == "compressed" else 0)
        both = ~torch.isnan(out[:, :width].float())
        assert torch.equal(out[:, :width][both], f32[:, :width].to(torch.bfloat16)[both]), f"{tag}: not the RNE of f32"


# Every served (H, D) (H = 16 packs two rows per tile and stores a row pair at once; D = 64 has one
# MFMA step and twice the key groups per stage) in every logits format, on the main path (150 rows:
# partial blocks at every block size) and the small-M path (70 rows), on the balanced plan and a
# fixed grid of 3 splits, with and without clean_logits; fresh inputs per case (its own seed), the
# output poisoned with NaN, against the float64 reference.
FORMATS_ALL = [(torch.float32, "full")] + FORMATS
SHAPE_CASES = [(h, d) for h, d in hostlib.SERVED]
SHAPE_MODES = ["causal", "multi_req", "random", "misaligned"]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("splits", [0, 3], ids=["balanced", "grid3"])
@pytest.mark.parametrize("M,N", [(150, 260), (70, 300)], ids=["main", "small"])
@pytest.mark.parametrize("logits_dtype,layout", FORMATS_ALL, ids=["f32", "bf16", "compressed", "compressed-bf16"])
@pytest.mark.parametrize("H,D", SHAPE_CASES, ids=[f"h{h}-d{d}" for h, d in SHAPE_CASES])
def test_every_head_shape(H, D, logits_dtype, layout, M, N, splits, clean):
    case = SHAPE_CASES.index((H, D)) * 64 + FORMATS_ALL.index((logits_dtype, layout)) * 8 + (M > 128) * 4 + \
        (splits > 0) * 2 + clean
    mode = SHAPE_MODES[case % len(SHAPE_MODES)]
    q, kv, scales, w = make_inputs(M, N, H, D, seed=1000 + case)
    ks, ke = make_windows(mode, M, N, generator=torch.Generator().manual_seed(2000 + case))
    longest = int((ke.clamp(0, N) - ks.clamp(0, N)).clamp_min(0).max())
    width = longest + 5 if layout == "compressed" else N
    max_seqlen_k = width if layout == "compressed" else 0
    out, plan = emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits=splits, logits_dtype=logits_dtype,
                        max_seqlen_k=max_seqlen_k)
    assert plan["small"] == int(M <= 128) and plan["balanced"] == int(splits == 0)
    ref = reference_logits(q, kv, scales, w, ks, ke, clean_logits=True)
    tag = f"M={M} N={N} H={H} D={D} {mode} {logits_dtype} {layout} clean={clean} plan={plan}"
    check_options(out, ref, ks, ke, N, clean, logits_dtype, width, tag)
    if (logits_dtype, layout) == (torch.float32, "full"):
        check(out, reference_logits(q, kv, scales, w, ks, ke, clean_logits=clean), ks, ke, N, clean, tag)
    if logits_dtype == torch.bfloat16:  # rounded once, at the store: the float32 run, rounded
        f32, _ = emulate(q, kv, scales, w, ks, ke, clean, fixed_grid_splits=splits, max_seqlen_k=max_seqlen_k)
        both = ~torch.isnan(out[:, :width].float())
        assert torch.equal(out[:, :width][both], f32[:, :width].to(torch.bfloat16)[both]), f"{tag}: not the RNE of f32"


# The -inf fill's 16-byte chunks follow each row's address: an output that starts off 16 bytes
# (a view one or three elements in), with the padded stride that gives the rows every phase, puts
# partial chunks at both ends of both parts of a row; the window modes move the parts' ends.
@pytest.mark.parametrize("base_offset", [1, 3])
@pytest.mark.parametrize("logits_dtype,layout", FORMATS_ALL, ids=["f32", "bf16", "compressed", "compressed-bf16"])
@pytest.mark.parametrize("mode", ["multi_req", "misaligned", "random", "past_end"])
@pytest.mark.parametrize("H", [16, 32])
def test_fill_off_16_bytes(H, mode, logits_dtype, layout, base_offset):
    M, N = 150, 261
    q, kv, scales, w = make_inputs(M, N, H, 128, seed=H + base_offset)
    ks, ke = make_windows(mode, M, N, generator=torch.Generator().manual_seed(base_offset))
    longest = int((ke.clamp(0, N) - ks.clamp(0, N)).clamp_min(0).max())
    width = longest + 11 if layout == "compressed" else N
    out, plan = emulate(q, kv, scales, w, ks, ke, True, logits_dtype=logits_dtype,
                        max_seqlen_k=width if layout == "compressed" else 0, base_offset=base_offset)
    ref = reference_logits(q, kv, scales, w, ks, ke, clean_logits=True)
    tag = f"M={M} N={N} H={H} {mode} {logits_dtype} {layout} base_offset={base_offset} plan={plan}"
    check_options(out, ref, ks, ke, N, True, logits_dtype, width, tag)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("mode", WINDOW_MODES + ("random",))
@pytest.mark.parametrize("D", [128, 64])
def test_h16_every_window_mode(D, mode, clean):
    """H = 16 over every window mode: empty and past-end rows put a block's last non-empty row and
    its first empty one (a lower natural row) into one pair, whose one store then reaches the
    rows in descending address order."""
    plan = run_case(150, 200, 16, mode, clean, D=D, seed=7)
    assert plan["balanced"] == 1 and plan["small"] == 0


@pytest.mark.parametrize("H,D", [(16, 128), (16, 64), (32, 64), (64, 64)])
@pytest.mark.parametrize("M,N", [(1, 1), (3, 1), (17, 61), (129, 127), (65, 257)])
def test_odd_sizes_new_shapes(H, D, M, N):
    run_case(M, N, H, "random", True, D=D, seed=M * 100 + N + H)
    run_case(M, N, H, "causal", False, D=D, seed=M + N + D, fixed_grid_splits=2)


def test_pair_stores_fall_back_to_the_fixed_grid():
    """H = 16 reaches both rows of a pair through one resource (offsets below 2^31): a float32
    output of 2^31 bytes or more takes the fixed grid (adjacent rows) instead of the balanced plan,
    which may pair any two rows; the other head counts keep the balanced plan."""
    lib = hostlib.load()
    M, N = 16384, 32768  # 2 GiB of float32 logits
    assert hostlib.plan_launch(M, N, 16, 0, 256, True)["balanced"] == 0
    assert hostlib.plan_launch(M, N, 16, 0, 256, True, element_bytes=2)["balanced"] == 1  # bfloat16: 1 GiB
    assert hostlib.plan_launch(M, N, 32, 0, 256, True)["balanced"] == 1
    assert hostlib.plan_launch(M, 32000, 16, 0, 256, True, head_dim=64)["balanced"] == 1
    assert lib.gfx950_pair_stores_reach(16, 128, 1, N, N, 4)  # adjacent rows: always
    assert not lib.gfx950_pair_stores_reach(16, 128, 1, 1 << 29, N, 4)  # a 2 GiB row stride: refused
    assert lib.gfx950_pair_stores_reach(32, 128, M, 1 << 29, N, 4)  # per-row resources: no limit


def test_fp8_decode_matches_torch():
    lib = hostlib.load()
    mine = torch.tensor([lib.gfx950_fp8_to_float(b) for b in range(256)], dtype=torch.float32)
    ref = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    assert torch.equal(torch.isnan(mine), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    assert torch.equal(mine[finite], ref[finite])


MODES = WINDOW_MODES + ("random",)
# Small-M path (M <= 128: 16-row blocks at H=32, 128-key stages) and main path (32-row blocks,
# 64-key stages); odd sizes exercise partial blocks, partial stages and keys past N.
SHAPES_H32 = [(61, 300), (128, 128), (160, 97)]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("M,N", SHAPES_H32, ids=[f"{m}x{n}" for m, n in SHAPES_H32])
def test_h32_balanced(M, N, mode, clean):
    plan = run_case(M, N, 32, mode, clean)
    assert plan["balanced"] == 1 and plan["small"] == int(M <= 128)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("mode", ["causal", "empty", "past_end", "multi_req", "random"])
@pytest.mark.parametrize("M,N", [(40, 200), (150, 130)], ids=["40x200", "150x130"])
def test_h64_balanced(M, N, mode, clean):
    plan = run_case(M, N, 64, mode, clean)
    assert plan["balanced"] == 1


@pytest.mark.parametrize("fixed_grid_splits", [1, 3])
@pytest.mark.parametrize("mode", ["causal", "misaligned", "empty", "random"])
@pytest.mark.parametrize("H", [32, 64])
def test_fixed_grid(H, mode, fixed_grid_splits):
    """The caller's fixed_grid_splits: grid (blocks, fixed_grid_splits), blocks reversed, no device plan."""
    plan = run_case(150, 200, H, mode, True, fixed_grid_splits=fixed_grid_splits)
    assert plan["balanced"] == 0 and plan["grid_y"] == fixed_grid_splits
    run_case(70, 150, H, mode, False, fixed_grid_splits=fixed_grid_splits)


@pytest.mark.parametrize("num_cus", [1, 3, 7])
@pytest.mark.parametrize("mode", ["causal", "multi_req", "past_end"])
def test_balanced_many_segments(mode, num_cus):
    """Few workgroups: each walks several blocks (segments), crossing compute and fill units."""
    run_case(160, 180, 32, mode, True, num_cus=num_cus)
    run_case(160, 180, 64, mode, False, num_cus=num_cus)


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode", ["multi_req", "misaligned"])
@pytest.mark.parametrize("H,D", SHAPE_CASES, ids=[f"h{h}-d{d}" for h, d in SHAPE_CASES])
def test_fill_between_stages(H, D, mode, logits_dtype):
    """Rows far wider than a fill unit and few workgroups: each segment holds several stages and
    several fill units, which the kernel writes between its stages (fill_between_stages) or in the
    fill pass (H = 16 with two key groups); the -inf pattern and values stay exact."""
    M, N, num_cus = 150, 1800, 3
    q, kv, scales, w = make_inputs(M, N, H, D, seed=H + D)
    ks, ke = make_windows(mode, M, N)
    out, plan = emulate(q, kv, scales, w, ks, ke, True, num_cus=num_cus, logits_dtype=logits_dtype)
    ref = reference_logits(q, kv, scales, w, ks, ke, clean_logits=True)
    tag = f"M={M} N={N} H={H} D={D} {mode} {logits_dtype} cus={num_cus} plan={plan}"
    check_options(out, ref, ks, ke, N, True, logits_dtype, N, tag)


@pytest.mark.parametrize("kmap", [0, 1])
def test_independent_of_hardware_k_order(kmap):
    """A and B fragments share one head_dim permutation, so the MFMA's internal k order is free."""
    run_case(129, 100, 32, "random", True, kmap=kmap)


@pytest.mark.parametrize("M,N", [(1, 1), (1, 3), (3, 1), (17, 61), (127, 129), (129, 127), (33, 64)])
def test_odd_sizes(M, N):
    run_case(M, N, 32, "random", True, seed=M * 1000 + N)
    run_case(M, N, 64, "causal", False, seed=M + N)


def natural_block_units(ks, ke, M, N, H, clean, D=128):
    """Units of the same rows in natural blocks (no compaction), by the kernel's block_facts."""
    lib = hostlib.load()
    g = hostlib.geometry(H, M <= 128, D)
    s, e = ks.clamp(0, N), ke.clamp(0, N)
    total, buf = 0, (ctypes.c_int32 * 8)()
    for b0 in range(0, M, g["block_rows"]):
        live = s[b0:b0 + g["block_rows"]] < e[b0:b0 + g["block_rows"]]
        lo = int(s[b0:b0 + g["block_rows"]][live].min()) if live.any() else N
        hi = int(e[b0:b0 + g["block_rows"]][live].max()) if live.any() else 0
        lib.gfx950_block_facts(H, int(M <= 128), D, lo, hi, N, int(clean), buf)
        total += buf[6]
    return total


@pytest.mark.parametrize("mode", ["causal", "empty", "past_end"])
def test_empty_rows_cost_nothing(mode):
    """The balanced plan compacts rows with empty or past-end windows out of the compute blocks,
    so interleaved empty rows add no stages (the design document's third known limitation)."""
    lib = hostlib.load()
    M, N, H = 512, 4096, 32
    ks, ke = make_windows(mode, M, N)
    units, segs = (ctypes.c_int32 * 256)(), (ctypes.c_int32 * 256)()
    compacted = lib.gfx950_balanced_plan(hostlib.ptr(ks, ctypes.c_int32), hostlib.ptr(ke, ctypes.c_int32),
                                         M, N, H, 128, 0, 256, units, segs, None)
    natural = natural_block_units(ks, ke, M, N, H, clean=False)
    live = ks.clamp(0, N) < ke.clamp(0, N)
    live_only = natural_block_units(ks[live], ke[live], int(live.sum()), N, H, clean=False)
    print(f"{mode}: {int(live.sum())}/{M} rows live; compute units: plan {compacted}, "
          f"natural blocks {natural}, live rows alone {live_only}")
    # Exactly what the live rows alone would cost: the empty ones cost nothing.
    assert compacted == live_only
    if mode != "causal":
        assert compacted < natural
