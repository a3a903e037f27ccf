// Entry points of the Hopper (sm_90a) backend.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: as in common/fp8_mqa_logits_params.h (Q [M, H, D] and K [N, D] e4m3, out [M, N] f32, ...).
// Why torch-free: the ATen binding validates the arguments, fills Fp8MqaLogitsParams and calls these
// on the current stream; only launcher.cu is compiled by nvcc.
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {

// H in {32, 64}, D == 128.
bool fp8_mqa_logits_sm90_supports(int heads, int head_dim);
// `stream` is a cudaStream_t. Returns nullptr on success, else a static message.
const char* fp8_mqa_logits_sm90_launch(const Fp8MqaLogitsParams& params, int num_sms, void* stream);

}  // namespace aiter
