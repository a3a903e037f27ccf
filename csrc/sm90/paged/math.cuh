// The paged decode kernel's math warpgroups: wgmma per 64-key tile, then the epilogue (relu, x w,
// head sum, x kv scale, masked store).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//                               for p < keys(b, j); -inf for keys(b, j) <= p when clean_logits
//
// Operands (shared memory, D-byte swizzle): A = the K tile, 64 keys x D; B = this warpgroup's N =
// kWgCols columns of the batch's Q tile (wgmma m64nNk32 at the exact width: 8 to 128).
// Accumulator fragment (per thread, N / 2 floats), warp wi, lane l, quad lane q = l % 4:
//   d[4 j + 2 i + c] = S[key = 16 wi + l / 4 + 8 i][col = 8 j + 2 q + c]
//   col -> (row r = col / H of this warpgroup's rows, head = col % H)
// Tensors: weights [B * next_n, H] f32 (row stride weights_stride), read once per batch (from the
// Q slot, shared_storage.cuh); out [B * next_n, max_context_len] f32 or bf16 (row stride out_stride),
// written.
// kv scale > 0 (a precondition), so it is applied after the head sum: relu(s x) = s relu(x); relu(x)
// is (x + |x|) / 2 with the 1/2 folded into the scale (one FADD instead of an FMNMX).
#pragma once
#include <cstdint>

#include "sm90/common/exact.cuh"
#include "sm90/common/reduce.cuh"
#include "sm90/mma/wgmma.cuh"
#include "sm90/paged/schedule.cuh"
#include "sm90/paged/shared_storage.cuh"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/ld_st.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// The quad's (key, row) sums as lanes hold them after the reduce-scatter (common/reduce.cuh): output
// o = i kRows + r (key i of the thread's two, row r) ends in lane o % 4 as its slot o / 4; two
// outputs (one row) go to lanes 0 and 1 (and their copies in lanes 2 and 3, which do not store).
template <int kRows>
struct QuadOutputs {
  static constexpr int kCount = 2 * kRows;
  static constexpr int kSlots = kCount >= 4 ? kCount / 4 : 1;  // outputs a lane holds
  __device__ static int output(int quad_lane, int slot) { return kCount >= 4 ? 4 * slot + quad_lane : quad_lane % 2; }
  __device__ static bool stores(int quad_lane) { return kCount >= 4 || quad_lane < 2; }
};

