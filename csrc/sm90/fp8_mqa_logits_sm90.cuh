// fp8_mqa_logits for NVIDIA Hopper (sm_90a): TMA + wgmma, warp-specialised, persistent.
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]    for n in [s_m, e_m)
//                  -inf elsewhere when clean_logits; without it nothing outside the windows is written
//   (kv_scale > 0 is a precondition, so it is applied after the head sum.)
//
// Tensors (see fp8_mqa_logits_params.h):
//   Q  [M, H, 128] e4m3, read through a 2-D tensor map [M*H rows, 128 bytes], box 128 rows
//   K  [N, 128]    e4m3, read through a 2-D tensor map [N rows, 128 bytes],   box 64 rows
//   kv_scale [N] f32, w [M, H] f32 (row stride weights_stride), ks/ke [M] i32
//   out [M, N] f32, row stride out_stride
//
// Work decomposition
//   Q block  = kRowsPerBlock = kQTileCols / H query rows (384 columns: 12 rows at H=32, 6 at H=64);
//              its Q tile is kQTileCols (row, head) columns x 128 d.
//   K tile   = 64 keys. A Q block only visits the K tiles of its union window [lo, hi).
//   Each CTA is persistent. All CTAs derive the same plan from ks/ke on the device (no host sync):
//   the concatenated list of (Q block, K tile) units, each block preceded by kBlockOverheadTiles units
//   for starting it, is cut into gridDim.x equal ranges, so causal and multi-request chunks balance
//   by real window work. With clean_logits, the column tiles
//   outside each block's union window form a second list, cut the same way, that the spare producer
//   warps fill with -inf while the math warpgroups compute.
//
// Roles (128 x (1 + kMathWarpgroups) threads; tunables header)
//   warpgroup 0, warp 0   : producer. Publishes each Q block (Q tile by TMA, weights and row
//                           windows into a slot), then streams its K tiles into an 8-stage ring.
//   warpgroup 0, warps 1-3: the rows with 1..kExactKeys keys on the CUDA cores (exact_short_rows),
//                           then the -inf fill of the out-of-window column tiles (clean_logits only).
//   warpgroups 1..W       : math. Warpgroup g owns Q-tile columns [128 g, 128 g + 128): all consume
//                           every K tile with wgmma m64n128k32 (A = 64 keys, B = 128 columns). With
//                           W = 3 (default) each has one accumulator and the three MMAs of a tile
//                           finish in turn, so one warpgroup's epilogue (relu, x w, head sum,
//                           x kv_scale, store) runs under the others' MMAs; with W = 2 each has two
//                           accumulators and its own next MMA runs under its epilogue.
//
// Accumulator fragment of m64n128 (per thread, 64 floats): warp wi, lane l, quad lane q = l % 4:
//   d[4j + 2i + c] = S[key = 16 wi + l/4 + 8 i][col = 8 j + 2 q + c],  j < 16, i, c in {0, 1}
//   col -> (row r = j / (H/8), head = 8 (j % (H/8)) + 2 q + c) within the warpgroup's rows.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "common/fp8_mqa_logits_params.h"
#include "sm90/tunables.h"
#include "sm90/primitives.cuh"

