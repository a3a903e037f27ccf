"""``from aiter.ops.triton.attention.fp8_mqa_logits import fp8_mqa_logits``: the same op as
aiter.ops.triton.fp8_mqa_logits, at aiter's newer module path."""

from aiter.ops.fp8_mqa_logits import fp8_mqa_logits

__all__ = ["fp8_mqa_logits"]
