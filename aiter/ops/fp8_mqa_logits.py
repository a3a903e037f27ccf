"""Python API of fp8_mqa_logits: aiter's call form, DeepGEMM's call forms, and ``is_supported``.

    logits[m, n] = sum_h relu(kv_scales[n] * (q[m, h, :] . kv[n, :])) * weights[m, h]   n in [ks[m], ke[m])
                   -inf elsewhere when clean_logits (else unspecified)

Every entry goes through one of two torch custom ops registered here at import
(``torch.ops.aiter.fp8_mqa_logits``, functional, and ``torch.ops.aiter.fp8_mqa_logits_out``, which
writes ``out``), in the way aiter/ops/_boundary.py registers every op of this package: not
differentiable, traced by torch.compile, torch.export and CUDA-graph capture through fake kernels that
repeat the binding's checks. The implementation calls the native library (built on first use, see
aiter/jit/core.py), which validates every argument and runs the CPU path or the GPU kernel of q's
device. Nothing here synchronises with the device or reads tensor values.

Precondition (not checked on the device): kv_scales > 0, as in every real caller (amax / 448).
"""

from __future__ import annotations

import torch

from aiter.ops import _boundary as b

__all__ = ["fp8_fp4_mqa_logits", "fp8_mqa_logits", "fp8_mqa_logits_deepgemm", "is_supported"]

_INPUT_NAMES = ("q", "kv", "kv_scales", "weights", "cu_starts", "cu_ends")
_CHECKS = b.Checks("fp8_mqa_logits")
# A result the op allocates has its row stride padded to 256 bytes.
_ROW_BYTES = 256


