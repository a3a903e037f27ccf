"""Python API of fp8_mqa_logits: aiter's call form, DeepGEMM's call forms, and ``is_supported``.

    logits[m, n] = sum_h relu(kv_scales[n] * (q[m, h, :] . kv[n, :])) * weights[m, h]   n in [ks[m], ke[m])
                   -inf elsewhere when clean_logits (else unspecified)

Both entries go through torch custom ops registered here at import (``torch.ops.aiter.fp8_mqa_logits``,
functional, and ``torch.ops.aiter.fp8_mqa_logits_out``, which writes ``out``). Their Autograd kernels
refuse inputs that need a gradient (the op has no backward); their fake kernels repeat the binding's
checks on metadata, so that torch.compile, torch.export and CUDA-graph capture trace them and refuse
bad arguments while tracing. The implementation calls the JIT module (built on first use, see
aiter/jit/core.py), which validates every argument and runs the CPU path or the GPU kernel of q's
device. Nothing here synchronises with the device or reads tensor values.

Precondition (not checked on the device): kv_scales > 0, as in every real caller (amax / 448).
"""

from __future__ import annotations

import functools

import torch
from torch.autograd import forward_ad

from aiter import backends
from aiter.ops import native

__all__ = ["fp8_fp4_mqa_logits", "fp8_mqa_logits", "fp8_mqa_logits_deepgemm", "is_supported"]

# FRAGMENT: other packages may define ops in the "aiter" namespace too. Plain Library + impl rather
# than torch.library.custom_op: its per-call Python overhead measured ~9 us against ~2.6 us here (the
# Autograd kernels below add ~1-2 us; custom_op stays about twice as slow), which matters for the small
# shapes (a few us of GPU time each).
_lib = torch.library.Library("aiter", "FRAGMENT")
_lib.define(
    "fp8_mqa_logits(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, "
    "Tensor cu_ends, bool clean_logits=True, int split_n=0, int max_seqlen_k=0, ScalarType? logits_dtype=None) "
    "-> Tensor"
)
_lib.define(
    "fp8_mqa_logits_out(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, "
    "Tensor cu_ends, bool clean_logits, Tensor(a!) out, int split_n=0, int max_seqlen_k=0) -> ()"
)


_FUNCTIONAL_OP = torch.ops.aiter.fp8_mqa_logits.default
_OUT_OP = torch.ops.aiter.fp8_mqa_logits_out.default
_INPUT_NAMES = ("q", "kv", "kv_scales", "weights", "cu_starts", "cu_ends")


# The binding takes the logits dtype by name ("" = out's dtype, or float32 for a new tensor).
_LOGITS_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def _dtype_name(logits_dtype) -> str:
    return "" if logits_dtype is None else _LOGITS_DTYPE_NAMES.get(logits_dtype, str(logits_dtype))


def _functional_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits=True, split_n=0, max_seqlen_k=0,
                     logits_dtype=None):
    return native.ops("prefill", q.device).fp8_mqa_logits.default(
        q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, None, split_n, max_seqlen_k,
        _dtype_name(logits_dtype))


def _out_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0, max_seqlen_k=0):
    native.ops("prefill", q.device).fp8_mqa_logits.default(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits,
                                                           out, split_n, max_seqlen_k, "")


# One implementation for every device: the extension dispatches on q's device itself.
_lib.impl("fp8_mqa_logits", _functional_impl, "CompositeExplicitAutograd")
_lib.impl("fp8_mqa_logits_out", _out_impl, "CompositeExplicitAutograd")


# ---- autograd: the op is not differentiable -------------------------------------------------------
# Without an Autograd kernel torch's fallback attaches a grad_fn whose backward only warns, so a gradient
# goes missing silently. These kernels refuse at the call instead, and otherwise go on below autograd
# (an output made there carries no grad_fn).
#
# Speed: a redispatch re-enters the dispatcher and runs a second Python kernel, which about doubles
# the op's per-call overhead. When nothing sits between these kernels and the CPU/CUDA one (plain
# tensors, no fake, functional or Python mode), that next kernel is the implementation, so it is
# called directly; any other keyset is redispatched.
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_AFTER_AD_INPLACE_OR_VIEW = torch._C._after_ADInplaceOrView_keyset
_PLAIN_BACKENDS = frozenset(torch._C.DispatchKeySet(key).raw_repr()
                            for key in (torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA))


