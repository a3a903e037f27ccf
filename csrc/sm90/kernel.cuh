// fp8_mqa_logits for NVIDIA Hopper (sm_90a): TMA + wgmma, warp-specialised, persistent.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//                  -inf elsewhere when clean_logits; without it nothing outside the windows is written
//
// Tensors (common/fp8_mqa_logits_params.h), H and D as capabilities.h lists:
//   Q  [M, H, D] e4m3, read through a 2-D tensor map [M*H rows, D bytes], box 128 rows
//   K  [N, D]    e4m3, read through a 2-D tensor map [N rows, D bytes],   box 64 rows
//   kv_scale [N] f32, w [M, H] f32 (row stride weights_stride), ks/ke [M] i32
//   out [M, N] f32 or bf16, or [M, max_seqlen_k] (compressed: key n of row m at column n - s_m,
//       with clean_logits -inf past the window's keys), row stride out_stride
//
// A pricing kernel (plan.cuh) first prices every Q block; then one CTA per SM, 512 threads in four
// roles, each in its own file:
//   all threads              plan.cuh        the CTA's balanced share of the compute and fill lists
//   warpgroup 0, warp 0      producer.cuh    Q blocks into slots (TMA, weights, windows), K tiles into the ring
//   warpgroup 0, warps 1-3   exact_rows.cuh  rows of 1..kExactKeys keys on the CUDA cores, then
//                            fill.cuh        the -inf columns (clean_logits): outside the blocks'
//                                            compute tiles, or the compressed layout's row tails
//   warpgroups 1-3           math.cuh        wgmma per K tile, then epilogue.cuh (relu, x w, head sum, store)
// The work units and their prices (work.cuh) come from the shared scheduler, common/work_scheduler.h;
// the shared-memory layout and the barrier protocol are shared_storage.cuh; tile sizes tunables.h.
// Why warp-specialised: the tensor cores and the CUDA-core epilogue must overlap (the epilogue alone
// needs about half of all issue slots at full tensor rate), and TMA issue must never wait on either.
#pragma once
#include <cuda.h>
#include <cstdint>

#include "sm90/exact_rows.cuh"
#include "sm90/fill.cuh"
#include "sm90/math.cuh"
#include "sm90/plan.cuh"
#include "sm90/producer.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/ptx/utils.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// `block_units`: [num_blocks] int2, written by price_blocks_kernel just before on the stream.
// Logits: what the kernel writes (a LogitsFormat, common/logits_dtype.h), like H and D an instance of its own.
template <int H, int D, class Logits>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_mqa_logits_sm90_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                               const KernelArgs args, const int2* __restrict__ block_units) {
  extern __shared__ uint8_t dynamic_smem[];
  SharedStorage& smem = shared_storage(dynamic_smem);
  // Through a shuffle so the compiler knows it is warp-uniform (else it serialises the wgmmas).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&q_map);
    tma_prefetch_descriptor(&k_map);
    init_barriers(smem);
  }
  // This CTA may have started while the pricing kernel runs (programmatic dependent launch): the
  // setup above overlaps it. Nothing else this kernel reads is written by the pricing kernel.
  grid_dependency_wait();
  cut_shares<H>(args, block_units, smem);  // ends with __syncthreads, which also publishes the barrier inits

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x < 32) {
      produce_q_and_k<H, D>(args, smem, &q_map, &k_map);
    } else {
      exact_short_rows<H, D, Logits>(args, smem, threadIdx.x - 32);
      if (args.clean_logits) {
        if constexpr (Logits::kCompressed)
          fill_compressed_tails<Logits>(args, threadIdx.x - 32);
        else
          fill_outside_windows<H, D, Logits>(args, smem, threadIdx.x - 32);
      }
    }
  } else {
    setmaxnreg_inc<kMathRegs>();
    run_math_warpgroup<H, D, Logits>(args, smem, warpgroup - 1);
  }
}

}  // namespace sm90
}  // namespace aiter
