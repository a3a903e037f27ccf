"""Python API of fp8_mqa_logits: aiter's call form, DeepGEMM's call form, and ``is_supported``.

    logits[m, n] = sum_h relu(kv_scales[n] * (q[m, h, :] . kv[n, :])) * weights[m, h]   n in [ks[m], ke[m])
                   -inf elsewhere when clean_logits (else unspecified)

Both entries go through torch custom ops registered here at import (``torch.ops.aiter.fp8_mqa_logits``,
functional, and ``torch.ops.aiter.fp8_mqa_logits_out``, which writes ``out``), with fake kernels so
that torch.compile and CUDA-graph capture trace them. The ops' implementation calls the JIT module
(built on first use, see aiter/jit/core.py), which validates every argument and runs the CPU path or
the GPU kernel of q's device. Nothing here synchronises with the device or reads tensor values.

Precondition (not checked on the device): kv_scales > 0, as in every real caller (amax / 448).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["fp8_mqa_logits", "fp8_mqa_logits_deepgemm", "is_supported"]

GPU_HEADS = (32, 64)
GPU_HEAD_DIM = 128

# FRAGMENT: other packages may define ops in the "aiter" namespace too. Plain Library + impl rather
# than torch.library.custom_op: its per-call Python overhead measured ~9 us against ~2.6 us here,
# which matters for the small shapes (a few us of GPU time each).
_lib = torch.library.Library("aiter", "FRAGMENT")
_lib.define(
    "fp8_mqa_logits(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, "
    "Tensor cu_ends, bool clean_logits=True, int split_n=0) -> Tensor"
)
_lib.define(
    "fp8_mqa_logits_out(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, "
    "Tensor cu_ends, bool clean_logits, Tensor(a!) out, int split_n=0) -> ()"
)


def _module():
    from aiter.jit.core import get_module  # the first call builds or loads; never at import

    return get_module()


def _functional_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits=True, split_n=0):
    return _module().fp8_mqa_logits(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, None, split_n)


def _out_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0):
    _module().fp8_mqa_logits(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n)


# One implementation for every device: the extension dispatches on q's device itself.
_lib.impl("fp8_mqa_logits", _functional_impl, "CompositeExplicitAutograd")
_lib.impl("fp8_mqa_logits_out", _out_impl, "CompositeExplicitAutograd")


def _check_fake_args(q, kv, named):
    """What the fake kernel needs for a truthful output shape and device. A meta tensor among real
    ones sends the call here instead of to the real op, so mixed devices are rejected here too,
    with the real op's message; everything else the real op checks."""
    if q.dim() != 3:
        raise ValueError(f"fp8_mqa_logits: q must be 3-D [M, H, D], got shape {tuple(q.shape)}")
    if kv.dim() != 2:
        raise ValueError(f"fp8_mqa_logits: kv must be 2-D [N, D], got shape {tuple(kv.shape)}")
    for name, t in named:
        if t.device != q.device:
            raise RuntimeError(f"fp8_mqa_logits: {name} is on {t.device} but q is on {q.device}")


@torch.library.register_fake("aiter::fp8_mqa_logits", lib=_lib)
def _functional_fake(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits=True, split_n=0):
    _check_fake_args(q, kv, (("kv", kv), ("kv_scales", kv_scales), ("weights", weights),
                             ("cu_starts", cu_starts), ("cu_ends", cu_ends)))
    return q.new_empty((q.shape[0], kv.shape[0]), dtype=torch.float32)


@torch.library.register_fake("aiter::fp8_mqa_logits_out", lib=_lib)
def _out_fake(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0):
    _check_fake_args(q, kv, (("kv", kv), ("kv_scales", kv_scales), ("weights", weights),
                             ("cu_starts", cu_starts), ("cu_ends", cu_ends), ("out", out)))
    return None


def fp8_mqa_logits(q=None, kv=None, kv_scales=None, weights=None, cu_starts=None, cu_ends=None, clean_logits=True,
                   *, out=None, split_n=None, Q=None, KV=None):
    """Logits [M, N] float32 (argument order of aiter's Triton op).

    q [M, H, D] e4m3fn, kv [N, D] e4m3fn, kv_scales [N] (or [N, 1]) float32 > 0, weights [M, H]
    float32, cu_starts / cu_ends [M] int32 raw window bounds (clamped to [0, N]). With ``out`` (an
    [M, N] float32 view, stride(1) == 1) the result is written there and ``out`` is returned.
    ``split_n``: gfx950 key-range split, None or 0 = chosen by the kernel's model.
    ``Q=`` and ``KV=`` are accepted for ``q`` and ``kv``: aiter's Triton op names them so, and call
    sites that pass them by keyword then swap by import too.
    """
    q = _one_of(q, Q, "q", "Q")
    kv = _one_of(kv, KV, "kv", "KV")
    given = dict(q=q, kv=kv, kv_scales=kv_scales, weights=weights, cu_starts=cu_starts, cu_ends=cu_ends)
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise TypeError(f"fp8_mqa_logits() missing required argument(s): {', '.join(missing)}")
    split = 0 if split_n is None else int(split_n)
    clean = bool(clean_logits)
    if out is None:
        return torch.ops.aiter.fp8_mqa_logits(q, kv, kv_scales, weights, cu_starts, cu_ends, clean, split)
    torch.ops.aiter.fp8_mqa_logits_out(q, kv, kv_scales, weights, cu_starts, cu_ends, clean, out, split)
    return out


def _one_of(value, alias, name, alias_name):
    if value is not None and alias is not None:
        raise TypeError(f"fp8_mqa_logits() got both {name} and {alias_name} (the same argument)")
    return value if value is not None else alias


def fp8_mqa_logits_deepgemm(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    """DeepGEMM's call form: ``fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, clean_logits)``.

    ``max_seqlen_k`` (a sizing hint some DeepGEMM versions take) is accepted and not needed here.
    """
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError("fp8_mqa_logits_deepgemm: kv must be the pair (kv [N, D] e4m3fn, kv_scales [N] float32)")
    kv_fp8, kv_scales = kv
    return fp8_mqa_logits(q, kv_fp8, kv_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits)


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@functools.lru_cache(maxsize=None)
def _gpu_has_kernel(index: int) -> bool:
    if torch.version.hip:
        arch = getattr(torch.cuda.get_device_properties(index), "gcnArchName", "") or ""
        return arch.startswith("gfx950")
    if torch.version.cuda:
        return torch.cuda.get_device_capability(index) == (9, 0)
    return False


def is_supported(num_heads, head_dim, device=None) -> bool:
    """True when a native kernel of this package serves (num_heads, head_dim) on ``device``.

    CPU: any H, D >= 1. CUDA: compute capability 9.0 (sm_90a) with H in {32, 64} and D == 128.
    ROCm: gfx950 with the same H and D. ``device=None`` means the current GPU when one is visible,
    else the CPU. Cheap: it reads device properties only; it never builds or launches anything.
    """
    try:
        H, D = int(num_heads), int(head_dim)
    except (TypeError, ValueError):
        return False
    if H < 1 or D < 1:
        return False
    try:
        dev = _default_device() if device is None else torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        return False
    if dev.type == "cpu":
        return True
    if dev.type != "cuda" or H not in GPU_HEADS or D != GPU_HEAD_DIM:
        return False
    if not torch.cuda.is_available():
        return False
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    return _gpu_has_kernel(index)
