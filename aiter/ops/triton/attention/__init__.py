"""aiter's newer module path for the indexer ops (``aiter.ops.triton.attention.fp8_mqa_logits``)."""
