"""Layout math of the gfx950 kernel, from the headers the kernel compiles
(csrc/gfx950/geometry.h and layout.h, through dev/gfx950/layout_shim.cpp), for every variant
(H 16 / 32 / 64 x D 128 / 64 x main / small-M path): the LDS swizzle and slot layout, the LDS-DMA
coverage, bank conflicts of every ds_read the stage body issues, the MFMA fragment layouts, the
tiles' (row, head) columns and chain sets (H = 16: two rows per tile), the tail schedule, the store
offsets, and the hand-placed vmcnt wait."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from dev.gfx950 import hostlib

pytestmark = pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++)")

VARIANTS = [(h, small, d) for h, d in hostlib.SERVED for small in (False, True)]
IDS = [f"h{h}_d{d}" + ("_small" if small else "") for h, small, d in VARIANTS]
LANES, WAVES, SUBTILES, TILES = 64, 8, 2, 4


@pytest.fixture(scope="module")
def lib():
    return hostlib.load()


@pytest.mark.parametrize("head_dim", [128, 64])
def test_swizzle_is_a_bijection(lib, head_dim):
    keys, chunks = 256, head_dim // 16  # the largest stage's keys
    seen = {}
    for key, c in itertools.product(range(keys), range(chunks)):
        p = lib.gfx950_lds_chunk(32, 1, head_dim, key, c)
        assert 0 <= p < keys * chunks and p not in seen
        seen[p] = (key, c)
        assert (lib.gfx950_chunk_key(32, 1, head_dim, p), lib.gfx950_chunk_col(32, 1, head_dim, p)) == (key, c)
        assert p // chunks == key  # a key's D bytes stay together: one DMA lane never spans two keys


@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_dma_covers_the_stage_once(lib, heads, small, head_dim):
    """Every 16-byte chunk of the stage's K is fetched by exactly one lane of one DMA and lands at
    its swizzled position; the kv_scale DMAs fill each wave's own area; nothing overlaps."""
    g = hostlib.geometry(heads, small, head_dim)
    v = (heads, int(small), head_dim)
    out = (ctypes.c_int32 * 3)()
    lds_bytes = {}
    fetched = set()
    for wave, d, lane in itertools.product(range(WAVES), range(g["dmas_per_wave"] + 1), range(LANES)):
        lib.gfx950_dma(*v, wave, d, lane, out)
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
            key, col = glob // head_dim, (glob % head_dim) // 16
            # lands where the swizzle puts (key, col)
            assert lds == lib.gfx950_padded_chunk(*v, lib.gfx950_lds_chunk(*v, key, col))
        else:
            # the 64 scales a wave's sub-tiles use: keys 64 * key_group + lane
            first = lib.gfx950_wave_subtile(*v, wave, 0) * 32
            assert glob == 4 * (first + lane)
            for j in range(SUBTILES):
                if lane // 32 == j:
                    assert lds == lib.gfx950_scale_read_offset(*v, wave, j, lane % 32)
    assert len(fetched) * 16 == g["stage_bytes"]
    assert g["slot_bytes"] % 256 == 0  # slots start on a bank line: bank patterns repeat per slot


