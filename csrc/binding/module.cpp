// module_fp8_mqa_logits: the Python module every op of this package lives in (built by aiter/jit).
#include <torch/extension.h>

#include "binding/ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The DeepSeek-V3.2 / GLM-5 lightning-indexer logits (fp8 Q and K): prefill (fp8_mqa_logits) and "
            "decode over a paged K cache (fp8_paged_mqa_logits)";
  aiter::register_fp8_mqa_logits(m);
  aiter::register_fp8_paged_mqa_logits(m);
  aiter::register_indexer_topk(m);
}
