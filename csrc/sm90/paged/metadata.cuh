// The paged decode op's schedule, on the device: get_paged_mqa_logits_metadata for sm90.
//
//   schedule_meta[p] = (batch, block) of unit share_begin(total, P, p), p in [0, P]; row P = (B, 0)
//   units: each batch's cache blocks, ceil(keys(b) / block_kv), keys(b) the most keys a row of b sees
//   (common/work_scheduler.h: paged_batch_keys, share_begin, paged_unit)
//
// Tensors: context_lens [B] or [B, next_n] int32 (read); schedule_meta [P + 1, 2] int32 (written).
// One CTA of kMetadataThreads: each thread sums the units of a contiguous run of batches, a CTA
// scan gives each run's first unit, and the thread of each share finds its run by binary search and
// its batch by walking the run. No host synchronisation, nothing outlives the call.
#pragma once
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/paged/schedule.cuh"  // kNoKeyLimit: the units count unclamped keys

namespace aiter {
namespace sm90 {
namespace paged {

// 512 threads: with 1024 (64 registers each) the scan and search spilled.
constexpr int kMetadataThreads = 512;

__global__ void __launch_bounds__(kMetadataThreads)
    paged_metadata_kernel(const int32_t* __restrict__ context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                          int64_t block_kv, int64_t num_shares, int32_t* __restrict__ schedule_meta) {
  __shared__ int64_t run_first[kMetadataThreads + 1];  // first unit of each thread's run; then the total
  auto units = [&](int64_t b) {
    return scheduler::ceil_div(scheduler::paged_batch_keys(context_lens, b, next_n, lens_per_row, kNoKeyLimit), block_kv);
  };
  const int tid = threadIdx.x;
  const int64_t per_thread = scheduler::ceil_div(batches, kMetadataThreads);
  const int64_t run_begin = min(batches, tid * per_thread), run_end = min(batches, run_begin + per_thread);
  int64_t mine = 0;
  for (int64_t b = run_begin; b < run_end; ++b) mine += units(b);
  // Inclusive scan over the CTA: shuffles within a warp, then over the warps' sums.
  __shared__ int64_t warp_sums[kMetadataThreads / 32];
  const int lane = tid % 32, warp = tid / 32;
  int64_t inclusive = mine;
#pragma unroll
  for (int distance = 1; distance < 32; distance *= 2) {
    const int64_t below = __shfl_up_sync(0xffffffffu, inclusive, distance);
    if (lane >= distance) inclusive += below;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  constexpr int kWarps = kMetadataThreads / 32;
  static_assert(kWarps <= 32, "one warp scans the warps' sums");
  if (warp == 0) {
    const int64_t own = lane < kWarps ? warp_sums[lane] : 0;
    int64_t sum = own;
#pragma unroll
    for (int distance = 1; distance < 32; distance *= 2) {
      const int64_t below = __shfl_up_sync(0xffffffffu, sum, distance);
      if (lane >= distance) sum += below;
    }
    if (lane < kWarps) warp_sums[lane] = sum - own;  // exclusive
  }
  __syncthreads();
  run_first[tid] = warp_sums[warp] + inclusive - mine;
  if (tid == kMetadataThreads - 1) run_first[kMetadataThreads] = warp_sums[warp] + inclusive;
  __syncthreads();
  const int64_t total = run_first[kMetadataThreads];
  for (int64_t share = tid; share <= num_shares; share += kMetadataThreads) {
    const int64_t unit = scheduler::share_begin(total, num_shares, share);
    int batch = static_cast<int>(batches), block = 0;
    if (unit < total) {
      // The last run whose first unit is <= unit, then the batch within it.
      int lo = 0, hi = kMetadataThreads - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (run_first[mid] <= unit) lo = mid; else hi = mid - 1;
      }
      int64_t seen = run_first[lo];
      for (int64_t b = min(batches, lo * per_thread); b < batches; ++b) {
        const int64_t count = units(b);
        if (unit < seen + count) {
          batch = static_cast<int>(b);
          block = static_cast<int>(unit - seen);
          break;
        }
        seen += count;
      }
    }
    schedule_meta[2 * share] = batch;
    schedule_meta[2 * share + 1] = block;
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
