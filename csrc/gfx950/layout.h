// Index, layout and scheduling math of the gfx950 fp8_mqa_logits kernel, shared by the kernel
// (csrc/kernels/fp8_mqa_logits_gfx950.hip) and its host-side tests (op_tests/gfx950/), so that the
// tests check the very functions the kernel runs. Compiles under clang HIP and a plain host C++17
// compiler; everything here is constexpr or inline, torch-free and allocation-free.
//
// Vocabulary (see the kernel file for the full picture):
//   tile      32 (row, head) columns of Q: the A operand (32 x 64 per MFMA step) of one MFMA chain.
//   sub-tile  32 keys: the B operand (64 x 32 per step) and the N side of the 32x32 accumulator.
//   stage     the keys one LDS ring slot holds; every wave of the workgroup consumes it.
//   block     the rows one workgroup owns (block_rows); in the balanced plan, positions in an order
//             that puts rows with a non-empty window first.
//   unit      the scheduling quantum: one compute stage of a block, or one -inf fill unit of it.
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
constexpr uint32_t kOutOfRange = 0x80000000u;    // >= every num_records the kernel builds
constexpr int kMaxKeys = (1 << 25) - 1;          // N * 128 must fit a 32-bit buffer offset

// ------------------------------------------------------------------------------------------------
// Geometry of one kernel variant (heads in {32, 64}; small = the M <= kSmallMaxRows path).
// ------------------------------------------------------------------------------------------------
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

GFX950_FN Geometry geometry(int heads, bool small) {
  Geometry g{};
  g.heads = heads;
  g.head_tiles = heads / kTileCols;
  g.rows_per_wave = kTilesPerWave / g.head_tiles;
  g.pairs_per_wave = g.rows_per_wave / 2;
  g.row_groups = small ? kSmallRowGroups : kMainRowGroups;
  g.key_groups = kWaves / g.row_groups;
  g.block_rows = g.row_groups * g.rows_per_wave;
  g.stage_keys = g.key_groups * kSubTiles * kTileCols;
  g.stage_bytes = g.stage_keys * kKeyBytes;
  g.dmas_per_wave = g.stage_bytes / (kWaves * kDmaBytes);
  g.wave_part_bytes = g.dmas_per_wave * kDmaBytes + kScaleSlack;
  g.slot_bytes = kWaves * g.wave_part_bytes;
  g.slots = kPrefetchStages + 1;
  g.loads_per_stage = g.dmas_per_wave + 1;
  g.stores_per_stage = kSubTiles * g.pairs_per_wave * 2;
  // Program order per wave: [wait; barrier; loads of stage i+D] [stores of stage i] ... so after
  // the loads of stage i come: its own iteration's stores, then D-1 full iterations.
  g.vmcnt_wait = kPrefetchStages * g.stores_per_stage + (kPrefetchStages - 1) * g.loads_per_stage;
  g.fill_cols = kFillUnitElems / g.block_rows;
  g.plan_rows = small ? kSmallMaxRows : kPlanMaxRows;
  g.plan_blocks = g.plan_rows / g.block_rows;
  return g;
}

// Static sanity of every variant the kernel instantiates.
GFX950_FN bool geometry_ok(Geometry g) {
  return g.head_tiles * g.rows_per_wave == kTilesPerWave && g.rows_per_wave % 2 == 0 &&
         g.key_groups * g.row_groups == kWaves && g.dmas_per_wave >= 1 &&
         g.dmas_per_wave * kWaves * kDmaBytes == g.stage_bytes &&
         // one wave's kv_scale DMA (64 lanes x 4 B) covers exactly the keys it reads
         kSubTiles * kTileCols == kLanes &&
         // the scale DMA reaches its area through the 12-bit instruction offset
         g.dmas_per_wave * kDmaBytes + kScaleSlack <= 4096 &&
         // s_waitcnt vmcnt is 6 bits on gfx9
         g.vmcnt_wait <= 63 &&
         // even number of pair tails per stage: the permlane asm takes them two at a time
         (kSubTiles * g.pairs_per_wave) % 2 == 0 && g.fill_cols % kThreads == 0;
}
static_assert(geometry_ok(geometry(32, false)) && geometry_ok(geometry(64, false)) &&
                  geometry_ok(geometry(32, true)) && geometry_ok(geometry(64, true)),
              "gfx950 tunables break a layout invariant");

