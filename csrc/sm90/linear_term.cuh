// The linear term of the relu head sum, and the pieces of Q it is computed from.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// With x_h = Q[m,h,:] . K[n,:], relu(x) = (|x| + x) / 2 splits the head sum in two:
//   sum_h relu(x_h) w_h = (sum_h |x_h| w_h + sum_h x_h w_h) / 2,   sum_h x_h w_h = K[n,:] . q'[m,:]
// where q'[m,:] = sum_h w[m,h] Q[m,h,:] is one float32 vector per query row. The first sum costs one
// FFMA per accumulator element (|x| is an operand modifier) where relu(x) * w costs two; the second is
// four more wgmma columns per query row: q' as four e4m3 pieces with power-of-two scales,
//   q'[m,:] ~= sum_p scale[m,p] * piece[m,p,:]   (each piece takes the previous ones' residual)
// which the tensor cores multiply by K with the heads. Four pieces leave a relative error of about
// 2^-16 of q'; the FP8 MMA's own accumulation error (~1e-4, tunables.h: kExactKeys) dominates.
// Why: the epilogue's instructions, not the MMA, bound the kernel where the split is on (tunables.h:
// linear_term_split); it halves the per-element instructions for 1/16 (H = 64) or 1/8 (H = 32) more MMA.
//
// Each math warpgroup builds the pieces of its R query rows when it opens a Q slot, from the slot's Q
// tile and weights (shared memory, no global traffic), and writes them behind its 128 Q columns:
//   region of warpgroup g in q[slot] (shared_storage.cuh, kQRegionBytes): rows of D bytes, D-byte swizzle,
//     rows [0, 128)          Q[(row, head)] as TMA wrote them, row = g R + col / H, head = col % H
//     rows [128, 128 + 4R)   the pieces: row 128 + piece_row(r, p) = piece p of query row g R + r
//   weights[slot][g * 4 + p][kPieceScaleColumn + r]   scale[g R + r, p], read with the weights
// so that one wgmma m64n(128 + 4R)k32 computes both.
#pragma once
#include <cstdint>

#include "sm90/ptx/utils.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/tunables.h"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

constexpr int kLinearPieces = 4;  // one per quad lane: the fragment's columns 2q, 2q + 1 (piece_row)
// Where piece p's scales of warpgroup g's rows sit: weights[slot][g * 4 + p][kPieceScaleColumn + r],
// after a thread's 32 weights, in the padding of kWeightRun.
constexpr int kPieceScaleColumn = 32;

template <int H, int D>
struct LinearTerm {
  static constexpr bool kOn = linear_term_split(H, D);
  static constexpr int kRows = BlockShape<H>::kRowsPerWarpgroup;  // query rows per math warpgroup
  static constexpr int kCols = kOn ? kLinearPieces * kRows : 0;    // extra wgmma columns
  static constexpr int kMmaCols = kColsPerMathWarpgroup + kCols;   // the wgmma's N
  static_assert(kCols <= kMaxLinearCols, "shared memory holds kMaxLinearCols piece rows per warpgroup");
  static_assert(!kOn || kRows % 2 == 0, "the piece columns pair two query rows per 8-column group");
  static_assert(!kOn || kPieceScaleColumn + kRows <= kWeightRun, "the scales fit the padding of a thread's weights");
  static_assert(kMmaCols % 8 == 0, "wgmma N is a multiple of 8");
};

// The extra column e of a warpgroup's tile (accumulator column 128 + e = 8 j + 2 q + c, quad lane q)
// holds piece q of query row 2 j + c: a thread's piece columns all belong to its own quad lane's
// piece, and the row is known at compile time (j, c are unrolled loop indices).
__host__ __device__ constexpr int piece_row(int row_in_group, int piece) {
  return 8 * (row_in_group / 2) + 2 * piece + row_in_group % 2;
}

// Byte offset of `offset` (from a 1024-byte aligned tile of D-byte rows) under the D-byte swizzle TMA
// writes and wgmma reads: the 16-byte chunk index xor the row's bits above it.
template <int D>
__device__ __forceinline__ int swizzled(int offset) {
  return offset ^ (((offset >> 7) & (D / 16 - 1)) << 4);
}

