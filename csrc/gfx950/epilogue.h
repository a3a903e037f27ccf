// gfx950 fp8_mqa_logits: the epilogue. MFMA accumulators -> relu * w chains -> row-pair reduction
// across lane halves (v_permlane32_swap) -> kv_scale -> masked buffer stores.
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//                  -inf (clean_logits) or untouched (not clean) for the other n of a masked stage
//
// Layouts touched: the 32x32 accumulator C (lane l, element v = A row c_row(l, v) of the tile, key
// l % 32 of the sub-tile, layout.h); the chain sets (H >= 32: a row, one chain; H = 16: a tile's
// two rows, its even and odd elements); after the swap, lanes 0-31 hold row A of a pair
// and lanes 32-63 row B; out rows (Element: float or bfloat16; full [M, N] or
// compressed [M, out_columns]) through per-row buffer resources (num_records = (key_limit - k0) x
// element bytes, 0 for a missing row: the hardware drops what is out of range), or at H = 16 one
// resource per row pair with per-lane offsets into both rows (store_pair_at_once); the block's
// segment_rows table in LDS for the masked stages' window test.
// Why this shape: the sum over heads is one scalar fma chain per row in a fixed order (scalar VALU
// co-issues under the other wave's MFMAs, packed v_pk_* does not); at H = 16 a tile's two rows take
// two chains (its even and odd elements), so the epilogue and its registers stay H = 32's. Row
// pairs are reduced two tails at a time by inline asm that also keeps the 2 wait states a VALU
// write needs before v_permlane32_swap reads it (the compiler cannot see into the asm to insert
// them).
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "common/logits_dtype.h"
#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

// Per-lane store voffsets per pair half (first sub-tile; +128 B per sub-tile).
struct StoreLanes {
  uint32_t offset[2];
};

// The previous stage's deferred work: the epilogue of its last tile-step and the row-pair tails
// that epilogue completes. Loop-carried registers; before the first stage a dummy whose stores
// go to empty resources (so every iteration still issues the same VMEM count).
template <class V>
struct Carry {
  v16f acc;
  float part[kSubTiles][V::kChainSets][2];
  float scale[kSubTiles];
  int stage_key;  // first key of the carried stage
  bool live;      // false before the first stage: its stores go to empty resources
};

// Row-pair reduction of two tails, in place: x and y are two row pairs, *a the chain of the pair's
// row A and *b that of row B (H >= 32: each row's one chain; H = 16: a tile's even and odd
// elements). Swap lane halves between each pair's two rows, scaling x's row-A half between the
// swaps. x's chains were complete a step or more earlier (tail 2k never completes after tail
// 2k + 1); y's were written by the step just before, and the swap and the scale of x are the 2 wait
// states y's swap needs after those writes (the ISA check verifies both). Afterwards
//   pair x = fma(xb, sx, xa),  pair y = (ya + yb) * sy
// hold row A in lanes 0-31 and row B in lanes 32-63; every register written is read afterwards.
// Inline asm rather than __builtin_amdgcn_permlane32_swap because the asm fixes this order (x's
// swap and scale are y's wait states), which the compiler would be free to change; not because of
// the builtin: the builtin and its code generation are correct (both results). What reads as a wrong
// second result is clang's front end: __builtin_bit_cast(float, r[1]) on the builtin's 2-element
// vector result reads element 0; copying r[1] to an unsigned first reads element 1
// (dev/isa/permlane_bitcast.hip shows both with clang-22). The ISA check also enforces the swap's
// other hazard here: no EXEC write within 4 wait states before it.
__device__ __forceinline__ void reduce_two(float& xa, float& xb, float& ya, float& yb, float sx) {
  asm("v_permlane32_swap_b32 %0, %1\n\t"
      "v_mul_f32 %0, %0, %4\n\t"
      "v_permlane32_swap_b32 %2, %3"
      : "+v"(xa), "+v"(xb), "+v"(ya), "+v"(yb)
      : "v"(sx));
}

// Logits: a LogitsFormat (common/logits_dtype.h). Its element: float or __bf16; its layout: full,
// whose rows share the key limit N, or compressed, whose rows each have their own (s_m + out_columns).
template <class V, class Logits>
struct Epilogue {
  using Element = typename Logits::Element;
  static constexpr bool kCompressed = Logits::kCompressed;
  static constexpr int kElementBytes = sizeof(Element);
  static constexpr int kChainSets = V::kChainSets;
  using Chains = float[kSubTiles][kChainSets][2];  // [sub-tile][chain set][even/odd]
  const Workgroup<V> wg;  // a copy: a reference to a sibling member would keep the kernel object in scratch

