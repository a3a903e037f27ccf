// The exact path: rows whose window holds 1..kExactKeys keys, on the CUDA cores.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, D] e4m3 and K [N, D] e4m3 (one Q row and its few K rows at a time, by plain
// loads or bulk copies), kv_scale [N] f32, w [M, H] f32 (row stride weights_stride), ks, ke [M]
// int32; out [M, N] f32 or bf16, or [M, max_seqlen_k] in the compressed layout, row stride
// out_stride (written: the row's in-window columns; compressed: columns 0..keys-1).
//
// Why: Hopper's FP8 wgmma accumulates with ~14-bit precision, and a row with only a few logits can
// cancel them all to the size of that error (tunables.h: kExactKeys). These rows are computed here
// with exact fp8 products and a fixed-order sum (deterministic), and the math warpgroups skip their
// in-window stores (epilogue.cuh: BlockRows::stores). kv_scale > 0 (a precondition), so it is applied
// after the head sum.
#pragma once
#include <cstdint>

#include "sm90/common/exact.cuh"
#include "sm90/common/store.cuh"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/ld_st.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// The exact work this CTA owns, by the 96 fill warps' threads (`tid`). Each row is `spread` items,
// item (m, part) being keys part, part + spread, ... of row m; this CTA owns items i = blockIdx.x +
// k gridDim.x of the list i = part M + m. With kSpreadExactRows<H> (tunables.h), `spread` is as large
// as keeps that list within one round of candidates per fill thread (at most kExactKeys): a short
// call's exact rows (a causal chunk's first rows: 1, 2, ... 8 keys) then cost a CTA one key of
// CUDA-core work instead of a whole row per SM; a long call keeps one item per row. Otherwise every
// item is a whole row. Per item: one round of loads stages its Q row and K rows in shared memory,
// each (key, head) term is computed by one thread, and one thread per key sums the heads in a
// fixed order.
template <int H, int D, class Logits>
__device__ void exact_short_rows(const KernelArgs& args, SharedStorage& smem, int tid) {
  constexpr bool kCompressed = Logits::kCompressed;
  constexpr bool kSpread = kSpreadExactRows<H>;
  constexpr int kRowVecs = D / 16;
  constexpr int kQVecs = H * kRowVecs, kKVecs = kExactKeys * kRowVecs;
  static_assert(kKVecs <= kFillThreads, "one K vector per thread");
  constexpr int kQRounds = (kQVecs + kFillThreads - 1) / kFillThreads;
  const int64_t step = int64_t(gridDim.x) * kFillThreads;
  const int spread =
      kSpread ? static_cast<int>(max(int64_t(1), min(int64_t(kExactKeys), step / max(args.M, int64_t(1))))) : 1;
  const int64_t items = kSpread ? args.M * spread : args.M;
  uint4* q_rows = reinterpret_cast<uint4*>(smem.exact_q);
  uint4* k_rows = reinterpret_cast<uint4*>(smem.exact_k);
  uint32_t exact_phase = 0;  // of smem.exact_full
  for (int64_t base = blockIdx.x; base < items; base += step) {
    const int64_t item = base + int64_t(gridDim.x) * tid;
    int part = 0;
    int64_t m = item;
    if constexpr (kSpread) {
      part = static_cast<int>(item / max(args.M, int64_t(1)));
      m = item - part * args.M;
    }
    const scheduler::KeyRange window = item < items ? load_row_window(args, m) : scheduler::KeyRange{0, 0};
    // The compressed layout has out_columns columns: a longer window (a caller's broken guarantee)
    // stores its first keys only, so its end is cut here, once per candidate.
    const int64_t stored_end = kCompressed ? min(window.end, window.begin + args.out_columns) : window.end;
    const bool exact = is_exact_row(static_cast<int>(window.size())) && (!kSpread || window.begin + part < stored_end);
    smem.exact_row[tid] = exact ? (kSpread ? m * kExactKeys + part : m) : -1;
    smem.exact_window[tid] = make_int2(static_cast<int>(window.begin), static_cast<int>(stored_end));
    fill_warps_sync();
    for (int candidate = 0; candidate < kFillThreads; ++candidate) {
      const int64_t candidate_item = smem.exact_row[candidate];
      if (candidate_item < 0) continue;
      const int64_t row = kSpread ? candidate_item / kExactKeys : candidate_item;
      const int part = kSpread ? static_cast<int>(candidate_item % kExactKeys) : 0;
      const int2 row_window = smem.exact_window[candidate];
      // This item's keys: window keys part, part + spread, ... (at least one: part < the window's keys).
      const int keys =
          kSpread ? (row_window.y - row_window.x - part + spread - 1) / spread : row_window.y - row_window.x;
      const uint4* q_src = reinterpret_cast<const uint4*>(args.q + row * H * D);
      const uint4* k_src = reinterpret_cast<const uint4*>(args.kv + int64_t(row_window.x + part) * D);
      if constexpr (kSpread) {
        // Staged by bulk copies (the Q row is contiguous, the keys `spread` rows apart), which hold
        // no registers.
        if (tid == 0) {
          mbar_arrive_expect_tx(&smem.exact_full, (H + keys) * D);
          bulk_copy_to_shared(q_rows, q_src, H * D, &smem.exact_full);
          for (int key = 0; key < keys; ++key)
            bulk_copy_to_shared(k_rows + key * kRowVecs, k_src + key * spread * kRowVecs, D, &smem.exact_full);
        }
        mbar_wait(&smem.exact_full, exact_phase);
        exact_phase ^= 1;
      } else if constexpr (kCompressed) {
        // Copied without registers: the compressed instance's allocation spills the register
        // stage below at H = 64 (80 registers per producer thread). The full layout keeps the
        // register stage: with the copy, ptxas schedules the H = 64 epilogue's relu after the stage
        // release, which slows the long H = 64 rows.
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
        const int window_key = part + tid * spread;
        store_logit(logits_out<Logits>(args) + row * args.out_stride + (kCompressed ? 0 : row_window.x) + window_key,
                    static_cast<float>(0.5 * sum * args.kv_scales[row_window.x + window_key]));
      }
      fill_warps_sync();  // before the next row overwrites the staged rows and exact_part
    }
  }
}

}  // namespace sm90
}  // namespace aiter
