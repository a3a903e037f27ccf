"""Inputs, window modes and the float64 reference of fp8_mqa_logits (tests and benchmarks share them).

The window modes follow ``docs/operator.md`` ("Window modes") to the letter; the reference
computes the contract's formula in float64 on the same fp8 inputs, chunked over rows so that the
benchmark shapes fit in memory.
"""

from __future__ import annotations

import math

import torch

WINDOW_MODES = ("causal", "cp", "misaligned", "empty", "past_end", "multi_req")
FP8 = torch.float8_e4m3fn


def mode_applies(mode: str, M: int, N: int) -> bool:
    """cp needs N % M == 0 and M even; every other mode takes any M, N >= 1."""
    if mode == "cp":
        return M > 0 and M % 2 == 0 and N % M == 0
    return True


def make_windows(mode: str, M: int, N: int, device="cpu", generator=None):
    """Raw int32 bounds (ks, ke) of one window mode, or 'random' for fuzzing."""
    rows = torch.arange(M, dtype=torch.int64)
    if mode == "causal":
        ks = torch.zeros(M, dtype=torch.int64)
        ke = N - M + rows + 1
    elif mode == "cp":
        if not mode_applies(mode, M, N):
            raise ValueError(f"cp windows need N % M == 0 and M even, got M={M}, N={N}")
        chunk = M // 2
        cp_size = N // M
        cp_id = cp_size // 3
        i = torch.arange(chunk, dtype=torch.int64)
        ks = torch.zeros(M, dtype=torch.int64)
        ke = torch.empty(M, dtype=torch.int64)
        ke[:chunk] = cp_id * chunk + i
        ke[chunk:] = (2 * cp_size - 1 - cp_id) * chunk + i
    elif mode == "misaligned":
        ks = (rows * 53 + 100) % max(1, N // 2)
        ke = torch.clamp(ks + max(1, N // 3), max=N)
    elif mode == "empty":
        ks = torch.where(rows % 3 == 1, torch.full_like(rows, min(100, N)), torch.zeros_like(rows))
        ke = torch.where(
            rows % 3 == 0,
            -1 - rows % 7,
            torch.where(rows % 3 == 1, torch.zeros_like(rows), torch.minimum(rows + 1, ks + N)),
        )
    elif mode == "past_end":
        even = rows % 2 == 0
        ks = torch.where(even, torch.full_like(rows, N + 17), torch.zeros_like(rows))
        ke = torch.where(even, torch.full_like(rows, N + 64), torch.clamp(rows + 1, max=N))
    elif mode == "multi_req":
        R = max(1, min(4, M // 2, N // 2))
        rpr = math.ceil(M / R)
        kvr = N // R
        req = torch.clamp(rows // rpr, max=R - 1)
        ks = req * kvr
        ke = torch.minimum(torch.maximum(ks + (kvr - rpr) + (rows - req * rpr) + 1, ks), ks + kvr)
    elif mode == "random":
        # Raw bounds spread past both ends, so clamping, empty and inverted rows all occur.
        lo, hi = -N // 4 - 2, N + N // 4 + 2
        ks = torch.randint(lo, hi, (M,), generator=generator, dtype=torch.int64)
        ke = torch.randint(lo, hi, (M,), generator=generator, dtype=torch.int64)
        swap = torch.rand(M, generator=generator) < 0.8  # mostly ordered, some inverted
        ks, ke = torch.where(swap, torch.minimum(ks, ke), ks), torch.where(swap, torch.maximum(ks, ke), ke)
    else:
        raise ValueError(f"unknown window mode {mode!r}; expected one of {WINDOW_MODES + ('random',)}")
    return ks.to(torch.int32).to(device), ke.to(torch.int32).to(device)


def make_inputs(M: int, N: int, H: int, D: int, device="cpu", seed: int = 0):
    """Fresh random, never-zero inputs: q, kv (e4m3), kv_scales > 0, weights of both signs."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = (torch.randn(M, H, D, generator=g) * 2.0).to(FP8)
    kv = (torch.randn(N, D, generator=g) * 2.0).to(FP8)
    # Per-token amax/448 style scales: positive, spread over two decades.
    kv_scales = torch.exp(torch.rand(N, generator=g) * 4.6 - 2.3) / 8.0
    weights = torch.randn(M, H, generator=g) * (D ** -0.5) * (H ** -0.5)
    return q.to(device), kv.to(device), kv_scales.to(device), weights.to(device)


INPUT_SETS = ("engine", "make_inputs")
E4M3_MAX = 448.0


def quantize_pow2_scaled(x: torch.Tensor, eps: float = 1e-10):
    """(e4m3 values, float32 scales) of x [..., D], one scale per vector of the last dim: a power of two
    at or above amax / 448, so the largest element lands in [224, 448] (vLLM's indexer quantises q per
    token and head this way, ue8m0 scales)."""
    amax = x.abs().float().amax(dim=-1, keepdim=True).clamp_min(eps)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    values = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)
    return values, scale.squeeze(-1)


def quantize_amax_scaled(x: torch.Tensor, eps: float = 1e-4):
    """(e4m3 values, float32 scales) of x [..., D], one scale amax / 448 per vector of the last dim (how
    DeepGEMM's tests and vLLM's indexer cache quantise the keys)."""
    scale = x.abs().float().amax(dim=-1, keepdim=True).clamp_min(eps) / E4M3_MAX
    values = (x.float() * (1.0 / scale)).to(FP8)
    return values, scale.squeeze(-1)


def make_engine_inputs(M: int, N: int, H: int, D: int, device="cpu", seed: int = 0):
    """Inputs as a serving engine makes them, drawn on `device`: bfloat16 activations quantised with
    quantize_pow2_scaled per (query, head) for q, whose scales fold into the weights (with the
    D^-1/2 softmax scale and H^-1/2, as vLLM's indexer does), and with quantize_amax_scaled per key for kv.
    The weights have both signs. Returns q, kv (e4m3), kv_scales > 0, weights, like make_inputs."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(seed)
    q_act = torch.randn(M, H, D, generator=g, device=device, dtype=torch.bfloat16)
    q, q_scale = quantize_pow2_scaled(q_act)
    del q_act
    k_act = torch.randn(N, D, generator=g, device=device, dtype=torch.bfloat16)
    kv, kv_scales = quantize_amax_scaled(k_act)
    raw_weights = torch.randn(M, H, generator=g, device=device, dtype=torch.float32)
    weights = raw_weights * q_scale * (D ** -0.5) * (H ** -0.5)
    return q, kv, kv_scales.contiguous(), weights.contiguous()


def make_input_set(name: str, M: int, N: int, H: int, D: int, device="cpu", seed: int = 0):
    """The inputs of one of INPUT_SETS: "engine" (make_engine_inputs) or "make_inputs"."""
    if name == "engine":
        return make_engine_inputs(M, N, H, D, device, seed)
    if name == "make_inputs":
        return make_inputs(M, N, H, D, device, seed)
    raise ValueError(f"unknown input set {name!r}; expected one of {INPUT_SETS}")


def clamped_windows(ks: torch.Tensor, ke: torch.Tensor, N: int):
    """(s, e) as int64 after the contract's clamp to [0, N]."""
    return ks.to(torch.int64).clamp(0, N), ke.to(torch.int64).clamp(0, N)


def window_mask(ks: torch.Tensor, ke: torch.Tensor, N: int) -> torch.Tensor:
    """Boolean [M, N]: True where n lies in row m's clamped window."""
    s, e = clamped_windows(ks, ke, N)
    n = torch.arange(N, device=ks.device, dtype=torch.int64)
    return (n[None, :] >= s[:, None]) & (n[None, :] < e[:, None])


def reference_logits(q, kv, kv_scales, weights, ks, ke, clean_logits=True, max_chunk_bytes=1 << 28):
    """float64 logits on the same fp8 inputs; -inf outside the window when clean, NaN otherwise.

    Works on q's device. Rows go in chunks so the [rows, H, N] float64 intermediate stays under
    ``max_chunk_bytes``.
    """
    M, H, D = q.shape
    N = kv.shape[0]
    dev = q.device
    k64 = kv.to(torch.float64)
    s64 = kv_scales.reshape(-1).to(torch.float64)
    w64 = weights.to(torch.float64)
    out = torch.empty(M, N, dtype=torch.float64, device=dev)
    rows_per_chunk = max(1, int(max_chunk_bytes // max(1, H * N * 8)))
    for m0 in range(0, M, rows_per_chunk):
        m1 = min(M, m0 + rows_per_chunk)
        dots = torch.einsum("mhd,nd->mhn", q[m0:m1].to(torch.float64), k64)
        scaled = torch.relu(dots * s64[None, None, :])
        out[m0:m1] = torch.einsum("mhn,mh->mn", scaled, w64[m0:m1])
    inside = window_mask(ks.to(dev), ke.to(dev), N)
    return out.masked_fill_(~inside, float("-inf") if clean_logits else float("nan"))


def in_window_pairs(ks, ke, N: int) -> int:
    """Number of (m, n) pairs inside the windows: the work count of the benchmark's TFLOP/s."""
    s, e = clamped_windows(ks, ke, N)
    return int((e - s).clamp_min(0).sum().item())


def compress_logits(full: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, width: int, tail=float("-inf")):
    """The compressed layout of full [M, N] logits: [M, width], row m holding its clamped window's
    values from column 0 and `tail` after them (what the op writes with max_seqlen_k = width)."""
    M, N = full.shape
    s, e = clamped_windows(ks.to(full.device), ke.to(full.device), N)
    cols = torch.arange(width, device=full.device, dtype=torch.int64)
    length = (e - s).clamp_min(0)
    keys = (s[:, None] + cols[None, :]).clamp(max=max(N - 1, 0))
    inside = cols[None, :] < length[:, None]
    values = full.gather(1, keys) if N > 0 else torch.zeros(M, width, dtype=full.dtype, device=full.device)
    return torch.where(inside, values, torch.full((), tail, dtype=full.dtype, device=full.device))
