// The one work scheduler of fp8_mqa_logits and fp8_paged_mqa_logits, shared by every backend (CPU,
// sm90, gfx950) and by the gfx950 host emulation. Host + device, torch-free, allocation-free:
// everything here is a pure function of the row bounds (the paged op's: of the context lengths), so
// every CTA / workgroup / thread that evaluates it agrees. The paged op's terms are at the end.
//
//   window  the keys [begin, end) row m sees: ks[m], ke[m] clamped to [0, N]; empty when begin >= end.
//   block   consecutive query rows one worker computes together (each backend sizes its blocks).
//   union   the smallest key range that holds every non-empty window of a block; empty when none.
//   tile    tile_keys consecutive keys, the backend's unit of compute (sm90: a 64-key K tile on the
//           grid n = 64 t; gfx950: a stage of 64 or 128 keys counted from the union's begin).
//   price   what a block costs, in tiles: a start overhead when it computes, its compute tiles, and
//           with clean_logits its fill units (the -inf columns outside the covered keys).
//   share   part p of P of a price total: [total p / P, total (p + 1) / P), contiguous and even.
//
// A backend prices each block with a CostModel, takes prefix sums of the prices (a parallel scan on
// a GPU, a loop on the host) and walks its share; the helpers below say which keys a tile or a fill
// unit of a block stands for, so the planner, the compute loop and the -inf fill always agree.
#pragma once
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define AITER_SCHED_FN __host__ __device__ inline
#else
#define AITER_SCHED_FN inline
#endif

