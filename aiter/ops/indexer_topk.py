"""The indexer's top-k: the k keys with the largest logits per query row, fused with the logits (vLLM's
call forms) and on given logits (aiter's ``top_k_per_row_prefill`` / ``top_k_per_row_decode``).

What every form returns (one canonical answer, bitwise reproducible on a backend):

    indices[r, :] = the columns of row r's k largest float32 logits among its visible keys, in ascending
                    column order; of two equal logits the lower column is chosen; -inf and NaN are never
                    chosen; a row with fewer than k choosable keys lists all of them, then -1.

Columns are absolute: prefill, column n of the chunk's K (never n - cu_seqlen_ks[r]); decode, the token
position. The fused ops never hold the [rows, N] logits: they compute them in row chunks (prefill) or
batch chunks (decode) of at most ``WORKSPACE_BYTES`` of float32 logits (at least one row), select each
chunk's top-k with the same kernel the unfused ops run, and allocate nothing else but the output.
Nothing here synchronises with the device or reads tensor values on the host, so a call may be captured
in a CUDA graph. ``docs/operator.md`` ("Indexer top-k") states the whole contract.
"""

from __future__ import annotations

import torch

from aiter.ops import _boundary as b
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata

__all__ = ["WORKSPACE_BYTES", "fp8_fp4_mqa_topk_indices", "fp8_fp4_paged_mqa_topk_indices", "fp8_mqa_topk_indices",
           "fp8_paged_mqa_topk_indices", "top_k_per_row_decode", "top_k_per_row_prefill"]

# The fused ops' logits workspace: 128 MiB of float32 logits at a time, 1/4 of a 1024 x 131072 chunk's.
# Each chunk's logits and top-k launches end in a partly idle wave, so fewer chunks waste less: the
# default weighs that against the memory the logits would take (docs/performance.md has the sizes).
WORKSPACE_BYTES = 128 << 20
# The largest k the top-k kernels serve (common/indexer_topk_params.h: kTopkMaxK).
MAX_K = 4096

# The binding checks every argument; the fake kernels have no result to describe. The logits may
# require grad (the indices are integers, not a function to differentiate); what the ops write may not.
_PREFILL_OP = b.register(b.Op(
    "top_k_per_row_prefill(Tensor logits, Tensor rowStarts, Tensor rowEnds, Tensor(a!) indices, Tensor(b!)? values, "
    "int numRows, int stride0, int stride1, int k) -> ()",
    native=b.Native("top_k_per_row_prefill", "topk", "logits"), fake=lambda a: None))
# The native decode op takes values too (its argument 4); aiter's form has none.
_DECODE_OP = b.register(b.Op(
    "top_k_per_row_decode(Tensor logits, int next_n, Tensor seqLens, Tensor(a!) indices, int numRows, int stride0, "
    "int stride1, int k) -> ()",
    native=b.Native("top_k_per_row_decode", "topk", "logits", fixed={4: None}), fake=lambda a: None))


def top_k_per_row_prefill(logits, rowStarts, rowEnds, indices, values, numRows, stride0, stride1, k=2048,
                          stable=False) -> None:
    """aiter's prefill top-k: row r of ``logits`` sees the columns [rowStarts[r], rowEnds[r]) (cut to
    [0, logits.size(1))); writes indices[r, :k] (int32 absolute columns, ascending, then -1) and, when
    ``values`` is a tensor, values[r, :k] (float32 logits, -inf where indices is -1).

    ``logits`` is float32 or bfloat16; ``stride0``/``stride1`` are its strides (anything else is a
    ValueError). The output is always the deterministic, ascending, lowest-column-wins order that
    aiter's ``stable=True`` asks for, so ``stable`` changes nothing.
    """
    f = "top_k_per_row_prefill"
    for name, t in (("logits", logits), ("rowStarts", rowStarts), ("rowEnds", rowEnds), ("indices", indices)):
        b.check_tensor(t, name, f)
    if values is not None:
        b.check_tensor(values, "values", f)
    for name, v in (("numRows", numRows), ("stride0", stride0), ("stride1", stride1), ("k", k)):
        b.check_int(v, name, f)
    b.check_bool(stable, "stable", f)
    _PREFILL_OP(logits, rowStarts, rowEnds, indices, values, numRows, stride0, stride1, k)


def top_k_per_row_decode(logits, next_n, seqLens, indices, numRows, stride0, stride1, k=2048, stable=False) -> None:
    """aiter's decode top-k: row r = b * next_n + j sees the token positions [0, seqLens[b] - next_n + j + 1)
    (seqLens [B] or [B, 1]) or [0, seqLens[b, j]) (seqLens [B, next_n]), cut to [0, logits.size(1));
    writes indices[r, :k] (int32 positions, ascending, then -1). ``stable`` as for the prefill form."""
    f = "top_k_per_row_decode"
    for name, t in (("logits", logits), ("seqLens", seqLens), ("indices", indices)):
        b.check_tensor(t, name, f)
    for name, v in (("next_n", next_n), ("numRows", numRows), ("stride0", stride0), ("stride1", stride1), ("k", k)):
        b.check_int(v, name, f)
    b.check_bool(stable, "stable", f)
    _DECODE_OP(logits, next_n, seqLens, indices, numRows, stride0, stride1, k)