def banks(addrs, width):
    """Bank slots (16-byte units mod 64 banks) touched by one ds_read_b128 phase."""
    return [(a // 16) % width for a in addrs]


@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_b_fragment_reads_are_conflict_free(lib, heads, small, head_dim):
    """Each ds_read_b128 of a B fragment: every 16-lane phase covers the 64 banks once (gfx950:
    64 banks x 4 B), and every 8-lane phase 32 distinct banks (a 32-bank part), for every wave,
    sub-tile, MFMA step and half. The reads also match the fragment layout: lane l holds key
    (sub-tile base + l % 32), chunks 4 s + 2 (l / 32) + {0, 1} (s < D / 64: all D / 16 chunks)."""
    g = hostlib.geometry(heads, small, head_dim)
    v = (heads, int(small), head_dim)
    stride = lib.gfx950_subtile_stride(*v)
    chunks_read = set()
    for wave, j, s, q in itertools.product(range(WAVES), range(SUBTILES), range(g["steps"]), range(2)):
        sub0 = lib.gfx950_wave_subtile(*v, wave, 0)
        addrs = [lib.gfx950_b_read_offset(*v, sub0, lane, s, q) + j * stride for lane in range(LANES)]
        for lane, addr in enumerate(addrs):
            key = 32 * (sub0 + j) + lane % 32
            chunk = lib.gfx950_frag_chunk(lane, s, q)
            assert chunk == 4 * s + 2 * (lane // 32) + q
            chunks_read.add(chunk)
            assert addr == lib.gfx950_padded_chunk(*v, lib.gfx950_lds_chunk(*v, key, chunk))
            assert addr % 16 == 0 and addr + 16 <= g["slot_bytes"]
        for base in range(0, LANES, 16):
            assert sorted(banks(addrs[base:base + 16], 16)) == list(range(16)), (wave, j, s, q, base)
        for base in range(0, LANES, 8):
            assert len(set(banks(addrs[base:base + 8], 8))) == 8, (wave, j, s, q, base)
    assert chunks_read == set(range(head_dim // 16))  # the fragments read all of each key


@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_scale_reads_broadcast(lib, heads, small, head_dim):
    """The kv_scale ds_read_b32: lanes l and l + 32 read the same word, 32 consecutive words."""
    for wave, j in itertools.product(range(WAVES), range(SUBTILES)):
        addrs = [lib.gfx950_scale_read_offset(heads, int(small), head_dim, wave, j, lane) for lane in range(LANES)]
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
    # an element's A row has its parity: which row of an H = 16 tile it belongs to is static
    assert all(lib.gfx950_c_row(lane, v) % 2 == v % 2 for lane in range(LANES) for v in range(16))


@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_rows_tiles_and_tails(lib, heads, small, head_dim):
    """Every (block row, head) is one A row of exactly one tile of one wave of every key group; a
    tile's A rows are one row's 32 heads (H >= 32) or, at H = 16, two rows' 16 heads interleaved (its
    even A rows the first row): so an accumulator element's row is its chain (the element's
    parity); every tile adds into one chain set, which its first tile starts. Row pairs of every
    sub-tile are reduced exactly once, two per permlane asm, one step after the epilogue that
    completes them (the next stage's step 1 when that is the last sub-tile's)."""
    g = hostlib.geometry(heads, small, head_dim)
    v = (heads, int(small), head_dim)
    covered = {}
    out = (ctypes.c_int32 * 4)()
    for wave in range(WAVES):
        kg = lib.gfx950_wave_subtile(*v, wave, 0) // SUBTILES
        sets = {}
        for t in range(TILES):
            for m in range(32):
                lib.gfx950_tile(*v, t, m, out)
                r, head, chain_set, starts = out[0], out[1], out[2], out[3]
                assert 0 <= r < g["rows_per_wave"] and 0 <= head < heads
                if g["rows_per_tile"] == 2:
                    assert (r % 2, head) == (m % 2, m // 2) and r // 2 == t
                slot = lib.gfx950_wave_row_slot(*v, wave, r)
                covered[(slot, head, kg)] = covered.get((slot, head, kg), 0) + 1
            sets.setdefault(chain_set, []).append((t, starts))
        assert len(sets) == g["chain_sets"]
        assert all(tiles[0][1] == 1 and all(s == 0 for _, s in tiles[1:]) for tiles in sets.values())
    assert set(covered) == set(itertools.product(range(g["block_rows"]), range(heads), range(g["key_groups"])))
    assert all(count == 1 for count in covered.values())
    subs = {lib.gfx950_wave_subtile(*v, w, j) for w in range(WAVES) for j in range(SUBTILES)}
    assert subs == set(range(g["stage_keys"] // 32))
    # after the reduction row b of pair p sits in one chain of its own: the rows' own (H >= 32) or
    # the pair's tile's two (H = 16)
    ends = set()
    for p, b in itertools.product(range(g["pairs_per_wave"]), range(2)):
        lib.gfx950_pair_chain(*v, p, b, out)
        ends.add((out[0], out[1]))
        assert out[0] == (p if g["rows_per_tile"] == 2 else 2 * p + b)
    assert len(ends) == 2 * g["pairs_per_wave"]
    n = lib.gfx950_tail(*v, 0, out)
    tails = set()
    for i in range(n):
        lib.gfx950_tail(*v, i, out)
        tails.add((out[0], out[1]))
    assert n % 2 == 0 and tails == set(itertools.product(range(SUBTILES), range(g["pairs_per_wave"])))
    for k in range(n // 2):
        lib.gfx950_tail(*v, 2 * k + 1, out)
        completes = out[0]
        lib.gfx950_tail_group(*v, k, out)
        deferred, step = out[0], out[1]
        assert deferred == (completes == SUBTILES - 1)
        assert step == (1 if deferred else (completes + 1) * TILES + 1) and step < SUBTILES * TILES


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
    D, L, T = g["prefetch_stages"], g["loads_per_stage"], g["stores_per_stage"]
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


@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_hand_placed_vmcnt_waits(heads, small, head_dim):
    """vmcnt counts loads and stores in issue order (gfx9: one in-order counter). The loop's
    s_waitcnt vmcnt(N) retires a stage's DMAs iff at least N ops were issued after them; the ISA
    checker confirms the loop issues exactly loads_per_stage + stores_per_stage VMEM ops. H = 16
    stores a row pair at once, so its 8 rows per wave issue H = 32's 8 stores per stage; D = 64
    issues D = 128's loads (twice the keys of half the bytes)."""
    g = hostlib.geometry(heads, small, head_dim)
    assert g["stores_per_stage"] == (8 if heads <= 32 else 4) and g["prefetch_stages"] == 4
    assert g["loads_per_stage"] == (3 if small else 2) and g["dmas_per_wave"] * 8 * 1024 == g["stage_bytes"]
    N = g["vmcnt_wait"]
    assert N <= 63  # 6-bit field on gfx9
    for stages in (1, 2, 3, 4, 5, 9, 40):
        after = simulate_vmem(g, stages)
        for i, a in enumerate(after):
            if a is None:
                continue  # drained by the vmcnt(0) after the Q/w loads
            assert a >= N, f"stage {i}: only {a} ops after its loads, wait vmcnt({N}) would not retire them"
            assert a == N, f"stage {i}: wait is looser than needed ({a} ops after, vmcnt({N}))"


def fill_row_chunks(lib, left_end, right_begin, row_end, phase, element_bytes):
    """[(part, chunk, first column, whole)] of a row's fill positions, in order."""
    out = (ctypes.c_int32 * 4)()
    rows = []
    for p in range(lib.gfx950_fill_chunks(left_end, right_begin, row_end, phase, element_bytes)):
        lib.gfx950_fill_position(left_end, right_begin, row_end, phase, element_bytes, p, out)
        assert out[0] >= 0, f"position {p} in no part"
        rows.append(tuple(out[:4]))
    return rows


ROW_ENDS = [1, 2, 3, 5, 8, 9, 16, 17, 23, 40]


@pytest.mark.parametrize("element_bytes", [4, 2], ids=["f32", "bf16"])
def test_fill_chunks_cover_the_fill_columns(element_bytes):
    """A row's fill chunks (layout.h): every -inf column in exactly one chunk, chunks in increasing
    order, a whole chunk on 16 bytes with every column -inf and inside the row, a partial one only
    at a part's ends; nothing of the computed columns or past the row. Both parts, either part,
    every phase of the row's start within its 16-byte chunk."""
    lib = hostlib.load()
    per_chunk = 16 // element_bytes
    for phase, row_end in itertools.product(range(per_chunk), ROW_ENDS):
        for left_end in sorted({0, 1, min(3, row_end), row_end // 2, row_end}):
            gaps = [row_end - left_end] if left_end == 0 else [per_chunk, per_chunk + 1, 2 * per_chunk + 3]
            for right_begin in sorted({min(row_end, left_end + g) for g in gaps} | ({0, row_end} if left_end == 0 else set())):
                if left_end and right_begin < row_end and right_begin - left_end < per_chunk:
                    continue  # the kernel's parts are a stage apart when both are present
                fill = {c for c in range(row_end) if c < left_end or c >= right_begin}
                seen, chunks = [], []
                for part, chunk, first, whole in fill_row_chunks(lib, left_end, right_begin, row_end, phase,
                                                                 element_bytes):
                    cols = set(range(first, first + per_chunk))
                    assert first == chunk * per_chunk - phase
                    if whole:
                        assert cols <= fill, f"whole chunk {chunk} holds a column that is not -inf"
                        assert (first + phase) % per_chunk == 0
                    else:
                        assert cols & fill and not cols <= fill, f"chunk {chunk} called partial"
                    chunks.append(chunk)
                    seen.extend(sorted(cols & fill))
                tag = f"phase {phase} row_end {row_end} parts [0, {left_end}) [{right_begin}, {row_end})"
                assert chunks == sorted(set(chunks)), tag
                assert sorted(seen) == sorted(fill) and len(seen) == len(fill), tag


def test_partial_chunks_are_a_runs_partial_ends():
    """partial_chunks: of a run [begin, end) of a part's chunks, exactly those not whole (at most
    its first and last; a one-chunk run once), for parts of every length and phase (V = 4)."""
    lib = hostlib.load()
    out = (ctypes.c_int32 * 2)()
    V = 4
    for phase, first_column, length in itertools.product(range(V), range(V), range(1, 3 * V + 2)):
        columns = range(first_column, first_column + length)
        chunks = range((columns.start + phase) // V, (columns.stop - 1 + phase) // V + 1)
        whole = {c for c in chunks if set(range(c * V - phase, c * V - phase + V)) <= set(columns)}
        whole_begin, whole_end = (columns.start + phase + V - 1) // V, (columns.stop + phase) // V
        assert whole == set(range(whole_begin, whole_end))
        for begin, end in itertools.combinations(range(chunks.start, chunks.stop + 1), 2):
            lib.gfx950_partial_chunks(begin, end, whole_begin, whole_end, out)
            assert {c for c in out[:2] if c >= 0} == {c for c in range(begin, end) if c not in whole}
            assert out[0] != out[1] or out[0] < 0


@pytest.mark.parametrize("element_bytes", [4, 2], ids=["f32", "bf16"])
@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_fill_units_split_each_row(heads, small, head_dim, element_bytes):
    """Fill unit u is positions [u P, (u + 1) P) of each row (P = fill_cols / chunk elements), the
    last unit to the row's end: the units of a block partition every row's fill chunks, none is
    empty, and its rows are whole waves of threads in whole rounds."""
    lib = hostlib.load()
    g = hostlib.geometry(heads, small, head_dim)
    per_chunk = 16 // element_bytes
    out = (ctypes.c_int32 * 3)()
    for fill_keys in (1, g["fill_cols"] - 1, g["fill_cols"], g["fill_cols"] + 1, 5 * g["fill_cols"] + 7):
        units = -(-fill_keys // g["fill_cols"])
        for extra in range(5):  # a row's chunks: at least fill_keys / V, up to four more
            row_chunks = -(-fill_keys // per_chunk) + extra
            covered = []
            for u in range(units):
                lib.gfx950_unit_positions(heads, int(small), head_dim, element_bytes, u, units, row_chunks, out)
                assert out[0] < out[1], f"unit {u} of {units} is empty"
                covered.extend(range(out[0], out[1]))
            assert covered == list(range(row_chunks))
    row_threads = out[2]
    assert row_threads % LANES == 0 and (LANES * WAVES) % row_threads == 0
    assert g["block_rows"] % (LANES * WAVES // row_threads) == 0
    # Writing the fill between stages is left out only where the stage loops had no registers for it.
    assert g["fill_between_stages"] == (not (heads == 16 and g["key_groups"] == 2))


def block_parts(lib, overhead, compute, fill, u_begin, u_end):
    out = (ctypes.c_int32 * 4)()
    lib.gfx950_block_parts(overhead, compute, fill, u_begin, u_end, out)
    return tuple(out)


def test_block_units_interleave_stages_and_fill():
    """A block's units (cost_model.h): the start overhead, then stages and fill units interleaved.
    Consecutive unit ranges partition the stages and the fill units in order; any range holds them
    in the block's ratio (within one unit of each); the first body unit is a fill unit, the last a
    stage (when the block has both)."""
    lib = hostlib.load()
    for overhead, compute, fill in itertools.product((0, 2), (0, 1, 3, 7, 40), (0, 1, 2, 5, 17)):
        if compute == 0 and overhead:
            continue  # a block without stages has no start overhead
        total = overhead + compute + fill
        for cuts in ([0, total], list(range(total + 1)), [0, total // 3, total // 2, total]):
            tiles, fills = [], []
            for a, b in zip(cuts, cuts[1:]):
                t0, t1, f0, f1 = block_parts(lib, overhead, compute, fill, a, b)
                tiles.extend(range(t0, t1))
                fills.extend(range(f0, f1))
                body = max(0, b - max(a, overhead))
                if compute + fill and body:
                    assert abs((t1 - t0) * (compute + fill) - body * compute) <= compute + fill
            assert tiles == list(range(compute)) and fills == list(range(fill))
        if compute and fill:
            assert block_parts(lib, overhead, compute, fill, overhead, overhead + 1)[2:] == (0, 1)
            assert block_parts(lib, overhead, compute, fill, total - 1, total)[:2] == (compute - 1, compute)


def fill_schedule(lib, stage_begin, stage_end, fill_begin, fill_end, stage):
    out = (ctypes.c_int32 * 2)()
    lib.gfx950_fill_schedule(stage_begin, stage_end, fill_begin, fill_end, stage, out)
    return out[0], out[1]


def test_fill_schedule_spreads_the_fill_over_the_stages():
    """FillSchedule (plan.h): fill unit k of F goes before stage k S / F of S; every one before the
    last stage; the stage loop breaks exactly where more become due."""
    lib = hostlib.load()
    for stages, fills, begin, fill_begin in itertools.product((1, 2, 3, 8, 41), (0, 1, 2, 3, 8, 100), (0, 5), (0, 9)):
        end, fill_end = begin + stages, fill_begin + fills
        expected = [min(fills, -(-(r + 1) * fills // stages)) for r in range(stages)]
        got = [fill_schedule(lib, begin, end, fill_begin, fill_end, begin + r) for r in range(stages)]
        assert [due - fill_begin for due, _ in got] == expected
        assert got[-1][0] == fill_end  # all due before the last stage
        for r, (due, nxt) in enumerate(got):
            later = [q for q in range(r + 1, stages) if expected[q] > expected[r]]
            assert nxt == begin + (later[0] if later else stages)


@pytest.mark.parametrize("element_bytes", [4, 2], ids=["f32", "bf16"])
@pytest.mark.parametrize("heads,small,head_dim", VARIANTS, ids=IDS)
def test_fill_between_stages_keeps_the_waits_safe(heads, small, head_dim, element_bytes):
    """The fill's stores between a segment's stages count in vmcnt like the loop's own (gfx9 has one
    counter): the hand-placed wait of a stage then sees more ops after its loads than it assumes,
    so it waits for them too (later, never early). No wait may see fewer."""
    g = hostlib.geometry(heads, small, head_dim)
    D, L, T, N = g["prefetch_stages"], g["loads_per_stage"], g["stores_per_stage"], g["vmcnt_wait"]
    unit_stores = g["fill_cols"] * g["block_rows"] * element_bytes // (16 * LANES * WAVES)  # 16-byte stores a wave
    lib = hostlib.load()
    for stages, fills in ((1, 3), (5, 2), (9, 9), (40, 17), (3, 40)):
        ops, last_load, filled, after = [], {}, 0, []
        for i in range(D):
            ops.extend(["load"] * L)
            last_load[i] = len(ops) - 1
        drained = len(ops)  # the vmcnt(0) after the Q/w loads
        for i in range(stages):
            due, _ = fill_schedule(lib, 0, stages, 0, fills, i)
            ops.extend(["fill"] * (unit_stores * (due - filled)))
            filled = due
            if last_load[i] >= drained:
                after.append(len(ops) - 1 - last_load[i])
            ops.extend(["load"] * L)
            last_load[i + D] = len(ops) - 1
            ops.extend(["store"] * T)
        assert filled == fills
        assert all(a >= N for a in after), f"a wait retires its stage's loads early: {after} < {N}"
