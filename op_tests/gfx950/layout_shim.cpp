// extern "C" access to fp8_mqa_logits_gfx950_layout.h for the Python host tests: the tests check
// the very functions the kernel compiles.
#include "gfx950/layout.h"

using namespace aiter::gfx950;

extern "C" {

// Geometry fields in declaration order (see struct Geometry).
int gfx950_geometry(int heads, int small, int* out) {
  const Geometry g = geometry(heads, small != 0);
  const int v[] = {g.heads, g.head_tiles, g.rows_per_wave, g.pairs_per_wave, g.row_groups,
                   g.key_groups, g.block_rows, g.stage_keys, g.stage_bytes, g.dmas_per_wave,
                   g.wave_part_bytes, g.slot_bytes, g.slots, g.loads_per_stage,
                   g.stores_per_stage, g.vmcnt_wait, g.fill_cols, g.plan_rows, g.plan_blocks};
  const int n = int(sizeof v / sizeof v[0]);
  for (int i = 0; i < n; ++i) out[i] = v[i];
  return geometry_ok(g) ? n : -n;
}

int gfx950_lds_chunk(int key, int c) { return lds_chunk(key, c); }
int gfx950_chunk_key(int p) { return chunk_key(p); }
int gfx950_chunk_col(int p) { return chunk_col(p); }
int gfx950_padded_chunk(int heads, int small, int p) { return padded_chunk(geometry(heads, small), p); }
int gfx950_frag_chunk(int lane, int step, int half) { return frag_chunk(lane, step, half); }
int gfx950_c_row(int lane, int v) { return c_row(lane, v); }
int gfx950_wave_subtile(int heads, int small, int wave, int j) {
  return wave_subtile(geometry(heads, small), wave, j);
}
int gfx950_wave_row_slot(int heads, int small, int wave, int r) {
  return wave_row_slot(geometry(heads, small), wave, r);
}
int gfx950_b_read_offset(int heads, int small, int sub, int lane, int step, int half) {
  return b_read_offset(geometry(heads, small), sub, lane, step, half);
}
int gfx950_subtile_stride(int heads, int small) { return subtile_stride(geometry(heads, small)); }
int gfx950_scale_read_offset(int heads, int small, int wave, int j, int lane) {
  return scale_read_offset(geometry(heads, small), wave, j, lane);
}
// LDS DMA of (wave, d, lane): {LDS byte within slot, global byte within stage, kind}; kind 0 = K,
// 1 = kv_scale (d == dmas_per_wave), whose global byte is 4 * (stage key).
void gfx950_dma(int heads, int small, int wave, int d, int lane, int* out) {
  const Geometry g = geometry(heads, small);
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
unsigned gfx950_store_offset(int sub, int lane, int half) { return store_offset(sub, lane, half); }
int gfx950_tail(int heads, int small, int i, int* out) {
  const Geometry g = geometry(heads, small);
  out[0] = tail_subtile(g, i);
  out[1] = tail_pair(g, i);
  return kSubTiles * g.pairs_per_wave;
}

void gfx950_plan_launch(long long M, long long N, int heads, int split_n, int num_cus, int clean,
                        int* out) {
  const LaunchPlan p = plan_launch(M, N, heads, split_n, num_cus, clean != 0);
  out[0] = p.small;
  out[1] = p.balanced;
  out[2] = p.blocks;
  out[3] = p.grid_x;
  out[4] = p.grid_y;
  out[5] = p.split_n;
  out[6] = p.reverse_rows;
}
double gfx950_fixed_grid_makespan(int heads, int small, long long M, long long N, int split_n,
                                  int num_cus, int clean) {
  return fixed_grid_makespan(geometry(heads, small), M, N, split_n, num_cus, clean != 0);
}
int gfx950_choose_split_n(int heads, int small, long long M, long long N, int num_cus, int clean) {
  return choose_split_n(geometry(heads, small), M, N, num_cus, clean != 0);
}
// {lo, hi, stages, cov_end, fill_total, fill_units, units, ovh}
void gfx950_block_work(int heads, int small, int lo, int hi, int N, int clean, int* out) {
  const BlockWork b = block_work(geometry(heads, small), lo, hi, N, clean != 0);
  const int v[] = {b.lo, b.hi, b.stages, b.cov_end, b.fill_total, b.fill_units, b.units, b.ovh};
  for (int i = 0; i < 8; ++i) out[i] = v[i];
}
// segment_work of units [u_begin, u_end): {stage_begin, stage_end, fill_begin, fill_end}
void gfx950_segment_work(int heads, int small, int lo, int hi, int N, int clean, int u_begin,
                         int u_end, int* out) {
  const SegmentWork w =
      segment_work(block_work(geometry(heads, small), lo, hi, N, clean != 0), u_begin, u_end);
  out[0] = w.stage_begin;
  out[1] = w.stage_end;
  out[2] = w.fill_begin;
  out[3] = w.fill_end;
}
// Modelled cost of every workgroup of a fixed grid over real block unions lo[b], hi[b], in
// dispatch order (x = blocks reversed, fastest; then y): stages + fill units, plus the segment
// overhead when it computes. Returns the number of workgroups written.
int gfx950_fixed_grid_costs(int heads, int small, int N, int clean, int split_n, const int* lo,
                            const int* hi, int blocks, double* out) {
  const Geometry g = geometry(heads, small);
  int n = 0;
  for (int y = 0; y < split_n; ++y)
    for (int b = blocks - 1; b >= 0; --b) {
      const BlockWork w = block_work(g, lo[b], hi[b], N, clean != 0);
      const SegmentWork sw = segment_work(w, int(share_begin(w.units, split_n, y)),
                                          int(share_begin(w.units, split_n, y + 1)));
      const int stages = sw.stage_end - sw.stage_begin;
      out[n++] = stages + (sw.fill_end - sw.fill_begin) + (stages ? w.ovh : 0);
    }
  return n;
}
int gfx950_fill_column(int heads, int small, int lo, int hi, int N, int f) {
  return fill_column(block_work(geometry(heads, small), lo, hi, N, true), f);
}

}  // extern "C"
