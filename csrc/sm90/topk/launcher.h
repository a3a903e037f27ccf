// Entry point of the Hopper top-k kernel (top_k_per_row_prefill / top_k_per_row_decode, and the fused
// indexer ops on their bounded logits chunks).
//
// Tensors and semantics: as in common/indexer_topk_params.h. Torch-free: the ATen binding validates the
// arguments, fills TopkPerRowParams and calls this on the current stream; it allocates nothing and
// never synchronises, so it may be captured in a CUDA graph.
#pragma once
#include "common/indexer_topk_params.h"

namespace aiter {
namespace sm90 {
namespace topk {

// Launches the top-k of every row on `stream` (a cudaStream_t) of GPU `device_index`. nullptr on success,
// else a static message.
const char* launch(const TopkPerRowParams& params, int device_index, void* stream);

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