namespace aiter {
namespace scheduler {

AITER_SCHED_FN int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A range of keys [begin, end); empty when begin >= end.
struct KeyRange {
  int64_t begin;
  int64_t end;
  AITER_SCHED_FN bool empty() const { return begin >= end; }
  AITER_SCHED_FN int64_t size() const { return empty() ? 0 : end - begin; }
};

AITER_SCHED_FN int64_t clamp_bound(int64_t bound, int64_t num_keys) {
  return bound < 0 ? 0 : (bound > num_keys ? num_keys : bound);
}

// Row m's window from its raw bounds: negative, past-N and inverted bounds are all legal.
AITER_SCHED_FN KeyRange row_window(int64_t raw_start, int64_t raw_end, int64_t num_keys) {
  return KeyRange{clamp_bound(raw_start, num_keys), clamp_bound(raw_end, num_keys)};
}

AITER_SCHED_FN KeyRange intersect(KeyRange a, KeyRange b) {
  return KeyRange{a.begin > b.begin ? a.begin : b.begin, a.end < b.end ? a.end : b.end};
}

// The union of a block's non-empty windows, accumulated one row at a time from empty_within(N).
// Empty rows do not widen it; a block of empty rows has the empty union {0, 0}. Int may be narrower
// than int64_t for a backend whose per-row loops stay in 32-bit registers (a 64-bit min/max costs a
// GPU 2-3 instructions); the empty union's lo is N rather than the largest Int, so every bound is a
// key and no constant of its own occupies a register.
template <class Int = int64_t>
struct BlockUnion {
  Int lo;
  Int hi;
  AITER_SCHED_FN static BlockUnion empty_within(int64_t num_keys) { return BlockUnion{Int(num_keys), Int(0)}; }
  AITER_SCHED_FN void add(KeyRange window) {
    if (window.empty()) return;
    lo = Int(window.begin) < lo ? Int(window.begin) : lo;
    hi = Int(window.end) > hi ? Int(window.end) : hi;
  }
  AITER_SCHED_FN bool empty() const { return hi <= lo; }
  AITER_SCHED_FN KeyRange range() const { return empty() ? KeyRange{0, 0} : KeyRange{lo, hi}; }
};

// How a backend prices a block.
struct CostModel {
  int64_t num_keys;         // N
  int64_t tile_keys;        // keys per compute tile
  bool tiles_on_key_grid;   // tiles start at multiples of tile_keys (TMA boxes), else at the union's begin
  int64_t start_overhead;   // tiles charged for starting a block that computes (its Q and weight loads)
  int64_t fill_unit_keys;   // -inf columns per fill unit; 0 when clean_logits is off (no fill)
};

// The tiles a block computes: `tiles` of them from key `first_key`; keys [first_key, covered_end)
// are written by its compute (the last tile may stop at N).
struct TileSpan {
  int64_t first_key;
  int64_t tiles;
  int64_t covered_end;
  AITER_SCHED_FN int64_t first_tile(int64_t tile_keys) const { return first_key / tile_keys; }
};

AITER_SCHED_FN TileSpan tile_span(const CostModel& model, KeyRange block_union) {
  if (block_union.empty()) return TileSpan{0, 0, 0};
  const int64_t first = model.tiles_on_key_grid ? block_union.begin / model.tile_keys * model.tile_keys
                                                : block_union.begin;
  const int64_t tiles = ceil_div(block_union.end - first, model.tile_keys);
  const int64_t end = first + tiles * model.tile_keys;
  return TileSpan{first, tiles, end < model.num_keys ? end : model.num_keys};
}

// Keys outside a block's covered range, which clean_logits fills with -inf.
AITER_SCHED_FN int64_t fill_keys(const CostModel& model, const TileSpan& span) {
  return model.num_keys - (span.covered_end - span.first_key);
}

// The f-th key outside the covered range, f < fill_keys: left of it first, then right of it.
AITER_SCHED_FN int64_t fill_key(const TileSpan& span, int64_t f) {
  return f < span.first_key ? f : span.covered_end + (f - span.first_key);
}

struct BlockPrice {
  int64_t overhead;  // start overhead (0 when the block computes nothing)
  int64_t compute;   // compute tiles
  int64_t fill;      // fill units (0 without clean_logits)
  AITER_SCHED_FN int64_t compute_total() const { return overhead + compute; }
  AITER_SCHED_FN int64_t total() const { return overhead + compute + fill; }
};

AITER_SCHED_FN BlockPrice price_block(const CostModel& model, const TileSpan& span) {
  BlockPrice price;
  price.compute = span.tiles;
  price.overhead = span.tiles > 0 ? model.start_overhead : 0;
  price.fill = model.fill_unit_keys > 0 ? ceil_div(fill_keys(model, span), model.fill_unit_keys) : 0;
  return price;
}

AITER_SCHED_FN BlockPrice price_block(const CostModel& model, KeyRange block_union) {
  return price_block(model, tile_span(model, block_union));
}

// Part `part` of `parts` of `total` units: [share_begin(part), share_begin(part + 1)).
AITER_SCHED_FN int64_t share_begin(int64_t total, int64_t parts, int64_t part) {
  return total * part / parts;
}

// Where units [u_begin, u_end) of a block fall when its units are laid out as
// [overhead | compute tiles | fill units]: tiles [tile_begin, tile_end) and fill units
// [fill_begin, fill_end), each possibly empty.
struct SegmentParts {
  int64_t tile_begin, tile_end, fill_begin, fill_end;
};

AITER_SCHED_FN int64_t clamp_to(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

AITER_SCHED_FN SegmentParts segment_parts(const BlockPrice& price, int64_t u_begin, int64_t u_end) {
  const int64_t tiles_from = price.overhead, fill_from = price.overhead + price.compute;
  SegmentParts parts;
  parts.tile_begin = clamp_to(u_begin, tiles_from, fill_from) - tiles_from;
  parts.tile_end = clamp_to(u_end, tiles_from, fill_from) - tiles_from;
  parts.fill_begin = (u_begin > fill_from ? u_begin : fill_from) - fill_from;
  parts.fill_end = (u_end > fill_from ? u_end : fill_from) - fill_from;
  return parts;
}

// ---- The paged decode op (fp8_paged_mqa_logits) ------------------------------------------------------
//
//   row     (b, j): query token j of batch b (output row b * next_n + j).
//   keys    row (b, j) sees keys [0, keys): context_lens[b] - next_n + j + 1 with one length per batch,
//           context_lens[b, j] with one per row; at least 0, at most a key limit (max_context_len).
//   unit    (batch b, cache block i): b's keys [i * block_kv, (i + 1) * block_kv), for every row of b
//           at once (a block of K is read once for all of them). Batch b has
//           ceil(batch_keys / block_kv) units, batch_keys the most keys any row of b sees.
//   share   part p of P of all units, batches in order (share_begin above); it starts at the unit
//           paged_unit() finds. The metadata op stores each share's start as (batch, block).

// Keys row j of a batch sees, from its context length (lens_per_row: the row's own, else the batch's).
AITER_SCHED_FN int64_t paged_row_keys(int64_t context_len, int64_t next_n, int64_t j, bool lens_per_row,
                                      int64_t key_limit) {
  const int64_t keys = lens_per_row ? context_len : context_len - next_n + j + 1;
  return keys < 0 ? 0 : (keys > key_limit ? key_limit : keys);
}

// The most keys a row of batch b sees; context_lens is [batches] or, when lens_per_row, [batches][next_n].
template <class Int>
AITER_SCHED_FN int64_t paged_batch_keys(const Int* context_lens, int64_t b, int64_t next_n, bool lens_per_row,
                                        int64_t key_limit) {
  if (!lens_per_row) return paged_row_keys(context_lens[b], next_n, next_n - 1, false, key_limit);
  int64_t most = 0;
  for (int64_t j = 0; j < next_n; ++j) {
    const int64_t keys = paged_row_keys(context_lens[b * next_n + j], next_n, j, true, key_limit);
    most = keys > most ? keys : most;
  }
  return most;
}

// A unit: cache block `block` (counted from the batch's first key) of batch `batch`.
struct PagedUnit {
  int64_t batch;
  int64_t block;
};

// Where unit u falls, given unit_ends[b] = the units of batches 0..b (inclusive prefix sums): the
// first batch whose units reach past u (batches without units are passed over) and the block within
// it. u = the total gives {batches, 0}, the end.
template <class Int>
AITER_SCHED_FN PagedUnit paged_unit(const Int* unit_ends, int64_t batches, int64_t u) {
  int64_t lo = 0, hi = batches;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (int64_t(unit_ends[mid]) <= u)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo >= batches) return PagedUnit{batches, 0};
  return PagedUnit{lo, u - (lo > 0 ? int64_t(unit_ends[lo - 1]) : 0)};
}

}  // namespace scheduler
}  // namespace aiter
