// Entry points of the Hopper (sm_90a) backend.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: as in common/fp8_mqa_logits_params.h (Q [M, H, D] and K [N, D] e4m3, out [M, N] or [M, max_seqlen_k] f32 or bf16, ...).
// Why torch-free: the ATen binding validates the arguments, fills Fp8MqaLogitsParams and calls these
// through its backend table on the current stream; only launcher.cu is compiled by nvcc. What the
// backend serves (H, D, the device) is stated once, in sm90/capabilities.h.
#pragma once
#include <cstddef>

#include "common/fp8_mqa_logits_params.h"
#include "sm90/device.h"  // check_device, sm_count

namespace aiter {
namespace sm90 {

// Bytes of device workspace a launch with these params needs (the plan, plan.cuh); the caller
// allocates them on the device, stream-ordered, for the one launch. 0 when the shape is not served
// (launch then says why).
size_t workspace_bytes(const Fp8MqaLogitsParams& params, int device_index);
// Launches on `stream` (a cudaStream_t) of GPU `device_index`: the pricing kernel, then one persistent
// CTA per SM. `workspace`: workspace_bytes(params, device_index) bytes on that GPU, 8-byte aligned.
// Returns nullptr on success, else a static message.
const char* launch(const Fp8MqaLogitsParams& params, void* workspace, int device_index, void* stream);

}  // namespace sm90
}  // namespace aiter
