// gfx950 fp8_mqa_logits: the geometry of one kernel variant and which wave computes what.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// A variant is (heads, head dim: a pair capabilities.h serves; small-M path or main path). Its
// geometry is derived from the tunables alone; every layout (layout.h), plan (plan.h,
// launch_plan.h) and device role of the kernel reads its sizes from here. Host + device and
// constexpr, so the host tests (dev/gfx950/) check the very values the kernel folds; touches
// no memory.
//
// Vocabulary of the backend:
//   tile      32 (row, head) columns of Q: the A operand (32 x 64 per MFMA step) of one MFMA chain.
//             H >= 32: heads [32 i, 32 i + 32) of one row. H = 16: two rows, interleaved (A row
//             2 h + r is head h of the tile's row r), so that the accumulator's even elements are
//             the first row and its odd ones the second.
//   chain set the two fp32 epilogue chains a tile adds into: H >= 32, one row's even and odd
//             halves of its head sum; H = 16, the tile's two rows.
//   sub-tile  32 keys: the B operand (64 x 32 per step) and the N side of the 32x32 accumulator.
//   stage     the keys one LDS ring slot holds; every wave of the workgroup consumes it.
//   block     the rows one workgroup owns at a time (block_rows); in the balanced plan, plan
//             positions in an order that puts rows with a non-empty window first.
//   unit      the scheduling quantum: one compute stage of a block, one -inf fill unit of it, or
//             one of the virtual units charged for starting a block's compute.
#pragma once
#include <stdint.h>

#include "gfx950/capabilities.h"
#include "gfx950/tunables.h"

#if defined(__HIP__) || defined(__HIPCC__)
#define GFX950_HD __host__ __device__
#else
#define GFX950_HD
#endif
#define GFX950_FN GFX950_HD inline constexpr

