// The math warpgroups' epilogue of one K tile: relu, x w, head sum, x kv_scale, store.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//                  -inf elsewhere when clean_logits; without it nothing outside the windows is written
//
// Tensors: out [M, N] f32 or bf16 (or [M, max_seqlen_k], the compressed layout), row stride
// out_stride (written: the Logits format, work.cuh); kv_scale [N] f32 (the caller loads it);
// w [M, H] and the row windows come from the block's Q slot in shared memory (producer.cuh).
// kv_scale > 0 is a precondition, so it is applied after the head sum: relu(s x) = s relu(x).
//
// Accumulator fragment of wgmma m64n128 (per thread, 64 floats): warp wi of the warpgroup, lane l,
// quad lane q = l % 4:
//   d[4j + 2i + c] = S[key = 16 wi + l/4 + 8 i][col = 8 j + 2 q + c],  j < 16, i, c in {0, 1}
//   col -> (row r = j / (H/8), head = 8 (j % (H/8)) + 2 q + c) within the warpgroup's rows.
// So each thread holds, for two keys, H/4 heads of every one of the warpgroup's 128/H rows: the head
// sum is a per-thread FFMA chain and then a reduction across the quad. Where the instance splits the
// head sum (linear_term.cuh), columns 128 + 8 j' + 2 q + c (j' < R / 2) are piece q of row 2 j' + c,
// d[64 + 4 j' + 2 i + c].
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "sm90/common/exact.cuh"
#include "sm90/common/reduce.cuh"
#include "sm90/linear_term.cuh"
#include "sm90/ptx/ld_st.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// What a math thread keeps per Q block: its 32 weights, and for the kRowsPerWarpgroup / 2
// consecutive rows it stores, the first row's output pointer, their clamped windows and what it
// stores of them: bit 2k of `stores` = row k's in-window elements (not past M, not an exact-path
// row: exact_rows.cuh), bit 2k + 1 = its out-of-window elements (-inf; not past M, clean_logits).
template <int H, class Logits>
struct BlockRows {
  static constexpr int kRows = BlockShape<H>::kRowsPerWarpgroup / 2;
  float weights[32];
  typename Logits::Element* out_row;  // where key 0 of the first row is stored
  int64_t row_offset[kRows];  // the compressed layout only: row k's key 0 from out_row
  int2 window[kRows];
  uint32_t stores;
  float piece_scale[BlockShape<H>::kRowsPerWarpgroup];  // split instances: piece q's scale of each row
};

// The compressed layout (Logits::kCompressed): key n of row m at column n - s_m; its -inf tail is
// the fill warps' (fill.cuh), so here only in-window elements are stored.
template <int H, int D, class Logits>
__device__ __forceinline__ void load_block_rows(BlockRows<H, Logits>& rows, const SharedStorage& smem, int slot, int block,
                                                int math_warpgroup, int quad_lane, int local_row,
                                                const KernelArgs& args) {
  const float4* weights = reinterpret_cast<const float4*>(smem.weights[slot][math_warpgroup * 4 + quad_lane]);
#pragma unroll
  for (int v = 0; v < 8; ++v) {
    const float4 four = weights[v];
    rows.weights[4 * v] = four.x;
    rows.weights[4 * v + 1] = four.y;
    rows.weights[4 * v + 2] = four.z;
    rows.weights[4 * v + 3] = four.w;
  }
  if constexpr (LinearTerm<H, D>::kOn) {
    const float* scales = smem.weights[slot][math_warpgroup * 4 + quad_lane] + kPieceScaleColumn;
#pragma unroll
    for (int r = 0; r < BlockShape<H>::kRowsPerWarpgroup; ++r) rows.piece_scale[r] = scales[r];
  }
  // Row indices fit in 32 bits (the launcher keeps M * H below 2^31); only the output offset is 64-bit.
  const int num_rows = static_cast<int>(args.M);
  const int m = block * BlockShape<H>::kRowsPerBlock + local_row;
  rows.out_row = logits_out<Logits>(args) + int64_t(m < num_rows ? m : 0) * args.out_stride;
  rows.stores = 0;
#pragma unroll
  for (int k = 0; k < BlockRows<H, Logits>::kRows; ++k) {
    rows.window[k] = smem.window[slot][local_row + k];
    const bool valid = m + k < num_rows;
    rows.stores |= (uint32_t(valid && !is_exact_row(rows.window[k].y - rows.window[k].x)) |
                    (uint32_t(valid && args.clean_logits && !Logits::kCompressed) << 1))
                   << (2 * k);
  }
  if constexpr (Logits::kCompressed) {
    // Each row's shift folded into the row pointers once per block; no key is stored past column
    // out_columns (the caller's guarantee, kept rather than trusted: the window's end is cut there).
    int column_shift[BlockRows<H, Logits>::kRows];
#pragma unroll
    for (int k = 0; k < BlockRows<H, Logits>::kRows; ++k) {
      column_shift[k] = rows.window[k].x;
      rows.window[k].y = min(rows.window[k].y, rows.window[k].x + static_cast<int>(args.out_columns));
    }
    rows.out_row -= column_shift[0];
#pragma unroll
    for (int k = 0; k < BlockRows<H, Logits>::kRows; ++k)
      rows.row_offset[k] = k * args.out_stride - (column_shift[k] - column_shift[0]);
  }
}

