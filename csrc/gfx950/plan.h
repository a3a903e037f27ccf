// gfx950 fp8_mqa_logits: the work plan on the device. Which rows a block holds, what the block
// costs, and which units of which blocks a workgroup processes.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//   [s_m, e_m) = row_window(ks[m], ke[m], N) (common/work_scheduler.h); -inf elsewhere if clean.
//
// Work is counted in units (cost_model.h): per block, the scheduler's start overhead, one unit per
// compute stage, one per -inf fill unit. Two plans, one walker:
//   balanced (default, M <= plan_rows): one workgroup per CU. Every workgroup builds the same plan
//     in LDS from ks/ke: the rows with a non-empty window first (stable, a 64-row ballot per chunk
//     and a prefix over chunks), then blocks of block_rows plan positions, each priced from the
//     union of its windows, and a prefix sum of the prices; workgroup g of G takes units
//     [share_begin(T, G, g), share_begin(T, G, g + 1)) of the total T. Rows with empty or past-end
//     windows therefore cost nothing, whatever the window layout (multi-request chunks too).
//   fixed grid (the caller's fixed_grid_splits, or M above the plan's capacity): grid (blocks,
//     splits), natural rows, block x taken in reverse; workgroup (x, y) takes share y of its block.
// Layouts touched (LdsLayout, layout.h): row_windows, nonempty_mask, chunk_nonempty_prefix,
// block_units_prefix, segment_rows.
// Why here: the pure part (tables -> rows, unions, shares, the segment walk) is host + device, so
// the host emulation (dev/gfx950/emulator.cpp) runs this very code on the tables it builds;
// the device part (ballots, scans, LDS) follows under __HIP__.
#pragma once
#include <stdint.h>

#include "common/work_scheduler.h"
#include "gfx950/cost_model.h"
#include "gfx950/geometry.h"

namespace aiter {
namespace gfx950 {

// ------------------------------------------------------------------------------------------------
// Balanced plan tables: rows are grouped in chunks of 64 (one ballot); bit i of nonempty_mask[c]
// says whether row 64 c + i has a non-empty window, chunk_nonempty_prefix[c] counts the non-empty
// rows before chunk c (entry [chunks] all of them). Plan position p < nonempty_rows is the p-th
// non-empty row; p >= nonempty_rows the (p - nonempty_rows)-th empty one.
// ------------------------------------------------------------------------------------------------
struct PlanTables {
  const uint64_t* nonempty_mask;
  const int* chunk_nonempty_prefix;
  int rows;  // M
};

GFX950_FN int plan_chunks(int rows) { return (rows + kLanes - 1) / kLanes; }
GFX950_FN uint64_t chunk_valid_mask(int64_t rows, int chunk) {
  const int64_t rows_left = rows - int64_t(chunk) * kLanes;
  return rows_left >= kLanes ? ~0ull : (rows_left <= 0 ? 0ull : ((1ull << rows_left) - 1));
}
// Bit index of the k-th (0-based) set bit of mask; mask must have more than k set bits.
GFX950_FN int select_bit(uint64_t mask, int k) {
  for (int i = 0; i < k; ++i) mask &= mask - 1;
  return __builtin_ctzll(mask);
}

// Largest chunk c with chunk_nonempty_prefix[c] <= position (position < nonempty rows).
GFX950_HD inline int chunk_of_nonempty(const PlanTables& plan, int position) {
  const int* prefix = plan.chunk_nonempty_prefix;
  int lo = 0, hi = plan_chunks(plan.rows) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= position) lo = mid; else hi = mid - 1;
  }
  return lo;
}
// Largest chunk c with (empty rows before c) <= k.
GFX950_HD inline int chunk_of_empty(const PlanTables& plan, int k) {
  const int* prefix = plan.chunk_nonempty_prefix;
  int lo = 0, hi = plan_chunks(plan.rows) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (mid * kLanes - prefix[mid] <= k) lo = mid; else hi = mid - 1;
  }
  return lo;
}
// Natural row at plan position p: non-empty rows first (stable), then empty rows; -1 past M.
GFX950_HD inline int plan_row(const PlanTables& plan, int position) {
  if (position >= plan.rows) return -1;
  const int chunks = plan_chunks(plan.rows);
  const int nonempty_rows = plan.chunk_nonempty_prefix[chunks];
  if (position < nonempty_rows) {
    const int c = chunk_of_nonempty(plan, position);
    return c * kLanes + select_bit(plan.nonempty_mask[c], position - plan.chunk_nonempty_prefix[c]);
  }
  const int k = position - nonempty_rows;
  const int c = chunk_of_empty(plan, k);
  const uint64_t empties = ~plan.nonempty_mask[c] & chunk_valid_mask(plan.rows, c);
  return c * kLanes + select_bit(empties, k - (c * kLanes - plan.chunk_nonempty_prefix[c]));
}

