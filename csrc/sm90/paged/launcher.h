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
// params.block_table_fault, block_table_claim and nan_scales are set here: the device's record of
// bad block_table entries (below), in pinned host memory that a kernel writes only when it meets one.
const char* launch(const Fp8PagedMqaLogitsParams& params, int device_index, void* stream);
// The out-of-range block_table entry that launches on `device_index` recorded since the last time
// one was taken, into *fault (found = 0: none seen). Without `wait` it reads the host record as it
// is (no host synchronisation); with `wait` it first synchronises with `stream`. A found record is
// reset (its claim word on `stream`). nullptr on success, else an error text (a sticky context error
// is named as such). Does nothing while `stream` is being captured.
const char* take_block_table_fault(int device_index, void* stream, bool wait, PagedBlockTableFault* fault);

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
