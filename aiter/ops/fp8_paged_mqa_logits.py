"""Python API of the decode op fp8_paged_mqa_logits and its metadata, in DeepGEMM's call forms.

    logits[b * next_n + j, p] = sum_h relu(scale(b, p) * (q[b, j, h, :] . K(b, p))) * weights[b * next_n + j, h]
                                for p < keys(b, j); -inf after it (to max_context_len) when clean_logits,
                                else unspecified
    keys(b, j) = context_lens[b] - next_n + j + 1 ([B] lens) or context_lens[b, j] ([B, next_n] lens),
                 clamped to [0, max_context_len]
    K(b, p), scale(b, p): slot p % block_kv of cache block block_table[b, p // block_kv]

kv_cache is [num_blocks, block_kv, 1, D + 4] uint8: each block holds block_kv keys of D e4m3fn bytes
(slot s at byte s * D), then block_kv float32 scales. Entries of block_table past a batch's last
visible block are never read. ``docs/operator.md`` ("The decode op") states the whole contract.

The entries go through torch custom ops registered here at import
(``torch.ops.aiter.get_paged_mqa_logits_metadata`` and ``torch.ops.aiter.fp8_paged_mqa_logits``), whose
fake kernels repeat the binding's checks on metadata, so that torch.compile, torch.export and CUDA-graph
capture trace them and refuse bad arguments while tracing. The implementation calls the JIT module
(csrc/binding/fp8_paged_mqa_logits_binding.cpp). Nothing here synchronises with the device or reads
tensor values. The CPU path serves any H, D, block_kv and next_n; the sm90 kernel what its
``capabilities.h`` lists (``is_supported`` answers); another GPU is a NotImplementedError naming it.
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from aiter.ops import native
from aiter.ops.fp8_mqa_logits import (_AFTER_AUTOGRAD, _C10_DTYPE_NAMES, _C10_LAYOUT_NAMES, _INT32_MAX,
                                      _LOGITS_DTYPE_NAMES, _MAX_LOGITS_BYTES, _check_bool, _check_logits_dtype_type,
                                      _default_device, _dtype_name, _gpu_backend, _next_is_backend)

__all__ = ["check_block_table", "fp8_fp4_paged_mqa_logits", "fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata",
           "is_supported"]

_lib = torch.library.Library("aiter", "FRAGMENT")
_lib.define("get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms) -> Tensor")
_lib.define(
    "fp8_paged_mqa_logits(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
    "Tensor schedule_meta, int max_context_len, bool clean_logits=False, ScalarType? logits_dtype=None) -> Tensor"
)

_METADATA_OP = torch.ops.aiter.get_paged_mqa_logits_metadata.default
_LOGITS_OP = torch.ops.aiter.fp8_paged_mqa_logits.default
_INPUT_NAMES = ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta")
_OP = "fp8_paged_mqa_logits: "
_METADATA = "get_paged_mqa_logits_metadata: "


def _metadata_impl(context_lens, block_kv, num_sms):
    return native.ops("paged", context_lens.device).get_paged_mqa_logits_metadata.default(context_lens, block_kv, num_sms)


def _logits_impl(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits=False,
                 logits_dtype=None):
    return native.ops("paged", q.device).fp8_paged_mqa_logits.default(
        q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
        _dtype_name(logits_dtype))


# One implementation for every device: the extension dispatches on the tensors' device itself.
_lib.impl("get_paged_mqa_logits_metadata", _metadata_impl, "CompositeExplicitAutograd")
_lib.impl("fp8_paged_mqa_logits", _logits_impl, "CompositeExplicitAutograd")


# ---- autograd: the op is not differentiable (as aiter/ops/fp8_mqa_logits.py explains) -------------------


def _raise_not_differentiable(tensors):
    if torch.is_grad_enabled():
        for name, t in zip(_INPUT_NAMES, tensors):
            if t.requires_grad:
                raise RuntimeError(
                    f"{_OP}{name} requires grad, but the op is not differentiable (it has no backward); call it "
                    f"under torch.no_grad() or pass {name}.detach()")
    for name, t in zip(_INPUT_NAMES, tensors):
        if forward_ad.unpack_dual(t).tangent is not None:
            raise RuntimeError(f"{_OP}{name} carries a forward-mode AD tangent, but the op is not differentiable; "
                               f"pass forward_ad.unpack_dual({name}).primal")


def _logits_autograd(keyset, q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                     clean_logits=False, logits_dtype=None):
    if (torch.is_grad_enabled() and (q.requires_grad or weights.requires_grad)) or forward_ad._current_level >= 0:
        _raise_not_differentiable((q, kv_cache, weights, context_lens, block_table, schedule_meta))
    if _next_is_backend(keyset):
        return _logits_impl(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                            clean_logits, logits_dtype)
    with torch._C._AutoDispatchBelowAutograd():
        return _LOGITS_OP.redispatch(keyset & _AFTER_AUTOGRAD, q, kv_cache, weights, context_lens, block_table,
                                     schedule_meta, max_context_len, clean_logits, logits_dtype)


_lib.impl("fp8_paged_mqa_logits", _logits_autograd, "Autograd", with_keyset=True)


# ---- fake kernels: the binding's checks on metadata ---------------------------------------------------
# They refuse what csrc/binding/fp8_paged_mqa_logits_binding.cpp refuses, in the same order, with the
# same exception types and messages (op_tests/test_paged_mqa_logits.py runs every bad input through
# both); keep the two in step. Left to the real op, because they read tensor values: whether a
# block_table entry a row needs is a block of kv_cache (checked by each backend where it reads it).


def _require(cond, error, op, message):
    """Raise error(op + message()) unless cond; a symbolic cond becomes a guard or a runtime assert."""
    if cond is not True:
        torch._check_with(error, cond, lambda: op + message())


def _dtype_text(t):
    return _C10_DTYPE_NAMES.get(t.dtype, t.dtype)


def _check_dense(t, name, op):
    _require(t.layout == torch.strided, ValueError, op,
             lambda: f"{name} must be a dense (strided) tensor, got layout {_C10_LAYOUT_NAMES.get(t.layout, t.layout)}")


def _check_dtype(t, name, want, want_text, op, hint=""):
    _require(t.dtype == want, TypeError, op, lambda: f"{name} must have dtype {want_text}, got {_dtype_text(t)}{hint}")


def _check_int32(t, name, op):
    _check_dtype(t, name, torch.int32, "torch.int32", op,
                 " (int64 is not accepted: pass .to(torch.int32))" if t.dtype == torch.int64 else "")


def _check_dim(t, name, dim, layout, op=_OP):
    _require(t.dim() == dim, ValueError, op, lambda: f"{name} must be {dim}-D {layout}, got shape {list(t.shape)}")


def _check_size(t, name, dim, want, what):
    _require(t.shape[dim] == want, ValueError, _OP,
             lambda: f"{name}.size({dim}) must be {what} = {want}, got shape {list(t.shape)}")


def _check_contiguous(t, name, op=_OP):
    _require(t.is_contiguous(), ValueError, op,
             lambda: f"{name} must be contiguous, got shape {list(t.shape)} with strides {list(t.stride())} "
                     "(call .contiguous())")


def _check_row_major(t, name, cols_name):
    rows, cols = t.shape
    _require(cols <= 1 or t.stride(1) == 1, ValueError, _OP,
             lambda: f"{name} must have a contiguous last dim (stride(1) == 1), got strides {list(t.stride())}")
    _require(rows <= 1 or t.stride(0) >= cols, ValueError, _OP,
             lambda: f"{name} row stride (stride(0) = {t.stride(0)}) must be >= {cols_name} = {cols}, got "
                     f"strides {list(t.stride())}")


def _check_context_lens_rank(context_lens, op):
    _require(context_lens.dim() in (1, 2), ValueError, op,
             lambda: f"context_lens must be 1-D [B] or 2-D [B, next_n], got shape {list(context_lens.shape)}")
    return context_lens.dim() == 2


def _check_device_served(device, name, op, registered_op):
    # Meta tensors are the fake kernel's own; the real op refuses them. A GPU: no paged kernel yet, so the
    # real op refuses a CUDA tensor (checked there: it names the compiled backends).
    _require(device.type in ("cpu", "cuda", "meta"), NotImplementedError, op,
             lambda: f"{name} is on {device}, which has no kernel here (cpu or cuda tensors only; the fake kernel "
                     f"of torch.ops.aiter.{registered_op} handles meta tensors)")


def _check_metadata_args(context_lens, block_kv, num_sms):
    op = _METADATA
    _check_dense(context_lens, "context_lens", op)
    _require(block_kv >= 1, ValueError, op, lambda: f"block_kv must be >= 1 (keys per cache block), got {block_kv}")
    _require(block_kv <= _INT32_MAX, ValueError, op,
             lambda: f"block_kv must be <= 2^31 - 1 (context lengths are int32, so no row sees more keys than that), "
                     f"got {block_kv}")
    _require(1 <= num_sms < _INT32_MAX, ValueError, op,
             lambda: f"num_sms must be >= 1 and < 2^31 - 1 (the number of work shares: the GPU's SM count), got "
                     f"{num_sms}")
    _check_int32(context_lens, "context_lens", op)
    _check_context_lens_rank(context_lens, op)
    _require(context_lens.shape[0] <= _INT32_MAX, ValueError, op,
             lambda: f"context_lens has B = {context_lens.shape[0]} batches; the metadata stores batch indices as "
                     "int32")
    _check_device_served(context_lens.device, "context_lens", op, "get_paged_mqa_logits_metadata")
    _check_contiguous(context_lens, "context_lens", op)


def _check_logits_args(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, logits_dtype):
    """The binding's argument checks, on metadata only (dtype, rank, sizes, devices, strides)."""
    tensors = (q, kv_cache, weights, context_lens, block_table, schedule_meta)
    for name, t in zip(_INPUT_NAMES, tensors):
        _check_dense(t, name, _OP)
    _require(0 <= max_context_len <= _INT32_MAX, ValueError, _OP,
             lambda: f"max_context_len must be >= 0 and fit in int32 (the logits' columns), got {max_context_len}")
    _require(logits_dtype is None or logits_dtype in _LOGITS_DTYPE_NAMES, ValueError, _OP,
             lambda: f"logits_dtype must be torch.float32 or torch.bfloat16, got {_dtype_name(logits_dtype)}")

    _check_dtype(q, "q", torch.float8_e4m3fn, "torch.float8_e4m3fn", _OP,
                 " (the bytes are decoded as e4m3fn, so another one-byte dtype is not accepted)"
                 if q.element_size() == 1 else "")
    _check_dtype(kv_cache, "kv_cache", torch.uint8, "torch.uint8", _OP,
                 " (each block's bytes: block_kv keys of D e4m3fn bytes, then block_kv float32 scales)")
    _check_dtype(weights, "weights", torch.float32, "torch.float32", _OP)
    _check_int32(context_lens, "context_lens", _OP)
    _check_int32(block_table, "block_table", _OP)
    _check_dtype(schedule_meta, "schedule_meta", torch.int32, "torch.int32", _OP)

    _check_dim(q, "q", 4, "[B, next_n, H, D]")
    _check_dim(kv_cache, "kv_cache", 4, "[num_blocks, block_kv, 1, D + 4]")
    _check_dim(weights, "weights", 2, "[B * next_n, H]")
    lens_per_row = _check_context_lens_rank(context_lens, _OP)
    _check_dim(block_table, "block_table", 2, "[B, max_blocks]")
    _check_dim(schedule_meta, "schedule_meta", 2, "[num_sms + 1, 2]")
    B, next_n, H, D = q.shape
    _require(next_n >= 1 and H >= 1 and D >= 1, ValueError, _OP,
             lambda: f"q must have next_n >= 1 tokens per batch, H >= 1 heads and head dim D >= 1, got shape "
                     f"{list(q.shape)}")
    _require(H <= _INT32_MAX and D <= _INT32_MAX - 4, ValueError, _OP,
             lambda: f"q's H and D must fit in int32, got shape {list(q.shape)}")
    num_blocks, block_kv = kv_cache.shape[0], kv_cache.shape[1]
    _require(block_kv >= 1, ValueError, _OP,
             lambda: f"kv_cache must have block_kv >= 1 keys per block, got shape {list(kv_cache.shape)}")
    _require(block_kv <= _INT32_MAX, ValueError, _OP,
             lambda: f"kv_cache must have block_kv <= 2^31 - 1 keys per block (context lengths are int32, so no row "
                     f"sees more keys than that), got shape {list(kv_cache.shape)}")
    _check_size(kv_cache, "kv_cache", 2, 1, "one K head")
    _check_size(kv_cache, "kv_cache", 3, D + 4, "D + 4 (q's head dim D, then a float32 scale)")
    _check_size(weights, "weights", 0, B * next_n, "q's B * next_n")
    _check_size(weights, "weights", 1, H, "q's H")
    _check_size(context_lens, "context_lens", 0, B, "q's B")
    if lens_per_row:
        _check_size(context_lens, "context_lens", 1, next_n, "q's next_n")
    _check_size(block_table, "block_table", 0, B, "q's B")
    max_blocks = block_table.shape[1]
    _require(max_blocks * block_kv >= max_context_len, ValueError, _OP,
             lambda: f"block_table has {max_blocks} columns of block_kv = {block_kv} keys, fewer than max_context_len "
                     f"= {max_context_len} keys; a row may see up to max_context_len keys, so it needs at least "
                     f"{(max_context_len + block_kv - 1) // block_kv} columns")
    _check_size(schedule_meta, "schedule_meta", 1, 2, "2 (batch, block)")
    _require(schedule_meta.shape[0] >= 2, ValueError, _OP,
             lambda: f"schedule_meta must have num_sms + 1 >= 2 rows (from get_paged_mqa_logits_metadata), got shape "
                     f"{list(schedule_meta.shape)}")

    device = q.device
    _check_device_served(device, "q", _OP, "fp8_paged_mqa_logits")
    for name, t in zip(_INPUT_NAMES[1:], tensors[1:]):
        _require(t.device == device, RuntimeError, _OP,
                 lambda: f"{name} is on {t.device} but q is on {device}; all tensors must be on q's device")

    _check_contiguous(q, "q")
    row = D + 4
    _require(kv_cache.stride(3) == 1 and (block_kv <= 1 or kv_cache.stride(1) == row)
             and (num_blocks <= 1 or kv_cache.stride(0) >= block_kv * row), ValueError, _OP,
             lambda: f"kv_cache must hold each block's block_kv * (D + 4) bytes densely (stride(3) == 1, stride(1) == "
                     f"D + 4 = {row}, stride(0) >= block_kv * (D + 4) = {block_kv * row}), got strides "
                     f"{list(kv_cache.stride())}")
    _check_row_major(weights, "weights", "H")
    _check_contiguous(context_lens, "context_lens")
    _check_row_major(block_table, "block_table", "max_blocks")
    _check_contiguous(schedule_meta, "schedule_meta")