  __device__ explicit Epilogue(const Workgroup<V>& workgroup) : wg(workgroup) {}

  __device__ StoreLanes lanes() const {
    StoreLanes lanes;
    const int sub0 = wave_subtile(V::geometry(), wg.wave, 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) lanes.offset[h] = store_offset(sub0, wg.lane, h, kElementBytes);
    return lanes;
  }

  // One tile's accumulator: relu, times w, into its chain set's chains in a fixed order (the set's
  // first tile starts them). H >= 32: one chain per row (slot 0), so a row pair reduces without
  // first merging two chains per row (4 VALU per two pairs fewer); H = 16: the tile's two rows,
  // its even and odd elements (slots 0 and 1).
  __device__ __forceinline__ void accumulate(const v16f& acc, int t, const WaveRows<V>& rows,
                                             float (&chain)[kChainSets][2]) const {
    const int r = tile_chain_set(V::geometry(), t);
    const bool first = tile_starts_chains(V::geometry(), t);
    constexpr int kSlots = V::kPackedRows ? 2 : 1;
#pragma unroll
    for (int v = 0; v < 16; ++v) {
      const float x = fmaxf(acc[v], 0.f);
      float& ch = chain[r][v % kSlots];
      ch = (first && v < kSlots) ? x * rows.weights[t][v / 4][v % 4]
                                 : __builtin_fmaf(x, rows.weights[t][v / 4][v % 4], ch);
    }
  }

  // Tail groups: the permlane asm takes tails (2k, 2k+1) together; group k holds the pairs of
  // tail_subtile(2k+1), complete after that sub-tile's last epilogue. reduce_group runs the asm on
  // the chains in place; store_group finishes the sums, masks and stores.
  struct TailGroup {
    int subtile_x, pair_x, subtile_y, pair_y;
  };
  static constexpr __device__ TailGroup tail_group(int k) {
    return TailGroup{tail_subtile(V::geometry(), 2 * k), tail_pair(V::geometry(), 2 * k),
                     tail_subtile(V::geometry(), 2 * k + 1), tail_pair(V::geometry(), 2 * k + 1)};
  }
  // Group k completes with the stage's last sub-tile: it is reduced and stored in the next stage.
  static constexpr __device__ bool tail_deferred(int k) { return tail_group_deferred(V::geometry(), k); }

  __device__ __forceinline__ void reduce_group(int k, Chains& part,
                                               const float (&scale)[kSubTiles]) const {
    const TailGroup group = tail_group(k);
    const Geometry g = V::geometry();
    float(&x)[kChainSets][2] = part[group.subtile_x];
    float(&y)[kChainSets][2] = part[group.subtile_y];
    reduce_two(x[pair_chain_set(g, group.pair_x, 0)][pair_chain_slot(g, 0)],
               x[pair_chain_set(g, group.pair_x, 1)][pair_chain_slot(g, 1)],
               y[pair_chain_set(g, group.pair_y, 0)][pair_chain_slot(g, 0)],
               y[pair_chain_set(g, group.pair_y, 1)][pair_chain_slot(g, 1)], scale[group.subtile_x]);
  }

  template <bool MASKED>
  __device__ __forceinline__ void store_group(int k, const Chains& part,
                                              const float (&scale)[kSubTiles], int stage_key,
                                              bool live, const WaveRows<V>& rows,
                                              const StoreLanes& lanes) const {
    const TailGroup group = tail_group(k);
    const Geometry g = V::geometry();
    const float(&x)[kChainSets][2] = part[group.subtile_x];
    const float(&y)[kChainSets][2] = part[group.subtile_y];
    const float x_a = x[pair_chain_set(g, group.pair_x, 0)][pair_chain_slot(g, 0)];
    const float x_b = x[pair_chain_set(g, group.pair_x, 1)][pair_chain_slot(g, 1)];
    const float y_a = y[pair_chain_set(g, group.pair_y, 0)][pair_chain_slot(g, 0)];
    const float y_b = y[pair_chain_set(g, group.pair_y, 1)][pair_chain_slot(g, 1)];
    const float vx = __builtin_fmaf(x_b, scale[group.subtile_x], x_a);
    const float vy = (y_a + y_b) * scale[group.subtile_y];
    if constexpr (V::kPackedRows) {
      store_pair_at_once<MASKED>(vx, group.subtile_x, group.pair_x, stage_key, live, rows);
      store_pair_at_once<MASKED>(vy, group.subtile_y, group.pair_y, stage_key, live, rows);
    } else {
      store_pair<MASKED>(vx, group.subtile_x, group.pair_x, stage_key, live, rows, lanes);
      store_pair<MASKED>(vy, group.subtile_y, group.pair_y, stage_key, live, rows, lanes);
    }
  }

