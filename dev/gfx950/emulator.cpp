// Host emulation of the gfx950 fp8_mqa_logits kernel (csrc/gfx950/), built by
// op_tests/test_gfx950_*.py with g++ and called through ctypes.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// It runs the kernel's algorithm with the kernel's own code wherever that code is not a device
// primitive: the launch plan (launch_plan.h), the balanced plan's lookups, block unions, row table,
// block facts, clean-stage run, shares and segment walk (plan.h, all host + device), the prices of
// the shared work scheduler (common/work_scheduler.h via cost_model.h) and every index of layout.h.
// What it models itself is what only a GPU has: the 64-lane ballots and scans that fill the plan
// tables, the LDS ring filled by LDS DMAs (swizzled K of D = 64 or 128 bytes, per-wave kv_scale
// areas, buffer range checks), ds_read_b128 B fragments, MFMA 32x32x64 steps on 64-lane fragments
// in the CDNA4 A/B/C register layouts (H = 16: two rows per tile, interleaved), the epilogue
// chains (one per row; H = 16 even/odd), the software pipeline with its deferred epilogue and
// tails, the permlane32 row-pair reductions, per-row buffer stores with out-of-range dropping, or at
// H = 16 one store per row pair through one resource (float or bfloat16 elements, full or
// compressed rows), the -inf fill (16-byte stores of whole chunks, element stores of partial ones;
// written between a segment's stages where the variant does, else in the fill pass) and the
// compressed tails. A 16-byte store the kernel
// issues at an address not on 16 bytes, or partly past its resource's end, is counted as a fault.
// Waves run one after another and memory is sequential: it checks the index math and the
// algorithm, not timing, hazards, waitcnts or the compiler.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fp8_mqa_logits_params.h"
#include "common/work_scheduler.h"
#include "gfx950/capabilities.h"
#include "gfx950/cost_model.h"
#include "gfx950/geometry.h"
#include "gfx950/launch_plan.h"
#include "gfx950/layout.h"
#include "gfx950/plan.h"
#include "common/e4m3.h"

using namespace aiter::gfx950;
using aiter::Fp8MqaLogitsParams;
namespace scheduler = aiter::scheduler;

namespace {

const float* const kFp8 = aiter::e4m3_table();
constexpr int kMaxRowsPerWave = 8;  // H = 16: 4 tiles of two rows

// Which head_dim index (k of the MFMA) byte b of lane half h holds inside the hardware. The
// kernel's result must not depend on it (A and B share the permutation); the tests run two.
int hw_k(int variant, int half, int byte) {
  if (variant == 0) return 32 * half + byte;                        // contiguous halves
  return 16 * half + (byte % 16) + 32 * (byte / 16);                // 16-byte interleave
}

// A buffer resource: base (bytes, relative to the tensor) and num_records.
struct Rsrc {
  int64_t base;
  uint32_t num_records;
};

// bfloat16 bits of a float, rounded to nearest even (what v_cvt_pk_bf16_f32 does; no NaN here).
uint16_t bf16_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

struct Emulator {
  Fp8MqaLogitsParams args;  // the launcher's argument block
  // The kernel's args.clean: -inf in masked stages and fill units, the full layout's only (the
  // launcher passes clean_logits && !compressed; the compressed layout's -inf is its tails).
  bool clean_in_plan;
  int element_bytes;
  Geometry geometry;
  LaunchPlan launch;
  int kmap;
  int blocks;
  // Balanced plan tables, as the kernel keeps them in LDS (LdsLayout).
  std::vector<uint64_t> nonempty_mask;
  std::vector<int> chunk_nonempty_prefix, block_units_prefix;
  std::vector<scheduler::KeyRange> row_windows;
  // One workgroup's LDS ring and the block row table of its current segment.
  std::vector<uint8_t> ring;
  std::vector<SegmentRow> segment_rows;
  int faults = 0;  // 16-byte stores off 16 bytes or straddling num_records (the kernel issues none)

  Emulator(const Fp8MqaLogitsParams& params, int fixed_grid_splits, int num_cus, int kmap_variant)
      : args(params), kmap(kmap_variant) {
    clean_in_plan = args.clean_logits && !args.compressed;
    element_bytes = args.logits_dtype == aiter::LogitsDtype::kBFloat16 ? 2 : 4;
    launch = plan_launch(args.M, args.N, args.H, args.D, args.out_stride, element_bytes, fixed_grid_splits,
                         num_cus, clean_in_plan);
    geometry = geometry_of(args.H, launch.small, args.D);
    blocks = int((args.M + geometry.block_rows - 1) / geometry.block_rows);
    ring.assign(size_t(geometry.slots) * geometry.slot_bytes, 0);
    segment_rows.resize(geometry.block_rows);
  }

  PlanTables plan() const {
    return PlanTables{nonempty_mask.data(), chunk_nonempty_prefix.data(), int(args.M)};
  }