# ---- fused: logits in bounded chunks, then the top-k kernel on each ----------------------------------


def _check_topk_out(topk_indices, rows, device, function):
    b.check_tensor(topk_indices, "topk_indices", function)
    if topk_indices.dtype != torch.int32:
        raise TypeError(f"{function}: topk_indices must have dtype torch.int32, got {topk_indices.dtype}")
    if topk_indices.dim() != 2 or topk_indices.shape[0] != rows:
        raise ValueError(f"{function}: topk_indices must be 2-D [{rows}, k] (one row per query row), got shape "
                         f"{tuple(topk_indices.shape)}")
    k = topk_indices.shape[1]
    if k > MAX_K:
        raise ValueError(f"{function}: topk_indices has k = {k} columns; at most {MAX_K} are served")
    if k > 1 and topk_indices.stride(1) != 1:
        raise ValueError(f"{function}: topk_indices must have a contiguous last dim (stride(1) == 1), got strides "
                         f"{topk_indices.stride()}")
    if topk_indices.device != device:
        raise RuntimeError(f"{function}: topk_indices is on {topk_indices.device} but q is on {device}")
    return k


def _chunk(total, bytes_per_item, workspace_bytes, function):
    if workspace_bytes is None:
        workspace_bytes = WORKSPACE_BYTES
    b.check_int(workspace_bytes, "workspace_bytes", function)
    if workspace_bytes < 1:
        raise ValueError(f"{function}: workspace_bytes must be >= 1, got {workspace_bytes}")
    return max(1, min(total, workspace_bytes // max(1, bytes_per_item)))


def _mqa_topk_into(q, kv, kv_scales, weights, cu_starts, cu_ends, topk_indices, workspace_bytes, function):
    for name, t in (("q", q), ("kv", kv), ("kv_scales", kv_scales), ("weights", weights), ("cu_seqlen_ks", cu_starts),
                    ("cu_seqlen_ke", cu_ends)):
        b.check_tensor(t, name, function)
    if q.dim() != 3 or kv.dim() != 2:
        raise ValueError(f"{function}: q must be 3-D [M, H, D] and kv 2-D [N, D], got shapes {tuple(q.shape)} and "
                         f"{tuple(kv.shape)}")
    rows, keys = q.shape[0], kv.shape[0]
    k = _check_topk_out(topk_indices, rows, q.device, function)
    step = _chunk(rows, keys * 4, workspace_bytes, function)
    if rows == 0 or k == 0:
        return
    if keys == 0:
        topk_indices.fill_(-1)
        return
    # Rows of 256-byte pitch, as the logits op's own allocations.
    pitch = -(-keys // 64) * 64
    workspace = torch.empty((step, pitch), dtype=torch.float32, device=q.device)
    for first in range(0, rows, step):
        last = min(rows, first + step)
        logits = workspace[: last - first, :keys]
        # clean_logits=False: the top-k reads only each row's window, so the rest needs no -inf.
        fp8_mqa_logits(q[first:last], kv, kv_scales, weights[first:last], cu_starts[first:last], cu_ends[first:last],
                       False, out=logits)
        _PREFILL_OP(logits, cu_starts[first:last], cu_ends[first:last],
                                              topk_indices[first:last], None, last - first, logits.stride(0),
                                              logits.stride(1), k)


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the CPU path plans its own shares


def _paged_topk_into(q, kv_cache, weights, context_lens, block_tables, max_model_len, topk_indices, workspace_bytes,
                     function):
    for name, t in (("q", q), ("kv_cache", kv_cache), ("weights", weights), ("context_lens", context_lens),
                    ("block_tables", block_tables)):
        b.check_tensor(t, name, function)
    b.check_int(max_model_len, "max_model_len", function)
    if max_model_len < 0:
        raise ValueError(f"{function}: max_model_len must be >= 0, got {max_model_len}")
    if q.dim() != 4 or kv_cache.dim() != 4:
        raise ValueError(f"{function}: q must be 4-D [B, next_n, H, D] and kv_cache 4-D [num_blocks, block_kv, 1, "
                         f"D + 4], got shapes {tuple(q.shape)} and {tuple(kv_cache.shape)}")
    batches, next_n = q.shape[0], q.shape[1]
    k = _check_topk_out(topk_indices, batches * next_n, q.device, function)
    # A chunk's logits rows have the paged op's pitch (a multiple of 256 float32 elements).
    pitch = max(1, -(-max_model_len // 256)) * 256
    step = _chunk(batches, next_n * pitch * 4, workspace_bytes, function)
    if batches == 0 or k == 0:
        return
    if max_model_len == 0 or next_n == 0:
        topk_indices.fill_(-1)
        return
    block_kv, num_sms = kv_cache.shape[1], _num_sms(q.device)
    for first in range(0, batches, step):
        last = min(batches, first + step)
        lens = context_lens[first:last]
        # The schedule of this chunk, computed on the device (no host synchronisation).
        meta = get_paged_mqa_logits_metadata(lens, block_kv, num_sms)
        logits = fp8_paged_mqa_logits(q[first:last], kv_cache, weights[first * next_n:last * next_n], lens,
                                      block_tables[first:last], meta, max_model_len, False)
        _DECODE_OP(logits, next_n, lens, topk_indices[first * next_n:last * next_n],
                                             (last - first) * next_n, logits.stride(0), logits.stride(1), k)
        del logits  # freed before the next chunk's are allocated: one chunk of logits at a time


def fp8_fp4_mqa_topk_indices(q, kv, weights, cu_seqlen_ks, cu_seqlen_ke, topk_indices) -> bool:
    """vLLM's fused prefill form: writes into ``topk_indices`` (int32 [M, k], k <= 4096) the columns of the
    chunk's K (absolute) of each row's k largest logits in [cu_seqlen_ks, cu_seqlen_ke), ascending, then
    -1; returns True. ``q = (q [M, H, D] e4m3fn, None)``, ``kv = (kv [N, D] e4m3fn, kv_scales [N])``."""
    f = "fp8_fp4_mqa_topk_indices"
    q_fp8 = b.fp8_queries(q, f)
    kv_fp8, kv_scales = b.pair(kv, "kv", f, "kv [N, D] e4m3fn, kv_scales [N] float32")
    _mqa_topk_into(q_fp8, kv_fp8, kv_scales, weights, cu_seqlen_ks, cu_seqlen_ke, topk_indices, None, f)
    return True


def fp8_fp4_paged_mqa_topk_indices(q, kv_cache, weights, context_lens, block_tables, max_model_len,
                                   topk_indices) -> bool:
    """vLLM's fused decode form: writes into ``topk_indices`` (int32 [B * next_n, k], k <= 4096) the token
    positions of each row's k largest logits among the keys it sees (as fp8_paged_mqa_logits with
    max_context_len = max_model_len: positions past max_model_len are never chosen), ascending, then -1;
    returns True. ``q = (q [B, next_n, H, D] e4m3fn, None)``; the schedule is computed internally, on the
    device."""
    f = "fp8_fp4_paged_mqa_topk_indices"
    q_fp8 = b.fp8_queries(q, f)
    _paged_topk_into(q_fp8, kv_cache, weights, context_lens, block_tables, max_model_len, topk_indices, None, f)
    return True


def _new_topk_indices(q, rows, topk, out, function):
    """The functional forms' result: ``out``, or a new int32 [rows, topk] on q's device."""
    b.check_tensor(q, "q", function)
    b.check_int(topk, "topk", function)
    if topk < 0 or topk > MAX_K:
        raise ValueError(f"{function}: topk must be in [0, {MAX_K}], got {topk}")
    if out is not None:
        return out
    return torch.empty((rows(q), topk), dtype=torch.int32, device=q.device)


def fp8_mqa_topk_indices(q, kv, kv_scales, weights, cu_starts, cu_ends, topk=2048, *, out=None,
                         workspace_bytes=None) -> torch.Tensor:
    """The functional prefill form, in aiter's argument order: returns int32 [M, topk] (or fills ``out``).
    ``workspace_bytes`` caps the logits chunk (default ``WORKSPACE_BYTES``; the result does not depend
    on it)."""
    f = "fp8_mqa_topk_indices"
    out = _new_topk_indices(q, lambda q: q.shape[0] if q.dim() else 0, topk, out, f)
    _mqa_topk_into(q, kv, kv_scales, weights, cu_starts, cu_ends, out, workspace_bytes, f)
    return out


def fp8_paged_mqa_topk_indices(q, kv_cache, weights, context_lens, block_tables, max_model_len, topk=2048, *,
                               out=None, workspace_bytes=None) -> torch.Tensor:
    """The functional decode form: returns int32 [B * next_n, topk] (or fills ``out``); ``workspace_bytes``
    as for the prefill form."""
    f = "fp8_paged_mqa_topk_indices"
    out = _new_topk_indices(q, lambda q: q.shape[0] * q.shape[1] if q.dim() >= 2 else 0, topk, out, f)
    _paged_topk_into(q, kv_cache, weights, context_lens, block_tables, max_model_len, out, workspace_bytes, f)
    return out