// The head sums are twice sum_h relu(x_h) w_h, and reduce_store's `half_kv_scale` = kv_scale / 2 takes
// the 2 back out. Split instances (linear_term.cuh) sum |x| w (one FFMA with an |x| operand) and add
// the piece columns times their scales (K . q'). The others compute 2 relu(x) as (x + |x|), one FADD on
// the FMA pipe where fmaxf would be an FMNMX on the busier ALU pipe (scaling by 2 and 1/2 is exact, so
// their result is bit-identical to fmaxf(x, 0) * w).
template <int H>
struct HeadSums {
  float value[2 * BlockShape<H>::kRowsPerWarpgroup];  // [key row i of the fragment * kRowsPerWarpgroup + row]
};

// relu, x w, and this thread's share of the head sum: 8 heads of each (key, row) it holds.
template <int H, int D, class Logits>
__device__ __forceinline__ HeadSums<H> head_sums(const float (&acc)[LinearTerm<H, D>::kMmaCols / 2],
                                                 const BlockRows<H, Logits>& rows) {
  using Shape = BlockShape<H>;
  using Linear = LinearTerm<H, D>;
  constexpr int kRows = Shape::kRowsPerWarpgroup;
  // FFMA chains per (key, row): 8 chains or more keep the FFMA latency hidden (H <= 32: one per
  // (key, row); H=64: two, even and odd head groups, joined at the end in a fixed order).
  constexpr int kChains = 2 * kRows >= 8 ? 1 : 8 / (2 * kRows);
  float part[2][kRows][kChains];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[i][r][c] = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int r = j / Shape::kHeadGroups, head_group = j % Shape::kHeadGroups;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float x = acc[4 * j + 2 * i + c];
        float& chain = part[i][r][head_group % kChains];
        chain = fmaf(Linear::kOn ? fabsf(x) : x + fabsf(x), rows.weights[2 * j + c], chain);
      }
  }
#pragma unroll
  for (int j = 0; j < Linear::kCols / 8; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int r = 2 * j + c;
        part[i][r][0] = fmaf(acc[64 + 4 * j + 2 * i + c], rows.piece_scale[r], part[i][r][0]);
      }
  HeadSums<H> sum;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float& value = sum.value[i * kRows + r];
      value = part[i][r][0];
#pragma unroll
      for (int c = 1; c < kChains; ++c) value += part[i][r][c];
    }
  return sum;
}

// Quad reduce-scatter of the head sums (common/reduce.cuh, halves: lane bit 1 picks the key row i,
// bit 0 the row half), x kv_scale, store: each thread ends with kRowsPerWarpgroup / 2 values of one
// key (`key`), the rows of BlockRows.
template <int H, class Logits>
__device__ __forceinline__ void reduce_store(HeadSums<H> sum, const BlockRows<H, Logits>& rows, float half_kv_scale,
                                             int key, const KernelArgs& args, int lane) {
  const bool key_ok = key < static_cast<int>(args.N);
  quad_reduce_scatter_halves(sum.value, lane & 3);
#pragma unroll
  for (int k = 0; k < BlockShape<H>::kRowsPerWarpgroup / 2; ++k) {
    float value = sum.value[k] * half_kv_scale;
    const bool outside = key < rows.window[k].x || key >= rows.window[k].y;
    value = outside ? __int_as_float(0xff800000) : value;
    // Without clean_logits only in-window elements are written: an empty row stays untouched.
    typename Logits::Element* const row =
        rows.out_row + (Logits::kCompressed ? rows.row_offset[k] : k * args.out_stride);
    store_if(row + key, value, key_ok && ((rows.stores >> (2 * k + outside)) & 1));
  }
}

}  // namespace sm90
}  // namespace aiter
