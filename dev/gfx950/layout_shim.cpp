// extern "C" access to the gfx950 backend's host + device headers (geometry.h, layout.h, plan.h,
// launch_plan.h) for the Python host tests: the tests check the very functions the kernel compiles.
// A variant is named by (heads, small, head_dim) everywhere.
#include "common/work_scheduler.h"
#include "gfx950/cost_model.h"
#include "gfx950/geometry.h"
#include "gfx950/launch_plan.h"
#include "gfx950/layout.h"
#include "gfx950/plan.h"

using namespace aiter::gfx950;
namespace scheduler = aiter::scheduler;

namespace {
Geometry variant(int heads, int small, int head_dim) { return geometry_of(heads, small != 0, head_dim); }
}  // namespace

extern "C" {

// Geometry fields in declaration order (see struct Geometry).
int gfx950_geometry(int heads, int small, int head_dim, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  const int v[] = {g.heads, g.head_dim, g.steps, g.chunks_per_key, g.rows_per_tile, g.head_tiles,
                   g.rows_per_wave, g.chain_sets, g.pairs_per_wave, g.row_groups, g.key_groups,
                   g.block_rows, g.stage_keys, g.stage_bytes, g.dmas_per_wave, g.wave_part_bytes,
                   g.slot_bytes, g.prefetch_stages, g.slots, g.loads_per_stage, g.stores_per_stage,
                   g.vmcnt_wait, g.fill_cols, g.plan_rows, g.plan_blocks, g.fill_between_stages,
                   fill_row_threads(g)};
  const int n = int(sizeof v / sizeof v[0]);
  for (int i = 0; i < n; ++i) out[i] = v[i];
  return geometry_ok(g) ? n : -n;
}

int gfx950_lds_chunk(int heads, int small, int head_dim, int key, int c) {
  return lds_chunk(variant(heads, small, head_dim), key, c);
}
int gfx950_chunk_key(int heads, int small, int head_dim, int p) { return chunk_key(variant(heads, small, head_dim), p); }
int gfx950_chunk_col(int heads, int small, int head_dim, int p) { return chunk_col(variant(heads, small, head_dim), p); }
int gfx950_padded_chunk(int heads, int small, int head_dim, int p) {
  return padded_chunk(variant(heads, small, head_dim), p);
}
int gfx950_frag_chunk(int lane, int step, int half) { return frag_chunk(lane, step, half); }
int gfx950_c_row(int lane, int v) { return c_row(lane, v); }
int gfx950_wave_subtile(int heads, int small, int head_dim, int wave, int j) {
  return wave_subtile(variant(heads, small, head_dim), wave, j);
}
int gfx950_wave_row_slot(int heads, int small, int head_dim, int wave, int r) {
  return wave_row_slot(variant(heads, small, head_dim), wave, r);
}
// Tile t's A row m: {row of the wave, head}; and the chain set the tile adds into.
void gfx950_tile(int heads, int small, int head_dim, int t, int m, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  out[0] = tile_row(g, t, m);
  out[1] = tile_head(g, t, m);
  out[2] = tile_chain_set(g, t);
  out[3] = tile_starts_chains(g, t);
}
// Where row b of pair p ends after the reduction: {chain set, chain}.
void gfx950_pair_chain(int heads, int small, int head_dim, int p, int b, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  out[0] = pair_chain_set(g, p, b);
  out[1] = pair_chain_slot(g, b);
}
int gfx950_b_read_offset(int heads, int small, int head_dim, int sub, int lane, int step, int half) {
  return b_read_offset(variant(heads, small, head_dim), sub, lane, step, half);
}
int gfx950_subtile_stride(int heads, int small, int head_dim) { return subtile_stride(variant(heads, small, head_dim)); }
int gfx950_scale_read_offset(int heads, int small, int head_dim, int wave, int j, int lane) {
  return scale_read_offset(variant(heads, small, head_dim), wave, j, lane);
}
// LDS DMA of (wave, d, lane): {LDS byte within slot, global byte within stage, kind}; kind 0 = K,
// 1 = kv_scale (d == dmas_per_wave), whose global byte is 4 * (stage key).
void gfx950_dma(int heads, int small, int head_dim, int wave, int d, int lane, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  if (d < g.dmas_per_wave) {
    out[0] = dma_m0(g, wave) + dma_inst_offset(d) + kChunkBytes * lane;
    out[1] = int(dma_voffset(g, wave, d, lane)) + dma_inst_offset(d);
    out[2] = 0;
  } else {
    out[0] = dma_m0(g, wave) + scale_inst_offset(g) + 4 * lane;
    out[1] = 4 * (scale_first_key(g, wave) + lane);
    out[2] = 1;
  }
}
unsigned gfx950_store_offset(int sub, int lane, int half, int element_bytes) {
  return store_offset(sub, lane, half, element_bytes);
}
// Tail i: {sub-tile, pair}; returns the tails per stage. gfx950_tail_group: {deferred, step}.
int gfx950_tail(int heads, int small, int head_dim, int i, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  out[0] = tail_subtile(g, i);
  out[1] = tail_pair(g, i);
  return kSubTiles * g.pairs_per_wave;
}
void gfx950_tail_group(int heads, int small, int head_dim, int k, int* out) {
  const Geometry g = variant(heads, small, head_dim);
  out[0] = tail_group_deferred(g, k);
  out[1] = tail_group_step(g, k);
}

void gfx950_plan_launch(long long M, long long N, int heads, int head_dim, long long out_stride,
                        int element_bytes, int fixed_grid_splits, int num_cus, int clean, int* out) {
  const LaunchPlan p =
      plan_launch(M, N, heads, head_dim, out_stride, element_bytes, fixed_grid_splits, num_cus, clean != 0);
  out[0] = p.small;
  out[1] = p.balanced;
  out[2] = p.blocks;
  out[3] = p.grid_x;
  out[4] = p.grid_y;
  out[5] = p.fixed_grid_splits;
  out[6] = p.reverse_blocks;
}
int gfx950_pair_stores_reach(int heads, int head_dim, long long rows_apart, long long out_stride, long long N,
                             int element_bytes) {
  return pair_stores_reach(variant(heads, 0, head_dim), rows_apart, out_stride, N, element_bytes);
}
double gfx950_fixed_grid_makespan(int heads, int small, int head_dim, long long M, long long N, int splits,
                                  int num_cus, int clean) {
  return fixed_grid_makespan(variant(heads, small, head_dim), M, N, splits, num_cus, clean != 0);
}
int gfx950_choose_fixed_grid_splits(int heads, int small, int head_dim, long long M, long long N, int num_cus,
                                    int clean) {
  return choose_fixed_grid_splits(variant(heads, small, head_dim), M, N, num_cus, clean != 0);
}

// The -inf fill of one row (layout.h): its fill chunk count, and for fill position `position`
// {part, chunk, first column of the chunk, whole} (positions_in_part, whole_chunks).
int gfx950_fill_chunks(int left_end, int right_begin, int row_end, int phase, int element_bytes) {
  return fill_chunks(FillRow{left_end, right_begin, row_end, phase}, chunk_elements(element_bytes));
}
void gfx950_fill_position(int left_end, int right_begin, int row_end, int phase, int element_bytes, int position,
                          int* out) {
  const FillRow row{left_end, right_begin, row_end, phase};
  const int per_chunk = chunk_elements(element_bytes);
  for (int part = 0; part < 2; ++part) {
    const ColumnRange chunks = positions_in_part(row, per_chunk, part, position, position + 1);
    if (chunks.end <= chunks.begin) continue;
    const ColumnRange whole = whole_chunks(fill_part(row, part), phase, per_chunk);
    out[0] = part;
    out[1] = chunks.begin;
    out[2] = chunk_first_column(chunks.begin, phase, per_chunk);
    out[3] = chunks.begin >= whole.begin && chunks.begin < whole.end;
    return;
  }
  out[0] = -1;
}
// partial_chunks of a run of chunks against the part's whole chunks: {head, tail}.
void gfx950_partial_chunks(int begin, int end, int whole_begin, int whole_end, int* out) {
  const PartialChunks p = partial_chunks(ColumnRange{begin, end}, ColumnRange{whole_begin, whole_end});
  out[0] = p.head;
  out[1] = p.tail;
}
// Fill unit `unit` of fill_units: its fill positions of a row with row_chunks chunks.
void gfx950_unit_positions(int heads, int small, int head_dim, int element_bytes, int unit, int fill_units,
                           int row_chunks, int* out) {
  const ColumnRange r = unit_position_range(variant(heads, small, head_dim), element_bytes, unit, fill_units,
                                            row_chunks);
  out[0] = r.begin;
  out[1] = r.end;
  out[2] = fill_row_threads(variant(heads, small, head_dim));
}
// The order of a block's units (cost_model.h): {tile_begin, tile_end, fill_begin, fill_end} of
// units [u_begin, u_end) of a block priced {overhead, compute, fill}.
void gfx950_block_parts(int overhead, int compute, int fill, int u_begin, int u_end, int* out) {
  const scheduler::SegmentParts p = block_parts(scheduler::BlockPrice{overhead, compute, fill}, u_begin, u_end);
  out[0] = int(p.tile_begin);
  out[1] = int(p.tile_end);
  out[2] = int(p.fill_begin);
  out[3] = int(p.fill_end);
}
// FillSchedule of a segment: {due_before(stage), next_break(stage)}.
void gfx950_fill_schedule(int stage_begin, int stage_end, int fill_begin, int fill_end, int stage, int* out) {
  const FillSchedule schedule{stage_begin, stage_end, fill_begin, fill_end};
  out[0] = schedule.due_before(stage);
  out[1] = schedule.next_break(stage);
}

// The kernel's facts of a block whose union of windows is [lo, hi) (empty when hi <= lo):
// {first_key, stages, covered_end, fill_keys, overhead, fill_units, units}.
void gfx950_block_facts(int heads, int small, int head_dim, int lo, int hi, int N, int clean, int* out) {
  auto keys = scheduler::BlockUnion<>::empty_within(N);
  keys.add(scheduler::KeyRange{lo, hi});
  const BlockFacts b = block_facts(variant(heads, small, head_dim), N, clean != 0, keys.range(), 0, N);
  const int v[] = {b.first_key, b.stages, b.covered_end, b.fill_keys, b.overhead, b.fill_units, b.units()};
  for (int i = 0; i < 7; ++i) out[i] = v[i];
}
// Modelled cost of every workgroup of a fixed grid over real block unions lo[b], hi[b], in
// dispatch order (x = blocks reversed, fastest; then y): stages + fill units, plus the segment
// overhead when it computes. Returns the number of workgroups written.
int gfx950_fixed_grid_costs(int heads, int small, int head_dim, int N, int clean, int splits, const int* lo,
                            const int* hi, int blocks, double* out) {
  const scheduler::CostModel model = cost_model(variant(heads, small, head_dim), N, clean != 0);
  int n = 0;
  for (int y = 0; y < splits; ++y)
    for (int b = blocks - 1; b >= 0; --b) {
      auto keys = scheduler::BlockUnion<>::empty_within(N);
      keys.add(scheduler::KeyRange{lo[b], hi[b]});
      const scheduler::BlockPrice price = scheduler::price_block(model, keys.range());
      const scheduler::SegmentParts parts =
          block_parts(price, scheduler::share_begin(price.total(), splits, y),
                      scheduler::share_begin(price.total(), splits, y + 1));
      const int64_t tiles = parts.tile_end - parts.tile_begin;
      out[n++] = double(tiles + (parts.fill_end - parts.fill_begin) + (tiles ? price.overhead : 0));
    }
  return n;
}

}  // extern "C"
