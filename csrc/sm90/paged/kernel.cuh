// fp8_paged_mqa_logits for NVIDIA Hopper (sm_90a): the decode op over a paged FP8 key cache.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//                               for p < keys(b, j)
//                               -inf for keys(b, j) <= p < max_context_len when clean_logits (else untouched)
//   keys(b, j): context_lens[b] - next_n + j + 1 (1-D) or context_lens[b, j] (2-D), clamped to
//   [0, max_context_len]; K(b, p), scale(b, p): slot p % block_kv of block block_table[b, p / block_kv].
//
// Tensors (common/fp8_paged_mqa_logits_params.h):
//   q            [B, next_n, H, D] e4m3, a 2-D tensor map [B * next_n * H rows, D bytes]
//   kv_cache     [num_blocks, block_kv, 1, D + 4] bytes, K through a 3-D tensor map (one block a box),
//                scales by bulk copies
//   weights      [B * next_n, H] f32; context_lens [B] or [B, next_n] i32; block_table [B, max_blocks] i32
//   schedule_meta [num_shares + 1, 2] i32 from the metadata kernel (metadata.cuh): CTA p's share
//   out          [B * next_n, max_context_len] f32 or bf16, row stride out_stride
//
// One CTA per share (the metadata's num_shares: the SM count), 512 threads in three roles:
//   warpgroup 0, warps 0-2   producer.cuh  per batch of the share: its Q tile into a slot (warp 0), its
//                                          64-key tiles (64 / block_kv cache blocks each) into the
//                                          rings, warp r the tiles of ring r (every third)
//   warpgroup 0, warp 3      exact_rows.cuh rows that see 1..kExactKeys keys, on the CUDA cores, then
//                            fill.cuh      the -inf columns past each batch's blocks (clean_logits)
//   warpgroups 1-3           math.cuh      wgmma per tile (the tiles in turn, or the first two on every
//                                          tile when next_n x H > 128), relu x w, head sum, store
// Why this shape: decode reads every key once and computes little per byte, so the kernel is a K
// stream: one CTA per SM keeps deep TMA rings full, and the tensor cores and the epilogue only have
// to keep up with it (tunables.h, the paged section).
#pragma once
#include <cuda.h>
#include <cstdint>

#include "sm90/paged/exact_rows.cuh"
#include "sm90/paged/fill.cuh"
#include "sm90/paged/math.cuh"
#include "sm90/paged/producer.cuh"
#include "sm90/paged/shared_storage.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/utils.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

template <int H, int D, int NEXT_N, typename Element>
__global__ void __launch_bounds__(kPagedThreads, 1)
    fp8_paged_mqa_logits_sm90_kernel(const __grid_constant__ CUtensorMap q_map,
                                     const __grid_constant__ CUtensorMap k_map, const PagedArgs args) {
  using Shape = PagedShape<H, D, NEXT_N>;
  extern __shared__ uint8_t dynamic_smem[];
  PagedSharedStorage& smem = shared_storage(dynamic_smem);
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&q_map);
    tma_prefetch_descriptor(&k_map);
    init_barriers(smem, Shape::kStageConsumers);
  }
  __syncthreads();
  if (warpgroup == 0) {
    setmaxnreg_dec<kPagedProducerRegs>();
    const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
    if (warp < kPagedRings) {
      produce_q_and_k<H, D, NEXT_N>(args, smem, &q_map, &k_map, warp);
    } else {
      exact_short_rows<H, D, NEXT_N, Element>(args, smem, threadIdx.x % 32);
      if (args.clean_logits) fill_tails<Element>(args, threadIdx.x % 32);
    }
  } else {
    setmaxnreg_inc<kPagedMathRegs>();
    run_math_warpgroup<H, D, NEXT_N, Element>(args, smem, warpgroup - 1);
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