// The scheduler's block union, kept in 32 bits: keys are below 2^25 (kMaxKeys).
using KeyUnion = scheduler::BlockUnion<int>;

// Union of the windows of plan positions [first, first + count), all non-empty rows
// (first + count <= nonempty rows), walking the chunk masks. window_of(row) -> its KeyRange.
template <class WindowOf>
GFX950_HD inline KeyUnion positions_union(const PlanTables& plan, int num_keys, int first,
                                          int count, WindowOf window_of) {
  KeyUnion keys = KeyUnion::empty_within(num_keys);
  if (count > 0) {
    int c = chunk_of_nonempty(plan, first);
    uint64_t mask = plan.nonempty_mask[c];
    for (int k = first - plan.chunk_nonempty_prefix[c]; k > 0; --k) mask &= mask - 1;
    for (int i = 0; i < count; ++i) {
      while (mask == 0) mask = plan.nonempty_mask[++c];
      keys.add(window_of(c * kLanes + __builtin_ctzll(mask)));
      mask &= mask - 1;
    }
  }
  return keys;
}

// ------------------------------------------------------------------------------------------------
// A block's rows and facts.
// ------------------------------------------------------------------------------------------------
// Block position p's row: the plan's (balanced) or the natural one (fixed grid); past M, row -1
// and an empty window.
struct SegmentRow {
  int row, begin, end;
};
GFX950_HD inline SegmentRow segment_row(const PlanTables& plan, bool balanced, const int32_t* ks,
                                        const int32_t* ke, int num_keys, int position) {
  const int row = balanced ? plan_row(plan, position) : (position < plan.rows ? position : -1);
  SegmentRow r{row, 0, 0};
  if (row >= 0) {
    const scheduler::KeyRange window = scheduler::row_window(ks[row], ke[row], num_keys);
    r.begin = int(window.begin);
    r.end = int(window.end);
  }
  return r;
}

// Over a block's rows (row_at(i) -> SegmentRow, i < block_rows): the union of the windows, and
// the latest begin / earliest end of the present rows. A stage is clean (no compare/select) when
// it lies in [max_begin, min_end): every present row covers it. A row with an empty window makes
// every stage masked, which is why the balanced plan sorts such rows out of non-empty blocks.
struct BlockBounds {
  KeyUnion keys;
  int max_begin, min_end;
};
template <class RowAt>
GFX950_HD inline BlockBounds block_bounds(int block_rows, int num_keys, RowAt row_at) {
  BlockBounds bounds{KeyUnion::empty_within(num_keys), 0, num_keys};
  for (int i = 0; i < block_rows; ++i) {
    const SegmentRow r = row_at(i);
    if (r.row < 0) continue;
    bounds.max_begin = r.begin > bounds.max_begin ? r.begin : bounds.max_begin;
    bounds.min_end = r.end < bounds.min_end ? r.end : bounds.min_end;
    bounds.keys.add(scheduler::KeyRange{r.begin, r.end});
  }
  return bounds;
}