  // Mask and store one reduced, scaled row pair of sub-tile j of the stage at stage_key. The
  // pair's two row resources are built here, just before use, to keep SGPR pressure low.
  template <bool MASKED>
  __device__ __forceinline__ void store_pair(float v, int j, int p, int stage_key, bool live,
                                             const WaveRows<V>& rows,
                                             const StoreLanes& lanes) const {
    const KernelArgs& args = wg.args;
    uint32_t offset_a = lanes.offset[0], offset_b = lanes.offset[1];
    if constexpr (MASKED) {
      // Row windows (begin, end) from the block table; a missing row has end = 0: never inside.
      const int4 w = *wg.template at<int4>(int(rows.window_addr[p]));
      const int n = stage_key + wave_subtile(V::geometry(), wg.wave, j) * kTileCols + wg.lane % 32;
      const bool in = n >= w.y && n < w.z;
      const bool keep = in || args.clean != 0;
      v = in ? v : -__builtin_inff();
      offset_a = keep ? offset_a : kOutOfRange;
      offset_b = keep ? offset_b : kOutOfRange;
    }
    // Keys at or past a row's key limit are out of range (compressed: a stage may start past it,
    // 0 records); the full layout's limit is N for both rows, and a stage starts below it.
    const uint32_t bytes_a = kCompressed ? uint32_t(max(rows.key_limit[2 * p] - stage_key, 0)) * kElementBytes
                                         : uint32_t(args.N - stage_key) * kElementBytes;
    const uint32_t bytes_b = kCompressed ? uint32_t(max(rows.key_limit[2 * p + 1] - stage_key, 0)) * kElementBytes
                                         : bytes_a;
    const v4i rsrc_a = make_rsrc(rows.out_row[2 * p] + uint64_t(stage_key) * kElementBytes,
                                 live && rows.valid[2 * p] ? bytes_a : 0u);
    const v4i rsrc_b = make_rsrc(rows.out_row[2 * p + 1] + uint64_t(stage_key) * kElementBytes,
                                 live && rows.valid[2 * p + 1] ? bytes_b : 0u);
    // Sub-tile j is 32 keys further: an instruction offset, which the range check includes.
    buffer_store_logit<Element>(v, rsrc_a, offset_a + j * kTileCols * kElementBytes);
    buffer_store_logit<Element>(v, rsrc_b, offset_b + j * kTileCols * kElementBytes);
  }

  // H = 16: the same row pair with one store. Both rows go through one resource based at the lower
  // of their key-0 addresses (rows.pair_base), each lane at its own row's offset (rows.pair_offset;
  // kOutOfRange for a missing row), and num_records = kPairRecords (just below 2^31), so only
  // those offsets are dropped: the rows' key limits are kept by the stages instead. A clean stage
  // lies inside every present row's window (so below N and below s_m + out_columns); a masked
  // stage keeps a key only inside the lane's row window, or, for the full layout's -inf
  // (clean_logits), below N. The launcher keeps the two rows' distance plus a stage's columns
  // within kPairRecords bytes (launch_plan.h). Eight rows per wave would otherwise take 16 stores
  // per stage (a vmcnt wait of 70 at depth 4, past its 6 bits) and 16 row resources' SGPRs (they
  // spilled into the loop).
  template <bool MASKED>
  __device__ __forceinline__ void store_pair_at_once(float v, int j, int p, int stage_key, bool live,
                                                     const WaveRows<V>& rows) const {
    const KernelArgs& args = wg.args;
    uint32_t offset = rows.pair_offset[p];
    if constexpr (MASKED) {
      const int4 w = *wg.template at<int4>(int(rows.window_addr[p]));
      const int n = stage_key + wave_subtile(V::geometry(), wg.wave, j) * kTileCols + wg.lane % 32;
      const bool in = n >= w.y && n < w.z;
      const bool keep = in || (args.clean != 0 && n < args.N);
      v = in ? v : -__builtin_inff();
      offset = keep ? offset : kOutOfRange;
    }
    const v4i rsrc = make_rsrc(rows.pair_base[p] + uint64_t(stage_key) * kElementBytes, live ? kPairRecords : 0u);
    buffer_store_logit<Element>(v, rsrc, offset + j * kTileCols * kElementBytes);
  }
};

}  // namespace gfx950
}  // namespace aiter
