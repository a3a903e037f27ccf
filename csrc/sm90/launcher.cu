// Host side of the Hopper fp8_mqa_logits backend: the checks, the plan's workspace size, and the
// dispatch of a call to its kernel instance.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: as in common/fp8_mqa_logits_params.h. A pricing kernel (plan.cuh) writes every Q block's
// price into the call's workspace; then one persistent CTA per SM (kernel.cuh describes the kernel)
// cuts its share. Each (H, D, logits format) is an instance of its own (launch_instance.cuh), built
// in instances/ one file per H; this file dispatches on H (capabilities.h's list) and holds none.
// Why a .cu of its own: the ATen binding stays a host-compiler file that only sees launcher.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/capabilities.h"
#include "sm90/launch_instance.cuh"
#include "sm90/launcher.h"
#include "sm90/plan.cuh"

namespace aiter {

namespace {

int64_t num_blocks(const Fp8MqaLogitsParams& params) {
  const int64_t rows_per_block = sm90::kQTileCols / params.H;
  return (params.M + rows_per_block - 1) / rows_per_block;
}

}  // namespace

namespace sm90 {

size_t workspace_bytes(const Fp8MqaLogitsParams& params, int device_index) {
  (void)device_index;  // the prices are per Q block, whatever the GPU
  return serves(params.H, params.D) ? plan_workspace_bytes(num_blocks(params)) : 0;
}

const char* launch(const Fp8MqaLogitsParams& params, void* workspace, int device_index, void* stream) {
  if (!serves(params.H, params.D)) return "fp8_mqa_logits (sm90): this H and D are not served (capabilities.h)";
  const int num_sms = sm90::sm_count(device_index);
  if (num_sms <= 0) return "fp8_mqa_logits (sm90): cannot query the number of SMs";
  if (workspace == nullptr) return "fp8_mqa_logits (sm90): no workspace for the plan (workspace_bytes)";
  // Keys, compressed columns and Q-tile rows are 32-bit TMA coordinates and indices; output offsets
  // are 64-bit.
  if (params.N >= (int64_t(1) << 31) - kKeysPerTile || params.out_columns >= (int64_t(1) << 31) - kKeysPerTile ||
      params.M * params.H >= (int64_t(1) << 31) - kQTileCols)
    return "fp8_mqa_logits (sm90): N, max_seqlen_k and M*H must stay below 2^31 minus one tile (64 keys, one Q "
           "tile)";
  const LaunchContext context{params, workspace, device_index, num_sms, static_cast<cudaStream_t>(stream)};
  return dispatch_listed<kServedHeads>(
      params.H, [&](auto heads) { return launch_heads<decltype(heads)::value>(context); },
      "fp8_mqa_logits (sm90): this H is not served (capabilities.h)");
}

}  // namespace sm90

}  // namespace aiter
