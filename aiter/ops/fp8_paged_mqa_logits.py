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
(``torch.ops.aiter.get_paged_mqa_logits_metadata`` and ``torch.ops.aiter.fp8_paged_mqa_logits``) in the
way aiter/ops/_boundary.py registers every op of this package: not differentiable, traced by
torch.compile, torch.export and CUDA-graph capture through fake kernels that repeat the binding's
checks. The implementation calls the native library (csrc/binding/fp8_paged_mqa_logits_binding.cpp).
Nothing here synchronises with the device or reads tensor values. The CPU path serves any H, D,
block_kv and next_n; the sm90 kernel what its ``capabilities.h`` lists (``is_supported`` answers);
another GPU is a NotImplementedError naming it.
"""

from __future__ import annotations

import torch

from aiter.ops import _boundary as b
from aiter.ops import native

__all__ = ["check_block_table", "fp8_fp4_paged_mqa_logits", "fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata",
           "is_supported"]

_INPUT_NAMES = ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta")
_OP = b.Checks("fp8_paged_mqa_logits")
_METADATA = b.Checks("get_paged_mqa_logits_metadata")


# ---- fake kernels: the binding's checks on metadata ---------------------------------------------------
# They mirror csrc/binding/fp8_paged_mqa_logits_binding.cpp. Left to the real op, because they read
# tensor values: whether a block_table entry a row needs is a block of kv_cache (checked by each
# backend where it reads it).


def _check_context_lens_rank(c, context_lens):
    c.require(context_lens.dim() in (1, 2), ValueError,
              lambda: f"context_lens must be 1-D [B] or 2-D [B, next_n], got shape {list(context_lens.shape)}")
    return context_lens.dim() == 2


def _metadata_fake(a):
    c, context_lens, block_kv, num_sms = _METADATA, a.context_lens, a.block_kv, a.num_sms
    c.dense(context_lens, "context_lens")
    c.require(block_kv >= 1, ValueError, lambda: f"block_kv must be >= 1 (keys per cache block), got {block_kv}")
    c.require(block_kv <= b.INT32_MAX, ValueError,
              lambda: f"block_kv must be <= 2^31 - 1 (context lengths are int32, so no row sees more keys than "
                      f"that), got {block_kv}")
    c.require(1 <= num_sms < b.INT32_MAX, ValueError,
              lambda: f"num_sms must be >= 1 and < 2^31 - 1 (the number of work shares: the GPU's SM count), got "
                      f"{num_sms}")
    c.int32(context_lens, "context_lens")
    _check_context_lens_rank(c, context_lens)
    c.require(context_lens.shape[0] <= b.INT32_MAX, ValueError,
              lambda: f"context_lens has B = {context_lens.shape[0]} batches; the metadata stores batch indices as "
                      "int32")
    c.served_device(context_lens.device, "context_lens", "get_paged_mqa_logits_metadata", "fake kernel")
    c.contiguous(context_lens, "context_lens")
    return context_lens.new_empty((num_sms + 1, 2), dtype=torch.int32)


def _check_logits_args(a):
    """The binding's argument checks, on metadata only (dtype, rank, sizes, devices, strides)."""
    c = _OP
    q, kv_cache, weights, context_lens, block_table, schedule_meta = tensors = a[:6]
    max_context_len = a.max_context_len
    for name, t in zip(_INPUT_NAMES, tensors):
        c.dense(t, name)
    c.require(0 <= max_context_len <= b.INT32_MAX, ValueError,
              lambda: f"max_context_len must be >= 0 and fit in int32 (the logits' columns), got {max_context_len}")
    c.logits_dtype(a.logits_dtype)

    c.fp8(q, "q")
    c.dtype(kv_cache, "kv_cache", torch.uint8,
            " (each block's bytes: block_kv keys of D e4m3fn bytes, then block_kv float32 scales)")
    c.dtype(weights, "weights", torch.float32)
    c.int32(context_lens, "context_lens")
    c.int32(block_table, "block_table")
    c.dtype(schedule_meta, "schedule_meta", torch.int32)

    c.dim(q, "q", 4, "[B, next_n, H, D]")
    c.dim(kv_cache, "kv_cache", 4, "[num_blocks, block_kv, 1, D + 4]")
    c.dim(weights, "weights", 2, "[B * next_n, H]")
    lens_per_row = _check_context_lens_rank(c, context_lens)
    c.dim(block_table, "block_table", 2, "[B, max_blocks]")
    c.dim(schedule_meta, "schedule_meta", 2, "[num_sms + 1, 2]")
    B, next_n, H, D = q.shape
    c.require(next_n >= 1 and H >= 1 and D >= 1, ValueError,
              lambda: f"q must have next_n >= 1 tokens per batch, H >= 1 heads and head dim D >= 1, got shape "
                      f"{list(q.shape)}")
    c.require(H <= b.INT32_MAX and D <= b.INT32_MAX - 4, ValueError,
              lambda: f"q's H and D must fit in int32, got shape {list(q.shape)}")
    num_blocks, block_kv = kv_cache.shape[0], kv_cache.shape[1]
    c.require(block_kv >= 1, ValueError,
              lambda: f"kv_cache must have block_kv >= 1 keys per block, got shape {list(kv_cache.shape)}")
    c.require(block_kv <= b.INT32_MAX, ValueError,
              lambda: f"kv_cache must have block_kv <= 2^31 - 1 keys per block (context lengths are int32, so no "
                      f"row sees more keys than that), got shape {list(kv_cache.shape)}")
    c.size(kv_cache, "kv_cache", 2, 1, "one K head")
    c.size(kv_cache, "kv_cache", 3, D + 4, "D + 4 (q's head dim D, then a float32 scale)")
    c.size(weights, "weights", 0, B * next_n, "q's B * next_n")
    c.size(weights, "weights", 1, H, "q's H")
    c.size(context_lens, "context_lens", 0, B, "q's B")
    if lens_per_row:
        c.size(context_lens, "context_lens", 1, next_n, "q's next_n")
    c.size(block_table, "block_table", 0, B, "q's B")
    max_blocks = block_table.shape[1]
    c.require(max_blocks * block_kv >= max_context_len, ValueError,
              lambda: f"block_table has {max_blocks} columns of block_kv = {block_kv} keys, fewer than "
                      f"max_context_len = {max_context_len} keys; a row may see up to max_context_len keys, so it "
                      f"needs at least {(max_context_len + block_kv - 1) // block_kv} columns")
    c.size(schedule_meta, "schedule_meta", 1, 2, "2 (batch, block)")
    c.require(schedule_meta.shape[0] >= 2, ValueError,
              lambda: f"schedule_meta must have num_sms + 1 >= 2 rows (from get_paged_mqa_logits_metadata), got "
                      f"shape {list(schedule_meta.shape)}")

    device = q.device
    c.served_device(device, "q", "fp8_paged_mqa_logits", "fake kernel")
    c.same_device(tuple(zip(_INPUT_NAMES[1:], tensors[1:])), device)

    c.contiguous(q, "q")
    row = D + 4
    c.require(kv_cache.stride(3) == 1 and (block_kv <= 1 or kv_cache.stride(1) == row)
              and (num_blocks <= 1 or kv_cache.stride(0) >= block_kv * row), ValueError,
              lambda: f"kv_cache must hold each block's block_kv * (D + 4) bytes densely (stride(3) == 1, "
                      f"stride(1) == D + 4 = {row}, stride(0) >= block_kv * (D + 4) = {block_kv * row}), got "
                      f"strides {list(kv_cache.stride())}")
    c.row_major(weights, "weights", "H")
    c.contiguous(context_lens, "context_lens")
    c.row_major(block_table, "block_table", "max_blocks")
    c.contiguous(schedule_meta, "schedule_meta")