// ------------------------------------------------------------------------------------------------
// Which wave does what.
// ------------------------------------------------------------------------------------------------
GFX950_FN int wave_row_group(Geometry g, int wave) { return wave / g.key_groups; }
GFX950_FN int wave_key_group(Geometry g, int wave) { return wave % g.key_groups; }
// Block row slot of the wave's r-th row.
GFX950_FN int wave_row_slot(Geometry g, int wave, int r) {
  return wave_row_group(g, wave) * g.rows_per_wave + r;
}
// Stage-local sub-tile index of the wave's j-th sub-tile.
GFX950_FN int wave_subtile(Geometry g, int wave, int j) {
  return wave_key_group(g, wave) * kSubTiles + j;
}
// Tile t of a wave: row t / head_tiles of the wave, heads [32 * (t % head_tiles), +32).
GFX950_FN int tile_row(Geometry g, int t) { return t / g.head_tiles; }
GFX950_FN int tile_head0(Geometry g, int t) { return (t % g.head_tiles) * kTileCols; }
// Row pair tails of a stage, in issue order: index i -> (sub-tile j, pair p), p fastest. The
// kernel's permlane asm takes tails (2k, 2k+1) together: for H=64 (one pair per sub-tile) that
// defers sub-tile 0's tail past sub-tile 1's MFMAs.
GFX950_FN int tail_subtile(Geometry g, int i) { return i / g.pairs_per_wave; }
GFX950_FN int tail_pair(Geometry g, int i) { return i % g.pairs_per_wave; }

// ------------------------------------------------------------------------------------------------
// MFMA v_mfma_f32_32x32x64_f8f6f4 fragments (CDNA4 ISA).
// A (32 x 64) and B (64 x 32): lane l holds row (A) / column (B) l % 32 and 32 of the 64 k values,
// 8 dwords. Which 32 is the hardware's business, but it is the same permutation for A and B, so any
// consistent assignment of head_dim bytes to (lane half, byte) gives the same dot product. We use:
// step s, lane half h = l / 32, byte b  <->  head_dim index 64 s + 32 h + b, i.e. 16-byte chunk
// 4 s + 2 h + b / 16 of the 128-byte Q or K row.
// Accumulator (32 x 32): lane l, element v holds row c_row(l, v) (= head of the tile) and column
// l % 32 (= key of the sub-tile).
// ------------------------------------------------------------------------------------------------
GFX950_FN int frag_chunk(int lane, int step, int half_read) {
  return 4 * step + 2 * (lane / 32) + half_read;
}
GFX950_FN int c_row(int lane, int v) { return 8 * (v / 4) + 4 * (lane / 32) + v % 4; }
GFX950_FN int c_col(int lane) { return lane % 32; }

// ------------------------------------------------------------------------------------------------
// LDS slot layout and swizzle.
// A stage's K is S keys x 8 chunks of 16 B. Chunk c of key k goes to chunk position
//   p = 8 k + (c ^ swizzle(k)),  swizzle(k) = (k & 7) ^ ((k >> 3) & 1)
// which makes every ds_read_b128 of the B fragments conflict-free both for 64 banks (16 lanes per
// pass) and 32 banks (8 lanes per pass): within 16 consecutive keys, keys of equal parity get
// distinct chunk columns, and within 8 consecutive keys all columns differ. The swizzle depends on
// k & 15 only, so sub-tile j of a stage is sub-tile 0 shifted by a constant.
// Position p lives at byte padded_chunk(p) of the slot: wave w's DMAs fill positions
// [64 D w, 64 D (w + 1)) (D = DMAs per wave), followed by that wave's 64 kv_scales, so each
// wave's part is one contiguous LDS-DMA target and its scales sit at a fixed instruction offset.
// ------------------------------------------------------------------------------------------------
GFX950_FN int swizzle(int key) { return (key & 7) ^ ((key >> 3) & 1); }
GFX950_FN int lds_chunk(int key, int c) { return key * kChunksPerKey + (c ^ swizzle(key)); }
GFX950_FN int chunk_key(int p) { return p / kChunksPerKey; }
GFX950_FN int chunk_col(int p) { return (p % kChunksPerKey) ^ swizzle(chunk_key(p)); }
GFX950_FN int padded_chunk(Geometry g, int p) {
  const int per_wave = g.dmas_per_wave * kLanes;
  return (p / per_wave) * g.wave_part_bytes + (p % per_wave) * kChunkBytes;
}
// Byte offset (within a slot) of the kv_scale of stage key `key`, in the area of wave `wave`.
GFX950_FN int scale_area(Geometry g, int wave) {
  return wave * g.wave_part_bytes + g.dmas_per_wave * kDmaBytes;
}

