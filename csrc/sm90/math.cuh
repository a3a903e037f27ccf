// The math warpgroups' mainloop: wgmma over every K tile of each published Q block, then the epilogue.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Operands, both in shared memory with the D-byte swizzle (shared_storage.cuh):
//   A = the K tile:  64 keys x D e4m3 (K-major, D-byte swizzle)
//   B = this warpgroup's 128 columns of the Q tile: (row, head) pairs x D e4m3 (K-major, D-byte swizzle),
//       then, where the instance splits the head sum (linear_term.cuh), its rows' 8 or 16 piece columns
//   D = S[key][col] = K[key] . Q[row, head], 64 x (128 + piece columns) f32 in registers (fragment: epilogue.cuh)
// kv_scale [N] f32 is read here, one tile ahead; out [M, N] is written by the epilogue.
//
// Why this shape: math warpgroup g owns Q-tile columns [128 g, 128 g + 128) and one accumulator; all
// three consume every K tile with wgmma m64n128k32, and their MMAs on a tile finish in turn, so one
// warpgroup's epilogue (relu, x w, head sum, x kv_scale, store: CUDA cores) runs under the others'
// MMAs (tensor cores). The loop keeps one MMA in flight per warpgroup: issue, advance the cursor
// (next slot and stage, the next kv_scale), wait, epilogue.
#pragma once
#include <cstdint>

#include "sm90/epilogue.cuh"
#include "sm90/linear_term.cuh"
#include "sm90/mma/wgmma.cuh"
#include "sm90/ptx/barrier.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

