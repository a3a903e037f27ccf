// The paged decode kernel's shared memory, as one type, and its barrier protocol.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// What lives here, per CTA (one CTA per share of the schedule):
//   q[slot]      a batch's Q tile: next_n x H rows (row, head) of D e4m3 bytes, by TMA with the
//                D-byte swizzle wgmma reads (kPagedQSlots slots, a ring: producer -> math)
//   k[stage]     a 64-key tile of cache blocks: 64 rows of D e4m3 bytes, same swizzle; the stages
//                form kPagedRings rings of kPagedStagesPerRing (ring_stage: tile seq -> ring seq % 3),
//                each filled in order by its own producer warp
//   scale[stage] the tile's 64 kv scales (float32), copied from the blocks' scale areas
//   weights[slot] the batch's next_n x H weights (float32), by bulk copies with its Q tile when the
//                rows are 16-byte aligned (weights_in_slots), so the math never waits on global memory
//   the slot's batch facts: which batch, the tiles and keys this CTA computes of it, and each row's
//   visible keys; the exact path's per-(key, head) terms (exact_rows.cuh)
// Sized for the largest tile (next_n x H = 256 columns, D = 128); smaller ones use the front.
#pragma once
#include <cstdint>

#include "sm90/paged/schedule.cuh"  // PagedArgs
#include "sm90/paged/shape.cuh"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/utils.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

constexpr int kMaxNextN = 4;
constexpr int kMaxCols = 2 * kWgmmaCols;

// The batch a Q slot holds. tile_begin / tile_end: the batch's 64-key tiles this CTA computes
// (tile t = keys [64 t, 64 t + 64)); key_begin / key_end: the keys of its share (whole cache
// blocks), outside which it stores nothing; first_seq: the CTA's running index of the batch's first
// tile (which warpgroup and ring stage take a tile); row_keys[j]: keys row j sees (clamped).
struct SlotBatch {
  int batch;  // -1: no further batch
  int tile_begin, tile_end;
  int key_begin, key_end;
  int first_seq;
  int row_keys[kMaxNextN];
};

struct PagedSharedStorage {
  alignas(1024) uint8_t q[kPagedQSlots][kMaxCols * kMaxHeadDim];
  alignas(1024) uint8_t k[kPagedStages][kKeysPerTile * kMaxHeadDim];
  alignas(16) float scale[kPagedStages][kKeysPerTile];
  alignas(16) float weights[kPagedQSlots][kMaxCols];
  SlotBatch slot[kPagedQSlots];
  double exact_part[kExactKeys][64];  // the exact path's relu(q.k) x w per (key, head) of its row in hand
  uint64_t q_full[kPagedQSlots];
  uint64_t q_empty[kPagedQSlots];
  uint64_t k_full[kPagedStages];
  uint64_t k_empty[kPagedStages];
};

// Whether each batch's weights rows can go to its Q slot by bulk copies (16-byte aligned rows of
// H x 4 bytes, H a multiple of 8); otherwise the math threads read them from global memory.
__device__ __forceinline__ bool weights_in_slots(const PagedArgs& args) {
  return reinterpret_cast<uintptr_t>(args.weights) % 16 == 0 && args.weights_stride % 4 == 0;
}

// Where the CTA's tile `seq` lives: ring seq % kPagedRings, the ring's stages in turn, and the parity
// of the stage's use (each ring has one producer and its consumers in order, so parity suffices).
struct RingStage {
  int stage;
  uint32_t phase;
};
__device__ __forceinline__ RingStage ring_stage(int seq) {
  const int ring = seq % kPagedRings, round = seq / kPagedRings;
  return RingStage{ring * kPagedStagesPerRing + round % kPagedStagesPerRing,
                   static_cast<uint32_t>(round / kPagedStagesPerRing) & 1u};
}
// A batch's first tile in ring `ring`, when its tiles [tile_begin, ...) are the CTA's tiles first_seq,
// first_seq + 1, ...: the producer warp of the ring and, taking the tiles in turn, its math
// warpgroup then step by kPagedRings from there.
__device__ __forceinline__ int first_tile_of_ring(int tile_begin, int first_seq, int ring) {
  return tile_begin + (ring + kPagedRings - first_seq % kPagedRings) % kPagedRings;
}
// The same walk one ring at a time: a ring's producer, and its math warpgroup when the warpgroups
// take the tiles in turn, meet every tile of the ring in order, so the stage steps by one (no
// division by 3 and 5 per tile).
struct RingCursor {
  RingStage at;
  __device__ static RingCursor first_of(int ring) { return RingCursor{RingStage{ring * kPagedStagesPerRing, 0u}}; }
  __device__ void advance() {
    if (++at.stage % kPagedStagesPerRing == 0) {
      at.stage -= kPagedStagesPerRing;
      at.phase ^= 1u;
    }
  }
};

__device__ __forceinline__ PagedSharedStorage& shared_storage(uint8_t* dynamic_smem) {
  const uint32_t align_pad = (1024 - (smem_addr(dynamic_smem) & 1023)) & 1023;
  return *reinterpret_cast<PagedSharedStorage*>(dynamic_smem + align_pad);
}

// The barriers, by one thread before the first __syncthreads:
//   q_full[slot]   the producer's arrival (after the slot's facts, released) plus the Q tile's bytes
//   q_empty[slot]  one arrival per math warp after the batch: the slot may be refilled
//   k_full[stage]  its ring's producer's arrival plus the tile's K and scale bytes
//   k_empty[stage] one arrival per warp that consumed the stage (one warpgroup, or both)
__device__ __forceinline__ void init_barriers(PagedSharedStorage& smem, int stage_consumers) {
  for (int slot = 0; slot < kPagedQSlots; ++slot) {
    mbar_init(&smem.q_full[slot], 1);
    mbar_init(&smem.q_empty[slot], 4 * kPagedMathWarpgroups);
  }
  for (int stage = 0; stage < kPagedStages; ++stage) {
    mbar_init(&smem.k_full[stage], 1);
    mbar_init(&smem.k_empty[stage], stage_consumers);
  }
  fence_barrier_init();
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
