"""The shared work scheduler (csrc/common/work_scheduler.h) on the host, against a Python statement
of what each helper must do.

A tiny extern "C" shim (below) is compiled with g++ against the header, like the gfx950 host
library (dev/gfx950/hostlib.py), and called through ctypes. Checked:
  - row_window: raw bounds clamped to [0, N] (negative, past N, inverted, INT32 and INT64 extremes);
  - BlockUnion over empty and non-empty rows, and BlockUnion<int32_t> from empty_within(N) equal to it;
  - tile_span on and off the key grid: the fewest tiles from first_key that cover the union,
    covered_end = min(first_key + tiles * tile_keys, N);
  - fill_keys / fill_key: exactly the complement of [first_key, covered_end) in [0, N), increasing
    (exhaustive over small N);
  - price_block: overhead, compute, fill and their totals, both overloads;
  - segment_parts: consecutive unit ranges partition the tiles and the fill units in order;
  - share_begin: P shares partition [0, total) in order, floor boundaries, sizes within one;
  - the paged op's paged_row_keys, paged_batch_keys and paged_unit (int64 and int32 prefix sums) over
    random lengths of both forms, negative ones and batches without units included.
A property test runs the chain on tens of thousands of random blocks.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest

from dev.gfx950 import hostlib

pytestmark = pytest.mark.skipif(hostlib.compiler() is None, reason="needs a host C++ compiler (g++)")

HEADER = hostlib.CSRC / "common" / "work_scheduler.h"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SHIM = r"""
#include <cstdint>
#include "common/work_scheduler.h"
using namespace aiter::scheduler;

static CostModel model_of(const int64_t* m) {
  return CostModel{m[0], m[1], m[2] != 0, m[3], m[4]};
}

