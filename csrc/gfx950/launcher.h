// Entry points of the gfx950 (MI355X) backend, defined at the end of fp8_mqa_logits_gfx950.hip.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// Layouts: those of Fp8MqaLogitsParams (common/fp8_mqa_logits_params.h).
// Why a header of its own: the ATen binding includes only this; it is torch-free and HIP-free, so
// the binding validates the arguments, fills the params and calls these through its backend table
// on the current stream. What the backend serves is stated once, in gfx950/capabilities.h.
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {
namespace gfx950 {

// nullptr when GPU `device_index` runs this backend (a gcnArchName starting with kArchPrefix), else a
// static sentence saying what it runs on.
const char* check_device(int device_index);
// Launches on `stream` (a hipStream_t) of GPU `device_index`. fixed_grid_splits (the API's
// split_n): 0 lets the kernel choose (the balanced plan, or above kPlanMaxRows rows the fixed grid
// with the makespan model's splits); > 0 forces the fixed grid (blocks, fixed_grid_splits), each
// block's units cut into that many contiguous shares. Returns nullptr on success, else a static
// message.
const char* launch(const Fp8MqaLogitsParams& params, int fixed_grid_splits, int device_index, void* stream);

}  // namespace gfx950
}  // namespace aiter
