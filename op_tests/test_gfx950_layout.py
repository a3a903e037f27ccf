"""Layout math of the gfx950 kernel, from the headers the kernel compiles
(csrc/gfx950/geometry.h and layout.h, through op_tests/gfx950/layout_shim.cpp):
the LDS swizzle and slot layout, the LDS-DMA coverage, bank conflicts of every ds_read the stage
body issues, the MFMA fragment layouts, the store offsets, and the hand-placed vmcnt wait."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from gfx950 import hostlib

pytestmark = pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++)")

VARIANTS = [(32, False), (64, False), (32, True), (64, True)]
IDS = ["h32", "h64", "h32_small", "h64_small"]
LANES, WAVES, SUBTILES, STEPS = 64, 8, 2, 2


@pytest.fixture(scope="module")
def lib():
    return hostlib.load()


def test_swizzle_is_a_bijection(lib):
    keys = 256  # the largest stage
    seen = {}
    for key, c in itertools.product(range(keys), range(8)):
        p = lib.gfx950_lds_chunk(key, c)
        assert 0 <= p < keys * 8 and p not in seen
        seen[p] = (key, c)
        assert (lib.gfx950_chunk_key(p), lib.gfx950_chunk_col(p)) == (key, c)
        assert p // 8 == key  # a key's 128 bytes stay together: one DMA lane never spans two keys


@pytest.mark.parametrize("heads,small", VARIANTS, ids=IDS)
def test_dma_covers_the_stage_once(lib, heads, small):
    """Every 16-byte chunk of the stage's K is fetched by exactly one lane of one DMA and lands at
    its swizzled position; the kv_scale DMAs fill each wave's own area; nothing overlaps."""
    g = hostlib.geometry(heads, small)
    out = (ctypes.c_int32 * 3)()
    lds_bytes = {}
    fetched = set()
    for wave, d, lane in itertools.product(range(WAVES), range(g["dmas_per_wave"] + 1), range(LANES)):
        lib.gfx950_dma(heads, int(small), wave, d, lane, out)
        lds, glob, kind = out[0], out[1], out[2]
        size = 16 if kind == 0 else 4
        assert 0 <= lds and lds + size <= g["slot_bytes"]
        for b in range(lds, lds + size):
            assert b not in lds_bytes, f"LDS byte {b} written twice"
            lds_bytes[b] = (wave, d, lane)
        if kind == 0:
            assert glob % 16 == 0 and 0 <= glob < g["stage_bytes"]
            assert glob not in fetched
            fetched.add(glob)
            key, col = glob // 128, (glob % 128) // 16
            # lands where the swizzle puts (key, col)
            assert lds == lib.gfx950_padded_chunk(heads, int(small), lib.gfx950_lds_chunk(key, col))
        else:
            # the 64 scales a wave's sub-tiles use: keys 64 * key_group + lane
            first = lib.gfx950_wave_subtile(heads, int(small), wave, 0) * 32
            assert glob == 4 * (first + lane)
            for j in range(SUBTILES):
                if lane // 32 == j:
                    assert lds == lib.gfx950_scale_read_offset(heads, int(small), wave, j, lane % 32)
    assert len(fetched) * 16 == g["stage_bytes"]
    assert g["slot_bytes"] % 256 == 0  # slots start on a bank line: bank patterns repeat per slot


