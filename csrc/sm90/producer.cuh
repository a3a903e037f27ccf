// The producer warp: TMA issue of Q and K for this CTA's share of the compute list.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors read:
//   Q  [M, H, D] e4m3 through a 2-D tensor map [M*H rows, D bytes], box kQBoxRows rows: a block's
//      Q tile is rows [block * kQTileCols, + kQTileCols), three boxes
//   K  [N, D] e4m3 through a 2-D tensor map [N rows, D bytes], box 64 rows: K tile t = keys [64 t, 64 t + 64)
//   w  [M, H] f32 (row stride weights_stride), by cp.async into SharedStorage::weights (weight_index order)
//   ks, ke [M] int32: the block's row windows, into SharedStorage::window
//
// Warp 0 of warpgroup 0 walks the blocks of its share (plan.cuh). For each block it publishes a Q slot
// (Q tile by TMA, weights, row windows, the tile range [tile_begin, tile_end) this CTA computes), then
// streams those K tiles into the kKStages ring; a slot with block -1 ends the math warpgroups' loop.
// Why a warp of its own: the TMA issue and the waits on the rings never stall the math warps.
#pragma once
#include <cuda.h>
#include <climits>
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/ld_st.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// Rows lane + 32 i < kRowsPerBlock of block `block`, their clamped windows, on lane `lane` (the
// producer walks the blocks with these in registers, one block ahead; rows past the block or past M
// have an empty window). The lanes also ask L2 for the rows' weights, which are copied into the slot
// with cp.async once it is published: no registers hold them meanwhile.
template <int H>
struct LaneWindows {
  scheduler::KeyRange row[BlockShape<H>::kRowsPerLane];
};

template <int H>
__device__ __forceinline__ LaneWindows<H> load_block_window(const KernelArgs& args, int64_t block, int lane) {
  LaneWindows<H> windows;
#pragma unroll
  for (int i = 0; i < BlockShape<H>::kRowsPerLane; ++i) {
    const int row = lane + 32 * i;
    const int64_t m = block * BlockShape<H>::kRowsPerBlock + row;
    windows.row[i] = scheduler::KeyRange{0, 0};
    if (row < BlockShape<H>::kRowsPerBlock && m < args.M) {
      const float* weight_row = args.weights + m * args.weights_stride;
#pragma unroll
      for (int h = 0; h < H; h += 32) prefetch_l2(weight_row + h);  // 128-byte lines
      windows.row[i] = load_row_window(args, m);
    }
  }
  return windows;
}

// The union of the 32 lanes' windows: a warp reduction (32-bit: windows lie in [0, N], N < 2^31).
template <int H>
__device__ __forceinline__ scheduler::BlockUnion<> warp_block_union(const LaneWindows<H>& windows, int64_t num_keys) {
  int lane_lo = INT_MAX, lane_hi = 0;
#pragma unroll
  for (int i = 0; i < BlockShape<H>::kRowsPerLane; ++i) {
    const bool live = !windows.row[i].empty();
    lane_lo = min(lane_lo, live ? static_cast<int>(windows.row[i].begin) : INT_MAX);
    lane_hi = max(lane_hi, live ? static_cast<int>(windows.row[i].end) : 0);
  }
  const int lo = __reduce_min_sync(0xffffffffu, lane_lo);
  const int hi = __reduce_max_sync(0xffffffffu, lane_hi);
  auto block_union = scheduler::BlockUnion<>::empty_within(num_keys);
  block_union.add(scheduler::KeyRange{lo, hi});  // empty (adds nothing) when no lane has a window
  return block_union;
}