  // ----------------------------------------------------------------------------------------------
  // Balanced plan (kernel: build_balanced_plan). The ballots and wave scans are modelled here; the
  // unions and prices are plan.h's and the scheduler's.
  // ----------------------------------------------------------------------------------------------
  void build_plan() {
    const int M = int(args.M), N = int(args.N);
    const int chunks = plan_chunks(M);
    nonempty_mask.assign(chunks, 0);
    chunk_nonempty_prefix.assign(chunks + 1, 0);
    row_windows.assign(M, scheduler::KeyRange{0, 0});
    for (int c = 0; c < chunks; ++c) {
      uint64_t ballot = 0;
      for (int lane = 0; lane < kLanes; ++lane) {
        const int row = c * kLanes + lane;
        if (row >= M) continue;
        row_windows[row] = scheduler::row_window(args.ks[row], args.ke[row], N);
        if (!row_windows[row].empty()) ballot |= 1ull << lane;
      }
      nonempty_mask[c] = ballot;
      chunk_nonempty_prefix[c] = __builtin_popcountll(ballot);
    }
    exclusive_scan(chunk_nonempty_prefix, chunks);
    const int nonempty_rows = chunk_nonempty_prefix[chunks];
    const scheduler::CostModel model = cost_model(geometry, N, clean_in_plan);
    block_units_prefix.assign(blocks + 1, 0);
    for (int b = 0; b < blocks; ++b) {
      const int first = b * geometry.block_rows;
      const int count = std::min(geometry.block_rows, nonempty_rows - first);
      const scheduler::KeyRange keys =
          positions_union(plan(), N, first, count, [&](int row) { return row_windows[row]; }).range();
      block_units_prefix[b] = int(scheduler::price_block(model, keys).total());
    }
    exclusive_scan(block_units_prefix, blocks);
  }
  // One wave's wave_scan_array.
  static void exclusive_scan(std::vector<int>& values, int n) {
    int run = 0;
    for (int i = 0; i < n; ++i) {
      const int x = values[i];
      values[i] = run;
      run += x;
    }
    values[n] = run;
  }

  // ----------------------------------------------------------------------------------------------
  // Segment setup (kernel: setup_block): the row table, then the block's facts.
  // ----------------------------------------------------------------------------------------------
  BlockFacts setup_block(int b, bool balanced) {
    for (int t = 0; t < geometry.block_rows; ++t)
      segment_rows[t] = segment_row(plan(), balanced, args.ks, args.ke, int(args.N),
                                    b * geometry.block_rows + t);
    const BlockBounds bounds = block_bounds(geometry.block_rows, int(args.N),
                                            [&](int i) { return segment_rows[i]; });
    return block_facts(geometry, int(args.N), clean_in_plan, bounds.keys.range(),
                       bounds.max_begin, bounds.min_end);
  }

  // ----------------------------------------------------------------------------------------------
  // Memory: LDS DMA of a stage (kernel: KeyPipeline::stage_load + issue_*), buffer stores.
  // ----------------------------------------------------------------------------------------------
  void load_stage(const BlockFacts& block, int stage, int stage_end, int slot) {
    const bool live = stage < stage_end;
    const int stage_key = block.first_key + stage * geometry.stage_keys;
    uint8_t* slot_bytes = ring.data() + size_t(slot) * geometry.slot_bytes;
    for (int wave = 0; wave < kWaves; ++wave) {
      const int m0 = dma_m0(geometry, wave);
      // K: resource base kv + stage_key * D, num_records (N - stage_key) * D (0 when not live).
      const uint64_t k_records = live ? uint64_t(args.N - stage_key) * args.D : 0;
      for (int d = 0; d < geometry.dmas_per_wave; ++d)
        for (int lane = 0; lane < kLanes; ++lane) {
          const uint64_t offset = uint64_t(dma_voffset(geometry, wave, d, lane)) + dma_inst_offset(d);
          uint8_t* dst = slot_bytes + m0 + dma_inst_offset(d) + kChunkBytes * lane;
          if (buffer_in_range(offset, kChunkBytes, k_records))
            std::memcpy(dst, args.kv + int64_t(stage_key) * args.D + int64_t(offset), kChunkBytes);
          else
            std::memset(dst, 0, kChunkBytes);
        }
      // kv_scale: base scales + (stage_key + first key) * 4 - inst, num_records (N - key) * 4 + inst.
      const int scale_key = stage_key + scale_first_key(geometry, wave);
      const int inst = scale_inst_offset(geometry);
      const uint64_t scale_records =
          live && scale_key < args.N ? uint64_t(args.N - scale_key) * 4 + inst : 0;
      for (int lane = 0; lane < kLanes; ++lane) {
        const uint64_t offset = uint64_t(lane) * 4 + inst;
        float v = 0.f;
        if (buffer_in_range(offset, 4, scale_records)) v = args.kv_scales[int64_t(scale_key) + lane];
        std::memcpy(slot_bytes + m0 + inst + 4 * lane, &v, 4);
      }
    }
  }