def _check_paged_logits_size(rows, cols, dtype):
    """The binding's check_logits_size: the new [rows, cols] result within 2^48 bytes."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    multiple = max(256, 1024 // itemsize)
    fits = cols <= _MAX_LOGITS_BYTES // itemsize and (
        rows == 0 or max(1, (cols + multiple - 1) // multiple) * multiple * itemsize <= _MAX_LOGITS_BYTES // max(rows, 1))
    _require(fits, ValueError, _OP,
             lambda: f"the logits [B * next_n = {rows}, max_context_len = {cols}] would take more than 2^48 bytes (rows "
                     f"padded to a multiple of {multiple} elements): max_context_len (or B * next_n) is too large")


def _new_paged_logits(q, rows, cols, dtype):
    """What the binding's allocate_paged_logits returns: [rows, cols], the row pitch a multiple of 256
    elements and of 1024 bytes (DeepGEMM's, which callers read through stride(0))."""
    multiple = max(256, 1024 // torch.empty((), dtype=dtype).element_size())
    pitch = torch.sym_max(1, (cols + multiple - 1) // multiple) * multiple
    return q.new_empty_strided((rows, cols), (pitch, 1), dtype=dtype)


@torch.library.register_fake("aiter::get_paged_mqa_logits_metadata", lib=_lib)
def _metadata_fake(context_lens, block_kv, num_sms):
    _check_metadata_args(context_lens, block_kv, num_sms)
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


@torch.library.register_fake("aiter::fp8_paged_mqa_logits", lib=_lib)
def _logits_fake(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits=False,
                 logits_dtype=None):
    _check_logits_args(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, logits_dtype)
    B, next_n = q.shape[0], q.shape[1]
    dtype = torch.float32 if logits_dtype is None else logits_dtype
    _check_paged_logits_size(B * next_n, max_context_len, dtype)
    return _new_paged_logits(q, B * next_n, max_context_len, dtype)


# ---- the Python entries -----------------------------------------------------------------------------


def _check_count(value, name, function, least, meaning):
    # An int >= least; a bool is not a count.
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{function}: {name} must be an int >= {least} ({meaning}), got {value!r}")
    return value


def _check_no_indices(indices, function):
    if indices is not None:
        raise NotImplementedError(
            f"{function}: indices (DeepGEMM's varlen batching, served by its sm100 kernel only) is not supported; "
            "pass indices=None with one batch row per query token (next_n = 1 rows of context_lens and "
            "block_table), which gives the same logits")


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    """The schedule of ``fp8_paged_mqa_logits`` (DeepGEMM's call form): int32 ``[num_sms + 1, 2]`` on
    ``context_lens``' device, computed there with no host synchronisation.

    ``context_lens`` is int32 ``[B]`` or ``[B, next_n]``; ``block_kv`` the cache's keys per block;
    ``num_sms`` the number of work shares (a GPU's SM count). Row p is the (batch, block) where share p
    of the work starts: the work is each batch's cache blocks (ceil(keys / block_kv) for the most keys
    a row of the batch sees), batches in order, cut into num_sms even shares; row num_sms is (B, 0).
    ``indices`` (DeepGEMM's sm100 varlen option) must be None.
    """
    _check_no_indices(indices, "get_paged_mqa_logits_metadata")
    _check_count(block_kv, "block_kv", "get_paged_mqa_logits_metadata", 1, "keys per cache block")
    _check_count(num_sms, "num_sms", "get_paged_mqa_logits_metadata", 1, "the number of work shares")
    return _METADATA_OP(context_lens, block_kv, num_sms)


def _paged_logits(function, q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                  clean_logits, logits_dtype, indices):
    _check_no_indices(indices, function)
    _check_bool(clean_logits, "clean_logits", function)
    _check_count(max_context_len, "max_context_len", function, 0, "the logits' columns")
    _check_logits_dtype_type(logits_dtype, function)
    return _LOGITS_OP(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                      logits_dtype)


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None, *, logits_dtype=torch.float32):
    """Decode logits ``[B * next_n, max_context_len]`` from a paged K cache (DeepGEMM's call form).

    q ``[B, next_n, H, D]`` e4m3fn; kv_cache ``[num_blocks, block_kv, 1, D + 4]`` uint8 (per block:
    block_kv keys of D e4m3fn bytes, then block_kv float32 scales > 0); weights ``[B * next_n, H]``
    float32; context_lens int32 ``[B]`` (row j of batch b sees keys p <= context_lens[b] - next_n + j)
    or ``[B, next_n]`` (p < context_lens[b, j]); block_table int32 ``[B, max_blocks]`` with
    max_blocks * block_kv >= max_context_len (entries past a batch's last visible block are never
    read); schedule_meta from ``get_paged_mqa_logits_metadata``. With ``clean_logits`` the columns a row
    does not see are -inf, else unspecified. ``logits_dtype`` (keyword; DeepGEMM's legacy form has none):
    torch.float32 or torch.bfloat16. The result's row pitch is DeepGEMM's: a multiple of 256 elements and
    1024 bytes. Not differentiable. ``indices`` must be None.
    """
    return _paged_logits("fp8_paged_mqa_logits", q, kv_cache, weights, context_lens, block_table, schedule_meta,
                         max_context_len, clean_logits, logits_dtype, indices)


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float32, indices=None):
    """DeepGEMM's call form with ``q=(q, q_scale)``: ``q_scale`` must be None (a scale means FP4
    queries, which this package does not serve). Otherwise as ``fp8_paged_mqa_logits``."""
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise TypeError("fp8_fp4_paged_mqa_logits: q must be the pair (q [B, next_n, H, D] e4m3fn, q_scale or None)")
    q_fp8, q_scale = q
    if q_scale is not None:
        raise NotImplementedError("fp8_fp4_paged_mqa_logits: a q scale means FP4 queries (and an FP4 cache), which "
                                  "this package does not serve; pass q=(q_fp8, None) with e4m3fn queries and an fp8 "
                                  "cache")
    return _paged_logits("fp8_fp4_paged_mqa_logits", q_fp8, kv_cache, weights, context_lens, block_table,
                         schedule_meta, max_context_len, clean_logits, logits_dtype, indices)


def check_block_table(device=None):
    """Raises the ValueError naming block_table of an out-of-range entry that a paged call on ``device``
    (None: the current GPU when one is visible, else the CPU) read since the last report; returns None
    when there was none. On a GPU it first synchronises with the device's current stream: the kernel
    cannot raise, so it reads no memory through such an entry, writes NaN for its keys and records it
    in pinned host memory, and the next call on that device that finds the record raises
    (docs/operator.md, "Bad block_table entries"). A CPU call refuses a bad entry itself, so on the
    CPU this does nothing."""
    dev = _default_device() if device is None else torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cpu":
        return None
    native.ops("paged", dev).check_paged_block_table.default(str(dev))
    return None


def is_supported(num_heads, head_dim, device=None, block_kv=64, next_n=1, logits_dtype=torch.float32) -> bool:
    """True when a native kernel of this package serves the decode op for (num_heads, head_dim,
    block_kv, next_n) writing ``logits_dtype`` logits on ``device`` (None: the current GPU when one is
    visible, else the CPU). The CPU path serves any H, D, block_kv, next_n >= 1 in both logits dtypes;
    a GPU backend what its capabilities.h lists (kServedPaged*: sm90 today; gfx950 has no paged
    kernel). Cheap: never builds or launches anything."""
    try:
        values = [int(v) for v in (num_heads, head_dim, block_kv, next_n)]
    except (TypeError, ValueError):
        return False
    if min(values) < 1 or logits_dtype not in _LOGITS_DTYPE_NAMES:
        return False
    try:
        dev = _default_device() if device is None else torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        return False
    if dev.type == "cpu":
        return True
    if dev.type != "cuda" or not torch.cuda.is_available():
        return False
    backend = _gpu_backend(dev.index if dev.index is not None else torch.cuda.current_device())
    return backend is not None and backend.serves_paged(*values)