namespace aiter {
namespace gfx950 {

constexpr int kLanes = 64;
constexpr int kThreads = kWaves * kLanes;
constexpr int kTileCols = 32;                    // MFMA M (A rows of a tile) and N (keys of a sub-tile)
constexpr int kStepK = 64;                       // MFMA K: head_dim bytes per MFMA step
constexpr int kMaxSteps = 2;                     // MFMA steps per tile at the largest head dim
constexpr int kChunkBytes = 16;                  // one LDS-DMA lane / one ds_read_b128
constexpr int kDmaBytes = kLanes * kChunkBytes;  // one buffer_load_dwordx4 ... lds of a wave
constexpr int kScaleSlack = kLanes * 4;          // per-wave kv_scale area in a slot (64 floats)
constexpr int kMaxKeys = (1 << 25) - 1;          // N * 128 must fit a 32-bit buffer offset

struct Geometry {
  int heads;
  int head_dim;
  int steps;             // MFMA K steps per tile: head_dim / 64
  int chunks_per_key;    // 16-byte chunks of one K row
  int rows_per_tile;     // 2 at H = 16 (two rows share a tile), else 1
  int head_tiles;        // tiles per row: heads / 32, 1 at H = 16
  int rows_per_wave;     // kTilesPerWave x rows_per_tile / head_tiles
  int chain_sets;        // epilogue chain sets per sub-tile: rows (H >= 32) or tiles (H = 16)
  int pairs_per_wave;    // row pairs reduced together by one permlane32 swap
  int row_groups;        // waves with different rows
  int key_groups;        // waves with the same rows and different keys of a stage
  int block_rows;        // rows per workgroup block
  int stage_keys;
  int stage_bytes;       // K bytes of a stage
  int dmas_per_wave;     // K DMAs per wave per stage
  int wave_part_bytes;   // one wave's LDS part of a slot: its K DMAs then its 64 kv_scales
  int slot_bytes;        // kWaves * wave_part_bytes
  int prefetch_stages;   // stages loaded ahead of the one being read
  int slots;             // prefetch depth + the slot being read
  int loads_per_stage;   // VMEM loads per wave per stage: K DMAs + 1 kv_scale DMA
  int stores_per_stage;  // VMEM stores per wave per stage per row pair and sub-tile: 2, or 1 at H = 16
  int vmcnt_wait;        // the hand-placed s_waitcnt vmcnt() of the stage loop
  int fill_cols;         // columns of one -inf fill unit
  int plan_rows;         // rows the balanced plan can hold
  int plan_blocks;
  bool fill_between_stages;  // a computing segment writes its fill units between its stages
};

GFX950_FN Geometry geometry_of(int heads, bool small, int head_dim) {
  Geometry geometry{};
  geometry.heads = heads;
  geometry.head_dim = head_dim;
  geometry.steps = head_dim / kStepK;
  geometry.chunks_per_key = head_dim / kChunkBytes;
  geometry.rows_per_tile = heads < kTileCols ? kTileCols / heads : 1;
  geometry.head_tiles = heads < kTileCols ? 1 : heads / kTileCols;
  geometry.rows_per_wave = kTilesPerWave * geometry.rows_per_tile / geometry.head_tiles;
  geometry.chain_sets = kTilesPerWave / geometry.head_tiles;
  geometry.pairs_per_wave = geometry.rows_per_wave / 2;
  geometry.row_groups = (small ? kSmallRowGroups : kMainRowGroups) * head_dim / kRowGroupsHeadDim;
  geometry.key_groups = kWaves / geometry.row_groups;
  geometry.block_rows = geometry.row_groups * geometry.rows_per_wave;
  geometry.stage_keys = geometry.key_groups * kSubTiles * kTileCols;
  geometry.stage_bytes = geometry.stage_keys * head_dim;
  geometry.dmas_per_wave = geometry.stage_bytes / (kWaves * kDmaBytes);
  geometry.wave_part_bytes = geometry.dmas_per_wave * kDmaBytes + kScaleSlack;
  geometry.slot_bytes = kWaves * geometry.wave_part_bytes;
  geometry.prefetch_stages = kPrefetchStages;
  geometry.slots = geometry.prefetch_stages + 1;
  geometry.loads_per_stage = geometry.dmas_per_wave + 1;
  // H = 16 stores a row pair with one instruction (its 8 rows per wave would otherwise double
  // H = 32's stores, and the vmcnt wait would pass its 6 bits: 70 at depth 4).
  geometry.stores_per_stage = kSubTiles * geometry.pairs_per_wave * (geometry.rows_per_tile > 1 ? 1 : 2);
  // Program order per wave: [wait; barrier; loads of stage i+D] [stores of stage i] ... so after
  // the loads of stage i come: its own iteration's stores, then D-1 full iterations.
  geometry.vmcnt_wait = geometry.prefetch_stages * geometry.stores_per_stage +
                        (geometry.prefetch_stages - 1) * geometry.loads_per_stage;
  geometry.fill_cols = kFillUnitElems / geometry.block_rows;
  // Not at H = 16 with two key groups (small-M path at D = 128, main path at D = 64): their stage
  // loops take all 256 VGPRs and SGPRs, and cutting them into runs between fill units spilled to
  // scratch (ISA check); their segments write the fill after the stages, in the fill pass.
  geometry.fill_between_stages = !(geometry.rows_per_tile > 1 && geometry.key_groups == 2);
  geometry.plan_rows = small ? kSmallMaxRows : kPlanMaxRows;
  geometry.plan_blocks = geometry.plan_rows / geometry.block_rows;
  return geometry;
}

// Row pair tails of a stage, in issue order: index i -> (sub-tile j, pair p), p fastest. The
// kernel's permlane asm takes tails (2k, 2k+1) together: for H=64 (one pair per sub-tile) that
// defers sub-tile 0's tail past sub-tile 1's MFMAs.
GFX950_FN int tail_subtile(Geometry geometry, int i) { return i / geometry.pairs_per_wave; }
GFX950_FN int tail_pair(Geometry geometry, int i) { return i % geometry.pairs_per_wave; }
// Group k = tails (2k, 2k+1) is complete after the last epilogue of sub-tile tail_subtile(2k+1).
// It is deferred to the next stage when that is the stage's last sub-tile.
GFX950_FN bool tail_group_deferred(Geometry geometry, int k) {
  return tail_subtile(geometry, 2 * k + 1) == kSubTiles - 1;
}
// The stage-body step that reduces and stores group k: the step after the epilogue completing it
// (that sub-tile's last tile-step's epilogue runs one step after its MFMAs), i.e. step
// (j + 1) x kTilesPerWave + 1 for sub-tile j, or step 1 of the next stage when deferred. Groups
// completing together share the step (H = 16 has two per sub-tile; spreading them over two steps
// kept more chains live and spilled).
GFX950_FN int tail_group_step(Geometry geometry, int k) {
  return tail_group_deferred(geometry, k) ? 1 : (tail_subtile(geometry, 2 * k + 1) + 1) * kTilesPerWave + 1;
}

// The stage's own (not deferred) tails come after the step that reads its kv_scales, the deferred
// ones (which use the carried scales) before it.
GFX950_FN bool scale_read_fits(Geometry geometry, int read_step) {
  for (int k = 0; k < kSubTiles * geometry.pairs_per_wave / 2; ++k)
    if (tail_group_deferred(geometry, k) ? tail_group_step(geometry, k) >= read_step
                                         : tail_group_step(geometry, k) <= read_step)
      return false;
  return true;
}

// Every tail group's step lies in the stage body.
GFX950_FN bool tail_steps_fit(Geometry geometry) {
  for (int k = 0; k < kSubTiles * geometry.pairs_per_wave / 2; ++k)
    if (tail_group_step(geometry, k) >= kSubTiles * kTilesPerWave) return false;
  return true;
}

// Static sanity of every variant the kernel instantiates.
GFX950_FN bool geometry_ok(Geometry geometry) {
  return (geometry.head_dim == 64 || geometry.head_dim == 128) &&
         geometry.rows_per_tile * geometry.heads == geometry.head_tiles * kTileCols &&
         geometry.chain_sets * geometry.head_tiles == kTilesPerWave &&
         geometry.rows_per_wave % 2 == 0 && geometry.key_groups * geometry.row_groups == kWaves &&
         geometry.dmas_per_wave >= 1 &&
         geometry.dmas_per_wave * kWaves * kDmaBytes == geometry.stage_bytes &&
         // one wave's kv_scale DMA (64 lanes x 4 B) covers exactly the keys it reads
         kSubTiles * kTileCols == kLanes &&
         // the scale DMA reaches its area through the 12-bit instruction offset
         geometry.dmas_per_wave * kDmaBytes + kScaleSlack <= 4096 &&
         // s_waitcnt vmcnt is 6 bits on gfx9
         geometry.vmcnt_wait <= 63 &&
         // even number of pair tails per stage: the permlane asm takes them two at a time
         (kSubTiles * geometry.pairs_per_wave) % 2 == 0 &&
         tail_steps_fit(geometry) &&
         // a fill unit is whole waves of each row it touches (fill.h)
         geometry.fill_cols % kLanes == 0 &&
         (geometry.fill_cols % kThreads == 0 || kThreads % geometry.fill_cols == 0);
}

// Every variant the backend compiles: each served (H, D) on both paths.
GFX950_FN bool every_geometry_ok() {
  for (int h : kServedHeads)
    for (int d : kServedHeadDims)
      for (int small = 0; small < 2; ++small)
        if (!geometry_ok(geometry_of(h, small != 0, d))) return false;
  return true;
}
static_assert(every_geometry_ok(), "gfx950 tunables break a layout invariant");

// The compile-time constants of one instantiated variant. Device code passes the geometry only
// as geometry() (a folded prvalue) and reads fields of kGeometry: copying the constexpr object
// itself would make it an externally initialised device global that the compiler cannot fold.
template <int H, int D, bool SMALL>
struct Variant {
  static constexpr int kHeads = H;
  static constexpr int kHeadDim = D;
  static constexpr bool kSmall = SMALL;
  static constexpr Geometry kGeometry = geometry_of(H, SMALL, D);
  static constexpr GFX950_HD Geometry geometry() { return geometry_of(H, SMALL, D); }
  static constexpr int kSteps = kGeometry.steps;
  static constexpr int kStageKeys = kGeometry.stage_keys;
  static constexpr int kRowsPerWave = kGeometry.rows_per_wave;
  static constexpr int kChainSets = kGeometry.chain_sets;
  static constexpr int kPairsPerWave = kGeometry.pairs_per_wave;
  static constexpr bool kPackedRows = kGeometry.rows_per_tile > 1;
  static constexpr int kTails = kSubTiles * kPairsPerWave;  // row-pair tails per stage
};

// ------------------------------------------------------------------------------------------------
// Which wave does what.
// ------------------------------------------------------------------------------------------------
GFX950_FN int wave_row_group(Geometry geometry, int wave) { return wave / geometry.key_groups; }
GFX950_FN int wave_key_group(Geometry geometry, int wave) { return wave % geometry.key_groups; }
// Block row slot of the wave's r-th row.
GFX950_FN int wave_row_slot(Geometry geometry, int wave, int r) {
  return wave_row_group(geometry, wave) * geometry.rows_per_wave + r;
}
// Stage-local sub-tile index of the wave's j-th sub-tile.
GFX950_FN int wave_subtile(Geometry geometry, int wave, int j) {
  return wave_key_group(geometry, wave) * kSubTiles + j;
}
// Tile t of a wave: its A row m (= lane % 32 of the A fragment) is the wave's row
// tile_row(t, m) and head tile_head(t, m). H >= 32: row t / head_tiles, heads
// [32 (t % head_tiles), +32); H = 16: rows 2t and 2t + 1, interleaved (m = 2 head + row - 2t).
GFX950_FN int tile_row(Geometry geometry, int t, int m) {
  return t * geometry.rows_per_tile / geometry.head_tiles + m % geometry.rows_per_tile;
}
GFX950_FN int tile_head(Geometry geometry, int t, int m) {
  return (t % geometry.head_tiles) * kTileCols + m / geometry.rows_per_tile;
}
// The chain set tile t adds into (its row at H >= 32, the tile itself at H = 16); the tile
// starts the set's chains when it is the first tile of that set.
GFX950_FN int tile_chain_set(Geometry geometry, int t) { return t / geometry.head_tiles; }
GFX950_FN bool tile_starts_chains(Geometry geometry, int t) { return t % geometry.head_tiles == 0; }
// Pair p is the wave's rows 2p (A, b = 0) and 2p + 1 (B, b = 1). The chain of row b: H >= 32, the
// one chain (slot 0) of the row's own set; H = 16, chain b of the pair's tile.
GFX950_FN int pair_chain_set(Geometry geometry, int p, int b) {
  return geometry.rows_per_tile > 1 ? p : 2 * p + b;
}
GFX950_FN int pair_chain_slot(Geometry geometry, int b) { return geometry.rows_per_tile > 1 ? b : 0; }
}  // namespace gfx950
}  // namespace aiter