template <int H, int D>
__device__ void produce_q_and_k(const KernelArgs& args, SharedStorage& smem, const CUtensorMap* q_map,
                                const CUtensorMap* k_map) {
  using Shape = BlockShape<H>;
  const int lane = threadIdx.x % 32;
  const scheduler::CostModel model = cost_model<H, D>(args);
  const int64_t blocks = Shape::num_blocks(args);
  int slot = 0, slot_phase = 0, stage = 0, stage_phase = 0;
  const PlanShare share = smem.plan_share[kComputeList];
  int64_t block = share.block;
  int64_t units_left = block < 0 ? 0 : share.units;
  int64_t offset = share.offset;
  // The next block's loads are issued before this block's K tiles, so their latency hides behind
  // the ring waits (a block of causal or multi-request chunks can be a single tile).
  LaneWindows<H> next_windows = load_block_window<H>(args, units_left > 0 ? block : blocks, lane);
  // block < blocks: a guard, the shares end inside the list.
  while (units_left > 0 && block < blocks) {
    const LaneWindows<H> windows = next_windows;
    const scheduler::TileSpan span = scheduler::tile_span(model, warp_block_union<H>(windows, args.N).range());
    const scheduler::BlockPrice price = scheduler::price_block(model, span);
    // This CTA's units of the block: [offset, offset + take) of [overhead | tiles].
    const int64_t take = min(units_left, price.compute_total() - offset);
    if (block + 1 < blocks && take < units_left) next_windows = load_block_window<H>(args, block + 1, lane);
    const scheduler::SegmentParts part = scheduler::segment_parts(price, offset, offset + take);
    const int first_tile = static_cast<int>(span.first_tile(kKeysPerTile));
    const int tile_begin = first_tile + static_cast<int>(part.tile_begin);
    const int tile_end = first_tile + static_cast<int>(part.tile_end);
    if (take > 0 && tile_end > tile_begin) {
      mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
#pragma unroll
      for (int i = 0; i < Shape::kRowsPerLane; ++i)
        if (lane + 32 * i < Shape::kRowsPerBlock)
          smem.window[slot][lane + 32 * i] =
              make_int2(static_cast<int>(windows.row[i].begin), static_cast<int>(windows.row[i].end));
#pragma unroll
      for (int i = 0; i < kQTileCols / 32; ++i) {
        const int col = lane + 32 * i;
        const int64_t row = block * Shape::kRowsPerBlock + col / H;
        const bool valid = row < args.M;
        cp_async_4(&smem.weights[slot][0][0] + weight_index<H>(col),
                   args.weights + (valid ? row * args.weights_stride + col % H : 0), valid);
      }
      // q_full completes after 32 plain arrivals (these stores, released) and 32 cp.async arrivals.
      cp_async_arrive_noinc(&smem.q_full[slot]);
      if (lane == 0) {
        smem.slot_block[slot] = static_cast<int>(block);
        smem.slot_tile_begin[slot] = tile_begin;
        smem.slot_tile_end[slot] = tile_end;
        mbar_arrive_expect_tx(&smem.q_full[slot], HeadDimShape<D>::kQTileBytes);
        // Box g is math warpgroup g's 128 columns, at the front of its region of the slot.
#pragma unroll
        for (int box = 0; box < kMathWarpgroups; ++box)
          tma_load_2d(smem.q[slot] + box * kQRegionBytes, q_map, &smem.q_full[slot], 0,
                      static_cast<int>(block * kQTileCols + box * kQBoxRows));
      } else {
        mbar_arrive(&smem.q_full[slot]);
      }
      slot = slot + 1 == kQSlots ? 0 : slot + 1;
      slot_phase ^= slot == 0;
      for (int tile = tile_begin; tile < tile_end; ++tile) {
        if (lane == 0) {
          mbar_wait(&smem.k_empty[stage], stage_phase ^ 1);
          mbar_arrive_expect_tx(&smem.k_full[stage], HeadDimShape<D>::kKTileBytes);
          tma_load_2d(smem.k[stage], k_map, &smem.k_full[stage], 0, tile * kKeysPerTile);
        }
        stage = (stage + 1) & (kKStages - 1);
        stage_phase ^= stage == 0;
      }
      __syncwarp();
    }
    if (take > 0) units_left -= take;
    ++block;
    offset = 0;
  }
  // Sentinel: tells the math warpgroups there is no further block.
  mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
  if (lane == 0) smem.slot_block[slot] = -1;
  cp_async_arrive_noinc(&smem.q_full[slot]);
  mbar_arrive(&smem.q_full[slot]);
}

}  // namespace sm90
}  // namespace aiter