  // Kernel: buffer_store_logit (a dword, or a short of the RNE bfloat16).
  void store(float v, const Rsrc& rsrc, uint32_t offset) {
    if (!buffer_in_range(offset, element_bytes, rsrc.num_records)) return;
    const int64_t at = rsrc.base + offset;
    if (element_bytes == 4) {
      std::memcpy(static_cast<uint8_t*>(args.out) + at, &v, 4);
    } else {
      const uint16_t bits = bf16_bits(v);
      std::memcpy(static_cast<uint8_t*>(args.out) + at, &bits, 2);
    }
  }
  // Kernel: buffer_store_b128 of a whole -inf chunk. Dropped when it starts past num_records; the
  // kernel's runs end on a chunk, so it is never partly in range, and its chunks sit on 16 bytes.
  void store_chunk(const Rsrc& rsrc, uint32_t offset) {
    if (offset >= rsrc.num_records) return;
    const uint64_t address = uint64_t(reinterpret_cast<uintptr_t>(args.out)) + uint64_t(rsrc.base + offset);
    if (!buffer_in_range(offset, kChunkBytes, rsrc.num_records) || address % kChunkBytes != 0) {
      ++faults;
      return;
    }
    for (uint32_t e = 0; e < uint32_t(kChunkBytes); e += uint32_t(element_bytes))
      store(-INFINITY, Rsrc{rsrc.base, rsrc.num_records}, offset + e);
  }
  // Column phase of a row of out within its 16-byte chunk (kernel: chunk_phase of the address).
  int row_phase(int64_t row_base) const {
    return chunk_phase(uint64_t(reinterpret_cast<uintptr_t>(args.out)) + uint64_t(row_base), element_bytes);
  }
  // Kernel: the row resources of Epilogue::store_pair (WaveRows::out_row and key_limit). In the
  // compressed layout the row's key 0 sits s_m columns before the row and keys stop at
  // s_m + out_columns; in the full one at N.
  Rsrc row_rsrc(int row, int stage_key, bool live) const {
    const int r = row < 0 ? 0 : row;
    const int begin = args.compressed ? int(scheduler::row_window(args.ks[r], args.ke[r], args.N).begin) : 0;
    const int key_limit = args.compressed ? begin + int(args.out_columns) : int(args.N);
    Rsrc rsrc;
    rsrc.base = (int64_t(r) * args.out_stride - begin + int64_t(stage_key)) * element_bytes;
    rsrc.num_records = live && row >= 0 ? uint32_t(std::max(key_limit - stage_key, 0)) * element_bytes : 0;
    return rsrc;
  }

  // ----------------------------------------------------------------------------------------------
  // One wave's registers, as 64-lane arrays.
  // ----------------------------------------------------------------------------------------------
  struct Frag {  // v8i: 32 bytes per lane
    uint8_t b[kLanes][32];
  };
  struct Acc {  // v16f
    float v[kLanes][16];
  };
  struct Chains {
    float v[kSubTiles][kTilesPerWave][2][kLanes];  // [sub-tile][chain set][even/odd][lane]
  };
  struct Carry {
    Acc acc;
    Chains part;
    float scale[kSubTiles][kLanes];
    int stage_key;
    bool live;
  };
  struct WaveState {
    int wave;
    Frag q_frag[kTilesPerWave][kMaxSteps];
    float weights[kTilesPerWave][16][kLanes];
    int row[kMaxRowsPerWave];
    Carry carry;
  };

  void mfma(Acc& c, const Frag& a, const Frag& b, bool zero) const {
    float av[32][64], bv[64][32];
    for (int lane = 0; lane < kLanes; ++lane)
      for (int byte = 0; byte < 32; ++byte) {
        const int k = hw_k(kmap, lane / 32, byte);
        av[lane % 32][k] = kFp8[a.b[lane][byte]];
        bv[k][lane % 32] = kFp8[b.b[lane][byte]];
      }
    for (int lane = 0; lane < kLanes; ++lane)
      for (int v = 0; v < 16; ++v) {
        const int i = c_row(lane, v), j = c_col(lane);
        float sum = zero ? 0.f : c.v[lane][v];
        for (int k = 0; k < kStepK; ++k) sum += av[i][k] * bv[k][j];
        c.v[lane][v] = sum;
      }
  }