template <int H, int D, int NEXT_N, typename Element>
__device__ void run_math_warpgroup(const PagedArgs& args, PagedSharedStorage& smem, int math_warpgroup) {
  using Shape = PagedShape<H, D, NEXT_N>;
  constexpr int kRows = Shape::kWgRows;
  constexpr int kFragGroups = Shape::kWgCols / 8;  // accumulator column groups holding real columns
  using Outputs = QuadOutputs<kRows>;
  const int lane = threadIdx.x % 32;
  const int warp_in_warpgroup = (threadIdx.x / 32) % 4;
  const int quad_lane = lane % 4;
  // The sharing warpgroups on a shared tile take their own rows; otherwise all take the tiles in turn.
  const int first_row = Shape::kSharedTiles ? math_warpgroup * kRows : 0;
  const uint64_t desc_k0 = smem_desc_swizzled<D>(smem.k[0]);
  const uint64_t desc_q0 = smem_desc_swizzled<D>(smem.q[0] + first_row * H * D);
  const uint64_t desc_hi = desc_k0 & 0xffffffff00000000ull;
  const uint32_t k_lo0 = static_cast<uint32_t>(desc_k0), q_lo0 = static_cast<uint32_t>(desc_q0);
  constexpr uint32_t kStageStride = sizeof(smem.k[0]) >> 4, kSlotStride = sizeof(smem.q[0]) >> 4;
  const float neg_inf = __int_as_float(0xff800000);
  // The (key, row) outputs this lane stores, fixed for the kernel: key_in_tile and row.
  int out_key_in_tile[Outputs::kSlots], out_row[Outputs::kSlots];
#pragma unroll
  for (int s = 0; s < Outputs::kSlots; ++s) {
    const int o = Outputs::output(quad_lane, s);
    out_key_in_tile[s] = 16 * warp_in_warpgroup + lane / 4 + 8 * (o / kRows);
    out_row[s] = first_row + o % kRows;
  }
  const bool lane_stores = Outputs::stores(quad_lane);
  const bool weights_in_slot = weights_in_slots(args);

  float acc[Shape::kWgCols / 2];
  RingCursor cursor = RingCursor::first_of(math_warpgroup);  // the turn order's walk (not shared tiles)
  int slot = 0, slot_phase = 0;
  for (;;) {
    mbar_wait(&smem.q_full[slot], slot_phase);
    // Through shuffles: ptxas must see the loop bounds warp-uniform, or it serialises the wgmmas.
    const SlotBatch& facts = smem.slot[slot];
    const int batch = __shfl_sync(0xffffffffu, facts.batch, 0);
    if (batch < 0) break;
    const int tile_begin = __shfl_sync(0xffffffffu, facts.tile_begin, 0);
    const int tile_end = __shfl_sync(0xffffffffu, facts.tile_end, 0);
    const int first_seq = __shfl_sync(0xffffffffu, facts.first_seq, 0);
    const int key_begin = facts.key_begin, key_end = facts.key_end;
    // This lane's outputs in the batch: their rows' visible keys, where a row's logits start, and
    // whether the exact path owns the row's values (exact_rows.cuh).
    int out_keys[Outputs::kSlots];
    bool out_exact[Outputs::kSlots];
    Element* out_base[Outputs::kSlots];
#pragma unroll
    for (int s = 0; s < Outputs::kSlots; ++s) {
      out_keys[s] = facts.row_keys[out_row[s]];
      out_exact[s] = is_exact_row(out_keys[s]);
      out_base[s] = static_cast<Element*>(args.out) + (int64_t(batch) * NEXT_N + out_row[s]) * args.out_stride +
                    out_key_in_tile[s];
    }
    // This thread's weights: columns 8 g + 2 q + c of its rows, from the Q slot (or global memory).
    float weights[2 * kFragGroups];
#pragma unroll
    for (int g = 0; g < kFragGroups; ++g)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 8 * g + 2 * quad_lane + c;
        const int64_t row = int64_t(batch) * NEXT_N + first_row + col / H;
        weights[2 * g + c] = weights_in_slot ? smem.weights[slot][first_row * H + col]
                                             : __ldg(args.weights + row * args.weights_stride + col % H);
      }

    // Whose tiles: every third in turn (seq = first_seq + tile - tile_begin, warpgroup seq % 3), or
    // every tile for the sharing warpgroups (the others pass).
    int tile = tile_begin, tile_step = 1;
    if (!Shape::kSharedTiles) {
      tile = first_tile_of_ring(tile_begin, first_seq, math_warpgroup);  // ring w is warpgroup w's
      tile_step = kPagedRings;
    } else if (math_warpgroup >= kPagedSharingWarpgroups) {
      tile = tile_end;
    }
    for (; tile < tile_end; tile += tile_step) {
      RingStage where;
      if (Shape::kSharedTiles) {
        where = ring_stage(first_seq + (tile - tile_begin));
      } else {
        where = cursor.at;
        cursor.advance();
      }
      const int stage = where.stage;
      mbar_wait(&smem.k_full[stage], where.phase);
      fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Shape::kMmaSteps; ++kk)
        wgmma_m64nk32_e4m3<Shape::kWgCols>(acc, desc_hi | (k_lo0 + stage * kStageStride + 2 * kk),
                                           desc_hi | (q_lo0 + slot * kSlotStride + 2 * kk), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(acc);
      // The scales of this lane's output keys (halved: the relu's 2), before the stage is released.
      float half_scale[Outputs::kSlots];
#pragma unroll
      for (int s = 0; s < Outputs::kSlots; ++s) half_scale[s] = 0.5f * smem.scale[stage][out_key_in_tile[s]];
      __syncwarp();
      if (lane == 0) mbar_arrive(&smem.k_empty[stage]);

      // relu x w into one partial per (key i, row r), output i kRows + r; then the quad's sums.
      float part[Outputs::kCount];
#pragma unroll
      for (int o = 0; o < Outputs::kCount; ++o) part[o] = 0.f;
#pragma unroll
      for (int g = 0; g < kFragGroups; ++g)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float x = acc[4 * g + 2 * i + c];
            float& sum = part[i * kRows + (8 * g) / H];
            sum = fmaf(x + fabsf(x), weights[2 * g + c], sum);
          }
      quad_reduce_scatter(part, quad_lane);
#pragma unroll
      for (int s = 0; s < Outputs::kSlots; ++s) {
        const int key = tile * kKeysPerTile + out_key_in_tile[s];
        const bool in_share = key >= key_begin && key < key_end;
        const bool visible = key < out_keys[s];
        const float value = visible ? part[s] * half_scale[s] : neg_inf;
        // A row of 1..kExactKeys keys gets its values from the exact path (exact_rows.cuh).
        store_if(out_base[s] + tile * kKeysPerTile, value,
                 lane_stores && in_share && (visible ? !out_exact[s] : args.clean_logits));
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&smem.q_empty[slot]);
    slot = slot + 1 == kPagedQSlots ? 0 : slot + 1;
    slot_phase ^= slot == 0;
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