namespace aiter {
namespace sm90 {

constexpr int kKTileBytes = kKeysPerTile * kHeadDim;  // 8 KiB
constexpr int kQTileBytes = kQTileCols * kHeadDim;    // 48 KiB with three math warpgroups
constexpr int kColsPerMathWarpgroup = kQTileCols / kMathWarpgroups;
constexpr int kFillThreads = 96;
// Fill runs up to this many columns (2 KiB) go a warp per row (fill_outside_windows): measured on
// the H200, a warp per row took 1024x1024 causal clean from 28.8 to 20.3 us (short runs: loop
// overhead) but multi_req 8192x8192 clean from 117 to 137 us (long runs: three rows' scattered
// 512-byte stores instead of one row's contiguous 1.5 KiB).
constexpr int kFillShortRun = 512;
constexpr int kMaxRowsPerBlock = kQTileCols / 32;
constexpr int kWeightRun = 32 + 4;

template <int H>
struct Shape {
  static constexpr int kRowsPerBlock = kQTileCols / H;                     // 12 / 6 (W=3), 8 / 4 (W=2)
  static constexpr int kRowsPerWarpgroup = kRowsPerBlock / kMathWarpgroups;  // 4 or 2
  static constexpr int kHeadGroups = H / 8;  // 8-column groups of the fragment per row
  static_assert(kColsPerMathWarpgroup == 128, "the math warpgroups use wgmma m64n128");
  static_assert(kRowsPerWarpgroup % 2 == 0, "the quad reduce-scatter halves the rows twice");
  // With one slot the math warpgroups wait for the next block's Q before releasing the current one.
  static_assert(kQSlots >= 2, "the Q ring needs two slots or more");
  static_assert((kKStages & (kKStages - 1)) == 0, "the ring index wraps with a mask");
  static_assert(kQTileCols % kQBoxRows == 0, "whole TMA boxes per Q tile");
};

struct SharedStorage {
  alignas(1024) uint8_t q[kQSlots][kQTileBytes];
  alignas(1024) uint8_t k[kKStages][kKTileBytes];
  // Weights of the slot's (row, head) columns in the math threads' order (weight_index): the 32 of
  // each (math warpgroup, quad lane) are contiguous, read once per block as 8 16-byte vectors; runs
  // padded to kWeightRun floats so a quarter warp's 4 vectors fall in different banks.
  alignas(16) float w[kQSlots][kMathWarpgroups * 4][kWeightRun];
  alignas(16) int2 window[kQSlots][kMaxRowsPerBlock];  // clamped [s, e) of each row of the slot's block
  int slot_block[kQSlots];                 // Q block index, -1 = no more work
  int slot_tile_begin[kQSlots];
  int slot_tile_end[kQSlots];
  uint64_t q_full[kQSlots];
  uint64_t q_empty[kQSlots];
  uint64_t k_full[kKStages];
  uint64_t k_empty[kKStages];
  long long plan_units[kThreads][2];  // per-thread unit counts of the plan scan (compute, fill)
  long long plan_start[2][2];         // (block, offset) where this CTA's compute / fill range starts
  long long plan_count[2];            // units in this CTA's compute / fill range
  int2 fill_window[kFillThreads];     // clamped windows of the blocks the fill warps walk next
  long long exact_row[kFillThreads];  // candidate rows of the exact path (-1: not short), and
  int2 exact_window[kFillThreads];    // their clamped windows
  double exact_part[kExactKeys][64];  // relu(q.k) * w per (key, head) of the row in hand
  alignas(16) uint8_t exact_q[64 * kHeadDim];          // its Q row, and
  alignas(16) uint8_t exact_k[kExactKeys * kHeadDim];  // its keys' K rows
};

// The kernel takes the binding's argument block by value; key indices are 32-bit (the launcher
// rejects N >= 2^31 - 64).
using KernelArgs = Fp8MqaLogitsParams;

__device__ __forceinline__ int64_t imin64(int64_t x, int64_t y) { return x < y ? x : y; }

__device__ __forceinline__ int clamp_bound(int32_t x, int64_t n) {
  return static_cast<int>(x < 0 ? 0 : (x > n ? n : x));
}

// Row m's window clamped to [0, N]: (s, e), empty when s >= e. Every walker of the plan (plan scan,
// producer, fill, exact path) reads windows through this, so they agree on every block.
__device__ __forceinline__ int2 clamped_window(const KernelArgs& a, int64_t m) {
  return make_int2(clamp_bound(__ldg(a.ks + m), a.N), clamp_bound(__ldg(a.ke + m), a.N));
}

// The union [lo, hi) of a block's non-empty row windows in K tiles; hi == 0: no row has a window.
__device__ __forceinline__ int2 union_to_tiles(int lo, int hi) {
  if (hi == 0) return make_int2(0, 0);
  return make_int2(lo / kKeysPerTile, (hi + kKeysPerTile - 1) / kKeysPerTile);
}

// Rows the exact path computes (exact_short_rows) and the math warpgroups therefore do not store.
__device__ __forceinline__ bool is_exact_row(int2 window) {
  const int len = window.y - window.x;
  return len > 0 && len <= kExactKeys;
}

// Union window of Q block `b` in K tiles: [tile_lo, tile_hi); empty when no row has a window.
template <int H>
__device__ __forceinline__ int2 block_tiles(const KernelArgs& a, int64_t b) {
  int lo = 0x7fffffff, hi = 0;
#pragma unroll
  for (int r = 0; r < Shape<H>::kRowsPerBlock; ++r) {
    const int64_t m = b * Shape<H>::kRowsPerBlock + r;
    if (m < a.M) {
      const int2 w = clamped_window(a, m);
      if (w.x < w.y) {
        lo = min(lo, w.x);
        hi = max(hi, w.y);
      }
    }
  }
  return union_to_tiles(lo, hi);
}

__device__ __forceinline__ int64_t key_tiles(int64_t n) { return (n + kKeysPerTile - 1) / kKeysPerTile; }

// Compute units of a block = its union-window tiles (+ kBlockOverheadTiles, the cost of starting it);
// fill units = every other column tile (clean).
template <int H>
__device__ __forceinline__ void block_units(const KernelArgs& a, int64_t b, long long& compute, long long& fill) {
  const int2 t = block_tiles<H>(a, b);
  compute = t.y > t.x ? (t.y - t.x) + kBlockOverheadTiles : 0;
  fill = a.clean_logits ? key_tiles(a.N) - (t.y - t.x) : 0;
}

// Every CTA scans all blocks (each thread a contiguous segment), then the thread whose segment holds
// this CTA's first unit finds the exact (block, offset). O(M) reads per CTA, no workspace, no launch.
template <int H>
__device__ void plan_ranges(const KernelArgs& a, SharedStorage& sh) {
  const int64_t blocks = (a.M + Shape<H>::kRowsPerBlock - 1) / Shape<H>::kRowsPerBlock;
  const int64_t per_thread = (blocks + kThreads - 1) / kThreads;
  const int tid = threadIdx.x;
  const int64_t b0 = imin64(blocks, tid * per_thread), b1 = imin64(blocks, b0 + per_thread);
  long long mine[2] = {0, 0};
  for (int64_t b = b0; b < b1; ++b) {
    long long c, f;
    block_units<H>(a, b, c, f);
    mine[0] += c;
    mine[1] += f;
  }
  sh.plan_units[tid][0] = mine[0];
  sh.plan_units[tid][1] = mine[1];
  __syncthreads();
  // Exclusive prefix of the per-thread counts, by warp 0: each lane sums a run, then a warp scan.
  constexpr int kRun = kThreads / 32;
  if (tid < 32) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      long long run = 0;
      for (int t = tid * kRun; t < (tid + 1) * kRun; ++t) run += sh.plan_units[t][k];
      long long inclusive = run;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const long long up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (tid >= d) inclusive += up;
      }
      long long prefix = inclusive - run;
      for (int t = tid * kRun; t < (tid + 1) * kRun; ++t) {
        const long long u = sh.plan_units[t][k];
        sh.plan_units[t][k] = prefix;
        prefix += u;
      }
      if (tid == 31) sh.plan_count[k] = inclusive;  // total, replaced below by this CTA's count
    }
  }
  __syncthreads();
  const long long before[2] = {sh.plan_units[tid][0], sh.plan_units[tid][1]};
  const long long total[2] = {sh.plan_count[0], sh.plan_count[1]};
  __syncthreads();
  const long long cta = blockIdx.x, ctas = gridDim.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const long long first = cta * total[k] / ctas, last = (cta + 1) * total[k] / ctas;
    if (tid == 0) {
      sh.plan_count[k] = last - first;
      sh.plan_start[k][0] = -1;
      sh.plan_start[k][1] = 0;
    }
    __syncthreads();
    if (first < last && before[k] <= first && first < before[k] + mine[k]) {
      long long seen = before[k];
      for (int64_t b = b0; b < b1; ++b) {
        long long u[2];
        block_units<H>(a, b, u[0], u[1]);
        if (first < seen + u[k]) {
          sh.plan_start[k][0] = b;
          sh.plan_start[k][1] = first - seen;
          break;
        }
        seen += u[k];
      }
    }
  }
  __syncthreads();
}