def _check_metadata(a, out, logits_dtype=None):
    """The checks of csrc/binding/fp8_mqa_logits_binding.cpp on metadata only (dtype, rank, sizes,
    devices, strides, overlap). Left to the real op, because only a GPU answers them: whether a
    compiled kernel serves H and D there, the 16-byte alignment of q and kv, and the device kernels'
    32-bit size limits."""
    c = _CHECKS
    q, kv, kv_scales, weights, cu_starts, cu_ends = inputs = a[:6]
    split_n, max_seqlen_k = a.split_n, a.max_seqlen_k
    named = tuple(zip(_INPUT_NAMES, inputs)) + ((("out", out),) if out is not None else ())
    for name, t in named:
        c.dense(t, name)
    c.require(split_n >= 0, ValueError, lambda: f"split_n must be >= 0 (0 = the kernel's own choice), got {split_n}")
    c.require(max_seqlen_k >= 0, ValueError,
              lambda: f"max_seqlen_k must be >= 0 (0 = the full [M, N] layout), got {max_seqlen_k}")
    c.logits_dtype(logits_dtype)

    c.fp8(q, "q")
    c.fp8(kv, "kv")
    c.dtype(kv_scales, "kv_scales", torch.float32)
    c.dtype(weights, "weights", torch.float32)
    c.int32(cu_starts, "cu_starts", " (int64 bounds are not accepted: pass .to(torch.int32))")
    c.int32(cu_ends, "cu_ends", " (int64 bounds are not accepted: pass .to(torch.int32))")
    if out is not None:
        c.require(out.dtype in b.LOGITS_DTYPES, TypeError,
                  lambda: f"out must have dtype torch.float32 or torch.bfloat16, got "
                          f"{b.C10_DTYPE_NAMES.get(out.dtype, out.dtype)}")
        c.require(logits_dtype is None or logits_dtype == out.dtype, TypeError,
                  lambda: f"out has dtype torch.{b.LOGITS_DTYPES[out.dtype]} but logits_dtype is "
                          f"torch.{b.LOGITS_DTYPES[logits_dtype]}; pass one that agrees")

    c.dim(q, "q", 3, "[M, H, D]")
    c.dim(kv, "kv", 2, "[N, D]")
    c.dim(weights, "weights", 2, "[M, H]")
    c.dim(cu_starts, "cu_starts", 1, "[M]")
    c.dim(cu_ends, "cu_ends", 1, "[M]")
    M, H, D = q.shape
    N = kv.shape[0]
    c.require(H >= 1 and D >= 1, ValueError,
              lambda: f"q must have H >= 1 heads and head dim D >= 1, got shape {list(q.shape)}")
    c.require(H <= b.INT32_MAX and D <= b.INT32_MAX, ValueError,
              lambda: f"q's H and D must fit in int32, got shape {list(q.shape)}")
    c.size(kv, "kv", 1, D, "q's head dim D")
    c.require(kv_scales.dim() == 1 or (kv_scales.dim() == 2 and kv_scales.shape[1] == 1)
              or (kv_scales.dim() == 0 and N == 1), ValueError,
              lambda: f"kv_scales must be [N], [N, 1] or (when N == 1) 0-d, got shape {list(kv_scales.shape)} "
                      f"with N = {N}")
    if kv_scales.dim() > 0:
        c.size(kv_scales, "kv_scales", 0, N, "kv's N")
    c.size(weights, "weights", 0, M, "q's M")
    c.size(weights, "weights", 1, H, "q's H")
    c.size(cu_starts, "cu_starts", 0, M, "q's M")
    c.size(cu_ends, "cu_ends", 0, M, "q's M")
    compressed = max_seqlen_k > 0
    width = max_seqlen_k if compressed else N
    if out is not None:
        c.dim(out, "out", 2, "[M, max_seqlen_k]" if compressed else "[M, N]")
        c.size(out, "out", 0, M, "q's M")
        c.size(out, "out", 1, width, "max_seqlen_k" if compressed else "kv's N")

    device = q.device
    c.served_device(device, "q", "fp8_mqa_logits")
    c.same_device(named[1:], device)
    for name, t in (("q", q), ("kv", kv), ("kv_scales", kv_scales), ("cu_starts", cu_starts), ("cu_ends", cu_ends)):
        c.contiguous(t, name)
    c.row_major(weights, "weights", "H")
    if out is not None:
        c.row_major(out, "out", "max_seqlen_k" if compressed else "N")
        for name, t in zip(_INPUT_NAMES, inputs):
            c.require(not b.overlaps(out, t), ValueError,
                      lambda: f"out overlaps {name} in memory; the op writes out while it reads {name}, so pass an "
                              "out that shares no memory with any input")
    c.require(split_n == 0 or device.type != "cpu", ValueError,
              lambda: "split_n (the fixed grid's splits) is an option of backends with a fixed grid (gfx950); the "
                      "CPU path has none, so pass split_n=0 or None")
    if split_n != 0 and device.type == "cuda" and torch.cuda.is_available():
        backend = b.gpu_backend(device.index if device.index is not None else torch.cuda.current_device())
        c.require(backend is None or backend.has_fixed_grid, ValueError,
                  lambda: f"split_n (the fixed grid's splits) is an option of backends with a fixed grid (gfx950); "
                          f"the {backend.name} kernel has none, so pass split_n=0 or None")


def _functional_fake(a):
    _check_metadata(a, None, a.logits_dtype)
    rows, compressed = a.q.shape[0], a.max_seqlen_k > 0
    width = a.max_seqlen_k if compressed else a.kv.shape[0]
    dtype = torch.float32 if a.logits_dtype is None else a.logits_dtype
    row_multiple = _ROW_BYTES // torch.empty((), dtype=dtype).element_size()
    why = ("max_seqlen_k (or M) is too large" if compressed else
           "q's M and kv's N are too large for the full layout (max_seqlen_k > 0 gives the compressed one)")
    _CHECKS.require(b.logits_fit(rows, width, dtype, row_multiple), ValueError,
                    lambda: f"the logits [M = {rows}, {'max_seqlen_k' if compressed else 'N'} = {width}] would take "
                            f"more than 2^48 bytes: {why}")
    return b.new_logits(a.q, rows, width, dtype, row_multiple)