// K DMA d of wave w: LDS destination M0 + d * 1024 + 16 lane with M0 = slot + w * wave_part; the
// global side is stage base + voffset + d * 1024 (the instruction offset applies to both).
GFX950_FN int dma_position(Geometry g, int wave, int d, int lane) {
  return kLanes * (g.dmas_per_wave * wave + d) + lane;
}
GFX950_FN int dma_m0(Geometry g, int wave) { return wave * g.wave_part_bytes; }
GFX950_FN int dma_inst_offset(int d) { return d * kDmaBytes; }
GFX950_FN uint32_t dma_voffset(Geometry g, int wave, int d, int lane) {
  const int p = dma_position(g, wave, d, lane);
  return uint32_t(chunk_key(p) * kKeyBytes + chunk_col(p) * kChunkBytes - dma_inst_offset(d));
}
// kv_scale DMA of a wave: same M0, instruction offset = its K bytes, lane l loads the scale of
// stage key 64 * key_group + l. The buffer base is moved back by the instruction offset.
GFX950_FN int scale_inst_offset(Geometry g) { return g.dmas_per_wave * kDmaBytes; }
GFX950_FN int scale_first_key(Geometry g, int wave) {
  return wave_key_group(g, wave) * kSubTiles * kTileCols;
}

// ds_read_b128 of the B fragment: byte offset within the slot for the wave's first sub-tile
// (stage-local sub-tile `sub`), lane, MFMA step and 16-byte half; later sub-tiles add
// subtile_stride().
GFX950_FN int b_read_offset(Geometry g, int sub, int lane, int step, int half_read) {
  return padded_chunk(g, lds_chunk(kTileCols * sub + lane % 32, frag_chunk(lane, step, half_read)));
}
GFX950_FN int subtile_stride(Geometry g) {
  return padded_chunk(g, kTileCols * kChunksPerKey) - padded_chunk(g, 0);
}
// ds_read_b32 of the kv_scale for (wave, its sub-tile j, lane): within the wave's own scale area.
GFX950_FN int scale_read_offset(Geometry g, int wave, int j, int lane) {
  return scale_area(g, wave) + 4 * (kTileCols * j + lane % 32);
}

// ------------------------------------------------------------------------------------------------
// Output stores. After the permlane32 swap, lanes 0-31 hold row A of a pair and lanes 32-63 row B,
// each for key (sub-tile base + lane % 32). Each row is stored by its own buffer_store_dword with a
// per-row resource (base = row start + k0, num_records = (N - k0) * 4 bytes, 0 for a missing row),
// so the hardware drops keys >= N and missing rows; the other half-wave gets an out-of-range
// offset. Masked stages also push out-of-window lanes out of range (clean_logits=False) or store
// -inf there (True).
// ------------------------------------------------------------------------------------------------
GFX950_FN uint32_t store_offset(int sub, int lane, int half) {
  return uint32_t(kTileCols * sub + lane % 32) * 4u | (lane / 32 == half ? 0u : kOutOfRange);
}
// Raw-buffer range check as the kernel relies on it (offset = voffset + instruction offset).
GFX950_FN bool buffer_in_range(uint64_t offset, uint64_t bytes, uint64_t num_records) {
  return offset + bytes <= num_records;
}

