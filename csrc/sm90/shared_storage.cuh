// The shared-memory layout of the Hopper kernel, as one type, and the barrier protocol over it.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// What lives here, per CTA (one CTA per SM):
//   q[slot]        the Q tile of a block: kQTileCols rows (m, h) of D e4m3 bytes, written by TMA with
//                  the D-byte swizzle wgmma reads (kQSlots slots, a ring: producer -> math warpgroups)
//   k[stage]       one K tile: 64 rows (keys) of D e4m3 bytes, same swizzle (kKStages stages, a ring)
//                  Both are sized for D = kMaxHeadDim; a smaller D fills the front of each.
//   weights[slot]  the block's weights w[m, h] (f32), permuted into the math threads' order (weight_index)
//   window[slot]   the block's clamped row windows, for the epilogue's in-window test
//   q[slot] is one region per math warpgroup (kQRegionBytes): its 128 Q columns, then the linear
//   term's piece columns that the warpgroup builds itself (linear_term.cuh), and their scales in the
//   padding of its weights
//   the plan cut's scratch and result, the fill's batch of row windows, the exact path's staging
// Why a type: every role addresses the same bytes, and the launcher sizes the dynamic shared memory
// with sizeof(SharedStorage); the tiles need 1024-byte alignment (the swizzle atom).
#pragma once
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/utils.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// The weights of one (math warpgroup, quad lane) are 32 floats, padded to kWeightRun so a quarter
// warp's four 16-byte reads fall in different banks.
constexpr int kWeightRun = 32 + 4;

// Which list of the plan: the (block, K tile) compute units, or the -inf fill units (plan.cuh).
enum PlanList { kComputeList = 0, kFillList = 1 };

// This CTA's share of one plan list: `units` units from unit `offset` of block `block` on
// (block = -1: the share is empty).
struct PlanShare {
  int64_t block;
  int64_t offset;
  int64_t units;
};

struct SharedStorage {
  alignas(1024) uint8_t q[kQSlots][kQSlotBytes];
  alignas(1024) uint8_t k[kKStages][kKStageBytes];
  // Weights of the slot's (row, head) columns in the math threads' order (weight_index): the 32 of
  // each (math warpgroup, quad lane) are contiguous, read once per block as 8 16-byte vectors.
  alignas(16) float weights[kQSlots][kMathWarpgroups * 4][kWeightRun];
  alignas(16) int2 window[kQSlots][kMaxRowsPerBlock];  // clamped [begin, end) of each row of the slot's block
  uint32_t piece_max[kMathWarpgroups][4];  // linear_term.cuh: each math warp's largest |residual| (bits)
  int slot_block[kQSlots];  // Q block index, -1 = no more work
  int slot_tile_begin[kQSlots];
  int slot_tile_end[kQSlots];
  uint64_t q_full[kQSlots];
  uint64_t q_empty[kQSlots];
  uint64_t k_full[kKStages];
  uint64_t k_empty[kKStages];
  uint64_t exact_full;  // the exact path's staged Q row and K rows (exact_rows.cuh)
  int64_t plan_warp_sums[kThreads / 32 + 1][2];  // plan cut: each warp's units, then their prefix; the total
  PlanShare plan_share[2];           // this CTA's share of each list (plan.cuh)
  int2 fill_window[kFillThreads];    // clamped windows of the rows of the blocks the fill warps walk next
  int64_t exact_row[kFillThreads];   // the exact path's candidate items, row x kExactKeys + part (-1: none), and
  int2 exact_window[kFillThreads];   // their clamped windows
  double exact_part[kExactKeys][kMaxHeads];  // relu(q.k) * w per (key, head) of the row in hand
  alignas(16) uint8_t exact_q[kMaxHeads * kMaxHeadDim];   // its Q row, and
  alignas(16) uint8_t exact_k[kExactKeys * kMaxHeadDim];  // its keys' K rows
};

// The storage in the dynamic shared memory, aligned to 1024 bytes (the launcher reserves the slack).
// Offset from the shared array itself (not a cast through an integer) so accesses stay LDS/STS.
__device__ __forceinline__ SharedStorage& shared_storage(uint8_t* dynamic_smem) {
  const uint32_t align_pad = (1024 - (smem_addr(dynamic_smem) & 1023)) & 1023;
  return *reinterpret_cast<SharedStorage*>(dynamic_smem + align_pad);
}

// The barriers, by one thread before the first __syncthreads:
//   q_full[slot]   64 arrivals (the producer lanes' window stores, released, and their cp.async weight
//                  copies) plus the Q tile's TMA bytes: the slot's block is ready.
//   q_empty[slot]  one arrival per math warp after the block's last tile: the slot may be refilled.
//   k_full[stage]  the producer's arrival plus the K tile's TMA bytes.
//   k_empty[stage] one arrival per math warp once its MMA on the stage is done.
//   exact_full     one fill thread's arrival plus the bulk copies' bytes of an exact item's Q and K rows.
__device__ __forceinline__ void init_barriers(SharedStorage& smem) {
  for (int slot = 0; slot < kQSlots; ++slot) {
    mbar_init(&smem.q_full[slot], 64);
    mbar_init(&smem.q_empty[slot], 4 * kMathWarpgroups);
  }
  for (int stage = 0; stage < kKStages; ++stage) {
    mbar_init(&smem.k_full[stage], 1);
    mbar_init(&smem.k_empty[stage], 4 * kMathWarpgroups);
  }
  mbar_init(&smem.exact_full, 1);
  fence_barrier_init();
}

// Position of the block's (row, head) column `col` in SharedStorage::weights: math warpgroup g's quad lane
// q holds heads 8 hg + 2q + c of rows [g R, g R + R) (the accumulator fragment, math.cuh), in the
// order the epilogue consumes them: [g][q][(r * H/8 + hg) * 2 + c].
template <int H>
__device__ __forceinline__ int weight_index(int col) {
  using Shape = BlockShape<H>;
  const int row = col / H, head = col % H;
  const int math_warpgroup = row / Shape::kRowsPerWarpgroup, row_in_warpgroup = row % Shape::kRowsPerWarpgroup;
  const int head_group = head / 8, quad_lane = (head % 8) / 2, pair = head % 2;
  return (math_warpgroup * 4 + quad_lane) * kWeightRun + (row_in_warpgroup * Shape::kHeadGroups + head_group) * 2 +
         pair;
}

}  // namespace sm90
}  // namespace aiter
