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
// Tensors: weights [B * next_n, H] f32 (row stride weights_stride), read once per batch; out
// [B * next_n, max_context_len] f32 or bf16 (row stride out_stride), written.
// kv scale > 0 (a precondition), so it is applied after the head sum: relu(s x) = s relu(x); relu(x)
// is (x + |x|) / 2 with the 1/2 folded into the scale (one FADD instead of an FMNMX).
#pragma once
#include <cstdint>

#include "sm90/epilogue.cuh"
#include "sm90/paged/schedule.cuh"
#include "sm90/paged/storage.cuh"
#include "sm90/primitives.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

template <int H, int D, int NEXT_N, typename Element>
__device__ void run_paged_math(const PagedArgs& args, PagedSharedStorage& smem, int math_warpgroup) {
  using Shape = PagedShape<H, D, NEXT_N>;
  constexpr int kRows = Shape::kWgRows;
  constexpr int kFragGroups = Shape::kWgCols / 8;  // accumulator column groups holding real columns
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

  float acc[Shape::kWgCols / 2];
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
    int row_keys[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) row_keys[r] = facts.row_keys[first_row + r];
    // This thread's weights: columns 8 g + 2 q + c of its rows.
    float weights[2 * kFragGroups];
#pragma unroll
    for (int g = 0; g < kFragGroups; ++g)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 8 * g + 2 * quad_lane + c;
        const int64_t row = int64_t(batch) * NEXT_N + first_row + col / H;
        weights[2 * g + c] = __ldg(args.weights + row * args.weights_stride + col % H);
      }

    // Whose tiles: every third in turn (seq = first_seq + tile - tile_begin, warpgroup seq % 3), or
    // every tile for the sharing warpgroups (the others pass).
    int tile = tile_begin, tile_step = 1;
    if (!Shape::kSharedTiles) {
      tile += (math_warpgroup + kPagedMathWarpgroups - first_seq % kPagedMathWarpgroups) % kPagedMathWarpgroups;
      tile_step = kPagedMathWarpgroups;
    } else if (math_warpgroup >= kPagedSharingWarpgroups) {
      tile = tile_end;
    }
    for (; tile < tile_end; tile += tile_step) {
      const int seq = first_seq + (tile - tile_begin);
      const RingStage where = ring_stage(seq);
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
      // This thread's two keys of the tile, and their scales (halved: the relu's 2), before the
      // stage is released.
      int key_in_tile[2];
      float half_scale[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        key_in_tile[i] = 16 * warp_in_warpgroup + lane / 4 + 8 * i;
        half_scale[i] = 0.5f * smem.scale[stage][key_in_tile[i]];
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&smem.k_empty[stage]);

      // relu x w into one partial per (key, row), then the sum over the quad's heads.
      float part[2][kRows];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int r = 0; r < kRows; ++r) part[i][r] = 0.f;
#pragma unroll
      for (int g = 0; g < kFragGroups; ++g)
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float x = acc[4 * g + 2 * i + c];
            float& sum = part[i][(8 * g) / H];
            sum = fmaf(x + fabsf(x), weights[2 * g + c], sum);
          }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          part[i][r] += __shfl_xor_sync(0xffffffffu, part[i][r], 1);
          part[i][r] += __shfl_xor_sync(0xffffffffu, part[i][r], 2);
        }
      // Each (key, row) output is stored by one lane of the quad: output k = i kRows + r by lane k % 4.
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int key = tile * kKeysPerTile + key_in_tile[i];
        const bool in_share = key >= key_begin && key < key_end;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (((i * kRows + r) & 3) != quad_lane) continue;
          const bool visible = key < row_keys[r];
          const float value = visible ? part[i][r] * half_scale[i] : neg_inf;
          const int64_t row = int64_t(batch) * NEXT_N + first_row + r;
          Element* const out = static_cast<Element*>(args.out) + row * args.out_stride + key;
          // A row of 1..kExactKeys keys gets its values from the exact path (exact_rows.cuh).
          store_if(out, value, in_share && (visible ? !is_exact_row(row_keys[r]) : args.clean_logits));
        }
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