  // Kernel: load_rows. The lane's A row m is the wave's row tile_row(t, m); element v's row is
  // tile_row(t, v % 2) (c_row(l, v) has v's parity).
  void load_rows(WaveState& wave) const {
    for (int r = 0; r < geometry.rows_per_wave; ++r)
      wave.row[r] = segment_rows[wave_row_slot(geometry, wave.wave, r)].row;
    auto row_or_zero = [&](int r) { return wave.row[r] >= 0 ? wave.row[r] : 0; };
    for (int t = 0; t < kTilesPerWave; ++t)
      for (int lane = 0; lane < kLanes; ++lane) {
        const int m = lane % 32;
        const int row = row_or_zero(tile_row(geometry, t, m));
        const int head = tile_head(geometry, t, m);
        const uint8_t* q_row = args.q + (int64_t(row) * args.H + head) * args.D;
        for (int s = 0; s < geometry.steps; ++s) {
          std::memcpy(wave.q_frag[t][s].b[lane], q_row + frag_chunk(lane, s, 0) * kChunkBytes, 16);
          std::memcpy(wave.q_frag[t][s].b[lane] + 16, q_row + frag_chunk(lane, s, 1) * kChunkBytes, 16);
        }
        for (int v = 0; v < 16; ++v)
          wave.weights[t][v][lane] =
              args.weights[int64_t(row_or_zero(tile_row(geometry, t, v % 2))) * args.weights_stride +
                           tile_head(geometry, t, c_row(lane, v))];
      }
  }

  // Kernel: KeyPipeline::read_b.
  void read_b(Frag (&b)[kMaxSteps], int slot, int wave, int j) const {
    const uint8_t* slot_bytes = ring.data() + size_t(slot) * geometry.slot_bytes;
    const int sub0 = wave_subtile(geometry, wave, 0);
    for (int step = 0; step < geometry.steps; ++step)
      for (int lane = 0; lane < kLanes; ++lane) {
        std::memcpy(b[step].b[lane],
                    slot_bytes + b_read_offset(geometry, sub0, lane, step, 0) + j * subtile_stride(geometry), 16);
        std::memcpy(b[step].b[lane] + 16,
                    slot_bytes + b_read_offset(geometry, sub0, lane, step, 1) + j * subtile_stride(geometry), 16);
      }
  }

  // Kernel: Epilogue::accumulate.
  void accumulate(const Acc& acc, int t, const WaveState& wave,
                  float (&chain)[kTilesPerWave][2][kLanes]) const {
    const int r = tile_chain_set(geometry, t);
    const bool first = tile_starts_chains(geometry, t);
    const int slots = geometry.rows_per_tile > 1 ? 2 : 1;  // H >= 32: one chain per row
    for (int lane = 0; lane < kLanes; ++lane)
      for (int v = 0; v < 16; ++v) {
        const float x = std::fmax(acc.v[lane][v], 0.f);
        float& ch = chain[r][v % slots][lane];
        ch = (first && v < slots) ? x * wave.weights[t][v][lane] : std::fmaf(x, wave.weights[t][v][lane], ch);
      }
  }

  static void permlane32_swap(float (&x)[kLanes], float (&y)[kLanes]) {
    float nx[kLanes], ny[kLanes];
    for (int l = 0; l < 32; ++l) {
      nx[l] = x[l];
      nx[l + 32] = y[l];
      ny[l] = x[l + 32];
      ny[l + 32] = y[l + 32];
    }
    std::memcpy(x, nx, sizeof nx);
    std::memcpy(y, ny, sizeof ny);
  }