def _out_fake(a):
    _check_metadata(a, a.out)


# The native op takes out (its argument 7: None = allocate) and then the logits dtype by name (its
# argument 10: "" = out's dtype).
_FUNCTIONAL_OP = b.register(b.Op(
    "fp8_mqa_logits(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, Tensor cu_ends, "
    "bool clean_logits=True, int split_n=0, int max_seqlen_k=0, ScalarType? logits_dtype=None) -> Tensor",
    native=b.Native("fp8_mqa_logits", "prefill", "q", fixed={7: None}), fake=_functional_fake, no_grad=_INPUT_NAMES[:4]))
_OUT_OP = b.register(b.Op(
    "fp8_mqa_logits_out(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, Tensor cu_ends, "
    "bool clean_logits, Tensor(a!) out, int split_n=0, int max_seqlen_k=0) -> ()",
    native=b.Native("fp8_mqa_logits", "prefill", "q", fixed={10: ""}), fake=_out_fake, no_grad=_INPUT_NAMES[:4],
    label="fp8_mqa_logits"))


def fp8_mqa_logits(q=None, kv=None, kv_scales=None, weights=None, cu_starts=None, cu_ends=None, clean_logits=True,
                   *, out=None, max_seqlen_k=0, logits_dtype=None, split_n=None, Q=None, KV=None):
    """Logits [M, N] (argument order of aiter's Triton op).

    q [M, H, D] e4m3fn, kv [N, D] e4m3fn, kv_scales [N] (or [N, 1], or 0-d when N == 1) float32 > 0,
    weights [M, H] float32, cu_starts / cu_ends [M] int32 raw window bounds (clamped to [0, N]).
    ``clean_logits`` is a bool: -inf outside each window (else those elements are unspecified).
    ``logits_dtype``: torch.float32 (default) or torch.bfloat16 (rounded once, at the store).
    ``max_seqlen_k > 0``: the compressed layout [M, max_seqlen_k], row m holding keys ks[m]..ke[m]-1
    (clamped) from column 0 and, with clean_logits, -inf past them; every window must fit.
    A new result has its row stride padded to a multiple of 256 bytes. With ``out`` ([M, N] or
    [M, max_seqlen_k], float32 or bfloat16, stride(1) == 1, sharing no memory with an input) the result
    is written there and ``out`` is returned; its dtype is the logits dtype. The op is not
    differentiable: an input (or ``out``) that requires grad is an error unless grad mode is off.
    ``split_n``: gfx950 only (aiter's HIP op's SplitN): the fixed grid's splits per row block; None
    or 0 lets the kernel choose. Backends without a fixed grid (CPU, sm90) refuse a nonzero value.
    ``Q=`` and ``KV=`` are accepted for ``q`` and ``kv``: aiter's Triton op names them so, and call
    sites that pass them by keyword then swap by import too.
    """
    f = "fp8_mqa_logits"
    if Q is not None or KV is not None:
        q = _one_of(q, Q, "q", "Q")
        kv = _one_of(kv, KV, "kv", "KV")
    tensors = (q, kv, kv_scales, weights, cu_starts, cu_ends)
    if q is None or kv is None or kv_scales is None or weights is None or cu_starts is None or cu_ends is None:
        missing = [name for name, t in zip(_INPUT_NAMES, tensors) if t is None]
        raise TypeError(f"fp8_mqa_logits() missing required argument(s): {', '.join(missing)}")
    b.check_bool(clean_logits, "clean_logits", f)
    b.check_count(max_seqlen_k, "max_seqlen_k", f, 0, "0 = the full [M, N] layout")
    split = _check_split_n(split_n, f)
    dtype = b.logits_dtype(logits_dtype, f, out)
    if out is None:
        return _FUNCTIONAL_OP(*tensors, clean_logits, split, max_seqlen_k, dtype)
    _OUT_OP(*tensors, clean_logits, out, split, max_seqlen_k)
    return out


