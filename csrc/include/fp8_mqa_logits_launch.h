// Launch entry points of the device backends. Torch-free: the ATen binding validates the
// arguments, fills Fp8MqaLogitsParams and calls one of these on the current stream.
// Each returns nullptr on success, else a static message describing the launch failure.
#pragma once
#include "fp8_mqa_logits_params.h"

namespace aiter {

// NVIDIA Hopper (sm_90a): H in {32, 64}, D == 128. `stream` is a cudaStream_t.
bool fp8_mqa_logits_sm90_supports(int heads, int head_dim);
const char* fp8_mqa_logits_sm90_launch(const Fp8MqaLogitsParams& p, int num_sms, void* stream);

// AMD gfx950 (MI355X): H in {32, 64}, D == 128. `stream` is a hipStream_t.
// split_n <= 0 picks the split from the makespan model.
bool fp8_mqa_logits_gfx950_supports(int heads, int head_dim);
const char* fp8_mqa_logits_gfx950_launch(const Fp8MqaLogitsParams& p, int split_n, int num_cus,
                                         void* stream);

}  // namespace aiter