_NEXT_IS_BACKEND: dict[int, bool] = {}  # by keyset.raw_repr(); a process meets a handful of keysets


def _next_is_backend(keyset) -> bool:
    """Whether the kernel below ADInplaceOrView (a fallthrough for the functional op) is the CPU or
    CUDA implementation itself."""
    raw = keyset.raw_repr()
    known = _NEXT_IS_BACKEND.get(raw)
    if known is None:
        known = _NEXT_IS_BACKEND[raw] = (keyset & _AFTER_AD_INPLACE_OR_VIEW).raw_repr() in _PLAIN_BACKENDS
    return known


def _raise_not_differentiable(tensors, names):
    if torch.is_grad_enabled():
        for name, t in zip(names, tensors):
            if not t.requires_grad:
                continue
            if name == "out":
                raise RuntimeError(
                    f"fp8_mqa_logits: out is {'a leaf tensor' if t.is_leaf else 'a tensor'} that requires "
                    "grad, but the op writes out in place and is not differentiable (torch's own out= "
                    "functions refuse this too); pass an out that does not require grad, or call under "
                    "torch.no_grad()")
            raise RuntimeError(
                f"fp8_mqa_logits: {name} requires grad, but the op is not differentiable (it has no "
                f"backward); call it under torch.no_grad() or pass {name}.detach()")
    for name, t in zip(names, tensors):
        if forward_ad.unpack_dual(t).tangent is not None:
            raise RuntimeError(
                f"fp8_mqa_logits: {name} carries a forward-mode AD tangent, but the op is not "
                f"differentiable; pass forward_ad.unpack_dual({name}).primal")


def _functional_autograd(keyset, q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits=True, split_n=0,
                         max_seqlen_k=0, logits_dtype=None):
    if (torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad or kv_scales.requires_grad
                                     or weights.requires_grad)) or forward_ad._current_level >= 0:
        _raise_not_differentiable((q, kv, kv_scales, weights, cu_starts, cu_ends), _INPUT_NAMES)
    if _next_is_backend(keyset):
        return _functional_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, split_n, max_seqlen_k,
                                logits_dtype)
    with torch._C._AutoDispatchBelowAutograd():
        return _FUNCTIONAL_OP.redispatch(keyset & _AFTER_AUTOGRAD, q, kv, kv_scales, weights, cu_starts, cu_ends,
                                         clean_logits, split_n, max_seqlen_k, logits_dtype)


def _out_autograd(keyset, q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0,
                  max_seqlen_k=0):
    if (torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad or kv_scales.requires_grad
                                     or weights.requires_grad or out.requires_grad)) or forward_ad._current_level >= 0:
        _raise_not_differentiable((q, kv, kv_scales, weights, cu_starts, cu_ends, out), _INPUT_NAMES + ("out",))
    # The next kernel is ADInplaceOrView's (the dispatcher includes that key outside inference mode,
    # where this kernel runs): called directly.
    _out_inplace_or_view(keyset, q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n,
                         max_seqlen_k)


def _out_inplace_or_view(keyset, q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0,
                         max_seqlen_k=0):
    """torch's rules for an in-place write of out, as its own in-place ops apply them: refuse an
    inference tensor outside inference mode (it has no version counter, so autograd could not see the
    write; torch refuses it even under no_grad), and bump out's version counter."""
    if out.is_inference() and not torch.is_inference_mode_enabled():
        raise RuntimeError(
            "fp8_mqa_logits: out is an inference tensor (made under torch.inference_mode()), which cannot "
            "be written in place outside inference mode; pass out.clone() or call inside "
            "torch.inference_mode()")
    torch.autograd.graph.increment_version(out)
    if _next_is_backend(keyset):
        _out_impl(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n, max_seqlen_k)
        return
    with torch._C._AutoDispatchBelowADInplaceOrView():
        _OUT_OP.redispatch(keyset & _AFTER_AD_INPLACE_OR_VIEW, q, kv, kv_scales, weights, cu_starts, cu_ends,
                           clean_logits, out, split_n, max_seqlen_k)