// ---- producer: Q blocks into slots, K tiles into the ring --------------------------------------
// Row r < kRowsPerBlock of block `b`, clamped window, on lane r (the producer walks the blocks with
// these in registers, one block ahead). The lanes also ask L2 for the block's weights, which are
// copied into the slot with cp.async once it is published: no registers hold them meanwhile.
template <int H>
__device__ __forceinline__ int2 load_block_window(const KernelArgs& a, int64_t b, int lane) {
  using S = Shape<H>;
  const int64_t m = b * S::kRowsPerBlock + lane;
  if (lane >= S::kRowsPerBlock || m >= a.M) return make_int2(0, 0);
  const float* w_row = a.weights + m * a.weights_stride;
#pragma unroll
  for (int h = 0; h < H; h += 32) prefetch_l2(w_row + h);  // 128-byte lines
  return clamped_window(a, m);
}

// Union window of the block in K tiles, from the lanes' windows (same as block_tiles).
__device__ __forceinline__ int2 union_tiles(int2 window) {
  const bool live = window.x < window.y;
  const int lo = __reduce_min_sync(0xffffffffu, live ? window.x : 0x7fffffff);
  const int hi = __reduce_max_sync(0xffffffffu, live ? window.y : 0);
  return union_to_tiles(lo, hi);
}

// Position of the block's (row, head) column `col` in SharedStorage::w: math warpgroup g's quad
// lane q holds heads 8 hg + 2q + c of rows [g R, g R + R) (the accumulator fragment, file header), in
// the order the epilogue consumes them: [g][q][(r * H/8 + hg) * 2 + c].
template <int H>
__device__ __forceinline__ int weight_index(int col) {
  using S = Shape<H>;
  const int row = col / H, head = col % H;
  const int g = row / S::kRowsPerWarpgroup, r = row % S::kRowsPerWarpgroup;
  const int hg = head / 8, q = (head % 8) / 2, c = head % 2;
  return (g * 4 + q) * kWeightRun + (r * S::kHeadGroups + hg) * 2 + c;
}

