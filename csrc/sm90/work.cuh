// The units of work of the Hopper kernel and how the shared work scheduler prices them.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors read here: ks, ke [M] int32 raw row bounds (common/fp8_mqa_logits_params.h has every layout).
//
//   Q block  BlockShape<H>::kRowsPerBlock = kQTileCols / H consecutive query rows (48 at H = 8);
//            its Q tile is kQTileCols (row, head) columns x D bytes, one wgmma B operand per math
//            warpgroup.
//   K tile   kKeysPerTile = 64 keys on the grid n = 64 t (TMA boxes); a Q block visits the K tiles
//            that cover its union window.
//
// Why one header: the pricing kernel, the producer, the -inf fill and the exact path each walk the same
// blocks and must agree on every window, union and price, so they all read windows through
// load_row_window and price blocks with the one cost_model below (common/work_scheduler.h).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "common/fp8_mqa_logits_params.h"
#include "common/work_scheduler.h"
#include "sm90/capabilities.h"
#include "sm90/tunables.h"

namespace aiter {
namespace sm90 {

// The kernel takes the binding's argument block by value; key indices are 32-bit (the launcher
// rejects N >= 2^31 - 64).
using KernelArgs = Fp8MqaLogitsParams;

constexpr int kMinHeads = smallest(kServedHeads);
constexpr int kMaxHeads = largest(kServedHeads);
static_assert(largest(kServedHeadDims) == kMaxHeadDim, "shared memory is sized for the largest D served");
constexpr int kColsPerMathWarpgroup = kQTileCols / kMathWarpgroups;
constexpr int kMaxRowsPerBlock = kQTileCols / kMinHeads;  // rows of a block at the smallest H
// Shared memory holds tiles of the largest head dim; a smaller D uses the front of each stage and slot.
constexpr int kKStageBytes = kKeysPerTile * kMaxHeadDim;  // 8 KiB
// A Q slot holds one region per math warpgroup: its 128 Q columns, then up to kMaxLinearCols piece
// columns of the linear term (linear_term.cuh), 1024-byte aligned (the swizzle atom of D = 128).
constexpr int kMaxLinearCols = 16;
constexpr int kQRegionBytes = ((kColsPerMathWarpgroup + kMaxLinearCols) * kMaxHeadDim + 1023) / 1024 * 1024;  // 18 KiB
constexpr int kQSlotBytes = kMathWarpgroups * kQRegionBytes;  // 54 KiB

// A K or Q row is D bytes, one swizzle atom wide (the tensor maps and the wgmma descriptors use the
// D-byte swizzle), and a tile's MMA is D / 32 wgmma k32 steps.
template <int D>
struct HeadDimShape {
  static_assert(D == 32 || D == 64 || D == 128, "the kernel takes rows of 32, 64 or 128 bytes: the three TMA/wgmma "
                "swizzles");
  static constexpr int kKTileBytes = kKeysPerTile * D;
  static constexpr int kQTileBytes = kQTileCols * D;
  static constexpr int kMmaSteps = D / 32;
};

// Warps 1-3 of the producer warpgroup: the exact rows, then the -inf fill. They synchronise among
// themselves only, on named barrier 1 (0 is __syncthreads).
constexpr int kFillThreads = 96;
__device__ __forceinline__ void fill_warps_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kFillThreads) : "memory"); }
// Math warpgroup g's 128 threads among themselves (the linear term's pieces): named barrier 2 + g.
__device__ __forceinline__ void math_warpgroup_sync(int math_warpgroup) {
  asm volatile("bar.sync %0, 128;" ::"r"(2 + math_warpgroup) : "memory");
}

