// Entry points of the Hopper (sm_90a) backend. Torch-free: the ATen binding validates the arguments,
// fills Fp8MqaLogitsParams and calls these on the current stream.
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {

// H in {32, 64}, D == 128.
bool fp8_mqa_logits_sm90_supports(int heads, int head_dim);
// `stream` is a cudaStream_t. Returns nullptr on success, else a static message.
const char* fp8_mqa_logits_sm90_launch(const Fp8MqaLogitsParams& p, int num_sms, void* stream);

}  // namespace aiter