template <int H>
__device__ void produce(const KernelArgs& a, SharedStorage& sh, const CUtensorMap* q_map, const CUtensorMap* k_map) {
  using S = Shape<H>;
  const int lane = threadIdx.x % 32;
  const int64_t blocks = (a.M + S::kRowsPerBlock - 1) / S::kRowsPerBlock;
  int slot = 0, slot_phase = 0, stage = 0, stage_phase = 0;
  int64_t b = sh.plan_start[0][0];
  long long left = b < 0 ? 0 : sh.plan_count[0];
  long long offset = sh.plan_start[0][1];
  // The next block's loads are issued before this block's K tiles, so their latency hides behind
  // the ring waits (a block of causal or multi-request chunks can be a single tile).
  int2 next = left > 0 ? load_block_window<H>(a, b, lane) : make_int2(0, 0);
  while (left > 0 && b < blocks) {  // b < blocks: a guard, the plan's ranges end inside the list
    const int2 window = next;
    const int2 tiles = union_tiles(window);
    // This CTA's units of the block: [offset, offset + take); the first kBlockOverheadTiles stand
    // for starting the block, the rest for its tiles.
    const long long units = tiles.y > tiles.x ? (tiles.y - tiles.x) + kBlockOverheadTiles : 0;
    const long long take = imin64(left, units - offset);
    if (b + 1 < blocks && take < left) next = load_block_window<H>(a, b + 1, lane);
    const int tile_begin = tiles.x + static_cast<int>(max(offset, (long long)kBlockOverheadTiles) - kBlockOverheadTiles);
    const int tile_end =
        tiles.x + static_cast<int>(max(offset + take, (long long)kBlockOverheadTiles) - kBlockOverheadTiles);
    if (take > 0 && tile_end > tile_begin) {
      mbar_wait(&sh.q_empty[slot], slot_phase ^ 1);
      if (lane < S::kRowsPerBlock) sh.window[slot][lane] = window;
#pragma unroll
      for (int i = 0; i < kQTileCols / 32; ++i) {
        const int col = lane + 32 * i;
        const int64_t row = b * S::kRowsPerBlock + col / H;
        const bool valid = row < a.M;
        cp_async_4(&sh.w[slot][0][0] + weight_index<H>(col), a.weights + (valid ? row * a.weights_stride + col % H : 0),
                   valid);
      }
      // q_full completes after 32 plain arrivals (these stores, released) and 32 cp.async arrivals.
      cp_async_arrive_noinc(&sh.q_full[slot]);
      if (lane == 0) {
        sh.slot_block[slot] = static_cast<int>(b);
        sh.slot_tile_begin[slot] = tile_begin;
        sh.slot_tile_end[slot] = tile_end;
        mbar_arrive_expect_tx(&sh.q_full[slot], kQTileBytes);
#pragma unroll
        for (int box = 0; box < kQTileCols / kQBoxRows; ++box)
          tma_load_2d(sh.q[slot] + box * kQBoxRows * kHeadDim, q_map, &sh.q_full[slot], 0,
                      static_cast<int>(b * kQTileCols + box * kQBoxRows));
      } else {
        mbar_arrive(&sh.q_full[slot]);
      }
      slot = slot + 1 == kQSlots ? 0 : slot + 1;
      slot_phase ^= slot == 0;
      for (int t = tile_begin; t < tile_end; ++t) {
        if (lane == 0) {
          mbar_wait(&sh.k_empty[stage], stage_phase ^ 1);
          mbar_arrive_expect_tx(&sh.k_full[stage], kKTileBytes);
          tma_load_2d(sh.k[stage], k_map, &sh.k_full[stage], 0, t * kKeysPerTile);
        }
        stage = (stage + 1) & (kKStages - 1);
        stage_phase ^= stage == 0;
      }
      __syncwarp();
    }
    if (take > 0) left -= take;
    ++b;
    offset = 0;
  }
  // Sentinel: tells the math warpgroups there is no further block.
  mbar_wait(&sh.q_empty[slot], slot_phase ^ 1);
  if (lane == 0) sh.slot_block[slot] = -1;
  cp_async_arrive_noinc(&sh.q_full[slot]);
  mbar_arrive(&sh.q_full[slot]);
}

// -inf over columns [n0, n1) of one row by `threads` threads (this one is `t`), 16-byte stores where
// the row allows. Streaming stores (st.global.cs, like the epilogue's), so the output passes through
// L2 without evicting K and Q. Column indices are 32-bit: the launcher keeps N below 2^31 - 64.
__device__ __forceinline__ void fill_row_run(float* row, int n0, int n1, int t, int threads, bool vec_ok) {
  const float neg_inf = __int_as_float(0xff800000);
  if (vec_ok) {
    // Scalar head up to 16-byte alignment, vector body, scalar tail.
    const int v0 = min(n1, (n0 + 3) & ~3), v1 = max(v0, n1 & ~3);
    for (int n = n0 + t; n < v0; n += threads) row[n] = neg_inf;
    float4* body = reinterpret_cast<float4*>(row + v0);
    const float4 v = make_float4(neg_inf, neg_inf, neg_inf, neg_inf);
    for (int k = t; k < (v1 - v0) / 4; k += threads) __stcs(body + k, v);
    for (int n = v1 + t; n < n1; n += threads) row[n] = neg_inf;
  } else {
    for (int n = n0 + t; n < n1; n += threads) row[n] = neg_inf;
  }
}

// The fill warps synchronise among themselves only (named barrier 1; 0 is __syncthreads).
__device__ __forceinline__ void fill_warps_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kFillThreads) : "memory"); }