  // Kernel: reduce_two (asm) via Epilogue::reduce_group; then store_group and
  // store_pair / store_pair_at_once.
  void reduce_group(int k, Chains& part, const float (&scale)[kSubTiles][kLanes]) const {
    const int jx = tail_subtile(geometry, 2 * k), px = tail_pair(geometry, 2 * k);
    const int jy = tail_subtile(geometry, 2 * k + 1), py = tail_pair(geometry, 2 * k + 1);
    float(&xa)[kLanes] = part.v[jx][pair_chain_set(geometry, px, 0)][pair_chain_slot(geometry, 0)];
    float(&xb)[kLanes] = part.v[jx][pair_chain_set(geometry, px, 1)][pair_chain_slot(geometry, 1)];
    float(&ya)[kLanes] = part.v[jy][pair_chain_set(geometry, py, 0)][pair_chain_slot(geometry, 0)];
    float(&yb)[kLanes] = part.v[jy][pair_chain_set(geometry, py, 1)][pair_chain_slot(geometry, 1)];
    permlane32_swap(xa, xb);
    for (int l = 0; l < kLanes; ++l) xa[l] *= scale[jx][l];
    permlane32_swap(ya, yb);
  }
  void store_group(bool masked, int k, const Chains& part, const float (&scale)[kSubTiles][kLanes],
                   int stage_key, bool live, const WaveState& wave) {
    const int jx = tail_subtile(geometry, 2 * k), px = tail_pair(geometry, 2 * k);
    const int jy = tail_subtile(geometry, 2 * k + 1), py = tail_pair(geometry, 2 * k + 1);
    const bool packed = geometry.rows_per_tile > 1;
    const auto& x = part.v[jx];
    const auto& y = part.v[jy];
    float vx[kLanes], vy[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      const float x_a = x[pair_chain_set(geometry, px, 0)][pair_chain_slot(geometry, 0)][l];
      const float x_b = x[pair_chain_set(geometry, px, 1)][pair_chain_slot(geometry, 1)][l];
      const float y_a = y[pair_chain_set(geometry, py, 0)][pair_chain_slot(geometry, 0)][l];
      const float y_b = y[pair_chain_set(geometry, py, 1)][pair_chain_slot(geometry, 1)][l];
      vx[l] = std::fmaf(x_b, scale[jx][l], x_a);
      vy[l] = (y_a + y_b) * scale[jy][l];
    }
    if (packed) {
      store_pair_at_once(masked, vx, jx, px, stage_key, live, wave);
      store_pair_at_once(masked, vy, jy, py, stage_key, live, wave);
    } else {
      store_pair(masked, vx, jx, px, stage_key, live, wave);
      store_pair(masked, vy, jy, py, stage_key, live, wave);
    }
  }
  void store_pair(bool masked, const float (&v)[kLanes], int j, int p, int stage_key, bool live,
                  const WaveState& wave) {
    const Rsrc rsrc_a = row_rsrc(wave.row[2 * p], stage_key, live);
    const Rsrc rsrc_b = row_rsrc(wave.row[2 * p + 1], stage_key, live);
    const int sub0 = wave_subtile(geometry, wave.wave, 0);
    for (int lane = 0; lane < kLanes; ++lane) {
      float x = v[lane];
      uint32_t offset_a = store_offset(sub0, lane, 0, element_bytes);
      uint32_t offset_b = store_offset(sub0, lane, 1, element_bytes);
      if (masked) {
        const SegmentRow& w = segment_rows[wave_row_slot(geometry, wave.wave, 2 * p + (lane < 32 ? 0 : 1))];
        const int n = stage_key + wave_subtile(geometry, wave.wave, j) * kTileCols + lane % 32;
        const bool in = n >= w.begin && n < w.end;
        const bool keep = in || clean_in_plan;
        x = in ? x : -INFINITY;
        offset_a = keep ? offset_a : kOutOfRange;
        offset_b = keep ? offset_b : kOutOfRange;
      }
      store(x, rsrc_a, offset_a + j * kTileCols * element_bytes);
      store(x, rsrc_b, offset_b + j * kTileCols * element_bytes);
    }
  }
  // Kernel: the pair's resource and lane offsets of load_rows (WaveRows::pair_base, pair_offset):
  // one resource at the lower of the two rows' key 0, each lane at its row's offset from there.
  void pair_addressing(const WaveState& wave, int p, int64_t* base, uint32_t (&offset)[kLanes]) const {
    int64_t addr[2];
    bool valid[2];
    for (int h = 0; h < 2; ++h) {
      const int row = wave.row[2 * p + h];
      valid[h] = row >= 0;
      addr[h] = row_rsrc(row, 0, true).base;
    }
    *base = !valid[1] || (valid[0] && addr[0] < addr[1]) ? addr[0] : addr[1];
    for (int lane = 0; lane < kLanes; ++lane) {
      const int h = lane / 32;
      const int key = kTileCols * wave_subtile(geometry, wave.wave, 0) + lane % 32;
      offset[lane] = valid[h] ? uint32_t(addr[h] - *base) + uint32_t(key) * element_bytes : kOutOfRange;
    }
  }
  void store_pair_at_once(bool masked, const float (&v)[kLanes], int j, int p, int stage_key, bool live,
                          const WaveState& wave) {
    int64_t base;
    uint32_t pair_offset[kLanes];
    pair_addressing(wave, p, &base, pair_offset);
    const Rsrc rsrc{base + int64_t(stage_key) * element_bytes, live ? kPairRecords : 0u};
    for (int lane = 0; lane < kLanes; ++lane) {
      float x = v[lane];
      uint32_t offset = pair_offset[lane];
      if (masked) {
        const SegmentRow& w = segment_rows[wave_row_slot(geometry, wave.wave, 2 * p + (lane < 32 ? 0 : 1))];
        const int n = stage_key + wave_subtile(geometry, wave.wave, j) * kTileCols + lane % 32;
        const bool in = n >= w.begin && n < w.end;
        const bool keep = in || (clean_in_plan && n < args.N);
        x = in ? x : -INFINITY;
        offset = keep ? offset : kOutOfRange;
      }
      store(x, rsrc, offset + j * kTileCols * element_bytes);
    }
  }

  bool tail_deferred(int k) const { return tail_group_deferred(geometry, k); }

