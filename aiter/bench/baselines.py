"""The benchmark's shapes and the peer it is compared with, measured in the same run.

BENCHMARK_SHAPES are the contract's: (mode, M, N), causal single requests, four-request chunks
(multi_req) and the small shapes (causal). The peer on an NVIDIA GPU is DeepGEMM's fp8_mqa_logits
when the `deep_gemm` package is importable; it runs on the same inputs, timed by the same timer, so
the ratio column is a same-run A/B. There is no table of remembered timings: where the peer is
absent the column says so.
"""

from __future__ import annotations

BENCHMARK_SHAPES = (
    ("causal", 8192, 8192),
    ("causal", 4096, 32768),
    ("causal", 2048, 65536),
    ("causal", 1024, 131072),
    ("causal", 16384, 32000),
    ("multi_req", 4096, 32768),
    ("multi_req", 2048, 65536),
    ("multi_req", 1024, 131072),
    ("multi_req", 8192, 8192),
    ("causal", 128, 4096),
    ("causal", 64, 8192),
    ("causal", 1024, 1024),
)


def deepgemm_logits():
    """DeepGEMM's prefill op as ``fn(q, kv, kv_scales, weights, ks, ke, clean, max_seqlen_k=0,
    logits_dtype=torch.float32) -> logits``, with the name of what was found, or (None, why not).
    The legacy form has no logits_dtype: a bfloat16 row then gets no baseline (TypeError, reported)."""
    try:
        import deep_gemm
        import torch
    except Exception as e:  # not installed, or built for another torch/CUDA
        return None, f"none (deep_gemm not importable: {type(e).__name__})"
    version = getattr(deep_gemm, "__version__", "?")
    if hasattr(deep_gemm, "fp8_fp4_mqa_logits"):
        op = deep_gemm.fp8_fp4_mqa_logits

        def run(q, kv, kv_scales, weights, ks, ke, clean, max_seqlen_k=0, logits_dtype=torch.float32):
            return op((q, None), (kv, kv_scales), weights, ks, ke, clean_logits=clean, max_seqlen_k=max_seqlen_k,
                      logits_dtype=logits_dtype)

        return run, f"DeepGEMM {version} fp8_fp4_mqa_logits, same run"
    if hasattr(deep_gemm, "fp8_mqa_logits"):
        op = deep_gemm.fp8_mqa_logits

        def run(q, kv, kv_scales, weights, ks, ke, clean, max_seqlen_k=0, logits_dtype=torch.float32):
            if logits_dtype != torch.float32:
                raise TypeError("the legacy fp8_mqa_logits writes float32 logits only")
            return op(q, (kv, kv_scales), weights, ks, ke, clean_logits=clean, max_seqlen_k=max_seqlen_k)

        return run, f"DeepGEMM {version} fp8_mqa_logits, same run"
    return None, f"none (deep_gemm {version} has no fp8_mqa_logits)"
