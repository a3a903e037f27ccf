// The plan: each CTA's balanced share of the call's work. A pricing kernel prices every Q block once,
// into a small device workspace; each CTA of the main kernel then cuts its own share from those prices.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Reads ks, ke [M] int32 (raw row bounds). The workspace (the binding allocates it per call):
//   block_units  [num_blocks] int2   each Q block's (compute, fill) units, written by price_blocks_kernel
// Writes SharedStorage::plan_share (the main kernel's CTA's share of each list).
//
// The work is two lists of units, priced per Q block by the shared scheduler (work.cuh: cost_model):
//   compute  per block, block_start_tiles units for starting it, then one per K tile of its union;
//   fill     with clean_logits, per block one unit per column tile outside those K tiles (-inf).
// Each list is cut into gridDim.x equal shares (scheduler::share_begin), so causal and multi-request
// chunks balance by real window work, and a block may be split across CTAs (its column ranges are
// disjoint: no reduction).
// Why this split: pricing a block (its rows' bounds loaded and clamped, their union, its tiles) is
// the expensive part; done by every CTA for every block it put an O(M) chain of loads and clamps on
// each CTA's critical path, and done by a single CTA it is bound by that one SM's issue rate.
// Spread over a grid it is one round of loads; what is left per CTA
// is a scan of 8 bytes per block from L2. The main kernel is the pricing kernel's programmatic
// dependent: its CTAs start during the pricing and wait for it at grid_dependency_wait, so the extra
// launch adds no launch gap. The pricing kernel is in turn the programmatic dependent of the stream's
// previous kernel, whose results it waits for before its first read. No host synchronisation,
// nothing outlives the call (graph capturable).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/ptx/utils.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// Bytes of workspace the plan needs for `num_blocks` Q blocks.
__host__ __device__ inline size_t plan_workspace_bytes(int64_t num_blocks) {
  return static_cast<size_t>(num_blocks) * sizeof(int2);
}

// One thread per Q block: its (compute, fill) units. A block's units fit 32 bits (at most N / 64 +
// block_start_tiles tiles, N < 2^31).
template <int H, int D>
__global__ void __launch_bounds__(kPriceThreads)
    price_blocks_kernel(const KernelArgs args, int2* __restrict__ block_units) {
  // The main kernel's CTAs may start now and wait at grid_dependency_wait.
  launch_dependents();
  // This kernel is itself launched as a programmatic dependent of whatever ran before it on the
  // stream (its launch overlaps that kernel's end): the row bounds are read only once it is done.
  grid_dependency_wait();
  const int64_t block = int64_t(blockIdx.x) * kPriceThreads + threadIdx.x;
  if (block >= BlockShape<H>::num_blocks(args)) return;
  const scheduler::BlockPrice price =
      scheduler::price_block(cost_model<H, D>(args), load_block_union<H>(args, block).range());
  block_units[block] = make_int2(static_cast<int>(price.compute_total()), static_cast<int>(price.fill));
}

// Exclusive prefix over the CTA of one value per thread for each list, and the CTA's totals, by all
// kThreads threads: a shuffle scan per warp, then one over the warps' sums.
__device__ __forceinline__ void cta_exclusive_scan(const int64_t (&value)[2], int64_t (&prefix)[2],
                                                   int64_t (&total)[2], SharedStorage& smem) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kWarps <= 32, "one warp scans the warps' sums");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t inclusive[2] = {value[0], value[1]};
#pragma unroll
  for (int list = 0; list < 2; ++list) {
#pragma unroll
    for (int distance = 1; distance < 32; distance *= 2) {
      const int64_t below = __shfl_up_sync(0xffffffffu, inclusive[list], distance);
      if (lane >= distance) inclusive[list] += below;
    }
    if (lane == 31) smem.plan_warp_sums[warp][list] = inclusive[list];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int list = 0; list < 2; ++list) {
      const int64_t warp_sum = lane < kWarps ? smem.plan_warp_sums[lane][list] : 0;
      int64_t running = warp_sum;
#pragma unroll
      for (int distance = 1; distance < 32; distance *= 2) {
        const int64_t below = __shfl_up_sync(0xffffffffu, running, distance);
        if (lane >= distance) running += below;
      }
      if (lane < kWarps) smem.plan_warp_sums[lane][list] = running - warp_sum;  // exclusive, per warp
      if (lane == 31) smem.plan_warp_sums[kWarps][list] = running;           // the CTA's total
    }
  }
  __syncthreads();
#pragma unroll
  for (int list = 0; list < 2; ++list) {
    prefix[list] = smem.plan_warp_sums[warp][list] + inclusive[list] - value[list];
    total[list] = smem.plan_warp_sums[kWarps][list];
  }
}

// This CTA's share of each list, from the blocks' prices, by all kThreads threads (after
// grid_dependency_wait). Each thread sums a contiguous run of blocks; a CTA scan gives each run's
// first unit; the thread whose run holds this CTA's first unit of a list finds the exact
// (block, offset). Ends with __syncthreads.
template <int H>
__device__ void cut_shares(const KernelArgs& args, const int2* __restrict__ block_units, SharedStorage& smem) {
  const int64_t blocks = BlockShape<H>::num_blocks(args);
  const int64_t blocks_per_thread = scheduler::ceil_div(blocks, kThreads);
  const int tid = threadIdx.x;
  const int64_t run_begin = min(blocks, tid * blocks_per_thread);
  const int64_t run_end = min(blocks, run_begin + blocks_per_thread);
  int64_t mine[2] = {0, 0};
#pragma unroll 4
  for (int64_t block = run_begin; block < run_end; ++block) {
    const int2 units = block_units[block];
    mine[kComputeList] += units.x;
    mine[kFillList] += units.y;
  }
  int64_t seen[2], total[2];
  cta_exclusive_scan(mine, seen, total, smem);

  int64_t share_first[2];
  bool owner[2];
#pragma unroll
  for (int list = 0; list < 2; ++list) {
    share_first[list] = scheduler::share_begin(total[list], gridDim.x, blockIdx.x);
    const int64_t share_last = scheduler::share_begin(total[list], gridDim.x, blockIdx.x + 1);
    if (tid == 0) smem.plan_share[list] = PlanShare{-1, 0, share_last - share_first[list]};
    owner[list] = share_first[list] < share_last && seen[list] <= share_first[list] &&
                  share_first[list] < seen[list] + mine[list];
  }
  __syncthreads();  // the empty shares above are written before an owner fills one in
  // The thread whose run holds a share's first unit walks the run again, for both lists at once.
  for (int64_t block = run_begin; block < run_end && (owner[kComputeList] || owner[kFillList]); ++block) {
    const int2 block_price = block_units[block];
    const int64_t units[2] = {block_price.x, block_price.y};
#pragma unroll
    for (int list = 0; list < 2; ++list) {
      if (owner[list] && share_first[list] < seen[list] + units[list]) {
        smem.plan_share[list].block = block;
        smem.plan_share[list].offset = share_first[list] - seen[list];
        owner[list] = false;
      }
      seen[list] += units[list];
    }
  }
  __syncthreads();
}

}  // namespace sm90
}  // namespace aiter
