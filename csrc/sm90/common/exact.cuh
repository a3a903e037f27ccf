// The exact path's pieces shared by the prefill and the paged kernel: which rows it owns, and the
// exact fp8 dot product it computes them with, on the CUDA cores.
//
// Why: Hopper's FP8 wgmma accumulates with about 14 bits of precision, and a row with only a few
// logits can cancel them all to the size of that error (tunables.h: kExactKeys). Each kernel
// computes those rows with exact fp8 products and a fixed-order sum (deterministic), and its math
// warpgroups skip their in-window stores.
#pragma once
#include <cstdint>

#include "sm90/ptx/utils.cuh"
#include "sm90/tunables.h"

namespace aiter {
namespace sm90 {

// Rows the exact path computes (each kernel's exact_rows.cuh) and the math warpgroups therefore do not store: a
// window of 1..kExactKeys keys (`keys` = end - begin of the clamped window, <= 0 when empty).
__device__ __forceinline__ bool is_exact_row(int keys) { return keys > 0 && keys <= kExactKeys; }

// D-long dot product of two e4m3 rows (D / 16 16-byte vectors each, in shared or global memory): every
// product of two e4m3 values is exact in float; four at a time are summed in float (3 roundings of
// 2^-24), the rest in double (a float-to-double conversion per element runs at a quarter rate). The
// vectors are visited from `rotation` on, so threads reading different rows hit different banks.
template <int D>
__device__ __forceinline__ double dot_e4m3_row(const uint4* x, const uint4* y, int rotation) {
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
  for (int i = 0; i < D / 16; ++i) {
    const int v = (i + rotation) % (D / 16);
    const uint4 x_vec = x[v], y_vec = y[v];
    const uint32_t x_words[4] = {x_vec.x, x_vec.y, x_vec.z, x_vec.w};
    const uint32_t y_words[4] = {y_vec.x, y_vec.y, y_vec.z, y_vec.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float xf[4], yf[4];
      e4m3x4_to_float(x_words[k], xf);
      e4m3x4_to_float(y_words[k], yf);
      const float four = fmaf(xf[3], yf[3], fmaf(xf[2], yf[2], fmaf(xf[1], yf[1], xf[0] * yf[0])));
      partial[k] += static_cast<double>(four);
    }
  }
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

}  // namespace sm90
}  // namespace aiter
