"""``from aiter.ops.triton.fp8_mqa_logits import fp8_mqa_logits``: aiter's argument order
(Q, KV, kv_scales, weights, cu_starts, cu_ends; -inf outside the windows by default), served by this
package's op (aiter/ops/fp8_mqa_logits.py)."""

from aiter.ops.fp8_mqa_logits import fp8_mqa_logits

__all__ = ["fp8_mqa_logits"]