def _check_split_n(value, function):
    # An int or None; int(x) would read 0.5 and "0" as 0 and a bool as 0 or 1.
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{function}: split_n must be an int or None (the fixed grid's splits; None or 0 = the "
                        f"kernel's own choice), got {type(value).__name__} {value!r}")
    return value


def _one_of(value, alias, name, alias_name):
    if value is not None and alias is not None:
        raise TypeError(f"fp8_mqa_logits() got both {name} and {alias_name} (the same argument)")
    return value if value is not None else alias


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=torch.float32):
    """DeepGEMM's call form: ``fp8_fp4_mqa_logits(q=(q, q_scale), kv=(kv, kv_scales), weights, ...)``.

    ``q_scale`` must be None: a scale means FP4 queries (DeepGEMM on sm100), which this package does
    not serve. ``max_seqlen_k > 0`` returns DeepGEMM's compressed layout [M, max_seqlen_k] (row m holds
    keys ks[m]..ke[m]-1 from column 0); ``logits_dtype`` is torch.float32 or torch.bfloat16. With
    clean_logits the compressed tail is -inf (DeepGEMM refuses that combination; this op serves it).
    """
    f = "fp8_fp4_mqa_logits"
    q_fp8 = b.fp8_queries(q, f, "q [M, H, D] e4m3fn")
    kv_fp8, kv_scales = b.pair(kv, "kv", f, "kv [N, D] e4m3fn, kv_scales [N] float32")
    b.check_bool(clean_logits, "clean_logits", f)
    b.check_count(max_seqlen_k, "max_seqlen_k", f, 0, "0 = the full [M, N] layout")
    return fp8_mqa_logits(q_fp8, kv_fp8, kv_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                          max_seqlen_k=max_seqlen_k, logits_dtype=b.logits_dtype(logits_dtype, f))


def fp8_mqa_logits_deepgemm(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    """DeepGEMM's legacy call form: ``fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, clean_logits,
    max_seqlen_k)``: float32 logits, the compressed layout [M, max_seqlen_k] when max_seqlen_k > 0."""
    f = "fp8_mqa_logits_deepgemm"
    kv_fp8, kv_scales = b.pair(kv, "kv", f, "kv [N, D] e4m3fn, kv_scales [N] float32")
    b.check_bool(clean_logits, "clean_logits", f)
    b.check_count(max_seqlen_k, "max_seqlen_k", f, 0, "0 = the full [M, N] layout")
    return fp8_mqa_logits(q, kv_fp8, kv_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                          max_seqlen_k=max_seqlen_k)


def is_supported(num_heads, head_dim, device=None, logits_dtype=torch.float32, compressed=False,
                 clean_logits=True) -> bool:
    """True when a native kernel of this package serves (num_heads, head_dim) on ``device``, writing
    ``logits_dtype`` logits (torch.float32 or torch.bfloat16), in the compressed layout when
    ``compressed`` (max_seqlen_k > 0), with its -inf tail when also ``clean_logits``.

    What each backend serves is its own statement (csrc/<backend>/capabilities.h, read through
    aiter/backends.py): the CPU path any H, D >= 1 and every option; sm_90a (compute capability 9.0)
    and gfx950 the heads, head dims and options they list. ``device=None`` means the current GPU when
    one is visible, else the CPU. Cheap: it reads device properties only; it never builds or launches
    anything.
    """
    try:
        H, D = int(num_heads), int(head_dim)
    except (TypeError, ValueError):
        return False
    if logits_dtype not in b.LOGITS_DTYPES or not isinstance(compressed, bool) or not isinstance(clean_logits, bool):
        return False
    backend = b.device_backend(device)
    return backend is not None and backend.serves(H, D, bf16_logits=logits_dtype == torch.bfloat16,
                                                  compressed=compressed, clean_logits=clean_logits)
