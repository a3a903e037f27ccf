// extern "C" access to the gfx950 backend's host + device headers (geometry.h, layout.h, plan.h,
// launch_plan.h) for the Python host tests: the tests check the very functions the kernel compiles.
#include "common/work_scheduler.h"
#include "gfx950/cost_model.h"
#include "gfx950/geometry.h"
#include "gfx950/launch_plan.h"
#include "gfx950/layout.h"
#include "gfx950/plan.h"

using namespace aiter::gfx950;
namespace scheduler = aiter::scheduler;

extern "C" {

// Geometry fields in declaration order (see struct Geometry).
int gfx950_geometry(int heads, int small, int* out) {
  const Geometry geometry = geometry_of(heads, small != 0);
  const int v[] = {geometry.heads, geometry.head_tiles, geometry.rows_per_wave, geometry.pairs_per_wave, geometry.row_groups,
                   geometry.key_groups, geometry.block_rows, geometry.stage_keys, geometry.stage_bytes, geometry.dmas_per_wave,
                   geometry.wave_part_bytes, geometry.slot_bytes, geometry.slots, geometry.loads_per_stage,
                   geometry.stores_per_stage, geometry.vmcnt_wait, geometry.fill_cols, geometry.plan_rows, geometry.plan_blocks};
  const int n = int(sizeof v / sizeof v[0]);
  for (int i = 0; i < n; ++i) out[i] = v[i];
  return geometry_ok(geometry) ? n : -n;
}

int gfx950_lds_chunk(int key, int c) { return lds_chunk(key, c); }
int gfx950_chunk_key(int p) { return chunk_key(p); }
int gfx950_chunk_col(int p) { return chunk_col(p); }
int gfx950_padded_chunk(int heads, int small, int p) { return padded_chunk(geometry_of(heads, small), p); }
int gfx950_frag_chunk(int lane, int step, int half) { return frag_chunk(lane, step, half); }
int gfx950_c_row(int lane, int v) { return c_row(lane, v); }
int gfx950_wave_subtile(int heads, int small, int wave, int j) {
  return wave_subtile(geometry_of(heads, small), wave, j);
}
int gfx950_wave_row_slot(int heads, int small, int wave, int r) {
  return wave_row_slot(geometry_of(heads, small), wave, r);
}
int gfx950_b_read_offset(int heads, int small, int sub, int lane, int step, int half) {
  return b_read_offset(geometry_of(heads, small), sub, lane, step, half);
}
int gfx950_subtile_stride(int heads, int small) { return subtile_stride(geometry_of(heads, small)); }
int gfx950_scale_read_offset(int heads, int small, int wave, int j, int lane) {
  return scale_read_offset(geometry_of(heads, small), wave, j, lane);
}
// LDS DMA of (wave, d, lane): {LDS byte within slot, global byte within stage, kind}; kind 0 = K,
// 1 = kv_scale (d == dmas_per_wave), whose global byte is 4 * (stage key).
void gfx950_dma(int heads, int small, int wave, int d, int lane, int* out) {
  const Geometry geometry = geometry_of(heads, small != 0);
  if (d < geometry.dmas_per_wave) {
    out[0] = dma_m0(geometry, wave) + dma_inst_offset(d) + kChunkBytes * lane;
    out[1] = int(dma_voffset(geometry, wave, d, lane)) + dma_inst_offset(d);
    out[2] = 0;
  } else {
    out[0] = dma_m0(geometry, wave) + scale_inst_offset(geometry) + 4 * lane;
    out[1] = 4 * (scale_first_key(geometry, wave) + lane);
    out[2] = 1;
  }
}
unsigned gfx950_store_offset(int sub, int lane, int half, int element_bytes) {
  return store_offset(sub, lane, half, element_bytes);
}
int gfx950_tail(int heads, int small, int i, int* out) {
  const Geometry geometry = geometry_of(heads, small != 0);
  out[0] = tail_subtile(geometry, i);
  out[1] = tail_pair(geometry, i);
  return kSubTiles * geometry.pairs_per_wave;
}

void gfx950_plan_launch(long long M, long long N, int heads, int fixed_grid_splits, int num_cus,
                        int clean, int* out) {
  const LaunchPlan p = plan_launch(M, N, heads, fixed_grid_splits, num_cus, clean != 0);
  out[0] = p.small;
  out[1] = p.balanced;
  out[2] = p.blocks;
  out[3] = p.grid_x;
  out[4] = p.grid_y;
  out[5] = p.fixed_grid_splits;
  out[6] = p.reverse_blocks;
}
double gfx950_fixed_grid_makespan(int heads, int small, long long M, long long N, int splits,
                                  int num_cus, int clean) {
  return fixed_grid_makespan(geometry_of(heads, small != 0), M, N, splits, num_cus, clean != 0);
}
int gfx950_choose_fixed_grid_splits(int heads, int small, long long M, long long N, int num_cus,
                                    int clean) {
  return choose_fixed_grid_splits(geometry_of(heads, small != 0), M, N, num_cus, clean != 0);
}

// The kernel's facts of a block whose union of windows is [lo, hi) (empty when hi <= lo):
// {first_key, stages, covered_end, fill_keys, overhead, fill_units, units}.
void gfx950_block_facts(int heads, int small, int lo, int hi, int N, int clean, int* out) {
  auto keys = scheduler::BlockUnion<>::empty_within(N);
  keys.add(scheduler::KeyRange{lo, hi});
  const BlockFacts b = block_facts(geometry_of(heads, small != 0), N, clean != 0, keys.range(), 0, N);
  const int v[] = {b.first_key, b.stages, b.covered_end, b.fill_keys, b.overhead, b.fill_units, b.units()};
  for (int i = 0; i < 7; ++i) out[i] = v[i];
}
// Modelled cost of every workgroup of a fixed grid over real block unions lo[b], hi[b], in
// dispatch order (x = blocks reversed, fastest; then y): stages + fill units, plus the segment
// overhead when it computes. Returns the number of workgroups written.
int gfx950_fixed_grid_costs(int heads, int small, int N, int clean, int splits, const int* lo,
                            const int* hi, int blocks, double* out) {
  const scheduler::CostModel model = cost_model(geometry_of(heads, small != 0), N, clean != 0);
  int n = 0;
  for (int y = 0; y < splits; ++y)
    for (int b = blocks - 1; b >= 0; --b) {
      auto keys = scheduler::BlockUnion<>::empty_within(N);
      keys.add(scheduler::KeyRange{lo[b], hi[b]});
      const scheduler::BlockPrice price = scheduler::price_block(model, keys.range());
      const scheduler::SegmentParts parts =
          scheduler::segment_parts(price, scheduler::share_begin(price.total(), splits, y),
                                   scheduler::share_begin(price.total(), splits, y + 1));
      const int64_t tiles = parts.tile_end - parts.tile_begin;
      out[n++] = double(tiles + (parts.fill_end - parts.fill_begin) + (tiles ? price.overhead : 0));
    }
  return n;
}

}  // extern "C"