// ------------------------------------------------------------------------------------------------
// Work of a block, in units: first `ovh` virtual units (the fixed cost of a compute segment: Q/w
// loads, pipeline fill and drain, so that an even split of units is an even split of modelled
// time), then the stages (S keys each from the union start lo), then the -inf fill units.
// Rows' windows are clamped [s, e); the union [lo, hi) is over rows with s < e; a stage is clean
// (no compare/select) when every valid row of the block covers it. A row with s >= e makes every
// stage masked, which is why the plan sorts such rows out of non-empty blocks.
// ------------------------------------------------------------------------------------------------
GFX950_FN int clamp_key(int64_t x, int N) { return x < 0 ? 0 : (x > N ? N : int(x)); }
GFX950_FN int div_up(int a, int b) { return (a + b - 1) / b; }
GFX950_FN int clamp_int(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }

struct BlockWork {
  int lo, hi;        // union of the non-empty windows (lo == hi == 0 when none)
  int ovh;           // virtual units charged for the block's compute segment
  int stages;        // compute stages
  int cov_end;       // keys [lo, cov_end) are written by the stages
  int fill_total;    // -inf columns per row outside [lo, cov_end) (clean only)
  int fill_units;
  int units;         // ovh + stages + fill_units
};

GFX950_FN BlockWork block_work(Geometry g, int lo, int hi, int N, bool clean) {
  BlockWork b{};
  b.lo = hi > lo ? lo : 0;
  b.hi = hi > lo ? hi : 0;
  b.stages = hi > lo ? div_up(hi - lo, g.stage_keys) : 0;
  b.ovh = b.stages ? kSegmentOverheadStages : 0;
  const int64_t end = int64_t(b.lo) + int64_t(b.stages) * g.stage_keys;
  b.cov_end = b.stages ? int(end < N ? end : N) : b.lo;
  b.fill_total = clean ? N - (b.cov_end - b.lo) : 0;
  b.fill_units = div_up(b.fill_total, g.fill_cols);
  b.units = b.ovh + b.stages + b.fill_units;
  return b;
}

// What units [u_begin, u_end) of a block hold: stages [stage_begin, stage_end) and fill units
// [fill_begin, fill_end) (either range may be empty).
struct SegmentWork {
  int stage_begin, stage_end, fill_begin, fill_end;
};
GFX950_FN SegmentWork segment_work(const BlockWork& b, int u_begin, int u_end) {
  const int s0 = b.ovh, s1 = b.ovh + b.stages;
  SegmentWork w{};
  w.stage_begin = clamp_int(u_begin, s0, s1) - s0;
  w.stage_end = clamp_int(u_end, s0, s1) - s0;
  w.fill_begin = (u_begin > s1 ? u_begin : s1) - s1;
  w.fill_end = (u_end > s1 ? u_end : s1) - s1;
  return w;
}

// Column of fill index f in [0, fill_total): left of lo, then right of cov_end.
GFX950_FN int fill_column(const BlockWork& b, int f) { return f < b.lo ? f : b.cov_end + (f - b.lo); }
GFX950_FN bool stage_is_clean(int k0, int stage_keys, int max_s, int min_e) {
  return k0 >= max_s && k0 + stage_keys <= min_e;
}

// Contiguous share `part` of `total` units split into `parts` (floor boundaries).
GFX950_FN int64_t share_begin(int64_t total, int64_t parts, int64_t part) {
  return total * part / parts;
}

// ------------------------------------------------------------------------------------------------
// Launch plan. Balanced (default, M <= plan_rows): one workgroup per CU; every workgroup builds
// the same plan from ks/ke in LDS (rows with non-empty windows first, per-block unions, a prefix
// sum of units) and takes units [T g / G, T (g+1) / G). Fixed grid (caller's split_n, or M beyond
// the plan): grid (blocks, split_n), block x processed in reverse order, each block's units cut
// into split_n contiguous shares.
// ------------------------------------------------------------------------------------------------
struct LaunchPlan {
  bool small;
  bool balanced;
  int blocks;
  int grid_x;
  int grid_y;
  int split_n;
  bool reverse_rows;
};

