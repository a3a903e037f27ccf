// One kernel instance's host side: tensor maps, shared-memory reservation, the pricing kernel and
// the main kernel as its programmatic dependent.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, D] and K [N, D] e4m3 get 2-D tensor maps (rows of D bytes, D-byte swizzle: the
// layout wgmma reads from shared memory); everything else goes to the kernel as pointers in
// Fp8MqaLogitsParams. launch_heads<H> is explicitly instantiated for each served H in its own file
// (instances/heads_slot_<i>.cu: kServedHeads[i]) so that the JIT compiles the H in parallel, and
// launcher.cu (the dispatch on H) sees only the declaration below.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/fp8_mqa_logits_params.h"

namespace aiter {
namespace sm90 {

// What a launch of any instance gets from the dispatch.
struct LaunchContext {
  const Fp8MqaLogitsParams& params;
  void* workspace;  // the plan's block prices: plan_workspace_bytes(num_blocks)
  int device_index;
  int num_sms;
  cudaStream_t stream;
};

// The instances of one H: the call's D and logits format dispatched to their kernel (every D of
// capabilities.h's kServedHeadDims, every format). nullptr on success, else a static message.
template <int H>
const char* launch_heads(const LaunchContext& context);

}  // namespace sm90
}  // namespace aiter

// The definition, for the instance files only (they define AITER_SM90_INSTANCE_FILE first).
#ifdef AITER_SM90_INSTANCE_FILE
#include <cuda_bf16.h>

#include "sm90/capabilities.h"
#include "sm90/common/launch.cuh"
#include "sm90/cuda_errors.h"
#include "sm90/kernel.cuh"
#include "sm90/plan.cuh"

namespace aiter {
namespace sm90 {
// The pricing kernel, then the main kernel as its programmatic dependent (plan.cuh says why).
template <int H, int D, class Logits>
const char* launch_instance(const LaunchContext& context) {
  const Fp8MqaLogitsParams& params = context.params;
  // TMA needs 16-byte aligned bases (the binding checks it too): said precisely here, so that an
  // encoder failure below is something else.
  if (reinterpret_cast<uintptr_t>(params.q) % 16 != 0 || reinterpret_cast<uintptr_t>(params.kv) % 16 != 0)
    return "fp8_mqa_logits (sm90): q and kv must start 16-byte aligned (the kernel reads them with TMA)";
  CUtensorMap q_map, k_map;
  if (!launch_detail::make_row_map<D>(&q_map, params.q, static_cast<uint64_t>(params.M) * H, kQBoxRows) ||
      !launch_detail::make_row_map<D>(&k_map, params.kv, static_cast<uint64_t>(params.N), kKeysPerTile))
    return explain_failure(context.stream,
                           "fp8_mqa_logits (sm90): cuTensorMapEncodeTiled failed for q's or kv's tensor map (the "
                           "driver has no tensor-map encoder, or it refused the map's dims)");
  const size_t smem = sizeof(SharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  if (const char* err = launch_detail::reserve_shared_memory<fp8_mqa_logits_sm90_kernel<H, D, Logits>>(
          context.device_index, smem))
    return explain_failure(context.stream, err);

  int2* block_units = static_cast<int2*>(context.workspace);
  const int64_t blocks = (params.M + BlockShape<H>::kRowsPerBlock - 1) / BlockShape<H>::kRowsPerBlock;
  const unsigned price_ctas = static_cast<unsigned>((blocks + kPriceThreads - 1) / kPriceThreads);
  // Both kernels are programmatic dependents of what precedes them on the stream: each one's CTAs
  // may start before that finishes, and wait for it (grid_dependency_wait) before reading its results.
  cudaLaunchAttribute dependent_launch[1];
  dependent_launch[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent_launch[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.stream = context.stream;
  config.attrs = dependent_launch;
  config.numAttrs = 1;
  config.gridDim = dim3(price_ctas);
  config.blockDim = dim3(kPriceThreads);
  cudaError_t err = cudaLaunchKernelEx(&config, price_blocks_kernel<H, D>, params, block_units);
  if (err != cudaSuccess) return launch_error_text(err);

  config.gridDim = dim3(context.num_sms);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  err = cudaLaunchKernelEx(&config, fp8_mqa_logits_sm90_kernel<H, D, Logits>, q_map, k_map, params,
                           static_cast<const int2*>(block_units));
  return err == cudaSuccess ? nullptr : launch_error_text(err);
}

// The four logits formats of one (H, D): float32 or bfloat16, full or compressed layout.
template <int H, int D>
const char* launch_format(const LaunchContext& context) {
  const bool compressed = context.params.compressed;
  if (context.params.logits_dtype == LogitsDtype::kBFloat16)
    return compressed ? launch_instance<H, D, LogitsFormat<__nv_bfloat16, true>>(context)
                      : launch_instance<H, D, LogitsFormat<__nv_bfloat16, false>>(context);
  return compressed ? launch_instance<H, D, LogitsFormat<float, true>>(context)
                    : launch_instance<H, D, LogitsFormat<float, false>>(context);
}

template <int H>
const char* launch_heads(const LaunchContext& context) {
  return dispatch_listed<kServedHeadDims>(
      context.params.D, [&](auto head_dim) { return launch_format<H, decltype(head_dim)::value>(context); },
      "fp8_mqa_logits (sm90): this D is not served (capabilities.h)");
}

// An instance file: the instances of the served H at position AITER_SM90_HEADS_SLOT of kServedHeads.
#ifdef AITER_SM90_HEADS_SLOT
static_assert(AITER_SM90_HEADS_SLOT < count_of(kServedHeads),
              "build_config compiles a heads_slot file for each served H only");
template const char* launch_heads<kServedHeads[AITER_SM90_HEADS_SLOT]>(const LaunchContext&);
#endif

}  // namespace sm90
}  // namespace aiter
#endif  // AITER_SM90_INSTANCE_FILE
