// Host (CPU) path of top_k_per_row (prefill windows or decode lengths): any width, any k up to
// kTopkMaxK, float32 or bfloat16 logits. Torch-free interface; the implementation uses only ATen's
// intra-op thread pool (ATen/Parallel.h).
#pragma once
#include "common/indexer_topk_params.h"

namespace aiter {

// Writes indices (and values when set) of rows [0, p.rows) as common/indexer_topk_params.h states.
// Each row is selected on its own with a total order on (value, column), so the result is the same
// whatever the thread count or the split of the rows. Per-thread scratch: 8 bytes per visible column
// of the longest row. Precondition: `p` was validated by the binding.
void top_k_per_row_cpu(const TopkPerRowParams& p);

}  // namespace aiter
