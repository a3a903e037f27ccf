// The paged decode kernel's producer warps: for each batch of the CTA's share, its Q tile into a slot
// (warp 0), and its 64-key tiles of cache blocks and their scales into the K rings (warp r fills
// ring r: the tiles with seq % kPagedRings == r).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors read:
//   q         [B * next_n * H rows, D bytes] through a 2-D tensor map, box next_n x H rows: batch b's tile
//   kv_cache  [num_blocks][block_kv][D] keys through a 3-D tensor map (block stride kv_block_stride
//             bytes), box one block; its scales, block_kv float32 at byte block_kv * D of the block, by
//             a bulk copy
//   block_table [B, max_blocks] int32 (each entry checked before any copy uses it), context_lens
//             (schedule.cuh)
// A tile is 64 / block_kv consecutive blocks of the batch (tile t = keys [64 t, 64 t + 64)); blocks
// outside the share are not loaded (their rows of the stage stay stale and are never stored).
//   weights   [B * next_n, H] f32: batch b's rows into its Q slot by bulk copies (shared_storage.cuh)
// Why warps of their own, three of them: TMA issue and the block-table loads never wait on the math,
// and one warp's issue of ~160 instructions a tile was slower than the K bytes (tunables.h).
#pragma once
#include <cuda.h>
#include <cstdint>

#include "sm90/paged/schedule.cuh"
#include "sm90/paged/shared_storage.cuh"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/tma.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// One producer warp's cache blocks of a batch: its tiles first_tile, first_tile + kPagedRings, ...
// below tile_end, each blocks_per_tile blocks, of which those in [block_begin, block_end) are loaded.
// Its k-th block is block_of(k); the block ids go 32 to a window (lane i holds block_of(base + i)),
// the next window's loads issued when a window is taken up, so they are in flight a window ahead.
struct WarpBlocks {
  const int32_t* table_row;
  int first_tile, log_blocks_per_tile, block_begin, block_end, count;

  __device__ int block_of(int k) const {
    const int tile = first_tile + kPagedRings * (k >> log_blocks_per_tile);
    return (tile << log_blocks_per_tile) + (k & ((1 << log_blocks_per_tile) - 1));
  }
  __device__ int load_ids(int base, int lane) const {
    const int block = block_of(base + lane);
    return base + lane < count && block >= block_begin && block < block_end ? __ldg(table_row + block) : 0;
  }
};