// The fill units of a block are the column tiles outside its union window: tile u for u < lo, else
// hi + (u - lo). This CTA's share of them is written row by row in contiguous runs: a long run by
// all three warps (1.5 KiB per store round), a short one (up to kFillShortRun columns) by one warp,
// so three rows go at once and a run costs one warp's loop overhead, not three.
// The windows of kFillThreads / kRowsPerBlock blocks are loaded at once, one row per thread: near
// the end of a causal chunk a CTA's share spans hundreds of blocks of a tile or two each, and one
// dependent load per block made the walk latency-bound. Measured on the H200 (ab_flags.sh, clean,
// H=32): the fill was the whole cost of clean_logits (8192x8192 causal 341 us with the per-block
// walk, 288 us with no fill at all; 1024x1024 causal 28.8 / 19.9 us); batched loads and the short-run
// split give 298 and 20.5 us. (Pacing the fill behind the compute helped multi_req rows by 4-8% and
// cost the others up to 13%: not kept.)
template <int H>
__device__ void fill_outside_windows(const KernelArgs& a, SharedStorage& sh, int tid) {
  using S = Shape<H>;
  constexpr int R = S::kRowsPerBlock;
  constexpr int kBatch = kFillThreads / R;
  // Per-block quantities are 32-bit (tiles < 2^25); only the CTA's unit count needs 64.
  int64_t b = sh.plan_start[1][0];
  long long left = b < 0 ? 0 : sh.plan_count[1];
  int unit = static_cast<int>(sh.plan_start[1][1]);
  const int tiles_n = static_cast<int>(key_tiles(a.N));
  const bool vec_ok = (reinterpret_cast<uintptr_t>(a.out) % 16 == 0) && (a.out_stride % 4 == 0);
  const int64_t blocks = (a.M + R - 1) / R;
  while (left > 0 && b < blocks) {
    if (tid < kBatch * R) {
      const int64_t m = b * R + tid;
      sh.fill_window[tid] = m < a.M ? clamped_window(a, m) : make_int2(0, 0);
    }
    fill_warps_sync();
    for (int i = 0; i < kBatch && left > 0 && b < blocks; ++i, ++b) {
      int lo = 0x7fffffff, hi = 0;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int2 w = sh.fill_window[i * R + r];
        if (w.x < w.y) {
          lo = min(lo, w.x);
          hi = max(hi, w.y);
        }
      }
      const int2 tiles = union_to_tiles(lo, hi);
      const int units = tiles_n - (tiles.y - tiles.x);
      const int take = static_cast<int>(imin64(left, units - unit));
      // Units [unit, unit + take) as at most two column-tile intervals.
      const int run_tiles[2][2] = {{unit, min(unit + take, tiles.x)},
                                   {tiles.y + (max(unit, tiles.x) - tiles.x), tiles.y + (unit + take - tiles.x)}};
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        const int t0 = run_tiles[part][0], t1 = run_tiles[part][1];
        if (t0 >= t1 || (part == 1 && unit + take <= tiles.x)) continue;
        const int n0 = t0 * kKeysPerTile, n1 = static_cast<int>(imin64(a.N, int64_t(t1) * kKeysPerTile));
        const bool short_run = n1 - n0 <= kFillShortRun;
        const int warps = kFillThreads / 32;
#pragma unroll 1
        for (int r = short_run ? tid / 32 : 0; r < R; r += short_run ? warps : 1) {
          const int64_t m = b * R + r;
          if (m < a.M)
            fill_row_run(a.out + m * a.out_stride, n0, n1, short_run ? tid % 32 : tid, short_run ? 32 : kFillThreads,
                         vec_ok);
        }
      }
      left -= take;
      unit = 0;
    }
    fill_warps_sync();  // before the next batch overwrites fill_window
  }
}

// ---- exact path: rows with 1..kExactKeys keys ----------------------------------------------------
// 128-d dot product of two e4m3 rows staged in shared memory (8 16-byte vectors each): every product
// of two e4m3 values is exact in float; four at a time are summed in float (3 roundings of 2^-24),
// the rest in double (a float-to-double conversion per element ran at a quarter rate and cost
// 1024x1024 causal H=64 ~5 us). The vectors are visited from `rot` on, so threads reading different
// rows of 128 bytes hit different banks.
__device__ __forceinline__ double dot_e4m3_row(const uint4* x, const uint4* y, int rot) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int i = 0; i < kHeadDim / 16; ++i) {
    const int v = (i + rot) % (kHeadDim / 16);
    const uint4 a = x[v], b = y[v];
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float af[4], bf[4];
      e4m3x4_to_float(aw[k], af);
      e4m3x4_to_float(bw[k], bf);
      const float four = fmaf(af[3], bf[3], fmaf(af[2], bf[2], fmaf(af[1], bf[1], af[0] * bf[0])));
      acc[k] += static_cast<double>(four);
    }
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The rows this CTA owns (m = blockIdx.x + k gridDim.x) whose clamped window holds 1..kExactKeys
// keys, computed by the fill warps on the CUDA cores; the math warpgroups do not store those rows'
// in-window elements (BlockRows::stores). See kExactKeys for why. Per row: one round of loads stages
// its Q and K rows in shared memory, each (key, head) term is computed by one thread, the head sum
// runs in a fixed order (deterministic).
template <int H>
__device__ void exact_short_rows(const KernelArgs& a, SharedStorage& sh, int tid) {
  constexpr int kRowVecs = kHeadDim / 16;
  constexpr int kQVecs = H * kRowVecs, kKVecs = kExactKeys * kRowVecs;
  static_assert(kKVecs <= kFillThreads, "one K vector per thread");
  const int64_t step = int64_t(gridDim.x) * kFillThreads;
  uint4* q_rows = reinterpret_cast<uint4*>(sh.exact_q);
  uint4* k_rows = reinterpret_cast<uint4*>(sh.exact_k);
  for (int64_t base = blockIdx.x; base < a.M; base += step) {
    const int64_t m = base + int64_t(gridDim.x) * tid;
    int2 w = make_int2(0, 0);
    if (m < a.M) w = clamped_window(a, m);
    sh.exact_row[tid] = is_exact_row(w) ? m : -1;
    sh.exact_window[tid] = w;
    fill_warps_sync();
    for (int c = 0; c < kFillThreads; ++c) {
      const long long row = sh.exact_row[c];
      if (row < 0) continue;
      const int2 win = sh.exact_window[c];
      const int keys = win.y - win.x;
      const uint4* q_src = reinterpret_cast<const uint4*>(a.q + row * H * kHeadDim);
      const uint4* k_src = reinterpret_cast<const uint4*>(a.kv + int64_t(win.x) * kHeadDim);
      uint4 staged[(kQVecs + kFillThreads - 1) / kFillThreads + 1];
#pragma unroll
      for (int j = 0; j * kFillThreads < kQVecs; ++j)
        if (tid + j * kFillThreads < kQVecs) staged[j] = __ldg(q_src + tid + j * kFillThreads);
      constexpr int kLast = (kQVecs + kFillThreads - 1) / kFillThreads;
      if (tid < keys * kRowVecs) staged[kLast] = __ldg(k_src + tid);
#pragma unroll
      for (int j = 0; j * kFillThreads < kQVecs; ++j)
        if (tid + j * kFillThreads < kQVecs) q_rows[tid + j * kFillThreads] = staged[j];
      if (tid < keys * kRowVecs) k_rows[tid] = staged[kLast];
      fill_warps_sync();
      for (int t = tid; t < keys * H; t += kFillThreads) {
        const int n = t / H, h = t % H;
        const double d = dot_e4m3_row(q_rows + h * kRowVecs, k_rows + n * kRowVecs, h);
        sh.exact_part[n][h] = (d + fabs(d)) * a.weights[row * a.weights_stride + h];  // 2 relu(d) w
      }
      fill_warps_sync();
      if (tid < keys) {
        double sum = 0.0;
        for (int h = 0; h < H; ++h) sum += sh.exact_part[tid][h];
        a.out[row * a.out_stride + win.x + tid] = static_cast<float>(0.5 * sum * a.kv_scales[win.x + tid]);
      }
      fill_warps_sync();  // before the next row overwrites the staged rows and exact_part
    }
  }
}