extern "C" {

// row_window of n raw bounds.
void ws_row_window(int n, const int64_t* raw_start, const int64_t* raw_end, int64_t num_keys,
                   int64_t* out) {
  for (int i = 0; i < n; ++i) {
    const KeyRange w = row_window(raw_start[i], raw_end[i], num_keys);
    out[2 * i] = w.begin;
    out[2 * i + 1] = w.end;
  }
}

// One block of n rows with raw bounds, priced by model m = {num_keys, tile_keys, on_grid,
// start_overhead, fill_unit_keys}. out: union (BlockUnion) begin, end, empty; union
// (BlockUnion<int32_t>, empty_within) begin, end, empty; span first_key, tiles, covered_end,
// first_tile; fill_keys; price overhead, compute, fill, compute_total, total; total of the
// KeyRange overload.
void ws_block(const int64_t* m, int n, const int64_t* raw_start, const int64_t* raw_end,
              int64_t* out) {
  const CostModel model = model_of(m);
  BlockUnion<> u = BlockUnion<>::empty_within(model.num_keys);
  BlockUnion<int32_t> u32 = BlockUnion<int32_t>::empty_within(model.num_keys);
  for (int i = 0; i < n; ++i) {
    const KeyRange w = row_window(raw_start[i], raw_end[i], model.num_keys);
    u.add(w);
    u32.add(w);
  }
  const KeyRange r = u.range(), r32 = u32.range();
  const TileSpan span = tile_span(model, r);
  const BlockPrice price = price_block(model, span);
  const int64_t v[] = {r.begin, r.end, u.empty(), r32.begin, r32.end, u32.empty(),
                       span.first_key, span.tiles, span.covered_end, span.first_tile(model.tile_keys),
                       fill_keys(model, span), price.overhead, price.compute, price.fill,
                       price.compute_total(), price.total(), price_block(model, r).total()};
  for (unsigned i = 0; i < sizeof v / sizeof v[0]; ++i) out[i] = v[i];
}

// The span of union [begin, end) under model m; fill_key(span, f) for f < min(fill_keys, cap).
// Returns fill_keys.
int64_t ws_fill(const int64_t* m, int64_t begin, int64_t end, int64_t* span_out, int64_t cap,
                int64_t* keys_out) {
  const CostModel model = model_of(m);
  const TileSpan span = tile_span(model, KeyRange{begin, end});
  span_out[0] = span.first_key;
  span_out[1] = span.tiles;
  span_out[2] = span.covered_end;
  const int64_t count = fill_keys(model, span);
  for (int64_t f = 0; f < count && f < cap; ++f) keys_out[f] = fill_key(span, f);
  return count;
}

// segment_parts of price {overhead, compute, fill} for the n - 1 unit ranges [cuts[i], cuts[i+1]).
void ws_segment_parts(int64_t overhead, int64_t compute, int64_t fill, int n, const int64_t* cuts,
                      int64_t* out) {
  const BlockPrice price{overhead, compute, fill};
  for (int i = 0; i + 1 < n; ++i) {
    const SegmentParts p = segment_parts(price, cuts[i], cuts[i + 1]);
    out[4 * i] = p.tile_begin;
    out[4 * i + 1] = p.tile_end;
    out[4 * i + 2] = p.fill_begin;
    out[4 * i + 3] = p.fill_end;
  }
}

// share_begin(total, parts, p) for p in [0, parts].
void ws_shares(int64_t total, int64_t parts, int64_t* out) {
  for (int64_t p = 0; p <= parts; ++p) out[p] = share_begin(total, parts, p);
}

// The paged op: keys of every row (paged_row_keys), of every batch (paged_batch_keys) of `lens`
// ([batches] or, when per_row, [batches][next_n]) under key_limit, and paged_unit(u) for u in [0, total]
// over the batches' unit prefix sums as int64 and as int32 (out_units: batch, block, batch32, block32).
// Returns the total. batches <= 64.
int64_t ws_paged(const int32_t* lens, int64_t batches, int64_t next_n, int per_row, int64_t key_limit,
                 int64_t block_kv, int64_t* out_row_keys, int64_t* out_batch_keys, int64_t* out_units) {
  int64_t total = 0;
  int64_t ends[64];
  int32_t ends32[64];
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t j = 0; j < next_n; ++j)
      out_row_keys[b * next_n + j] =
          paged_row_keys(lens[per_row ? b * next_n + j : b], next_n, j, per_row != 0, key_limit);
    out_batch_keys[b] = paged_batch_keys(lens, b, next_n, per_row != 0, key_limit);
    total += ceil_div(out_batch_keys[b], block_kv);
    ends[b] = total;
    ends32[b] = static_cast<int32_t>(total);
  }
  for (int64_t u = 0; u <= total; ++u) {
    const PagedUnit a = paged_unit(ends, batches, u), c = paged_unit(ends32, batches, u);
    out_units[4 * u] = a.batch;
    out_units[4 * u + 1] = a.block;
    out_units[4 * u + 2] = c.batch;
    out_units[4 * u + 3] = c.block;
  }
  return total;
}

}  // extern "C"
"""

i64 = ctypes.c_int64
i64p = ctypes.POINTER(i64)


@lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    source = Path(tempfile.gettempdir()) / "aiter_gfx950_hosttests" / (
        "work_scheduler_shim_" + hashlib.sha256(SHIM.encode()).hexdigest()[:16] + ".cpp")
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.exists():
        source.write_text(SHIM)
    so = ctypes.CDLL(str(hostlib.build_library("work_scheduler_shim", [source], headers=[HEADER])))
    so.ws_row_window.argtypes = [ctypes.c_int, i64p, i64p, i64, i64p]
    so.ws_block.argtypes = [i64p, ctypes.c_int, i64p, i64p, i64p]
    so.ws_fill.argtypes = [i64p, i64, i64, i64p, i64, i64p]
    so.ws_fill.restype = i64
    so.ws_segment_parts.argtypes = [i64, i64, i64, ctypes.c_int, i64p, i64p]
    so.ws_shares.argtypes = [i64, i64, i64p]
    so.ws_paged.argtypes = [ctypes.POINTER(ctypes.c_int32), i64, i64, ctypes.c_int, i64, i64, i64p, i64p, i64p]
    so.ws_paged.restype = i64
    for f in (so.ws_row_window, so.ws_block, so.ws_segment_parts, so.ws_shares):
        f.restype = None
    return so


def arr(values):
    return (i64 * max(len(values), 1))(*values)


# ------------------------------------------------------------------------------------------------
# Python statements of the helpers.
# ------------------------------------------------------------------------------------------------
def clamp(x, n):
    return min(max(x, 0), n)


def ref_union(windows):
    live = [(b, e) for b, e in windows if b < e]
    return (min(b for b, _ in live), max(e for _, e in live)) if live else (0, 0)


def ref_span(num_keys, tile_keys, on_grid, union):
    begin, end = union
    if begin >= end:
        return 0, 0, 0
    first = begin // tile_keys * tile_keys if on_grid else begin
    tiles = -(-(end - first) // tile_keys)
    return first, tiles, min(first + tiles * tile_keys, num_keys)


def ref_price(model, span):
    num_keys, tile_keys, on_grid, overhead, fill_unit = model
    first, tiles, covered_end = span
    fill_keys = num_keys - (covered_end - first)
    fill = -(-fill_keys // fill_unit) if fill_unit > 0 else 0
    return fill_keys, (overhead if tiles > 0 else 0), tiles, fill


def block(model, raw):
    out = (i64 * 17)()
    lib().ws_block(arr(model), len(raw), arr([s for s, _ in raw]), arr([e for _, e in raw]), out)
    return list(out)


def check_block(model, raw):
    num_keys, tile_keys, on_grid, overhead, fill_unit = model
    got = block(model, raw)
    union = ref_union([(clamp(s, num_keys), clamp(e, num_keys)) for s, e in raw])
    assert tuple(got[0:2]) == union and got[2] == (union == (0, 0)), (model, raw, got)
    assert tuple(got[3:5]) == union and got[5] == got[2], ("BlockUnion<int32_t> differs from BlockUnion<>", model, raw, got)
    span = ref_span(num_keys, tile_keys, on_grid, union)
    assert tuple(got[6:9]) == span and got[9] == span[0] // tile_keys, (model, raw, got)
    if union[0] < union[1]:  # the fewest tiles that cover the union, inside [0, N]
        first, tiles, covered_end = span
        assert first <= union[0] and first + tiles * tile_keys >= union[1] and covered_end <= num_keys
        assert first + (tiles - 1) * tile_keys < union[1]
        assert not on_grid or first % tile_keys == 0
    fill_keys, p_overhead, p_compute, p_fill = ref_price(model, span)
    assert got[10] == fill_keys
    assert got[11:14] == [p_overhead, p_compute, p_fill], (model, raw, got)
    assert got[14] == p_overhead + p_compute and got[15] == got[16] == p_overhead + p_compute + p_fill
    return got


def check_segment_parts(overhead, compute, fill, cuts):
    """Consecutive unit ranges [c_i, c_i+1) covering [0, total): their tile ranges concatenate to
    [0, compute) and their fill ranges to [0, fill), in order; each is empty or inside its part."""
    out = (i64 * (4 * len(cuts)))()
    lib().ws_segment_parts(overhead, compute, fill, len(cuts), arr(cuts), out)
    tiles_at, fill_at = 0, 0
    for i in range(len(cuts) - 1):
        tb, te, fb, fe = out[4 * i: 4 * i + 4]
        lo, hi = cuts[i], cuts[i + 1]
        # the statement: units [overhead, overhead + compute) are tiles, the rest after them fill units
        assert (tb, te) == (clamp(lo - overhead, compute), clamp(hi - overhead, compute)), (overhead, compute, fill, cuts)
        assert (fb, fe) == (max(lo - overhead - compute, 0), max(hi - overhead - compute, 0))
        if te > tb:
            assert tb == tiles_at
            tiles_at = te
        if fe > fb:
            assert fb == fill_at
            fill_at = fe
    assert tiles_at == compute and fill_at == fill


def check_shares(total, parts):
    out = (i64 * (parts + 1))()
    lib().ws_shares(total, parts, out)
    bounds = list(out)
    assert bounds == [total * p // parts for p in range(parts + 1)]
    assert bounds[0] == 0 and bounds[-1] == total
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1 and sum(sizes) == total


# ------------------------------------------------------------------------------------------------
# Tests.
# ------------------------------------------------------------------------------------------------
def test_row_window_clamps_raw_bounds():
    extremes = [INT32_MIN, INT32_MIN + 1, -(2**25), -1, 0, 1, 2, 6, 7, 8, 9, 100, 2**25, INT32_MAX - 1,
                INT32_MAX, 2**31, 2**35, -(2**35), INT64_MIN, INT64_MAX]
    for num_keys in (0, 1, 7, 8, 2**25 - 1, INT32_MAX, 2**40):
        pairs = [(s, e) for s in extremes for e in extremes]
        out = (i64 * (2 * len(pairs)))()
        lib().ws_row_window(len(pairs), arr([s for s, _ in pairs]), arr([e for _, e in pairs]), num_keys, out)
        for i, (s, e) in enumerate(pairs):
            begin, end = out[2 * i], out[2 * i + 1]
            assert (begin, end) == (clamp(s, num_keys), clamp(e, num_keys)), (s, e, num_keys)
            assert 0 <= begin <= num_keys and 0 <= end <= num_keys
            if s >= e:  # an inverted or empty raw window stays empty
                assert begin >= end


def test_block_union_over_empty_and_nonempty_rows():
    model = [100, 8, 0, 2, 0]
    check_block(model, [])                                  # no rows
    check_block([0, 8, 0, 2, 0], [])                        # no keys at all
    check_block([0, 8, 0, 2, 0], [(-3, 5), (0, 0)])
    assert block(model, [(5, 5), (7, 3), (-4, -1), (120, 130)])[0:3] == [0, 0, 1]  # all empty
    got = check_block(model, [(5, 5), (10, 20), (200, 300), (3, 12), (-9, 0)])
    assert got[0:2] == [3, 20]                              # empty rows do not widen it
    got = check_block(model, [(-50, 150)])
    assert got[0:2] == [0, 100]
    # BlockUnion<int32_t> equals BlockUnion at int32 extremes of the raw bounds
    check_block([INT32_MAX, 64, 0, 2, 512], [(INT32_MIN, INT32_MAX), (5, 6)])
    check_block([2**25 - 1, 128, 1, 2, 0], [(INT32_MAX, INT32_MIN), (2**25 - 2, INT32_MAX)])


@pytest.mark.parametrize("on_grid", [False, True], ids=["off_grid", "on_grid"])
def test_tile_span_and_fill_keys_exhaustive(on_grid):
    """Every union [b, e) of every N <= 20 (and the empty one), several tile sizes: the span
    covers the union with the fewest tiles, and the fill keys are exactly the other keys of
    [0, N), increasing."""
    cap = 64
    keys = (i64 * cap)()
    span = (i64 * 3)()
    cases = 0
    for num_keys in range(1, 21):
        unions = [(0, 0)] + [(b, e) for b in range(num_keys) for e in range(b + 1, num_keys + 1)]
        for tile_keys in (1, 2, 3, 5, 8, 64):
            model = arr([num_keys, tile_keys, int(on_grid), 2, 1])
            for union in unions:
                count = lib().ws_fill(model, union[0], union[1], span, cap, keys)
                first, tiles, covered_end = span
                assert (first, tiles, covered_end) == ref_span(num_keys, tile_keys, on_grid, union)
                covered = set(range(first, covered_end))
                assert set(range(*union)) <= covered <= set(range(num_keys))
                fill = list(keys[:count])
                assert count == num_keys - len(covered)
                assert fill == sorted(set(range(num_keys)) - covered), (num_keys, tile_keys, union, fill)
                cases += 1
    assert cases == 6 * sum(1 + n * (n + 1) // 2 for n in range(1, 21))


def test_price_totals():
    # N = 1000, 64-key tiles off the grid, overhead 2, 100-key fill units
    got = check_block([1000, 64, 0, 2, 100], [(100, 230)])
    assert got[6:9] == [100, 3, 292] and got[10] == 1000 - 192 and got[11:16] == [2, 3, 9, 5, 14]
    # on the grid the first tile starts at 64
    got = check_block([1000, 64, 1, 2, 100], [(100, 230)])
    assert got[6:9] == [64, 3, 256] and got[10] == 1000 - 192
    # no fill without fill units (clean_logits off), no overhead without tiles
    assert check_block([1000, 64, 0, 2, 0], [(100, 230)])[13] == 0
    got = check_block([1000, 64, 0, 2, 100], [(5, 5)])
    assert got[11:16] == [0, 0, 10, 0, 10]
    # the last tile stops at N
    got = check_block([70, 64, 0, 2, 16], [(10, 70)])
    assert got[6:9] == [10, 1, 70] and got[10] == 10 and got[13] == 1


def test_segment_parts_and_shares_small():
    for overhead in (0, 2):
        for compute in (0, 1, 3):
            for fill in (0, 1, 4):
                total = overhead + compute + fill
                for parts in range(1, 7):
                    check_shares(total, parts)
                    check_segment_parts(overhead, compute, fill,
                                        [total * p // parts for p in range(parts + 1)])
    check_shares(0, 5)
    check_shares(2**40 + 3, 256)


def test_random_blocks_property():
    """Tens of thousands of random blocks through the whole chain: windows, union (both types),
    span, fill keys, price, the segments of random cuts of its units, and even shares."""
    rng = random.Random(20261201)
    specials = [INT32_MIN, -1, 0, 1, INT32_MAX]
    cases = 0
    for _ in range(25000):
        num_keys = rng.choice([1, 2, 7, 64, 65, 1000, rng.randint(1, 5000), rng.randint(1, 2**25 - 1)])
        tile_keys = rng.choice([1, 3, 32, 64, 128, rng.randint(1, 300)])
        model = [num_keys, tile_keys, rng.randint(0, 1), rng.choice([0, 1, 2, 5]),
                 rng.choice([0, 0, 1, 7, 512, rng.randint(1, 2000)])]

        def bound():
            r = rng.random()
            if r < 0.1:
                return rng.choice(specials + [num_keys, num_keys + 1])
            if r < 0.2:
                return rng.randint(-num_keys, 2 * num_keys)
            return rng.randint(0, num_keys)

        raw = [(bound(), bound()) for _ in range(rng.choice([0, 1, 2, 4, 16, 32]))]
        got = check_block(model, raw)
        overhead, compute, fill = got[11:14]
        total = overhead + compute + fill
        inner = sorted(rng.randint(0, total) for _ in range(rng.randint(0, 5)))
        check_segment_parts(overhead, compute, fill, [0] + inner + [total])
        parts = rng.choice([1, 2, 3, 7, 256, rng.randint(1, 400)])
        check_shares(total, parts)
        if parts <= 16:  # the units of a block cut by the shares of a fixed grid
            check_segment_parts(overhead, compute, fill, [total * p // parts for p in range(parts + 1)])
        cases += 1
    assert cases == 25000


def test_paged_row_keys_batch_keys_and_units():
    """Row j of a batch sees lens[b] - next_n + j + 1 keys ([B] lens) or lens[b, j] ([B, next_n]), clamped
    to [0, key_limit]; a batch's keys are its rows' most; unit u lies in the first batch whose units
    reach past it, at block u - (units before that batch); u = total is (B, 0)."""
    rng = random.Random(11)
    for _ in range(300):
        batches, next_n = rng.randint(0, 12), rng.randint(1, 4)
        per_row = rng.random() < 0.5
        block_kv, key_limit = rng.randint(1, 9), rng.choice([5, 40, 1000])
        lens = [rng.choice([rng.randint(-6, 60), 0]) for _ in range(batches * (next_n if per_row else 1))]
        rows_out = (i64 * max(1, batches * next_n))()
        batch_out = (i64 * max(1, batches))()
        units_out = (i64 * (4 * (batches * -(-key_limit // block_kv) + 1)))()
        lens_c = (ctypes.c_int32 * max(1, len(lens)))(*lens)
        total = lib().ws_paged(lens_c, batches, next_n, int(per_row), key_limit, block_kv, rows_out, batch_out,
                               units_out)
        want_rows = []
        for b in range(batches):
            for j in range(next_n):
                keys = lens[b * next_n + j] if per_row else lens[b] - next_n + j + 1
                want_rows.append(min(max(keys, 0), key_limit))
        assert list(rows_out[: batches * next_n]) == want_rows
        want_batch = [max(want_rows[b * next_n:(b + 1) * next_n]) for b in range(batches)]
        assert list(batch_out[:batches]) == want_batch
        units = [-(-k // block_kv) for k in want_batch]
        assert total == sum(units)
        want_units = [(b, blk) for b, n in enumerate(units) for blk in range(n)] + [(batches, 0)]
        got = [tuple(units_out[4 * u: 4 * u + 2]) for u in range(total + 1)]
        got32 = [tuple(units_out[4 * u + 2: 4 * u + 4]) for u in range(total + 1)]
        assert got == want_units and got32 == want_units
