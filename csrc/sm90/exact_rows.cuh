// The exact path: rows whose window holds 1..kExactKeys keys, on the CUDA cores.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, D] e4m3 and K [N, D] e4m3 (plain loads, one Q row and its few K rows at a
// time), kv_scale [N] f32, w [M, H] f32 (row stride weights_stride), ks, ke [M] int32; out [M, N]
// f32 or bf16, or [M, max_seqlen_k] in the compressed layout, row stride out_stride (written: the
// row's in-window columns; compressed: columns 0..keys-1).
//
// Why: Hopper's FP8 wgmma accumulates with ~14-bit precision, and a row with only a few logits can
// cancel them all to the size of that error (tunables.h: kExactKeys). These rows are computed here
// with exact fp8 products and a fixed-order sum (deterministic), and the math warpgroups skip their
// in-window stores (epilogue.cuh: BlockRows::stores). kv_scale > 0 (a precondition), so it is applied
// after the head sum.
#pragma once
#include <cstdint>

#include "sm90/primitives.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// D-long dot product of two e4m3 rows staged in shared memory (D / 16 16-byte vectors each): every
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

// The short rows this CTA owns (m = blockIdx.x + k gridDim.x), by the 96 fill warps' threads (`tid`).
// Per row: one round of loads stages its Q row and K rows in shared memory, each (key, head) term is
// computed by one thread, and one thread per key sums the heads in a fixed order.
template <int H, int D, class Logits>
__device__ void exact_short_rows(const KernelArgs& args, SharedStorage& smem, int tid) {
  constexpr bool kCompressed = Logits::kCompressed;
  constexpr int kRowVecs = D / 16;
  constexpr int kQVecs = H * kRowVecs, kKVecs = kExactKeys * kRowVecs;
  static_assert(kKVecs <= kFillThreads, "one K vector per thread");
  constexpr int kQRounds = (kQVecs + kFillThreads - 1) / kFillThreads;
  const int64_t step = int64_t(gridDim.x) * kFillThreads;
  uint4* q_rows = reinterpret_cast<uint4*>(smem.exact_q);
  uint4* k_rows = reinterpret_cast<uint4*>(smem.exact_k);
  for (int64_t base = blockIdx.x; base < args.M; base += step) {
    const int64_t m = base + int64_t(gridDim.x) * tid;
    const scheduler::KeyRange window = m < args.M ? load_row_window(args, m) : scheduler::KeyRange{0, 0};
    smem.exact_row[tid] = is_exact_row(static_cast<int>(window.size())) ? m : -1;
    // The compressed layout has out_columns columns: a longer window (a caller's broken guarantee)
    // stores its first keys only, so its end is cut here, once per candidate.
    const int64_t stored_end = kCompressed ? min(window.end, window.begin + args.out_columns) : window.end;
    smem.exact_window[tid] = make_int2(static_cast<int>(window.begin), static_cast<int>(stored_end));
    fill_warps_sync();
    for (int candidate = 0; candidate < kFillThreads; ++candidate) {
      const int64_t row = smem.exact_row[candidate];
      if (row < 0) continue;
      const int2 row_window = smem.exact_window[candidate];
      const int keys = row_window.y - row_window.x;
      const uint4* q_src = reinterpret_cast<const uint4*>(args.q + row * H * D);
      const uint4* k_src = reinterpret_cast<const uint4*>(args.kv + int64_t(row_window.x) * D);
      if constexpr (kCompressed) {
        // Copied without registers: the compressed instance's allocation spills the register
        // stage below at H = 64 (80 registers per producer thread). The full layout keeps the
        // register stage: with the copy, ptxas moved the H = 64 epilogue's relu and the long H = 64
        // rows measured slower (docs/performance.md, issue 9).
#pragma unroll
        for (int j = 0; j < kQRounds; ++j)
          if (tid + j * kFillThreads < kQVecs)
            cp_async_16(q_rows + tid + j * kFillThreads, q_src + tid + j * kFillThreads);
        if (tid < keys * kRowVecs) cp_async_16(k_rows + tid, k_src + tid);
        cp_async_wait_all();
      } else {
        uint4 staged[kQRounds + 1];  // this thread's Q vectors, then its K vector
#pragma unroll
        for (int j = 0; j < kQRounds; ++j)
          if (tid + j * kFillThreads < kQVecs) staged[j] = __ldg(q_src + tid + j * kFillThreads);
        if (tid < keys * kRowVecs) staged[kQRounds] = __ldg(k_src + tid);
#pragma unroll
        for (int j = 0; j < kQRounds; ++j)
          if (tid + j * kFillThreads < kQVecs) q_rows[tid + j * kFillThreads] = staged[j];
        if (tid < keys * kRowVecs) k_rows[tid] = staged[kQRounds];
      }
      fill_warps_sync();
      for (int term = tid; term < keys * H; term += kFillThreads) {
        const int key = term / H, head = term % H;
        const double dot = dot_e4m3_row<D>(q_rows + head * kRowVecs, k_rows + key * kRowVecs, head);
        smem.exact_part[key][head] = (dot + fabs(dot)) * args.weights[row * args.weights_stride + head];  // 2 relu(dot) w
      }
      fill_warps_sync();
      // The compressed layout counts columns from the window's first key.
      if (tid < keys) {
        double sum = 0.0;
        for (int head = 0; head < H; ++head) sum += smem.exact_part[tid][head];
        store_logit(logits_out<Logits>(args) + row * args.out_stride + (kCompressed ? 0 : row_window.x) + tid,
                    static_cast<float>(0.5 * sum * args.kv_scales[row_window.x + tid]));
      }
      fill_warps_sync();  // before the next row overwrites the staged rows and exact_part
    }
  }
}

}  // namespace sm90
}  // namespace aiter