// ---- math warpgroups ------------------------------------------------------------------------------
// Measurement-only variants (tools/sm90_dev), selected at compile time; 0 is the product:
//   1: epilogue without the relu / weight / head-sum arithmetic (what MMA + pipeline + stores cost)
//   2: no MMA issued (what the epilogue alone costs)
//   3: no -inf fill by the producer's spare warps (what the fill costs; clean output incomplete)
#ifndef AITER_SM90_VARIANT
#define AITER_SM90_VARIANT 0
#endif

// A predicated streaming store: no branch around it in the epilogue (branch resolution stalled the
// math warps). Streaming (.cs, evict-first): nothing reads the output back, and K and Q stay in L2.
// Measured on the H200 (tools/sm90_dev/ab_flags.sh, this and the fill's stores against plain ones):
// multi_req 4096x32768 clean 324 -> 308 us (H=32), 543 -> 530 us (H=64); other rows within noise.
__device__ __forceinline__ void store_if(float* p, float v, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "@p st.global.cs.f32 [%0], %1;\n"
      "}\n" ::"l"(p),
      "f"(v), "r"(int(pred))
      : "memory");
}

// What a math thread keeps per Q block: its 32 weights, and for the kRowsPerWarpgroup / 2
// consecutive rows it stores, the first row's output pointer, their clamped windows and what it
// stores of them: bit 2k of `stores` = row k's in-window elements (not past M, not an exact-path
// row: exact_short_rows), bit 2k + 1 = its out-of-window elements (-inf; not past M, clean_logits).
template <int H>
struct BlockRows {
  static constexpr int kRows = Shape<H>::kRowsPerWarpgroup / 2;
  float w[32];
  float* out_row;
  int2 window[kRows];
  uint32_t stores;
};

template <int H>
__device__ __forceinline__ void load_block_rows(BlockRows<H>& br, const SharedStorage& sh, int slot, int block, int wg,
                                                int quad, int local_row, const KernelArgs& a) {
  const float4* w = reinterpret_cast<const float4*>(sh.w[slot][wg * 4 + quad]);
#pragma unroll
  for (int v = 0; v < 8; ++v) {
    const float4 x = w[v];
    br.w[4 * v] = x.x;
    br.w[4 * v + 1] = x.y;
    br.w[4 * v + 2] = x.z;
    br.w[4 * v + 3] = x.w;
  }
  const int64_t m = int64_t(block) * Shape<H>::kRowsPerBlock + local_row;
  br.out_row = a.out + (m < a.M ? m : 0) * a.out_stride;
  br.stores = 0;
#pragma unroll
  for (int k = 0; k < BlockRows<H>::kRows; ++k) {
    br.window[k] = sh.window[slot][local_row + k];
    const bool valid = m + k < a.M;
    br.stores |= (uint32_t(valid && !is_exact_row(br.window[k])) | (uint32_t(valid && a.clean_logits) << 1)) << (2 * k);
  }
}