_lib.impl("fp8_mqa_logits", _functional_autograd, "Autograd", with_keyset=True)
_lib.impl("fp8_mqa_logits_out", _out_autograd, "Autograd", with_keyset=True)
# torch's own ADInplaceOrView fallback bumps only mutated outputs, and this op returns nothing.
_lib.impl("fp8_mqa_logits_out", _out_inplace_or_view, "ADInplaceOrView", with_keyset=True)


# ---- fake kernels: the binding's checks on metadata ------------------------------------------------
# The fake (meta) kernels refuse what csrc/binding/fp8_mqa_logits_binding.cpp refuses, in the same order, with
# the same exception types and messages, so that FakeTensorMode, torch.export and torch.compile fail at
# trace time rather than at run time; keep the two in step (op_tests/test_validation.py runs every bad
# input through both). Left to the real op, because only a GPU answers them: whether a compiled kernel
# serves H and D there, the 16-byte alignment of q and kv, and the device kernels' 32-bit size limits.

# c10's names, which the binding's messages print.
_C10_DTYPE_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.float16: "Half", torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16",
    torch.bool: "Bool", torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2",
    torch.float8_e4m3fnuz: "Float8_e4m3fnuz", torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
}
_C10_LAYOUT_NAMES = {
    torch.strided: "Strided", torch.sparse_coo: "Sparse", torch.sparse_csr: "SparseCsr",
    torch.sparse_csc: "SparseCsc", torch.sparse_bsr: "SparseBsr", torch.sparse_bsc: "SparseBsc",
    torch._mkldnn: "Mkldnn", torch.jagged: "Jagged",
}
_INT32_MAX = 2**31 - 1


def _require(cond, error, message):
    """Raise error("fp8_mqa_logits: " + message()) unless cond. A symbolic cond (dynamic shapes) becomes
    a guard or a runtime assert, as in torch's own meta kernels."""
    if cond is not True:
        torch._check_with(error, cond, lambda: "fp8_mqa_logits: " + message())


def _check_dtype(t, name, want, hint=""):
    _require(t.dtype == want, TypeError,
             lambda: f"{name} must have dtype {want}, got {_C10_DTYPE_NAMES.get(t.dtype, t.dtype)}{hint}")


def _check_dim(t, name, dim, layout):
    _require(t.dim() == dim, ValueError, lambda: f"{name} must be {dim}-D {layout}, got shape {list(t.shape)}")


def _check_size(t, name, dim, want, what):
    _require(t.shape[dim] == want, ValueError,
             lambda: f"{name}.size({dim}) must be {what} = {want}, got shape {list(t.shape)}")


def _check_row_major(t, name, cols_name):
    rows, cols = t.shape
    _require(cols <= 1 or t.stride(1) == 1, ValueError,
             lambda: f"{name} must have a contiguous last dim (stride(1) == 1), got strides {list(t.stride())}")
    _require(rows <= 1 or t.stride(0) >= cols, ValueError,
             lambda: f"{name} row stride (stride(0) = {t.stride(0)}) must be >= {cols_name} = {cols}, got "
                     f"strides {list(t.stride())}")


def _byte_runs(t):
    """The bytes of a validated tensor (contiguous, or 2-D with a dense last dim) as (first, rows, pitch,
    run): `rows` runs of `run` bytes, `pitch` bytes apart, `first` counted from the start of its storage.
    None when a size or stride is symbolic."""
    item = t.element_size()
    if t.dim() == 2 and not t.is_contiguous():
        runs = (t.storage_offset() * item, t.shape[0], t.stride(0) * item, t.shape[1] * item)
    else:
        runs = (t.storage_offset() * item, 1, t.numel() * item, t.numel() * item)
    return runs if all(isinstance(v, int) for v in runs) else None


