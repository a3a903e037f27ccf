"""aiter-compatible kernels for PyTorch: the DeepSeek-V3.2 / GLM-5 indexer logits, prefill
(fp8_mqa_logits) and decode over a paged K cache (fp8_paged_mqa_logits), and the indexer's top-k,
fused with them (fp8_fp4_mqa_topk_indices, fp8_fp4_paged_mqa_topk_indices) or on given logits
(top_k_per_row_prefill, top_k_per_row_decode).

Importing registers torch.ops.aiter.fp8_mqa_logits / fp8_mqa_logits_out /
get_paged_mqa_logits_metadata / fp8_paged_mqa_logits / top_k_per_row_prefill / top_k_per_row_decode;
the native module is compiled (or loaded from the cache) on the first call, never here.
"""

from .ops.fp8_mqa_logits import fp8_fp4_mqa_logits, fp8_mqa_logits, fp8_mqa_logits_deepgemm, is_supported
from .ops.fp8_paged_mqa_logits import fp8_fp4_paged_mqa_logits, fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from .ops.indexer_topk import (fp8_fp4_mqa_topk_indices, fp8_fp4_paged_mqa_topk_indices, fp8_mqa_topk_indices,
                               fp8_paged_mqa_topk_indices, top_k_per_row_decode, top_k_per_row_prefill)

from ._version import __version__

__all__ = ["fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits", "fp8_mqa_logits_deepgemm",
           "fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata", "is_supported", "__version__",
           "fp8_fp4_mqa_topk_indices", "fp8_fp4_paged_mqa_topk_indices", "fp8_mqa_topk_indices",
           "fp8_paged_mqa_topk_indices", "top_k_per_row_decode", "top_k_per_row_prefill"]