// Four floats to four e4m3 (round to nearest even, saturating), value 0 in byte 0.
__device__ __forceinline__ uint32_t float4_to_e4m3x4(const float (&v)[4]) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1]), "f"(v[0]));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3]), "f"(v[2]));
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// Builds the pieces of warpgroup `math_warpgroup`'s rows of the block in `slot` (its Q tile and weights
// have landed: q_full), by its 128 threads (`thread` = 0..127). Thread t takes query row r = t / (128/R),
// four consecutive bytes `chunk` of D, and every S-th head from `split` (S = 512 / (R D) threads share a
// chunk, joined by a butterfly: the same bits in each). A piece's scale is 2^(e - 7), e the exponent of
// the residual's largest magnitude, so that element lands in [128, 256): no saturation, and the next
// residual is at most 1/16 of this one. A row of zeros, or one with a NaN, inf or tiny (< 2^-119)
// largest magnitude, gets zero pieces: its |x| sum carries a NaN or inf into the logits as before.
template <int H, int D>
__device__ __forceinline__ void build_linear_pieces(SharedStorage& smem, int slot, int math_warpgroup, int thread) {
  constexpr int R = LinearTerm<H, D>::kRows;
  constexpr int kThreadsPerRow = 128 / R;
  constexpr int kChunks = D / 4;
  constexpr int S = kThreadsPerRow / kChunks;
  static_assert(S >= 1 && S <= 32 && H % S == 0 && kThreadsPerRow % kChunks == 0, "whole chunks per thread");
  constexpr int kWarpsPerRow = kThreadsPerRow / 32;  // 1 (R = 4) or 2 (R = 2)
  const int r = thread / kThreadsPerRow, within = thread % kThreadsPerRow;
  const int chunk = within / S, split = within % S;
  uint8_t* region = smem.q[slot] + math_warpgroup * kQRegionBytes;
  const float(*weights)[kWeightRun] = smem.weights[slot] + math_warpgroup * 4;

  float value[4] = {0.f, 0.f, 0.f, 0.f};
  // Four heads' loads in flight per step.
#pragma unroll 4
  for (int k = 0; k < H / S; ++k) {
    const int head = k * S + split;
    const uint32_t bytes = *reinterpret_cast<const uint32_t*>(region + swizzled<D>((r * H + head) * D + chunk * 4));
    // weight_index<H>'s position of (row g R + r, head), written out: through weight_index's divisions
    // of a run-time column the build is longer (the ISA check's "last tile +").
    const float w = weights[(head % 8) / 2][(r * BlockShape<H>::kHeadGroups + head / 8) * 2 + head % 2];
    float q[4];
    e4m3x4_to_float(bytes, q);
#pragma unroll
    for (int i = 0; i < 4; ++i) value[i] = fmaf(w, q[i], value[i]);
  }
#pragma unroll
  for (int distance = 1; distance < S; distance *= 2)
#pragma unroll
    for (int i = 0; i < 4; ++i) value[i] += __shfl_xor_sync(0xffffffffu, value[i], distance);

  const int warp = thread / 32;
  // Not unrolled: unrolled, ptxas spills in the fill warps' code of the H = 64, D = 128 instances.
#pragma unroll 1
  for (int p = 0; p < kLinearPieces; ++p) {
    // |x| of a finite float orders as its bits.
    uint32_t lane_max = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) lane_max = max(lane_max, __float_as_uint(fabsf(value[i])));
    uint32_t max_bits = __reduce_max_sync(0xffffffffu, lane_max);
    if constexpr (kWarpsPerRow > 1) {
      if (thread % 32 == 0) smem.piece_max[math_warpgroup][warp] = max_bits;
      math_warpgroup_sync(math_warpgroup);
      max_bits = max(max_bits, smem.piece_max[math_warpgroup][warp ^ 1]);
      math_warpgroup_sync(math_warpgroup);  // the next piece's maxima overwrite these
    }
    const uint32_t biased = max_bits >> 23;  // the largest magnitude's biased exponent
    const bool usable = biased >= 8 && biased < 255;
    const float scale = __uint_as_float(usable ? (biased - 7) << 23 : 0u);            // 2^(e - 7)
    const float inverse = __uint_as_float(usable ? (127 + 127 + 7 - biased) << 23 : 0u);  // 2^(7 - e)
    float scaled[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) scaled[i] = value[i] * inverse;
    const uint32_t packed = float4_to_e4m3x4(scaled);
    float back[4];
    e4m3x4_to_float(packed, back);
#pragma unroll
    for (int i = 0; i < 4; ++i) value[i] = fmaf(-back[i], scale, value[i]);
    if (split == 0)
      *reinterpret_cast<uint32_t*>(region + swizzled<D>((kColsPerMathWarpgroup + piece_row(r, p)) * D + chunk * 4)) =
          packed;
    if (within == 0) smem.weights[slot][math_warpgroup * 4 + p][kPieceScaleColumn + r] = scale;
  }
  // The pieces are generic-proxy stores that wgmma reads through the async proxy.
  fence_proxy_async_shared();
  math_warpgroup_sync(math_warpgroup);
}

}  // namespace sm90
}  // namespace aiter
