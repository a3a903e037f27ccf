// Entry points of the Hopper (sm_90a) paged decode backend (fp8_paged_mqa_logits and its metadata).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors: as in common/fp8_paged_mqa_logits_params.h. Torch-free: the ATen binding validates the
// arguments and calls these through its paged backend table on the current stream. What the backend
// serves is stated once, in sm90/capabilities.h (the kServedPaged* lists).
#pragma once
#include <cstdint>

#include "common/fp8_paged_mqa_logits_params.h"

namespace aiter {
namespace sm90 {
namespace paged {

bool serves(long long heads, long long head_dim, long long block_kv, long long next_n);
// The schedule's shares on GPU `device_index`: one per SM (0 when the query fails).
int64_t num_shares(int device_index);
// Writes schedule_meta [num_shares + 1][2] on `stream`; nullptr on success, else a static message.
const char* metadata(const int32_t* context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                     int64_t block_kv, int64_t num_shares, int32_t* schedule_meta, int device_index, void* stream);
// Launches the decode kernel on `stream`: one CTA per share. nullptr on success, else a static message.
const char* launch(const Fp8PagedMqaLogitsParams& params, int device_index, void* stream);

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
