"""aiter-compatible kernels for PyTorch: fp8_mqa_logits (the DeepSeek-V3.2 / GLM-5 indexer logits).

Importing registers torch.ops.aiter.fp8_mqa_logits / fp8_mqa_logits_out; the native module is
compiled (or loaded from the cache) on the first call, never here.
"""

from .ops.fp8_mqa_logits import fp8_fp4_mqa_logits, fp8_mqa_logits, fp8_mqa_logits_deepgemm, is_supported

__version__ = "0.1.0"

__all__ = ["fp8_fp4_mqa_logits", "fp8_mqa_logits", "fp8_mqa_logits_deepgemm", "is_supported", "__version__"]