  // Kernel: stage_body (one wave).
  void stage_body(bool masked, int stage_key, int slot, WaveState& wave) {
    constexpr int kTiles = kTilesPerWave;
    constexpr int kTileSteps = kSubTiles * kTiles;
    const int tails = kSubTiles * geometry.pairs_per_wave;
    const uint8_t* slot_bytes = ring.data() + size_t(slot) * geometry.slot_bytes;
    float scale[kSubTiles][kLanes];
    for (int j = 0; j < kSubTiles; ++j)
      for (int lane = 0; lane < kLanes; ++lane)
        std::memcpy(&scale[j][lane], slot_bytes + scale_read_offset(geometry, wave.wave, j, lane), 4);
    Frag b[kSubTiles][kMaxSteps];
    read_b(b[0], slot, wave.wave, 0);
    Chains part;
    Acc acc[2];
    Carry& carry = wave.carry;
    for (int n = 0; n < kTileSteps; ++n) {
      const int j = n / kTiles, t = n % kTiles;
      bool pending[8] = {};
      for (int k = 0; k < tails / 2; ++k) {
        if (n != tail_group_step(geometry, k)) continue;
        if (tail_deferred(k))
          reduce_group(k, carry.part, carry.scale);
        else
          reduce_group(k, part, scale);
        pending[k] = true;
      }
      for (int s = 0; s < geometry.steps; ++s) mfma(acc[n & 1], wave.q_frag[t][s], b[j][s], s == 0);
      if (t == kTiles - 1 && j + 1 < kSubTiles) read_b(b[j + 1], slot, wave.wave, j + 1);
      if (n == 0) {
        accumulate(carry.acc, kTiles - 1, wave, carry.part.v[kSubTiles - 1]);
      } else {
        const int m = n - 1;
        accumulate(acc[m & 1], m % kTiles, wave, part.v[m / kTiles]);
      }
      for (int k = 0; k < tails / 2; ++k) {
        if (!pending[k]) continue;
        if (tail_deferred(k))
          store_group(masked, k, carry.part, carry.scale, carry.stage_key, carry.live, wave);
        else
          store_group(masked, k, part, scale, stage_key, true, wave);
      }
    }
    carry.acc = acc[(kTileSteps - 1) & 1];
    carry.part = part;
    std::memcpy(carry.scale, scale, sizeof scale);
    carry.stage_key = stage_key;
    carry.live = true;
  }

  // Kernel: finish_last_stage.
  void finish_last_stage(WaveState& wave) {
    Carry& carry = wave.carry;
    accumulate(carry.acc, kTilesPerWave - 1, wave, carry.part.v[kSubTiles - 1]);
    for (int k = 0; k < kSubTiles * geometry.pairs_per_wave / 2; ++k)
      if (tail_deferred(k)) {
        reduce_group(k, carry.part, carry.scale);
        store_group(true, k, carry.part, carry.scale, carry.stage_key, carry.live, wave);
      }
  }

  // Kernel: compute_stages + stage_loop. All waves step through the stages together; where the
  // variant writes the fill between stages (full layout), the fill units due come before each piece.
  void compute_stages(const BlockFacts& block, int stage_begin, int stage_end, int fill_begin, int fill_end) {
    for (int d = 0; d < geometry.prefetch_stages; ++d) load_stage(block, stage_begin + d, stage_end, d);
    std::vector<WaveState> waves(kWaves);
    for (int w = 0; w < kWaves; ++w) {
      WaveState& wave = waves[w];
      wave.wave = w;
      load_rows(wave);
      std::memset(&wave.carry, 0, sizeof wave.carry);
      wave.carry.live = false;
    }
    const StageRange clean = clean_stages(block, geometry.stage_keys, stage_begin, stage_end);
    const bool fill_here = geometry.fill_between_stages && !args.compressed;
    const FillSchedule schedule{stage_begin, stage_end, fill_begin, fill_end};
    int read_slot = 0;
    int filled = fill_begin;
    for (int i = stage_begin; i < stage_end;) {
      const int due = schedule.due_before(i);
      if (fill_here && filled < due) fill(block, filled, due);
      filled = due;
      for (const int next = fill_here ? schedule.next_break(i) : stage_end; i < next; ++i) {
        const int write_slot = read_slot == 0 ? geometry.slots - 1 : read_slot - 1;
        load_stage(block, i + geometry.prefetch_stages, stage_end, write_slot);
        const bool masked = !(i >= clean.begin && i < clean.end);
        for (WaveState& wave : waves)
          stage_body(masked, block.first_key + i * geometry.stage_keys, read_slot, wave);
        read_slot = read_slot + 1 == geometry.slots ? 0 : read_slot + 1;
      }
    }
    for (WaveState& wave : waves) finish_last_stage(wave);
  }