template <int H, int D, int NEXT_N>
__device__ void produce_q_and_k(const PagedArgs& args, PagedSharedStorage& smem, const CUtensorMap* q_map,
                              const CUtensorMap* k_map, int ring) {
  using Shape = PagedShape<H, D, NEXT_N>;
  const int lane = threadIdx.x % 32;
  const int block_kv = static_cast<int>(args.block_kv);
  const int log_blocks_per_tile = __ffs(kKeysPerTile / block_kv) - 1;  // block_kv divides 64 (capabilities.h)
  const uint32_t block_bytes = static_cast<uint32_t>(block_kv) * (D + 4);
  const uint32_t cache_blocks = cache_block_limit(args);
  const ShareWalk share = ShareWalk::of_cta(args);
  const bool weights_in_slot = weights_in_slots(args);
  int slot = 0, slot_phase = 0, seq = 0;
  RingCursor cursor = RingCursor::first_of(ring);
  for (int b = share.begin_batch; share.holds(b, args.batches); ++b) {
    const int64_t batch_keys = unclamped_batch_keys(args, b);
    const int block_begin = static_cast<int>(share.first_block(b));
    const int block_end = static_cast<int>(min(share.last_block(b, scheduler::ceil_div(batch_keys, args.block_kv)),
                                               int64_t(visible_blocks(args, batch_keys))));
    if (block_begin >= block_end) continue;
    const int tile_begin = block_begin >> log_blocks_per_tile;
    const int tile_end = (block_end + (1 << log_blocks_per_tile) - 1) >> log_blocks_per_tile;
    if (ring == 0) {
      mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
      if (lane == 0) {
        SlotBatch& facts = smem.slot[slot];
        facts.batch = b;
        facts.tile_begin = tile_begin;
        facts.tile_end = tile_end;
        facts.key_begin = block_begin * block_kv;
        facts.key_end = static_cast<int>(min(int64_t(block_end) * block_kv, args.max_context_len));
        facts.first_seq = seq;
#pragma unroll
        for (int j = 0; j < NEXT_N; ++j)
          facts.row_keys[j] = static_cast<int>(scheduler::paged_row_keys(
              args.context_lens[args.lens_per_row ? b * NEXT_N + j : b], NEXT_N, j, args.lens_per_row,
              args.max_context_len));
        constexpr uint32_t kWeightsRowBytes = H * 4;
        mbar_arrive_expect_tx(&smem.q_full[slot],  // releases the facts above
                              Shape::kQTileBytes + (weights_in_slot ? NEXT_N * kWeightsRowBytes : 0));
        tma_load_2d(smem.q[slot], q_map, &smem.q_full[slot], 0, b * Shape::kCols);
        if (weights_in_slot)
#pragma unroll
          for (int j = 0; j < NEXT_N; ++j)
            bulk_copy_to_shared(&smem.weights[slot][j * H], args.weights + (int64_t(b) * NEXT_N + j) * args.weights_stride,
                                kWeightsRowBytes, &smem.q_full[slot]);
      }
      slot = slot + 1 == kPagedQSlots ? 0 : slot + 1;
      slot_phase ^= slot == 0;
    }
    // This warp's tiles of the batch: those whose seq = seq + (tile - tile_begin) falls to its ring.
    WarpBlocks blocks;
    blocks.table_row = args.block_table + int64_t(b) * args.block_table_stride;
    blocks.first_tile = first_tile_of_ring(tile_begin, seq, ring);
    blocks.log_blocks_per_tile = log_blocks_per_tile;
    blocks.block_begin = block_begin;
    blocks.block_end = block_end;
    const int tiles =
        blocks.first_tile < tile_end ? (tile_end - blocks.first_tile + kPagedRings - 1) / kPagedRings : 0;
    blocks.count = tiles << log_blocks_per_tile;
    int window = 0;
    int ids = blocks.load_ids(0, lane);
    int next_ids = blocks.load_ids(32, lane);
    for (int i = 0; i < tiles; ++i) {
      const int tile = blocks.first_tile + kPagedRings * i;
      const RingStage where = cursor.at;
      cursor.advance();
      const int first = max(tile << log_blocks_per_tile, block_begin);
      const int last = min((tile + 1) << log_blocks_per_tile, block_end);
      mbar_wait(&smem.k_empty[where.stage], where.phase ^ 1);
      if (lane == 0)
        mbar_arrive_expect_tx(&smem.k_full[where.stage], static_cast<uint32_t>(last - first) * block_bytes);
      for (int block = first; block < last; ++block) {
        const int k = (i << log_blocks_per_tile) + (block - (tile << log_blocks_per_tile));
        if (k >= window + 32) {  // the next window (warp-uniform); blocks_per_tile divides 32
          window += 32;
          ids = next_ids;
          next_ids = blocks.load_ids(window + 32, lane);
        }
        const int id = __shfl_sync(0xffffffffu, ids, k - window);
        if (lane == 0) {
          // An id that is no block of the cache (a caller bug) reaches no copy from the cache: as a
          // tensor-map coordinate it is out of bounds (TMA writes zeros, reads nothing, and still
          // completes the box's bytes), and its scales come from args.nan_scales, so its keys'
          // logits are NaN; the record tells the host.
          const bool good = static_cast<uint32_t>(id) < cache_blocks;
          if (!good) report_bad_block(args, b, block, id);
          const int slot_in_tile = block - (tile << log_blocks_per_tile);
          tma_load_3d(smem.k[where.stage] + slot_in_tile * block_kv * D, k_map, &smem.k_full[where.stage], 0, 0, id);
          const void* scales = good ? static_cast<const void*>(args.kv_cache + int64_t(id) * args.kv_block_stride +
                                                               int64_t(block_kv) * D)
                                    : static_cast<const void*>(args.nan_scales);
          bulk_copy_to_shared(&smem.scale[where.stage][slot_in_tile * block_kv], scales,
                              static_cast<uint32_t>(block_kv) * 4, &smem.k_full[where.stage]);
        }
      }
    }
    seq += tile_end - tile_begin;
  }
  if (ring == 0) {  // sentinel: no further batch
    mbar_wait(&smem.q_empty[slot], slot_phase ^ 1);
    if (lane == 0) {
      smem.slot[slot].batch = -1;
      mbar_arrive(&smem.q_full[slot]);
    }
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