// What the -inf fill of a block needs (fill.h): its rows' parts [0, first_key) and
// [covered_end, N), and its number of fill units.
struct FillFacts {
  int first_key, covered_end, fill_units;
};

// What every thread knows of the block of a segment (uniform): the scheduler's tile span and price
// of the block's union, cast to the kernel's 32-bit ints where they are computed (keys are below
// 2^25, units below 2^31), and the clean-stage bounds.
struct BlockFacts {
  int first_key;     // stage i holds keys [first_key + i stage_keys, + stage_keys)
  int stages;        // compute stages (the scheduler's tiles)
  int covered_end;   // the stages write keys [first_key, covered_end)
  int fill_keys;     // the -inf columns per row outside them (filled when clean_logits)
  int overhead;      // the price: start overhead, stages, fill units
  int fill_units;
  int max_begin, min_end;  // clean stages lie in [max_begin, min_end)
  GFX950_HD scheduler::TileSpan span() const {
    return scheduler::TileSpan{first_key, stages, covered_end};
  }
  GFX950_HD scheduler::BlockPrice price() const {
    return scheduler::BlockPrice{overhead, stages, fill_units};
  }
  GFX950_HD int units() const { return overhead + stages + fill_units; }
  GFX950_HD FillFacts fill() const { return FillFacts{first_key, covered_end, fill_units}; }
};
GFX950_HD inline BlockFacts block_facts(Geometry geometry, int num_keys, bool clean,
                                        scheduler::KeyRange keys, int max_begin, int min_end) {
  const scheduler::CostModel model = cost_model(geometry, num_keys, clean);
  const scheduler::TileSpan span = scheduler::tile_span(model, keys);
  const scheduler::BlockPrice price = scheduler::price_block(model, span);
  BlockFacts block;
  block.first_key = int(span.first_key);
  block.stages = int(span.tiles);
  block.covered_end = int(span.covered_end);
  block.fill_keys = int(scheduler::fill_keys(model, span));
  block.overhead = int(price.overhead);
  block.fill_units = int(price.fill);
  block.max_begin = max_begin;
  block.min_end = min_end;
  return block;
}

// Stages [begin, end) of [stage_begin, stage_end) run clean (unmasked). The clean stages of a
// block form one run [first, last]; a clean body also finishes the previous stage's deferred
// tails, so it needs that stage clean too (or to be the segment's first): masked head, clean run,
// masked tail.
struct StageRange {
  int begin, end;
};
GFX950_HD inline StageRange clean_stages(const BlockFacts& block, int stage_keys, int stage_begin,
                                         int stage_end) {
  const int first = block.max_begin > block.first_key
                        ? (block.max_begin - block.first_key + stage_keys - 1) / stage_keys
                        : 0;
  const int last = block.min_end - block.first_key >= stage_keys
                       ? (block.min_end - block.first_key - stage_keys) / stage_keys
                       : -1;
  const int head_end = stage_begin >= first ? stage_begin : first + 1;
  const int begin_unclamped = head_end > stage_begin ? head_end : stage_begin;
  const int begin = begin_unclamped < stage_end ? begin_unclamped : stage_end;
  const int end_unclamped = last + 1 > begin ? last + 1 : begin;
  return StageRange{begin, end_unclamped < stage_end ? end_unclamped : stage_end};
}

// ------------------------------------------------------------------------------------------------
// Shares and segments.
// ------------------------------------------------------------------------------------------------
struct UnitRange {
  int begin, end;
};
// Part `part` of `parts` of `total` units: the scheduler's contiguous, even share.
GFX950_HD inline UnitRange unit_share(int total, int parts, int part) {
  return UnitRange{int(scheduler::share_begin(total, parts, part)),
                   int(scheduler::share_begin(total, parts, part + 1))};
}
// The stages and fill units of a block's units [unit_begin, unit_end) (cost_model.h's order).
GFX950_HD inline scheduler::SegmentParts segment_parts(const BlockFacts& block, int unit_begin,
                                                       int unit_end) {
  return block_parts(block.price(), unit_begin, unit_end);
}