// The epilogue of one tile: head_sums (relu, x w, each thread's share of the head sum: 8 values out
// of 64), then reduce_store (quad reduce-scatter, x kv_scale, store).
//
// relu(x) is computed as (x + |x|), one FADD on the FMA pipe where fmaxf would be an FMNMX on the
// busier ALU pipe; reduce_store's `half_kv_scale` = kv_scale / 2 takes the 2 back out (scaling by 2
// and 1/2 is exact, so the result is bit-identical to fmaxf(x, 0) * w).
template <int H>
struct HeadSums {
  float v[2][Shape<H>::kRowsPerWarpgroup];  // [key row i of the fragment][row]
};

template <int H>
__device__ __forceinline__ HeadSums<H> head_sums(const float (&acc)[64], const BlockRows<H>& br) {
  using S = Shape<H>;
  constexpr int R = S::kRowsPerWarpgroup;
  // FFMA chains per (key, row): 8 chains in all keep the FFMA latency hidden (H=32: one per (key,
  // row); H=64: two, even and odd head groups, joined at the end in a fixed order).
  constexpr int kChains = 8 / (2 * R);
  float part[2][R][kChains];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[i][r][c] = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int r = j / S::kHeadGroups, g = j % S::kHeadGroups;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float x = acc[4 * j + 2 * i + c];
        float& chain = part[i][r][g % kChains];
        if (AITER_SM90_VARIANT == 1)
          chain += j == 0 ? x : 0.f;
        else
          chain = fmaf(x + fabsf(x), br.w[2 * j + c], chain);
      }
  }
  HeadSums<H> sum;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      sum.v[i][r] = part[i][r][0];
#pragma unroll
      for (int c = 1; c < kChains; ++c) sum.v[i][r] += part[i][r][c];
    }
  return sum;
}

// Each thread ends with kRowsPerWarpgroup/2 values of one key.
template <int H>
__device__ __forceinline__ void reduce_store(const HeadSums<H>& sum, const BlockRows<H>& br, float half_kv_scale, int key,
                                             const KernelArgs& a, int lane) {
  constexpr int R = Shape<H>::kRowsPerWarpgroup;
  // Quad reduce-scatter: lanes with bit 1 set keep key row i = 1, then bit 0 picks the row half.
  const bool hi_key = lane & 2, hi_rows = lane & 1;
  const bool key_ok = key < static_cast<int>(a.N);
  float rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float keep = hi_key ? sum.v[1][r] : sum.v[0][r];
    const float send = hi_key ? sum.v[0][r] : sum.v[1][r];
    rows[r] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
  }
#pragma unroll
  for (int k = 0; k < R / 2; ++k) {
    const float keep = hi_rows ? rows[R / 2 + k] : rows[k];
    const float send = hi_rows ? rows[k] : rows[R / 2 + k];
    float v = (keep + __shfl_xor_sync(0xffffffffu, send, 1)) * half_kv_scale;
    const bool outside = key < br.window[k].x || key >= br.window[k].y;
    v = outside ? __int_as_float(0xff800000) : v;
    // Without clean_logits only in-window elements are written: an empty row stays untouched.
    store_if(br.out_row + k * a.out_stride + key, v, key_ok && ((br.stores >> (2 * k + outside)) & 1));
  }
}