def _runs_meet(a, b):
    """Whether two sets of byte runs (see _byte_runs) share a byte; the binding's runs_meet."""
    if a[0] >= b[0] + (b[1] - 1) * b[2] + b[3] or b[0] >= a[0] + (a[1] - 1) * a[2] + a[3]:
        return False
    if a[1] > b[1]:
        a, b = b, a
    first, rows, pitch, run = b
    for i in range(a[1]):
        lo = a[0] + i * a[2]
        # b's first run that ends after lo is the only one that can start before lo + a's run.
        j = max(0, (lo - run - first) // pitch + 1)
        if j < rows and first + j * pitch < lo + a[3]:
            return True
    return False


def _check_no_overlap(out, t, name):
    # The binding's rule (torch's): tensors of two storages never overlap; within one, bytes are
    # compared, so a view of another dtype counts.
    if out.untyped_storage()._cdata != t.untyped_storage()._cdata:
        return
    a, b = _byte_runs(out), _byte_runs(t)
    if a is None or b is None:
        return  # symbolic sizes or strides: left to the real op
    if a[3] == 0 or b[3] == 0:
        return  # empty
    _require(not _runs_meet(a, b), ValueError,
             lambda: f"out overlaps {name} in memory; the op writes out while it reads {name}, so pass an out "
                     "that shares no memory with any input")


def _check_metadata(q, kv, kv_scales, weights, cu_starts, cu_ends, out, split_n, max_seqlen_k=0, logits_dtype=None):
    """The binding's argument checks, on metadata only (dtype, rank, sizes, devices, strides, overlap)."""
    inputs = (q, kv, kv_scales, weights, cu_starts, cu_ends)
    named = tuple(zip(_INPUT_NAMES, inputs)) + ((("out", out),) if out is not None else ())
    for name, t in named:
        _require(t.layout == torch.strided, ValueError,
                 lambda: f"{name} must be a dense (strided) tensor, got layout "
                         f"{_C10_LAYOUT_NAMES.get(t.layout, t.layout)}")
    _require(split_n >= 0, ValueError, lambda: f"split_n must be >= 0 (0 = the kernel's own choice), got {split_n}")
    _require(max_seqlen_k >= 0, ValueError,
             lambda: f"max_seqlen_k must be >= 0 (0 = the full [M, N] layout), got {max_seqlen_k}")
    _require(logits_dtype is None or logits_dtype in _LOGITS_DTYPE_NAMES, ValueError,
             lambda: f"logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}")

    for name, t in (("q", q), ("kv", kv)):
        _check_dtype(t, name, torch.float8_e4m3fn,
                     " (the bytes are decoded as e4m3fn, so another one-byte dtype is not accepted)"
                     if t.element_size() == 1 else "")
    _check_dtype(kv_scales, "kv_scales", torch.float32)
    _check_dtype(weights, "weights", torch.float32)
    for name, t in (("cu_starts", cu_starts), ("cu_ends", cu_ends)):
        _check_dtype(t, name, torch.int32,
                     " (int64 bounds are not accepted: pass .to(torch.int32))" if t.dtype == torch.int64 else "")
    if out is not None:
        _require(out.dtype in _LOGITS_DTYPE_NAMES, TypeError,
                 lambda: f"out must have dtype torch.float32 or torch.bfloat16, got "
                         f"{_C10_DTYPE_NAMES.get(out.dtype, out.dtype)}")
        _require(logits_dtype is None or logits_dtype == out.dtype, TypeError,
                 lambda: f"out has dtype torch.{_LOGITS_DTYPE_NAMES[out.dtype]} but logits_dtype is "
                         f"torch.{_LOGITS_DTYPE_NAMES[logits_dtype]}; pass one that agrees")

    _check_dim(q, "q", 3, "[M, H, D]")
    _check_dim(kv, "kv", 2, "[N, D]")
    _check_dim(weights, "weights", 2, "[M, H]")
    _check_dim(cu_starts, "cu_starts", 1, "[M]")
    _check_dim(cu_ends, "cu_ends", 1, "[M]")
    M, H, D = q.shape
    N = kv.shape[0]
    _require(H >= 1 and D >= 1, ValueError,
             lambda: f"q must have H >= 1 heads and head dim D >= 1, got shape {list(q.shape)}")
    _require(H <= _INT32_MAX and D <= _INT32_MAX, ValueError,
             lambda: f"q's H and D must fit in int32, got shape {list(q.shape)}")
    _check_size(kv, "kv", 1, D, "q's head dim D")
    _require(kv_scales.dim() == 1 or (kv_scales.dim() == 2 and kv_scales.shape[1] == 1)
             or (kv_scales.dim() == 0 and N == 1), ValueError,
             lambda: f"kv_scales must be [N], [N, 1] or (when N == 1) 0-d, got shape {list(kv_scales.shape)} "
                     f"with N = {N}")
    if kv_scales.dim() > 0:
        _check_size(kv_scales, "kv_scales", 0, N, "kv's N")
    _check_size(weights, "weights", 0, M, "q's M")
    _check_size(weights, "weights", 1, H, "q's H")
    _check_size(cu_starts, "cu_starts", 0, M, "q's M")
    _check_size(cu_ends, "cu_ends", 0, M, "q's M")
    compressed = max_seqlen_k > 0
    width = max_seqlen_k if compressed else N
    if out is not None:
        _check_dim(out, "out", 2, "[M, max_seqlen_k]" if compressed else "[M, N]")
        _check_size(out, "out", 0, M, "q's M")
        _check_size(out, "out", 1, width, "max_seqlen_k" if compressed else "kv's N")

    device = q.device
    # Meta tensors are this kernel's own; the real op refuses them.
    _require(device.type in ("cpu", "cuda", "meta"), NotImplementedError,
             lambda: f"q is on {device}, which has no kernel here (cpu or cuda tensors only; the meta/fake "
                     "kernel of torch.ops.aiter.fp8_mqa_logits handles meta tensors)")
    for name, t in named[1:]:
        _require(t.device == device, RuntimeError,
                 lambda: f"{name} is on {t.device} but q is on {device}; all tensors must be on q's device")

    for name, t in (("q", q), ("kv", kv), ("kv_scales", kv_scales), ("cu_starts", cu_starts),
                    ("cu_ends", cu_ends)):
        _require(t.is_contiguous(), ValueError,
                 lambda: f"{name} must be contiguous, got shape {list(t.shape)} with strides {list(t.stride())} "
                         "(call .contiguous())")
    _check_row_major(weights, "weights", "H")
    if out is not None:
        _check_row_major(out, "out", "max_seqlen_k" if compressed else "N")
        for name, t in zip(_INPUT_NAMES, inputs):
            _check_no_overlap(out, t, name)
    _require(split_n == 0 or device.type != "cpu", ValueError,
             lambda: "split_n (the fixed grid's splits) is an option of backends with a fixed grid (gfx950); the "
                     "CPU path has none, so pass split_n=0 or None")
    if split_n != 0 and device.type == "cuda" and torch.cuda.is_available():
        backend = _gpu_backend(device.index if device.index is not None else torch.cuda.current_device())
        _require(backend is None or backend.has_fixed_grid, ValueError,
                 lambda: f"split_n (the fixed grid's splits) is an option of backends with a fixed grid (gfx950); "
                         f"the {backend.name} kernel has none, so pass split_n=0 or None")


# The most bytes a logits tensor the op allocates may take (the binding's kMaxLogitsBytes).
_MAX_LOGITS_BYTES = 1 << 48


def _check_logits_size(rows, cols, dtype, compressed):
    """The binding's check_logits_size: a new [rows, cols] result (row stride padded to 256 bytes)
    within 2^48 bytes, else a ValueError naming the width."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_256_bytes = 256 // itemsize
    width = "max_seqlen_k" if compressed else "N"
    fits = cols <= _MAX_LOGITS_BYTES // itemsize and (
        rows == 0 or max(1, (cols + per_256_bytes - 1) // per_256_bytes) * 256 <= _MAX_LOGITS_BYTES // max(rows, 1))
    why = ("max_seqlen_k (or M) is too large" if compressed else
           "q's M and kv's N are too large for the full layout (max_seqlen_k > 0 gives the compressed one)")
    _require(fits, ValueError, lambda: f"the logits [M = {rows}, {width} = {cols}] would take more than 2^48 bytes: {why}")


def _new_logits(q, rows, cols, dtype):
    """What the binding's allocate_logits returns: [rows, cols] with the row stride padded to 256 bytes."""
    per_256_bytes = 256 // torch.empty((), dtype=dtype).element_size()
    padded = torch.sym_max(1, (cols + per_256_bytes - 1) // per_256_bytes) * per_256_bytes
    return q.new_empty_strided((rows, cols), (padded, 1), dtype=dtype)


@torch.library.register_fake("aiter::fp8_mqa_logits", lib=_lib)
def _functional_fake(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits=True, split_n=0, max_seqlen_k=0,
                     logits_dtype=None):
    _check_metadata(q, kv, kv_scales, weights, cu_starts, cu_ends, None, split_n, max_seqlen_k, logits_dtype)
    width = max_seqlen_k if max_seqlen_k > 0 else kv.shape[0]
    dtype = torch.float32 if logits_dtype is None else logits_dtype
    _check_logits_size(q.shape[0], width, dtype, max_seqlen_k > 0)
    return _new_logits(q, q.shape[0], width, dtype)


@torch.library.register_fake("aiter::fp8_mqa_logits_out", lib=_lib)
def _out_fake(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split_n=0, max_seqlen_k=0):
    _check_metadata(q, kv, kv_scales, weights, cu_starts, cu_ends, out, split_n, max_seqlen_k)
    return None


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
    if Q is not None or KV is not None:
        q = _one_of(q, Q, "q", "Q")
        kv = _one_of(kv, KV, "kv", "KV")
    if q is None or kv is None or kv_scales is None or weights is None or cu_starts is None or cu_ends is None:
        given = dict(q=q, kv=kv, kv_scales=kv_scales, weights=weights, cu_starts=cu_starts, cu_ends=cu_ends)
        missing = [name for name, value in given.items() if value is None]
        raise TypeError(f"fp8_mqa_logits() missing required argument(s): {', '.join(missing)}")
    _check_bool(clean_logits, "clean_logits", "fp8_mqa_logits")
    max_seqlen_k = _check_max_seqlen_k(max_seqlen_k, "fp8_mqa_logits")
    _check_logits_dtype_type(logits_dtype, "fp8_mqa_logits")
    split = _check_split_n(split_n, "fp8_mqa_logits")
    if out is None:
        return _FUNCTIONAL_OP(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, split, max_seqlen_k,
                              logits_dtype)
    if logits_dtype is not None and isinstance(out, torch.Tensor) and out.dtype != logits_dtype:
        raise TypeError(f"fp8_mqa_logits: out has dtype {out.dtype} but logits_dtype is {logits_dtype}; pass one "
                        "that agrees")
    _OUT_OP(q, kv, kv_scales, weights, cu_starts, cu_ends, clean_logits, out, split, max_seqlen_k)
    return out


def _check_max_seqlen_k(value, function):
    # An int >= 0; a bool is not a length.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{function}: max_seqlen_k must be an int >= 0 (0 = the full [M, N] layout), got {value!r}")
    return value


def _check_split_n(value, function):
    # An int or None; int(x) would read 0.5 and "0" as 0 and a bool as 0 or 1.
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{function}: split_n must be an int or None (the fixed grid's splits; None or 0 = the "
                        f"kernel's own choice), got {type(value).__name__} {value!r}")
    return value


def _check_logits_dtype_type(value, function):
    # The op's schema takes a torch.dtype; say so by name rather than with torch's schema message.
    if value is not None and not isinstance(value, torch.dtype):
        raise TypeError(f"{function}: logits_dtype must be torch.float32 or torch.bfloat16 (a torch.dtype, not a "
                        f"string), got {type(value).__name__} {value!r}")


def _check_bool(value, name, function):
    # bool(x) would read None as False and "False" as True.
    if not isinstance(value, bool):
        raise TypeError(f"{function}: {name} must be a bool (True or False), got {type(value).__name__} {value!r}")


def _one_of(value, alias, name, alias_name):
    if value is not None and alias is not None:
        raise TypeError(f"fp8_mqa_logits() got both {name} and {alias_name} (the same argument)")
    return value if value is not None else alias


def _kv_pair(kv, function):
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise TypeError(f"{function}: kv must be the pair (kv [N, D] e4m3fn, kv_scales [N] float32)")
    return kv


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0,
                       logits_dtype=torch.float32):
    """DeepGEMM's call form: ``fp8_fp4_mqa_logits(q=(q, q_scale), kv=(kv, kv_scales), weights, ...)``.

    ``q_scale`` must be None: a scale means FP4 queries (DeepGEMM on sm100), which this package does
    not serve. ``max_seqlen_k > 0`` returns DeepGEMM's compressed layout [M, max_seqlen_k] (row m holds
    keys ks[m]..ke[m]-1 from column 0); ``logits_dtype`` is torch.float32 or torch.bfloat16. With
    clean_logits the compressed tail is -inf (DeepGEMM refuses that combination; this op serves it).
    """
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError("fp8_fp4_mqa_logits: q must be the pair (q [M, H, D] e4m3fn, q_scale or None)")
    q_fp8, q_scale = q
    if q_scale is not None:
        raise NotImplementedError("fp8_fp4_mqa_logits: a q scale means FP4 queries, which this package does not "
                                  "serve; pass q=(q_fp8, None) with e4m3fn queries")
    kv_fp8, kv_scales = _kv_pair(kv, "fp8_fp4_mqa_logits")
    _check_bool(clean_logits, "clean_logits", "fp8_fp4_mqa_logits")
    max_seqlen_k = _check_max_seqlen_k(max_seqlen_k, "fp8_fp4_mqa_logits")
    _check_logits_dtype_type(logits_dtype, "fp8_fp4_mqa_logits")
    return fp8_mqa_logits(q_fp8, kv_fp8, kv_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                          max_seqlen_k=max_seqlen_k, logits_dtype=logits_dtype)


def fp8_mqa_logits_deepgemm(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=0):
    """DeepGEMM's legacy call form: ``fp8_mqa_logits(q, (kv, kv_scales), weights, ks, ke, clean_logits,
    max_seqlen_k)``: float32 logits, the compressed layout [M, max_seqlen_k] when max_seqlen_k > 0."""
    kv_fp8, kv_scales = _kv_pair(kv, "fp8_mqa_logits_deepgemm")
    _check_bool(clean_logits, "clean_logits", "fp8_mqa_logits_deepgemm")
    max_seqlen_k = _check_max_seqlen_k(max_seqlen_k, "fp8_mqa_logits_deepgemm")
    return fp8_mqa_logits(q, kv_fp8, kv_scales, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits,
                          max_seqlen_k=max_seqlen_k)


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@functools.lru_cache(maxsize=None)
def _gpu_backend(index: int):
    return backends.gpu_backend_for(torch, index)


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
    if logits_dtype not in _LOGITS_DTYPE_NAMES or not isinstance(compressed, bool) or not isinstance(clean_logits, bool):
        return False
    try:
        dev = _default_device() if device is None else torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        return False
    if dev.type == "cpu":
        backend = backends.backends()["cpu"]
    elif dev.type != "cuda" or not torch.cuda.is_available():
        return False
    else:
        backend = _gpu_backend(dev.index if dev.index is not None else torch.cuda.current_device())
    return backend is not None and backend.serves(H, D, bf16_logits=logits_dtype == torch.bfloat16,
                                                  compressed=compressed, clean_logits=clean_logits)
