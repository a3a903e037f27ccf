// The paged decode kernel's producer warp: for each batch of the CTA's share, its Q tile into a slot,
// then its 64-key tiles of cache blocks and their scales into the K ring.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors read:
//   q         [B * next_n * H rows, D bytes] through a 2-D tensor map, box next_n x H rows: batch b's tile
//   kv_cache  [num_blocks][block_kv][D] keys through a 3-D tensor map (block stride kv_block_stride
//             bytes), box one block; its scales, block_kv float32 at byte block_kv * D of the block, by
//             a bulk copy
//   block_table [B, max_blocks] int32, context_lens (schedule.cuh)
// A tile is 64 / block_kv consecutive blocks of the batch (tile t = keys [64 t, 64 t + 64)); blocks
// outside the share are not loaded (their rows of the stage stay stale and are never stored).
// Why a warp of its own: TMA issue and the block-table loads never wait on the math.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "sm90/paged/schedule.cuh"
#include "sm90/paged/storage.cuh"
#include "sm90/primitives.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

template <int H, int D, int NEXT_N>
__device__ void produce_paged(const PagedArgs& args, PagedSharedStorage& smem, const CUtensorMap* q_map,
                              const CUtensorMap* k_map) {
  using Shape = PagedShape<H, D, NEXT_N>;
  const int lane = threadIdx.x % 32;
  const int block_kv = static_cast<int>(args.block_kv);
  const int blocks_per_tile = kKeysPerTile / block_kv;
  const uint32_t block_bytes = static_cast<uint32_t>(block_kv) * (D + 4);
  const ShareWalk share = ShareWalk::of_cta(args);
  int slot = 0, slot_phase = 0, seq = 0;
  for (int b = share.begin_batch; share.holds(b, args.batches); ++b) {
    const int64_t block_begin = share.first_block(b);
    const int64_t batch_keys = unclamped_batch_keys(args, b);
    const int64_t block_end = min(share.last_block(b, scheduler::ceil_div(batch_keys, args.block_kv)),
                                  int64_t(visible_blocks(args, batch_keys)));
    if (block_begin >= block_end) continue;
    const int tile_begin = static_cast<int>(block_begin / blocks_per_tile);
    const int tile_end = static_cast<int>(scheduler::ceil_div(block_end, blocks_per_tile));
    mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
    if (lane == 0) {
      SlotBatch& facts = smem.slot[slot];
      facts.batch = b;
      facts.tile_begin = tile_begin;
      facts.tile_end = tile_end;
      facts.key_begin = static_cast<int>(block_begin * block_kv);
      facts.key_end = static_cast<int>(min(block_end * block_kv, args.max_context_len));
      facts.first_seq = seq;
#pragma unroll
      for (int j = 0; j < NEXT_N; ++j)
        facts.row_keys[j] = static_cast<int>(scheduler::paged_row_keys(
            args.context_lens[args.lens_per_row ? b * NEXT_N + j : b], NEXT_N, j, args.lens_per_row,
            args.max_context_len));
      mbar_arrive_expect_tx(&smem.q_full[slot], Shape::kQTileBytes);  // releases the facts above
      tma_load_2d(smem.q[slot], q_map, &smem.q_full[slot], 0, b * Shape::kCols);
    }
    slot = slot + 1 == kPagedQSlots ? 0 : slot + 1;
    slot_phase ^= slot == 0;
    // The batch's block ids, 32 at a time (one per lane), ahead of the tiles that need them.
    const int32_t* table_row = args.block_table + int64_t(b) * args.block_table_stride;
    int64_t ids_base = block_begin;
    int ids = ids_base + lane < block_end ? __ldg(table_row + ids_base + lane) : 0;
    for (int tile = tile_begin; tile < tile_end; ++tile, ++seq) {
      const int stage = seq % kPagedStages;
      const int64_t first = max(int64_t(tile) * blocks_per_tile, block_begin);
      const int64_t last = min(int64_t(tile + 1) * blocks_per_tile, block_end);
      if (lane == 0) {
        mbar_wait(&smem.k_empty[stage], ((seq / kPagedStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&smem.k_full[stage], static_cast<uint32_t>(last - first) * block_bytes);
      }
      for (int64_t block = first; block < last; ++block) {
        if (block >= ids_base + 32) {  // the next 32 ids (warp-uniform)
          ids_base = block;
          ids = ids_base + lane < block_end ? __ldg(table_row + ids_base + lane) : 0;
        }
        const int id = __shfl_sync(0xffffffffu, ids, static_cast<int>(block - ids_base));
        if (lane == 0) {
          const int slot_in_tile = static_cast<int>(block - int64_t(tile) * blocks_per_tile);
          tma_load_3d(smem.k[stage] + slot_in_tile * block_kv * D, k_map, &smem.k_full[stage], 0, 0, id);
          bulk_copy_to_shared(&smem.scale[stage][slot_in_tile * block_kv],
                              args.kv_cache + int64_t(id) * args.kv_block_stride + int64_t(block_kv) * D,
                              static_cast<uint32_t>(block_kv) * 4, &smem.k_full[stage]);
        }
      }
      __syncwarp();
    }
  }
  // Sentinel: no further batch.
  mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
  if (lane == 0) {
    smem.slot[slot].batch = -1;
    mbar_arrive(&smem.q_full[slot]);
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