#if !defined(__HIP_DEVICE_COMPILE__)
// Modelled makespan, in stage units, of the fixed grid for a single causal request (the layout the
// design document's model assumes): workgroups in dispatch order (x = blocks, longest first,
// fastest; then y), each to the CU that frees first (one per CU: list scheduling); a workgroup
// costs its stages and fill units plus kSegmentOverheadStages when it computes. Host only.
inline double fixed_grid_makespan(Geometry g, int64_t M, int64_t N, int split_n, int num_cus,
                                  bool clean) {
  constexpr int kMaxCus = 1024;
  double heap[kMaxCus];  // min-heap of CU free times
  const int cus = num_cus < 1 ? 1 : (num_cus > kMaxCus ? kMaxCus : num_cus);
  for (int i = 0; i < cus; ++i) heap[i] = 0;
  const int64_t blocks = (M + g.block_rows - 1) / g.block_rows;
  double makespan = 0;
  for (int y = 0; y < split_n; ++y)
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t last_row = (b + 1) * g.block_rows < M ? (b + 1) * g.block_rows : M;
      const int64_t hi = N - M + last_row;  // causal: ke = N - M + row + 1
      const BlockWork w = block_work(g, 0, int(hi < 0 ? 0 : (hi > N ? N : hi)), int(N), clean);
      const SegmentWork sw = segment_work(w, int(share_begin(w.units, split_n, y)),
                                          int(share_begin(w.units, split_n, y + 1)));
      const int stages = sw.stage_end - sw.stage_begin;
      const double cost = stages + (sw.fill_end - sw.fill_begin) + (stages ? w.ovh : 0);
      const double t = heap[0] + cost;  // replace the root, sift down
      makespan = t > makespan ? t : makespan;
      int i = 0;
      for (;;) {
        int c = 2 * i + 1;
        if (c >= cus) break;
        if (c + 1 < cus && heap[c + 1] < heap[c]) ++c;
        if (heap[c] >= t) break;
        heap[i] = heap[c];
        i = c;
      }
      heap[i] = t;
    }
  return makespan;
}

inline int choose_split_n(Geometry g, int64_t M, int64_t N, int num_cus, bool clean) {
  constexpr int kCandidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
  int best = 1;
  double best_t = 0;
  for (int s : kCandidates) {
    const double t = fixed_grid_makespan(g, M, N, s, num_cus, clean);
    if (s == 1 || t < best_t * 0.999) {  // strictly better by 0.1%: prefer fewer workgroups
      best = s;
      best_t = t;
    }
  }
  return best;
}

inline LaunchPlan plan_launch(int64_t M, int64_t N, int heads, int split_n, int num_cus,
                              bool clean) {
  LaunchPlan p{};
  p.small = M <= kSmallMaxRows;
  const Geometry g = geometry(heads, p.small);
  p.blocks = int((M + g.block_rows - 1) / g.block_rows);
  p.balanced = split_n <= 0 && M <= g.plan_rows;
  p.reverse_rows = true;
  if (p.balanced) {
    p.split_n = 0;
    p.grid_x = num_cus > 0 ? num_cus : 1;
    p.grid_y = 1;
  } else {
    p.split_n = split_n > 0 ? split_n : choose_split_n(g, M, N, num_cus > 0 ? num_cus : 1, clean);
    p.grid_x = p.blocks;
    p.grid_y = p.split_n;
  }
  return p;
}
#endif  // !__HIP_DEVICE_COMPILE__

// ------------------------------------------------------------------------------------------------
// Plan helpers: rows are grouped in chunks of 64 (one ballot); mask bit i of chunk c says whether
// row 64 c + i has a non-empty window, prefix[c] counts non-empty rows before chunk c. Position
// p < n_nonempty is the p-th non-empty row; p >= n_nonempty the (p - n_nonempty)-th empty one.
// ------------------------------------------------------------------------------------------------
GFX950_FN uint64_t chunk_valid_mask(int64_t M, int c) {
  const int64_t rows = M - int64_t(c) * kLanes;
  return rows >= kLanes ? ~0ull : (rows <= 0 ? 0ull : ((1ull << rows) - 1));
}
// Bit index of the k-th (0-based) set bit of m; m must have more than k set bits.
GFX950_FN int select_bit(uint64_t m, int k) {
  for (int i = 0; i < k; ++i) m &= m - 1;
  return __builtin_ctzll(m);
}

}  // namespace gfx950
}  // namespace aiter
