// gfx950 fp8_mqa_logits: the geometry of one kernel variant and which wave computes what.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// A variant is (heads in {32, 64}, small-M path or main path). Its geometry is derived from the
// tunables alone; every layout (layout.h), plan (plan.h, launch_plan.h) and device role of the
// kernel reads its sizes from here. Host + device and constexpr, so the host tests
// (op_tests/gfx950/) check the very values the kernel folds; touches no memory.
//
// Vocabulary of the backend:
//   tile      32 (row, head) columns of Q: the A operand (32 x 64 per MFMA step) of one MFMA chain.
//   sub-tile  32 keys: the B operand (64 x 32 per step) and the N side of the 32x32 accumulator.
//   stage     the keys one LDS ring slot holds; every wave of the workgroup consumes it.
//   block     the rows one workgroup owns at a time (block_rows); in the balanced plan, plan
//             positions in an order that puts rows with a non-empty window first.
//   unit      the scheduling quantum: one compute stage of a block, one -inf fill unit of it, or
//             one of the virtual units charged for starting a block's compute.
#pragma once
#include <stdint.h>

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
constexpr int kTileCols = 32;                    // MFMA M (heads of a tile) and N (keys of a sub-tile)
constexpr int kStepK = 64;                       // MFMA K: head_dim bytes per MFMA step
constexpr int kSteps = kHeadDim / kStepK;        // MFMA steps per tile (2)
constexpr int kKeyBytes = kHeadDim;              // one fp8 K row
constexpr int kChunkBytes = 16;                  // one LDS-DMA lane / one ds_read_b128
constexpr int kChunksPerKey = kKeyBytes / kChunkBytes;
constexpr int kDmaBytes = kLanes * kChunkBytes;  // one buffer_load_dwordx4 ... lds of a wave
constexpr int kScaleSlack = kLanes * 4;          // per-wave kv_scale area in a slot (64 floats)
constexpr int kMaxKeys = (1 << 25) - 1;          // N * 128 must fit a 32-bit buffer offset

struct Geometry {
  int heads;
  int head_tiles;        // tiles per row: heads / 32
  int rows_per_wave;     // kTilesPerWave / head_tiles
  int pairs_per_wave;    // row pairs reduced together by one permlane32 swap
  int row_groups;        // waves with different rows
  int key_groups;        // waves with the same rows and different keys of a stage
  int block_rows;        // rows per workgroup block
  int stage_keys;
  int stage_bytes;       // K bytes of a stage
  int dmas_per_wave;     // K DMAs per wave per stage
  int wave_part_bytes;   // one wave's LDS part of a slot: its K DMAs then its 64 kv_scales
  int slot_bytes;        // kWaves * wave_part_bytes
  int slots;             // prefetch depth + the slot being read
  int loads_per_stage;   // VMEM loads per wave per stage: K DMAs + 1 kv_scale DMA
  int stores_per_stage;  // VMEM stores per wave per stage: 2 per row pair per sub-tile
  int vmcnt_wait;        // the hand-placed s_waitcnt vmcnt() of the stage loop
  int fill_cols;         // columns of one -inf fill unit
  int plan_rows;         // rows the balanced plan can hold
  int plan_blocks;
};

GFX950_FN Geometry geometry_of(int heads, bool small) {
  Geometry geometry{};
  geometry.heads = heads;
  geometry.head_tiles = heads / kTileCols;
  geometry.rows_per_wave = kTilesPerWave / geometry.head_tiles;
  geometry.pairs_per_wave = geometry.rows_per_wave / 2;
  geometry.row_groups = small ? kSmallRowGroups : kMainRowGroups;
  geometry.key_groups = kWaves / geometry.row_groups;
  geometry.block_rows = geometry.row_groups * geometry.rows_per_wave;
  geometry.stage_keys = geometry.key_groups * kSubTiles * kTileCols;
  geometry.stage_bytes = geometry.stage_keys * kKeyBytes;
  geometry.dmas_per_wave = geometry.stage_bytes / (kWaves * kDmaBytes);
  geometry.wave_part_bytes = geometry.dmas_per_wave * kDmaBytes + kScaleSlack;
  geometry.slot_bytes = kWaves * geometry.wave_part_bytes;
  geometry.slots = kPrefetchStages + 1;
  geometry.loads_per_stage = geometry.dmas_per_wave + 1;
  geometry.stores_per_stage = kSubTiles * geometry.pairs_per_wave * 2;
  // Program order per wave: [wait; barrier; loads of stage i+D] [stores of stage i] ... so after
  // the loads of stage i come: its own iteration's stores, then D-1 full iterations.
  geometry.vmcnt_wait = kPrefetchStages * geometry.stores_per_stage +
                        (kPrefetchStages - 1) * geometry.loads_per_stage;
  geometry.fill_cols = kFillUnitElems / geometry.block_rows;
  geometry.plan_rows = small ? kSmallMaxRows : kPlanMaxRows;
  geometry.plan_blocks = geometry.plan_rows / geometry.block_rows;
  return geometry;
}

// Static sanity of every variant the kernel instantiates.
GFX950_FN bool geometry_ok(Geometry geometry) {
  return geometry.head_tiles * geometry.rows_per_wave == kTilesPerWave &&
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
         (kSubTiles * geometry.pairs_per_wave) % 2 == 0 && geometry.fill_cols % kThreads == 0;
}
static_assert(geometry_ok(geometry_of(32, false)) && geometry_ok(geometry_of(64, false)) &&
                  geometry_ok(geometry_of(32, true)) && geometry_ok(geometry_of(64, true)),
              "gfx950 tunables break a layout invariant");

// The compile-time constants of one instantiated variant. Device code passes the geometry only
// as geometry() (a folded prvalue) and reads fields of kGeometry: copying the constexpr object
// itself would make it an externally initialised device global that the compiler cannot fold.
template <int H, bool SMALL>
struct Variant {
  static constexpr Geometry kGeometry = geometry_of(H, SMALL);
  static constexpr GFX950_HD Geometry geometry() { return geometry_of(H, SMALL); }
  static constexpr int kStageKeys = kGeometry.stage_keys;
  static constexpr int kRowsPerWave = kGeometry.rows_per_wave;
  static constexpr int kPairsPerWave = kGeometry.pairs_per_wave;
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
// Tile t of a wave: row t / head_tiles of the wave, heads [32 * (t % head_tiles), +32).
GFX950_FN int tile_row(Geometry geometry, int t) { return t / geometry.head_tiles; }
GFX950_FN int tile_head0(Geometry geometry, int t) { return (t % geometry.head_tiles) * kTileCols; }
// Row pair tails of a stage, in issue order: index i -> (sub-tile j, pair p), p fastest. The
// kernel's permlane asm takes tails (2k, 2k+1) together: for H=64 (one pair per sub-tile) that
// defers sub-tile 0's tail past sub-tile 1's MFMAs.
GFX950_FN int tail_subtile(Geometry geometry, int i) { return i / geometry.pairs_per_wave; }
GFX950_FN int tail_pair(Geometry geometry, int i) { return i % geometry.pairs_per_wave; }

}  // namespace gfx950
}  // namespace aiter
