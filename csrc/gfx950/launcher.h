// Entry points of the gfx950 (MI355X) backend. Torch-free: the ATen binding validates the arguments,
// fills Fp8MqaLogitsParams and calls these on the current stream.
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {

// H in {32, 64}, D == 128.
bool fp8_mqa_logits_gfx950_supports(int heads, int head_dim);
// `stream` is a hipStream_t; split_n <= 0 picks the balanced plan or the makespan model's split.
// Returns nullptr on success, else a static message.
const char* fp8_mqa_logits_gfx950_launch(const Fp8MqaLogitsParams& p, int split_n, int num_cus,
                                         void* stream);

}  // namespace aiter