  // Kernel: store_fill_part, every thread of one row (thread t of row_threads).
  void store_fill_part(int64_t row_base, bool row_present, const FillRow& row, int part, ColumnRange positions,
                       int row_threads) {
    const int per_chunk = chunk_elements(element_bytes);
    const ColumnRange chunks = positions_in_part(row, per_chunk, part, positions.begin, positions.end);
    if (chunks.end <= chunks.begin) return;
    const ColumnRange columns = fill_part(row, part);
    const ColumnRange whole_in_part = whole_chunks(columns, row.phase, per_chunk);
    const int whole_begin = std::max(chunks.begin, whole_in_part.begin);
    const int whole_end = std::min(chunks.end, whole_in_part.end);
    if (whole_begin < whole_end) {
      const int count = whole_end - whole_begin;
      const Rsrc rsrc{row_base + int64_t(chunk_first_column(whole_begin, row.phase, per_chunk)) * element_bytes,
                      row_present ? uint32_t(count) * kChunkBytes : 0u};
      for (int k = 0; k < count; k += row_threads)
        for (int t = 0; t < row_threads; ++t) store_chunk(rsrc, uint32_t(k + t) * kChunkBytes);
    }
    const PartialChunks partial = partial_chunks(chunks, whole_in_part);
    if (partial.head >= 0 || partial.tail >= 0) {
      const Rsrc rsrc{row_base, row_present ? uint32_t(row.row_end) * element_bytes : 0u};
      for (int t = 0; t < row_threads; ++t) {
        const int chunk = t < per_chunk ? partial.head : partial.tail;
        const int column = chunk_first_column(chunk, row.phase, per_chunk) + t % per_chunk;
        const bool fill = t < 2 * per_chunk && chunk >= 0 && column_in(columns, column);
        store(-INFINITY, rsrc, fill ? uint32_t(column) * element_bytes : kOutOfRange);
      }
    }
  }

  // Kernel: fill_neg_inf (rows in rounds, each by fill_row_threads threads).
  void fill(const BlockFacts& block, int unit_begin, int unit_end) {
    const int row_threads = fill_row_threads(geometry);
    const int rows_at_once = kThreads / row_threads;
    const int per_chunk = chunk_elements(element_bytes);
    for (int slot0 = 0; slot0 < geometry.block_rows; slot0 += rows_at_once)
      for (int r = 0; r < rows_at_once; ++r) {
        const int row = segment_rows[slot0 + r].row;
        const int64_t row_base = int64_t(row < 0 ? 0 : row) * args.out_stride * element_bytes;
        const FillRow fill_row{block.first_key, block.covered_end, int(args.N), row_phase(row_base)};
        const int row_chunks = fill_chunks(fill_row, per_chunk);
        for (int u = unit_begin; u < unit_end; ++u) {
          const ColumnRange positions =
              unit_position_range(geometry, element_bytes, u, block.fill_units, row_chunks);
          for (int part = 0; part < 2; ++part)
            store_fill_part(row_base, row >= 0, fill_row, part, positions, row_threads);
        }
      }
  }

  // Kernel: segment.
  void segment(bool compute, int b, int unit_begin, int unit_end, bool balanced) {
    const BlockFacts block = setup_block(b, balanced);
    const scheduler::SegmentParts parts = segment_parts(block, unit_begin, unit_end);
    const bool computes = parts.tile_begin < parts.tile_end;
    if (compute) {
      if (computes)
        compute_stages(block, int(parts.tile_begin), int(parts.tile_end), int(parts.fill_begin), int(parts.fill_end));
    } else if (parts.fill_begin < parts.fill_end && !(computes && geometry.fill_between_stages)) {
      fill(block, int(parts.fill_begin), int(parts.fill_end));
    }
  }

  // Kernel: pass.
  void pass(bool compute, bool balanced, int fixed_block, UnitRange units) {
    for_each_segment(
        balanced, blocks, fixed_block, units, [&](int b) { return block_units_prefix[b]; },
        [&](int b, int unit_begin, int unit_end) { segment(compute, b, unit_begin, unit_end, balanced); });
  }

  // The units workgroup (x, y) takes (kernel: run), and for the fixed grid its block.
  UnitRange workgroup_units(int x, int y, int* fixed_block) {
    if (launch.balanced) {
      *fixed_block = 0;
      return unit_share(block_units_prefix[blocks], launch.grid_x, x);
    }
    *fixed_block = fixed_grid_block(blocks, x, launch.reverse_blocks);
    return unit_share(setup_block(*fixed_block, false).units(), launch.fixed_grid_splits, y);
  }

  // Kernel: fill_compressed_tails of workgroup (x, y) (all 512 threads).
  void compressed_tails(int x, int y) {
    const int workgroups = launch.grid_x * launch.grid_y, workgroup = x + y * launch.grid_x;
    const uint32_t columns = uint32_t(args.out_columns);
    for (int m = workgroup; m < args.M; m += workgroups) {
      const scheduler::KeyRange window = scheduler::row_window(args.ks[m], args.ke[m], args.N);
      const int keys = int(std::min<int64_t>(window.size(), columns));
      const int64_t row_base = int64_t(m) * args.out_stride * element_bytes;
      const FillRow tail{0, keys, int(columns), row_phase(row_base)};
      store_fill_part(row_base, true, tail, 1, ColumnRange{0, fill_chunks(tail, chunk_elements(element_bytes))},
                      kThreads);
    }
  }