template <int H>
struct BlockShape {
  // What an H in capabilities.h's table must be for this kernel to tile it.
  static_assert(H % 8 == 0, "the kernel takes H a multiple of 8: whole 8-column groups of the accumulator");
  static_assert(kQTileCols % (H * kMathWarpgroups) == 0,
                "the kernel takes H dividing the Q tile's columns into whole rows for each math warpgroup");
  static constexpr int kRowsPerBlock = kQTileCols / H;
  static constexpr int kRowsPerWarpgroup = kRowsPerBlock / kMathWarpgroups;
  static constexpr int kHeadGroups = H / 8;  // 8-column groups of the accumulator fragment per row
  // Rows a lane of the producer warp loads (one per lane up to 32 rows: H >= 16).
  static constexpr int kRowsPerLane = (kRowsPerBlock + 31) / 32;
  static_assert(kColsPerMathWarpgroup == 128, "the math warpgroups use wgmma m64n128");
  static_assert(kRowsPerWarpgroup % 2 == 0, "the quad reduce-scatter halves the rows twice");
  // With one slot the math warpgroups would wait for the next block's Q before releasing the current one.
  static_assert(kQSlots >= 2, "the Q ring needs two slots or more");
  static_assert((kKStages & (kKStages - 1)) == 0, "the ring index wraps with a mask");
  static_assert(kQBoxRows == kColsPerMathWarpgroup, "a TMA box per math warpgroup's region of the Q slot");

  // Blocks the -inf fill takes per round (fill.cuh): as many as hold kFillThreads rows, one row
  // window loaded per fill thread.
  static constexpr int kFillBatchBlocks = kFillThreads / kRowsPerBlock;

  __host__ __device__ __forceinline__ static int64_t num_blocks(const KernelArgs& args) {
    return (args.M + kRowsPerBlock - 1) / kRowsPerBlock;
  }
};

// How the plan prices a Q block, in K tiles: the 64-key tiles of the grid that cover its union,
// block_start_tiles (tunables.h) for starting it, and with clean_logits one fill unit per column tile
// outside those (the -inf fill writes them). The compressed layout's -inf tails are not on the plan:
// the fill warps write them row by row (fill.cuh), so its blocks have no fill units.
template <int H, int D>
__device__ __forceinline__ scheduler::CostModel cost_model(const KernelArgs& args) {
  scheduler::CostModel model;
  model.num_keys = args.N;
  model.tile_keys = kKeysPerTile;
  model.tiles_on_key_grid = true;
  model.start_overhead = block_start_tiles(H, D);
  model.fill_unit_keys = args.clean_logits && !args.compressed ? kKeysPerTile : 0;
  return model;
}

// The logits output as the instance's element type.
template <class Logits>
__device__ __forceinline__ typename Logits::Element* logits_out(const KernelArgs& args) {
  return static_cast<typename Logits::Element*>(args.out);
}

// Row m's window, its raw bounds clamped to [0, N] (m < M).
__device__ __forceinline__ scheduler::KeyRange load_row_window(const KernelArgs& args, int64_t m) {
  return scheduler::row_window(__ldg(args.ks + m), __ldg(args.ke + m), args.N);
}

// The union of Q block `block`'s row windows (rows past M have none), held in 32 bits (windows lie
// in [0, N], and the launcher keeps N below 2^31). All the block's bounds are loaded before any is
// used, one round of independent loads (rows past M read row M - 1's bounds, then left out): the
// pricing kernel's thread pays one load latency for its block instead of kRowsPerBlock of them plus
// the clamp chains.
template <int H>
__device__ __forceinline__ scheduler::BlockUnion<int> load_block_union(const KernelArgs& args, int64_t block) {
  constexpr int kRows = BlockShape<H>::kRowsPerBlock;
  const int64_t first_row = block * kRows;
  const int num_keys = static_cast<int>(args.N);
  int raw_start[kRows], raw_end[kRows];
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
    const int64_t m = min(first_row + row, args.M - 1);
    raw_start[row] = __ldg(args.ks + m);
    raw_end[row] = __ldg(args.ke + m);
  }
  auto block_union = scheduler::BlockUnion<int>::empty_within(num_keys);
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
    // A select, not a branch: a load used only under a branch would be sunk into it again.
    const scheduler::KeyRange window = scheduler::row_window(raw_start[row], raw_end[row], num_keys);
    block_union.add(first_row + row < args.M ? window : scheduler::KeyRange{0, 0});
  }
  return block_union;
}

}  // namespace sm90
}  // namespace aiter