def banks(addrs, width):
    """Bank slots (16-byte units mod 64 banks) touched by one ds_read_b128 phase."""
    return [(a // 16) % width for a in addrs]


@pytest.mark.parametrize("heads,small", VARIANTS, ids=IDS)
def test_b_fragment_reads_are_conflict_free(lib, heads, small):
    """Each ds_read_b128 of a B fragment: every 16-lane phase covers the 64 banks once (gfx950:
    64 banks x 4 B), and every 8-lane phase 32 distinct banks (a 32-bank part), for every wave,
    sub-tile, MFMA step and half. The reads also match the fragment layout: lane l holds key
    (sub-tile base + l % 32), chunks 4 s + 2 (l / 32) + {0, 1}."""
    g = hostlib.geometry(heads, small)
    stride = lib.gfx950_subtile_stride(heads, int(small))
    for wave, j, s, q in itertools.product(range(WAVES), range(SUBTILES), range(STEPS), range(2)):
        sub0 = lib.gfx950_wave_subtile(heads, int(small), wave, 0)
        addrs = [lib.gfx950_b_read_offset(heads, int(small), sub0, lane, s, q) + j * stride for lane in range(LANES)]
        for lane, addr in enumerate(addrs):
            key = 32 * (sub0 + j) + lane % 32
            chunk = lib.gfx950_frag_chunk(lane, s, q)
            assert chunk == 4 * s + 2 * (lane // 32) + q
            assert addr == lib.gfx950_padded_chunk(heads, int(small), lib.gfx950_lds_chunk(key, chunk))
            assert addr % 16 == 0 and addr + 16 <= g["slot_bytes"]
        for base in range(0, LANES, 16):
            assert sorted(banks(addrs[base:base + 16], 16)) == list(range(16)), (wave, j, s, q, base)
        for base in range(0, LANES, 8):
            assert len(set(banks(addrs[base:base + 8], 8))) == 8, (wave, j, s, q, base)


@pytest.mark.parametrize("heads,small", VARIANTS, ids=IDS)
def test_scale_reads_broadcast(lib, heads, small):
    """The kv_scale ds_read_b32: lanes l and l + 32 read the same word, 32 consecutive words."""
    for wave, j in itertools.product(range(WAVES), range(SUBTILES)):
        addrs = [lib.gfx950_scale_read_offset(heads, int(small), wave, j, lane) for lane in range(LANES)]
        assert addrs[:32] == addrs[32:]
        assert [a - addrs[0] for a in addrs[:32]] == [4 * i for i in range(32)]


def test_accumulator_layout_covers_the_tile(lib):
    """C of a 32x32 MFMA: (lane, element) <-> (row, column) is a bijection; each lane half holds
    16 heads of its column; the two halves together all 32."""
    cells = set()
    for lane, v in itertools.product(range(LANES), range(16)):
        cells.add((lib.gfx950_c_row(lane, v), lane % 32))
    assert cells == set(itertools.product(range(32), range(32)))
    heads_h0 = {lib.gfx950_c_row(0, v) for v in range(16)}
    heads_h1 = {lib.gfx950_c_row(32, v) for v in range(16)}
    assert heads_h0.isdisjoint(heads_h1) and heads_h0 | heads_h1 == set(range(32))


@pytest.mark.parametrize("heads,small", VARIANTS, ids=IDS)
def test_rows_tiles_and_tails(lib, heads, small):
    """Every (block row, head) is one tile column of exactly one wave of every key group; row pairs
    of every sub-tile are reduced exactly once, two per permlane asm."""
    g = hostlib.geometry(heads, small)
    covered = {}
    for wave in range(WAVES):
        kg = lib.gfx950_wave_subtile(heads, int(small), wave, 0) // SUBTILES
        for r in range(g["rows_per_wave"]):
            slot = lib.gfx950_wave_row_slot(heads, int(small), wave, r)
            covered.setdefault((slot, kg), 0)
            covered[(slot, kg)] += 1
    assert set(covered) == set(itertools.product(range(g["block_rows"]), range(g["key_groups"])))
    assert all(v == 1 for v in covered.values())
    subs = {lib.gfx950_wave_subtile(heads, int(small), w, j) for w in range(WAVES) for j in range(SUBTILES)}
    assert subs == set(range(g["stage_keys"] // 32))
    out = (ctypes.c_int32 * 2)()
    n = lib.gfx950_tail(heads, int(small), 0, out)
    tails = set()
    for i in range(n):
        lib.gfx950_tail(heads, int(small), i, out)
        tails.add((out[0], out[1]))
    assert n % 2 == 0 and tails == set(itertools.product(range(SUBTILES), range(g["pairs_per_wave"])))


@pytest.mark.parametrize("element_bytes", [4, 2], ids=["f32", "bf16"])
def test_store_offsets_select_one_half(element_bytes):
    lib = hostlib.load()
    for sub, lane, half in itertools.product(range(8), range(LANES), range(2)):
        off = lib.gfx950_store_offset(sub, lane, half, element_bytes)
        if lane // 32 == half:
            assert off == element_bytes * (32 * sub + lane % 32)
        else:
            assert off >= 0x80000000  # beyond any num_records (N * 4 < 2^31)


def simulate_vmem(g, stages, qw_loads=20):
    """Per-wave VMEM issue order of one segment, as the kernel issues it. Returns, for each stage,
    how many VMEM ops were issued after its last load when its hand-placed wait ran, or None
    when a full drain (vmcnt(0)) retired it earlier."""
    D, L, T = 4, g["loads_per_stage"], g["stores_per_stage"]
    ops = []  # issue log: ("load", stage) / ("store", stage) / ("other", None)
    last_load = {}
    drained_before = 0

    def load(i):
        for _ in range(L):
            ops.append(("load", i))
        last_load[i] = len(ops) - 1

    for i in range(D):  # prologue: DMAs of stages 0..D-1 (dummy past the segment: still issued)
        load(i)
    ops.extend([("other", None)] * qw_loads)  # Q and w loads, then s_waitcnt vmcnt(0)
    drained_before = len(ops)
    after = []
    for i in range(stages):
        idx = last_load[i]
        after.append(None if idx < drained_before else len(ops) - 1 - idx)
        load(i + D)  # stage i + D (dummy when >= stages)
        ops.extend([("store", i)] * T)  # this iteration's stores (tails of i and i - 1)
    return after


@pytest.mark.parametrize("heads,small", VARIANTS, ids=IDS)
def test_hand_placed_vmcnt_waits(heads, small):
    """vmcnt counts loads and stores in issue order (gfx9: one in-order counter). The loop's
    s_waitcnt vmcnt(N) retires a stage's DMAs iff at least N ops were issued after them; the ISA
    checker confirms the loop issues exactly loads_per_stage + stores_per_stage VMEM ops."""
    g = hostlib.geometry(heads, small)
    N = g["vmcnt_wait"]
    assert N <= 63  # 6-bit field on gfx9
    for stages in (1, 2, 3, 4, 5, 9, 40):
        after = simulate_vmem(g, stages)
        for i, a in enumerate(after):
            if a is None:
                continue  # drained by the vmcnt(0) after the Q/w loads
            assert a >= N, f"stage {i}: only {a} ops after its loads, wait vmcnt({N}) would not retire them"
            assert a == N, f"stage {i}: wait is looser than needed ({a} ops after, vmcnt({N}))"