// When a segment with stages writes its fill units (geometry.fill_between_stages): spread evenly
// over its stages, fill unit k of its F before stage k S / F (of its S, rounded down), so the
// first goes before the first stage and every one before the last. The kernel cuts the segment's
// stage runs at those points (kernel.h).
struct FillSchedule {
  int stage_begin, stage_end;  // the segment's stages
  int fill_begin, fill_end;    // its fill units
  // Fill units due before stage `stage` (in [stage_begin, stage_end]): those k with
  // k S / F <= stage - stage_begin, i.e. k S < (stage - stage_begin + 1) F; all of them at the end.
  GFX950_HD int due_before(int stage) const {
    const int64_t stages = stage_end - stage_begin, fills = fill_end - fill_begin;
    if (stage >= stage_end || stages == 0) return fill_end;
    const int64_t due = ((stage - stage_begin + 1) * fills + stages - 1) / stages;
    return fill_begin + int(due < fills ? due : fills);
  }
  // The first stage after `stage` before which more fill units are due (stage_end: none).
  GFX950_HD int next_break(int stage) const {
    const int64_t stages = stage_end - stage_begin, fills = fill_end - fill_begin;
    const int64_t next = due_before(stage) - fill_begin;
    return next < fills ? stage_begin + int(next * stages / fills) : stage_end;
  }
};
// Fixed grid: the block workgroup x takes.
GFX950_FN int fixed_grid_block(int blocks, int x, bool reverse) {
  return reverse ? blocks - 1 - x : x;
}

// Largest block b with prefix_at(b) <= unit (prefix_at(0) = 0, non-decreasing).
template <class PrefixAt>
GFX950_HD inline int block_of_unit(int blocks, int unit, PrefixAt prefix_at) {
  int lo = 0, hi = blocks - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix_at(mid) <= unit) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The segments of a workgroup's units: visit(b, u_begin, u_end) with block-relative units.
// Balanced: every block whose units [prefix_at(b), prefix_at(b + 1)) overlap `units`. Fixed grid:
// units of its one block `fixed_block` (prefix_at is not called).
template <class PrefixAt, class Visit>
GFX950_HD inline void for_each_segment(bool balanced, int blocks, int fixed_block, UnitRange units,
                                       PrefixAt prefix_at, Visit visit) {
  int b = balanced ? block_of_unit(blocks, units.begin, prefix_at) : fixed_block;
  for (int u = units.begin; u < units.end && b < blocks; ++b) {
    const int base = balanced ? prefix_at(b) : 0;
    const int next = balanced ? prefix_at(b + 1) : units.end;
    if (next > u) visit(b, u - base, (units.end < next ? units.end : next) - base);
    u = u > next ? u : next;
  }
}

}  // namespace gfx950
}  // namespace aiter

// ------------------------------------------------------------------------------------------------
// Device side: building the balanced plan and a block's row table in LDS.
// ------------------------------------------------------------------------------------------------
#if defined(__HIP__)
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

template <class V>
__device__ __forceinline__ PlanTables plan_tables(const Workgroup<V>& wg) {
  using Lds = LdsLayout<V>;
  return PlanTables{wg.template at<uint64_t>(Lds::nonempty_mask),
                    wg.template at<int>(Lds::chunk_nonempty_prefix), wg.args.M};
}