def _logits_fake(a):
    _check_logits_args(a)
    rows, cols = a.q.shape[0] * a.q.shape[1], a.max_context_len
    dtype = torch.float32 if a.logits_dtype is None else a.logits_dtype
    # DeepGEMM's row pitch, which callers read through stride(0): a multiple of 256 elements and 1024 bytes.
    multiple = max(256, 1024 // torch.empty((), dtype=dtype).element_size())
    _OP.require(b.logits_fit(rows, cols, dtype, multiple), ValueError,
                lambda: f"the logits [B * next_n = {rows}, max_context_len = {cols}] would take more than 2^48 bytes "
                        f"(rows padded to a multiple of {multiple} elements): max_context_len (or B * next_n) is too "
                        "large")
    return b.new_logits(a.q, rows, cols, dtype, multiple)


_METADATA_OP = b.register(b.Op(
    "get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms) -> Tensor",
    native=b.Native("get_paged_mqa_logits_metadata", "paged", "context_lens"), fake=_metadata_fake))
# The binding takes the logits dtype by name.
_LOGITS_OP = b.register(b.Op(
    "fp8_paged_mqa_logits(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
    "Tensor schedule_meta, int max_context_len, bool clean_logits=False, ScalarType? logits_dtype=None) -> Tensor",
    native=b.Native("fp8_paged_mqa_logits", "paged", "q"), fake=_logits_fake, no_grad=("q", "weights")))


# ---- the Python entries -----------------------------------------------------------------------------


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
    f = "get_paged_mqa_logits_metadata"
    _check_no_indices(indices, f)
    b.check_count(block_kv, "block_kv", f, 1, "keys per cache block")
    b.check_count(num_sms, "num_sms", f, 1, "the number of work shares")
    return _METADATA_OP(context_lens, block_kv, num_sms)


def _paged_logits(function, q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                  clean_logits, logits_dtype, indices):
    _check_no_indices(indices, function)
    b.check_bool(clean_logits, "clean_logits", function)
    b.check_count(max_context_len, "max_context_len", function, 0, "the logits' columns")
    return _LOGITS_OP(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                      b.logits_dtype(logits_dtype, function))


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
    f = "fp8_fp4_paged_mqa_logits"
    q_fp8 = b.fp8_queries(q, f, "q [B, next_n, H, D] e4m3fn",
                          "a q scale means FP4 queries (and an FP4 cache), which this package does not serve; pass "
                          "q=(q_fp8, None) with e4m3fn queries and an fp8 cache")
    return _paged_logits(f, q_fp8, kv_cache, weights, context_lens, block_table,
                         schedule_meta, max_context_len, clean_logits, logits_dtype, indices)


def check_block_table(device=None):
    """Raises the ValueError naming block_table of an out-of-range entry that a paged call on ``device``
    (None: the current GPU when one is visible, else the CPU) read since the last report; returns None
    when there was none. On a GPU it first synchronises with the device's current stream: the kernel
    cannot raise, so it reads no memory through such an entry, writes NaN for its keys and records it
    in pinned host memory, and the next call on that device that finds the record raises
    (docs/operator.md, "Bad block_table entries"). A CPU call refuses a bad entry itself, so on the
    CPU this does nothing."""
    dev = b.default_device() if device is None else torch.device(device)
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
    if min(values) < 1 or logits_dtype not in b.LOGITS_DTYPES:
        return False
    backend = b.device_backend(device)
    return backend is not None and backend.serves_paged(*values)