template <int H>
__device__ void compute(const KernelArgs& a, SharedStorage& sh, int wg) {
  using S = Shape<H>;
  const int lane = threadIdx.x % 32;
  const int warp_in_wg = (threadIdx.x / 32) % 4;
  const int quad = lane % 4;
  // Fragment position of this thread after the reduce-scatter: one key of the tile, a half of the rows.
  const int key_in_tile = warp_in_wg * 16 + lane / 4 + 8 * ((lane >> 1) & 1);
  const int local_row = wg * S::kRowsPerWarpgroup + ((lane & 1) ? S::kRowsPerWarpgroup / 2 : 0);
  // Descriptors of stage 0 / slot 0; other stages and slots are fixed offsets (in 16-byte units).
  // Only the low word (start address) differs between stages, slots and k steps: 32-bit arithmetic.
  const uint64_t desc_k0 = smem_desc_sw128(sh.k[0]);
  const uint64_t desc_q0 = smem_desc_sw128(sh.q[0] + wg * kColsPerMathWarpgroup * kHeadDim);
  const uint64_t desc_hi = desc_k0 & 0xffffffff00000000ull;  // same for both: layout, strides
  const uint32_t k_lo0 = static_cast<uint32_t>(desc_k0), q_lo0 = static_cast<uint32_t>(desc_q0);

  float acc0[64], acc1[64];  // acc1 is dead (and allocated no registers) with one accumulator
  BlockRows<H> rows;
  int slot = 0, slot_phase = 0, stage = 0, stage_phase = 0;
  int block = -1, tile = 0, tile_begin = 0, tile_end = 0;

  // Slot values go through a shuffle so ptxas sees them warp-uniform; it serialises every wgmma
  // that sits behind a branch it believes divergent.
  auto open_slot = [&]() {
    mbar_wait(&sh.q_full[slot], slot_phase);
    block = __shfl_sync(0xffffffffu, sh.slot_block[slot], 0);
    tile_begin = __shfl_sync(0xffffffffu, sh.slot_tile_begin[slot], 0);
    tile_end = __shfl_sync(0xffffffffu, sh.slot_tile_end[slot], 0);
    tile = tile_begin;
  };
  auto issue = [&](float (&acc)[64]) {
    mbar_wait(&sh.k_full[stage], stage_phase);
    if (AITER_SM90_VARIANT == 2) return;
    const uint32_t k_lo = k_lo0 + stage * (kKTileBytes >> 4), q_lo = q_lo0 + slot * (kQTileBytes >> 4);
    fence_accumulators(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 32; ++kk)
      wgmma_m64n128k32_e4m3(acc, desc_hi | (k_lo + 2 * kk), desc_hi | (q_lo + 2 * kk), kk > 0);
    wgmma_commit();
  };

  // kv_scale / 2 (tile_epilogue) of the tile at the cursor, loaded a whole tile ahead of its use to
  // hide L2 latency.
  // The key is clamped rather than tested: no branch around the load (past the end, or after the
  // sentinel, the value is never used).
  auto load_scale = [&]() {
    const int key = min(tile * kKeysPerTile + key_in_tile, static_cast<int>(a.N) - 1);
    return 0.5f * __ldg(a.kv_scales + max(key, 0));
  };
  float pending_scale = 0.f;

  // The tile whose MMA is in flight, as its epilogue needs it once the cursor has moved on.
  struct InFlight {
    int slot, stage, block, key;
    bool first, last, has_next;
    float half_kv_scale;
  };
  auto advance = [&]() {
    InFlight f;
    f.slot = slot;
    f.stage = stage;
    f.block = block;
    f.first = tile == tile_begin;
    f.last = tile + 1 == tile_end;
    f.key = tile * kKeysPerTile + key_in_tile;
    f.half_kv_scale = pending_scale;
    f.has_next = true;
    stage = (stage + 1) & (kKStages - 1);
    stage_phase ^= stage == 0;
    if (!f.last) {
      ++tile;
    } else {
      slot = slot + 1 == kQSlots ? 0 : slot + 1;
      slot_phase ^= slot == 0;
      open_slot();
      f.has_next = block >= 0;
    }
    pending_scale = load_scale();
    return f;
  };
  // Releases the finished tile's K stage, runs its epilogue, releases its Q slot after its last tile.
  auto finish = [&](float (&acc)[64], const InFlight& f) {
    fence_accumulators(acc);
    if (lane == 0) mbar_arrive(&sh.k_empty[f.stage]);
    if (f.first) load_block_rows<H>(rows, sh, f.slot, f.block, wg, quad, local_row, a);
    reduce_store<H>(head_sums<H>(acc, rows), rows, f.half_kv_scale, f.key, a, lane);
    if (f.last) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&sh.q_empty[f.slot]);
    }
  };

  open_slot();
  if (block < 0) return;
  pending_scale = load_scale();
  if constexpr (kAccumulators == 1) {
    // One accumulator: the other warpgroups' MMAs on the same K tile run under this epilogue.
    // (Issuing this warpgroup's next MMA as soon as the head sums free the accumulator, before the
    // reduction and stores, measured 2-7% slower on the H200: tools/sm90_dev/ab_flags.sh.)
    for (;;) {
      issue(acc0);
      const InFlight f = advance();
      wgmma_wait<0>();
      finish(acc0, f);
      if (!f.has_next) break;
    }
  } else {
    issue(acc0);
    // Two accumulators in turn: the MMA of the next tile runs under the epilogue of this one. The
    // loop is written out for both parities so every accumulator index is a compile-time constant.
    for (;;) {
      InFlight f = advance();
      if (!f.has_next) {
        wgmma_wait<0>();
        finish(acc0, f);
        break;
      }
      issue(acc1);
      wgmma_wait<1>();
      finish(acc0, f);

      f = advance();
      if (!f.has_next) {
        wgmma_wait<0>();
        finish(acc1, f);
        break;
      }
      issue(acc0);
      wgmma_wait<1>();
      finish(acc1, f);
    }
  }
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_mqa_logits_sm90_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                               const KernelArgs args) {
  extern __shared__ uint8_t smem_raw[];
  // Offset from the shared array itself (not a cast through an integer) so accesses stay LDS/STS.
  const uint32_t align_pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  SharedStorage& sh = *reinterpret_cast<SharedStorage*>(smem_raw + align_pad);
  // Through a shuffle so the compiler knows it is warp-uniform (else it serialises the wgmmas).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&q_map);
    tma_prefetch_descriptor(&k_map);
    for (int s = 0; s < kQSlots; ++s) {
      mbar_init(&sh.q_full[s], 64);  // 32 lanes' stores + their 32 cp.async copies (produce)
      mbar_init(&sh.q_empty[s], 4 * kMathWarpgroups);
    }
    for (int s = 0; s < kKStages; ++s) {
      mbar_init(&sh.k_full[s], 1);
      mbar_init(&sh.k_empty[s], 4 * kMathWarpgroups);
    }
    fence_barrier_init();
  }
  plan_ranges<H>(args, sh);  // ends with __syncthreads, which also publishes the barrier inits

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x < 32) {
      produce<H>(args, sh, &q_map, &k_map);
    } else {
      exact_short_rows<H>(args, sh, threadIdx.x - 32);
      if (args.clean_logits && AITER_SM90_VARIANT != 3) fill_outside_windows<H>(args, sh, threadIdx.x - 32);
    }
  } else {
    setmaxnreg_inc<kMathRegs>();
    compute<H>(args, sh, warpgroup - 1);
  }
}

}  // namespace sm90
}  // namespace aiter
