"""The module paths vLLM's ROCm path imports from aiter (``aiter.ops.triton.fp8_mqa_logits`` and
``aiter.ops.triton.attention.fp8_mqa_logits``), so those call sites swap to this package by import.
The op behind them is this package's native one, not a Triton kernel."""
