// The per-CTA plan scan: how a CTA finds its balanced share of the work.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Reads ks, ke [M] int32 (raw row bounds); writes SharedStorage::plan_share.
//
// The work is two lists of units, priced per Q block by the shared scheduler (work.cuh: cost_model):
//   compute  per block, kBlockOverheadTiles units for starting it, then one per K tile of its union;
//   fill     with clean_logits, per block one unit per column tile outside those K tiles (-inf).
// Each list is cut into gridDim.x equal shares (scheduler::share_begin), so causal and multi-request
// chunks balance by real window work, and a block may be split across CTAs (its column ranges are
// disjoint: no reduction). Every CTA derives the same plan from ks/ke on the device: no host sync,
// no workspace, no extra launch, O(M) reads per CTA.
#pragma once
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

template <int H>
__device__ __forceinline__ scheduler::BlockPrice price_of_block(const KernelArgs& args,
                                                                const scheduler::CostModel& model, int64_t block) {
  return scheduler::price_block(model, load_block_union<H>(args, block).range());
}

// Every thread of the CTA prices a contiguous run of blocks; warp 0 turns the per-thread sums into
// prefix sums; the thread whose run holds this CTA's first unit of a list finds the exact (block,
// offset). Ends with __syncthreads.
template <int H>
__device__ void plan_shares(const KernelArgs& args, SharedStorage& smem) {
  const scheduler::CostModel model = cost_model(args);
  const int64_t blocks = BlockShape<H>::num_blocks(args);
  const int64_t blocks_per_thread = scheduler::ceil_div(blocks, kThreads);
  const int tid = threadIdx.x;
  const int64_t run_begin = min(blocks, tid * blocks_per_thread);
  const int64_t run_end = min(blocks, run_begin + blocks_per_thread);
  int64_t mine[2] = {0, 0};
  for (int64_t block = run_begin; block < run_end; ++block) {
    const scheduler::BlockPrice price = price_of_block<H>(args, model, block);
    mine[kComputeList] += price.compute_total();
    mine[kFillList] += price.fill;
  }
  smem.plan_prefix[tid][kComputeList] = mine[kComputeList];
  smem.plan_prefix[tid][kFillList] = mine[kFillList];
  __syncthreads();

  // Exclusive prefix of the per-thread sums, by warp 0: each lane sums a run, then a warp scan.
  constexpr int kThreadsPerLane = kThreads / 32;
  if (tid < 32) {
#pragma unroll
    for (int list = 0; list < 2; ++list) {
      int64_t lane_sum = 0;
      for (int i = tid * kThreadsPerLane; i < (tid + 1) * kThreadsPerLane; ++i) lane_sum += smem.plan_prefix[i][list];
      int64_t inclusive = lane_sum;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int64_t below = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (tid >= d) inclusive += below;
      }
      int64_t prefix = inclusive - lane_sum;
      for (int i = tid * kThreadsPerLane; i < (tid + 1) * kThreadsPerLane; ++i) {
        const int64_t units = smem.plan_prefix[i][list];
        smem.plan_prefix[i][list] = prefix;
        prefix += units;
      }
      if (tid == 31) smem.plan_total[list] = inclusive;
    }
  }
  __syncthreads();

  int64_t share_first[2], share_last[2];
#pragma unroll
  for (int list = 0; list < 2; ++list) {
    share_first[list] = scheduler::share_begin(smem.plan_total[list], gridDim.x, blockIdx.x);
    share_last[list] = scheduler::share_begin(smem.plan_total[list], gridDim.x, blockIdx.x + 1);
    if (tid == 0) smem.plan_share[list] = PlanShare{-1, 0, share_last[list] - share_first[list]};
  }
  __syncthreads();
  // The thread whose run holds a share's first unit walks the run again, for both lists at once.
  int64_t seen[2];
  bool owner[2];
#pragma unroll
  for (int list = 0; list < 2; ++list) {
    seen[list] = smem.plan_prefix[tid][list];
    owner[list] = share_first[list] < share_last[list] && seen[list] <= share_first[list] &&
                  share_first[list] < seen[list] + mine[list];
  }
  for (int64_t block = run_begin; block < run_end && (owner[kComputeList] || owner[kFillList]); ++block) {
    const scheduler::BlockPrice price = price_of_block<H>(args, model, block);
    const int64_t units[2] = {price.compute_total(), price.fill};
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