template <int H, int D, class Logits>
__device__ void run_math_warpgroup(const KernelArgs& args, SharedStorage& smem, int math_warpgroup) {
  using Shape = BlockShape<H>;
  const int lane = threadIdx.x % 32;
  const int warp_in_warpgroup = (threadIdx.x / 32) % 4;
  const int quad_lane = lane % 4;
  // Fragment position of this thread after the reduce-scatter: one key of the tile, a half of the rows.
  const int key_in_tile = warp_in_warpgroup * 16 + lane / 4 + 8 * ((lane >> 1) & 1);
  const int local_row = math_warpgroup * Shape::kRowsPerWarpgroup + ((lane & 1) ? Shape::kRowsPerWarpgroup / 2 : 0);
  // Descriptors of stage 0 / slot 0; other stages and slots are fixed offsets (in 16-byte units).
  // Only the low word (start address) differs between stages, slots and k steps: 32-bit arithmetic.
  const uint64_t desc_k0 = smem_desc_swizzled<D>(smem.k[0]);
  const uint64_t desc_q0 = smem_desc_swizzled<D>(smem.q[0] + math_warpgroup * kQRegionBytes);
  const uint64_t desc_hi = desc_k0 & 0xffffffff00000000ull;  // same for both: layout, strides
  const uint32_t k_lo0 = static_cast<uint32_t>(desc_k0), q_lo0 = static_cast<uint32_t>(desc_q0);

  constexpr int kMmaCols = LinearTerm<H, D>::kMmaCols;
  float acc[kMmaCols / 2];
  BlockRows<H, Logits> rows;
  int slot = 0, slot_phase = 0, stage = 0, stage_phase = 0;
  int block = -1, tile = 0, tile_begin = 0, tile_end = 0;

  // Slot values go through a shuffle so ptxas sees them warp-uniform; it serialises every wgmma
  // that sits behind a branch it believes divergent.
  auto open_slot = [&]() {
    mbar_wait(&smem.q_full[slot], slot_phase);
    block = __shfl_sync(0xffffffffu, smem.slot_block[slot], 0);
    tile_begin = __shfl_sync(0xffffffffu, smem.slot_tile_begin[slot], 0);
    tile_end = __shfl_sync(0xffffffffu, smem.slot_tile_end[slot], 0);
    tile = tile_begin;
  };
  // The linear term's pieces of the cursor's block (linear_term.cuh), before its first MMA and its
  // rows' load (which reads their scales); built while no accumulator is live.
  auto build_pieces = [&]() {
    if constexpr (LinearTerm<H, D>::kOn) build_linear_pieces<H, D>(smem, slot, math_warpgroup, threadIdx.x % 128);
  };
  auto issue = [&]() {
    mbar_wait(&smem.k_full[stage], stage_phase);
    const uint32_t k_lo = k_lo0 + stage * (kKStageBytes >> 4), q_lo = q_lo0 + slot * (kQSlotBytes >> 4);
    fence_accumulators(acc);
    wgmma_fence();
    // k step kk reads bytes [32 kk, 32 kk + 32) of every row: +32 bytes on the start address
    // within the swizzle atom (the hardware applies the swizzle to the full address).
#pragma unroll
    for (int kk = 0; kk < HeadDimShape<D>::kMmaSteps; ++kk)
      wgmma_m64nk32_e4m3<kMmaCols>(acc, desc_hi | (k_lo + 2 * kk), desc_hi | (q_lo + 2 * kk), kk > 0);
    wgmma_commit();
  };

  // kv_scale / 2 (reduce_store) of the tile at the cursor, loaded a whole tile ahead of its use to
  // hide L2 latency. The key is clamped rather than tested: no branch around the load (past the end,
  // or after the sentinel, the value is never used).
  auto load_scale = [&]() {
    const int key = min(tile * kKeysPerTile + key_in_tile, static_cast<int>(args.N) - 1);
    return 0.5f * __ldg(args.kv_scales + max(key, 0));
  };
  float pending_scale = 0.f;

  // The tile whose MMA is in flight, as its epilogue needs it once the cursor has moved on.
  struct InFlight {
    int slot, stage, block, key;
    bool first, last, has_next;
    float half_kv_scale;
  };
  auto advance = [&]() {
    InFlight in_flight;
    in_flight.slot = slot;
    in_flight.stage = stage;
    in_flight.block = block;
    in_flight.first = tile == tile_begin;
    in_flight.last = tile + 1 == tile_end;
    in_flight.key = tile * kKeysPerTile + key_in_tile;
    in_flight.half_kv_scale = pending_scale;
    in_flight.has_next = true;
    stage = (stage + 1) & (kKStages - 1);
    stage_phase ^= stage == 0;
    if (!in_flight.last) {
      ++tile;
    } else {
      slot = slot + 1 == kQSlots ? 0 : slot + 1;
      slot_phase ^= slot == 0;
      open_slot();
      in_flight.has_next = block >= 0;
    }
    pending_scale = load_scale();
    return in_flight;
  };
  // The weights and windows of a block, from its (full) Q slot.
  auto load_rows = [&](int rows_slot, int rows_block) {
    load_block_rows<H, D, Logits>(rows, smem, rows_slot, rows_block, math_warpgroup, quad_lane, local_row, args);
  };
  // Releases the finished tile's K stage, runs its epilogue, releases its Q slot after its last tile.
  // A block's pieces are built, and its rows loaded, at the end of the previous block's last epilogue
  // (advance has opened their slot by then); at H = 64 without the split the rows before the block's
  // first epilogue instead (tunables.h: kRowsAtBlockEnd).
  auto finish = [&](const InFlight& in_flight) {
    fence_accumulators(acc);
    if (lane == 0) mbar_arrive(&smem.k_empty[in_flight.stage]);
    if (!kRowsAtBlockEnd<H, D> && in_flight.first) load_rows(in_flight.slot, in_flight.block);
    reduce_store<H, Logits>(head_sums<H, D>(acc, rows), rows, in_flight.half_kv_scale, in_flight.key, args, lane);
    if (in_flight.last) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&smem.q_empty[in_flight.slot]);
      if (in_flight.has_next) {  // the cursor's new block
        build_pieces();
        if (kRowsAtBlockEnd<H, D>) load_rows(slot, block);
      }
    }
  };

  open_slot();
  if (block < 0) return;
  build_pieces();
  if (kRowsAtBlockEnd<H, D>) load_rows(slot, block);
  pending_scale = load_scale();
  // The other warpgroups' MMAs on the same K tile run under this epilogue. (Issuing this
  // warpgroup's next MMA as soon as the head sums free the accumulator, before the reduction and
  // stores, measured slower on every shape: ptxas then places stores between the next MMAs.)
  for (;;) {
    issue();
    const InFlight in_flight = advance();
    wgmma_wait<0>();
    finish(in_flight);
    if (!in_flight.has_next) break;
  }
}

}  // namespace sm90
}  // namespace aiter