  // Kernel: run, for every workgroup of the grid. Returns the number of workgroups with work.
  int run_all() {
    if (launch.balanced) build_plan();
    int busy = 0;
    for (int y = 0; y < launch.grid_y; ++y)
      for (int x = 0; x < launch.grid_x; ++x) {
        if (args.compressed && args.clean_logits) compressed_tails(x, y);
        int fixed_block;
        const UnitRange units = workgroup_units(x, y, &fixed_block);
        if (units.begin >= units.end) continue;
        pass(true, launch.balanced, fixed_block, units);
        pass(false, launch.balanced, fixed_block, units);
        ++busy;
      }
    return busy;
  }
};

}  // namespace

// What the plan reads of a launch's arguments: the windows, the sizes and clean_logits.
static Fp8MqaLogitsParams plan_params(const int32_t* ks, const int32_t* ke, int M, int N, int H, int D,
                                      int clean) {
  Fp8MqaLogitsParams params{};
  params.ks = ks;
  params.ke = ke;
  params.M = M;
  params.N = N;
  params.H = H;
  params.D = D;
  params.out_stride = N;
  params.out_columns = N;
  params.clean_logits = clean != 0;
  return params;
}

extern "C" {

// Runs the whole grid; returns the number of non-empty workgroups, -1 on bad arguments, or -2 when
// a 16-byte fill store was off 16 bytes or partly past its resource (store_chunk).
// out: float32 or (bf16 != 0) bfloat16 bits; out_columns > 0: the compressed layout of that width.
int gfx950_emulate(const uint8_t* q, const uint8_t* kv, const float* scales, const float* w,
                   const int32_t* ks, const int32_t* ke, void* out, int M, int N, int H, int D,
                   long long w_stride, long long out_stride, int clean, int fixed_grid_splits,
                   int num_cus, int kmap_variant, int bf16, int out_columns, int* plan_out) {
  if (!serves(H, D) || M <= 0 || N <= 0 || N > kMaxKeys || out_columns < 0) return -1;
  Fp8MqaLogitsParams params = plan_params(ks, ke, M, N, H, D, clean);
  params.logits_dtype = bf16 ? aiter::LogitsDtype::kBFloat16 : aiter::LogitsDtype::kFloat32;
  params.compressed = out_columns > 0;
  params.out_columns = out_columns > 0 ? out_columns : N;
  params.q = q;
  params.kv = kv;
  params.kv_scales = scales;
  params.weights = w;
  params.out = out;
  params.weights_stride = w_stride;
  params.out_stride = out_stride;
  Emulator emu(params, fixed_grid_splits, num_cus, kmap_variant);
  if (plan_out) {
    plan_out[0] = emu.launch.small;
    plan_out[1] = emu.launch.balanced;
    plan_out[2] = emu.launch.grid_x;
    plan_out[3] = emu.launch.grid_y;
    plan_out[4] = emu.launch.fixed_grid_splits;
  }
  const int busy = emu.run_all();
  return emu.faults > 0 ? -2 : busy;
}

// The balanced plan alone (no compute): per workgroup, the real units it processes (stages and
// fill units, not the virtual overhead units), its compute segments (Q/w loads, pipeline) and,
// when wg_fill is given, how many of its units are fill units. Returns the total number of units
// (virtual ones included), or -1.
int gfx950_balanced_plan(const int32_t* ks, const int32_t* ke, int M, int N, int H, int D, int clean,
                         int num_cus, int* wg_units, int* wg_segments, int* wg_fill) {
  if (!serves(H, D) || M <= 0 || N <= 0) return -1;
  Emulator emu(plan_params(ks, ke, M, N, H, D, clean), 0, num_cus, 0);
  if (!emu.launch.balanced) return -1;
  emu.build_plan();
  for (int x = 0; x < emu.launch.grid_x; ++x) {
    int fixed_block, real = 0, segments = 0, fill = 0;
    const UnitRange units = emu.workgroup_units(x, 0, &fixed_block);
    for_each_segment(true, emu.blocks, fixed_block, units,
                     [&](int b) { return emu.block_units_prefix[b]; },
                     [&](int b, int unit_begin, int unit_end) {
                       const scheduler::SegmentParts parts =
                           segment_parts(emu.setup_block(b, true), unit_begin, unit_end);
                       real += int((parts.tile_end - parts.tile_begin) + (parts.fill_end - parts.fill_begin));
                       fill += int(parts.fill_end - parts.fill_begin);
                       segments += parts.tile_begin < parts.tile_end;
                     });
    wg_units[x] = real;
    wg_segments[x] = segments;
    if (wg_fill) wg_fill[x] = fill;
  }
  return emu.block_units_prefix[emu.blocks];
}

// The fp8 e4m3fn decode the emulator uses (checked against torch by the tests).
float gfx950_fp8_to_float(int b) { return kFp8[b & 255]; }

}  // extern "C"