// All threads; every workgroup builds the identical plan.
template <class V>
__device__ void build_balanced_plan(const Workgroup<V>& wg, int blocks) {
  using Lds = LdsLayout<V>;
  const KernelArgs& args = wg.args;
  const int M = args.M, N = args.N;
  const int chunks = plan_chunks(M);
  uint64_t* nonempty_mask = wg.template at<uint64_t>(Lds::nonempty_mask);
  int* chunk_nonempty_prefix = wg.template at<int>(Lds::chunk_nonempty_prefix);
  int2* row_windows = wg.template at<int2>(Lds::row_windows);
  // Pass 1: clamp every row's window, remember it, ballot the non-empty rows per 64-row chunk.
  // Eight chunks per round keep eight loads in flight per wave.
  constexpr int kUnroll = 8;
  for (int c0 = wg.wave; c0 < chunks; c0 += kWaves * kUnroll) {
    int raw_start[kUnroll], raw_end[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = (c0 + u * kWaves) * kLanes + wg.lane;
      raw_start[u] = row < M ? args.ks[row] : 0;
      raw_end[u] = row < M ? args.ke[row] : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWaves;
      if (c >= chunks) break;
      const int row = c * kLanes + wg.lane;
      const scheduler::KeyRange window = scheduler::row_window(raw_start[u], raw_end[u], N);
      const uint64_t mask = __builtin_amdgcn_ballot_w64(row < M && !window.empty());
      if (row < M) row_windows[row] = make_int2(int(window.begin), int(window.end));
      if (wg.lane == 0) {
        nonempty_mask[c] = mask;
        chunk_nonempty_prefix[c] = __builtin_popcountll(mask);
      }
    }
  }
  sync_threads();
  if (wg.wave == 0) wave_scan_array(chunk_nonempty_prefix, chunks, wg.lane);
  sync_threads();
  // Pass 2: union of the non-empty windows of each block of positions, and its units.
  const int nonempty_rows = uniform(chunk_nonempty_prefix[chunks]);
  const PlanTables plan = plan_tables(wg);
  const scheduler::CostModel model = cost_model(V::geometry(), N, args.clean != 0);
  int* block_units_prefix = wg.template at<int>(Lds::block_units_prefix);
  for (int b = wg.tid; b < blocks; b += kThreads) {
    const int first = b * V::kGeometry.block_rows;
    const int count = min(V::kGeometry.block_rows, nonempty_rows - first);
    const scheduler::KeyRange keys = positions_union(plan, N, first, count, [&](int row) {
      const int2 window = row_windows[row];
      return scheduler::KeyRange{window.x, window.y};
    }).range();
    block_units_prefix[b] = int(scheduler::price_block(model, keys).total());
  }
  sync_threads();
  if (wg.wave == 0) wave_scan_array(block_units_prefix, blocks, wg.lane);
  sync_threads();
}

// Segment setup: the block's rows (natural row, begin, end) into LDS segment_rows, then its facts
// for every thread (uniform).
template <class V>
__device__ BlockFacts setup_block(const Workgroup<V>& wg, int block, bool balanced) {
  using Lds = LdsLayout<V>;
  const KernelArgs& args = wg.args;
  int4* rows = wg.template at<int4>(Lds::segment_rows);
  if (wg.tid < V::kGeometry.block_rows) {
    const SegmentRow r = segment_row(plan_tables(wg), balanced, args.ks, args.ke, args.N,
                                     block * V::kGeometry.block_rows + wg.tid);
    rows[wg.tid] = make_int4(r.row, r.begin, r.end, 0);
  }
  sync_threads();
  const BlockBounds bounds = block_bounds(V::kGeometry.block_rows, args.N, [&](int i) {
    const int4 r = rows[i];
    return SegmentRow{r.x, r.y, r.z};
  });
  const scheduler::KeyRange keys = bounds.keys.range();
  return block_facts(V::geometry(), args.N, args.clean != 0,
                     scheduler::KeyRange{uniform(int(keys.begin)), uniform(int(keys.end))},
                     uniform(bounds.max_begin), uniform(bounds.min_end));
}

}  // namespace gfx950
}  // namespace aiter
#endif  // __HIP__
