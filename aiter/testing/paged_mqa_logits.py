"""Inputs and the float64 reference of fp8_paged_mqa_logits (the decode op; tests and examples share them).

The paged K cache is DeepGEMM's layout, [num_blocks, block_kv, 1, D + 4] uint8, each block holding
block_kv keys of D e4m3fn bytes and then block_kv float32 scales. The reference gathers every row's
keys through the block table in plain torch and computes the contract's formula in float64 on the same
fp8 inputs (docs/operator.md, "The decode op"); it reads only the table entries of visible blocks.
"""

from __future__ import annotations

import torch

from aiter.ops.fp8_paged_mqa_logits import get_paged_mqa_logits_metadata

FP8 = torch.float8_e4m3fn


def pack_kv_cache(keys: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The cache of e4m3fn keys [num_blocks, block_kv, D] and float32 scales [num_blocks, block_kv]:
    uint8 [num_blocks, block_kv, 1, D + 4] (per block: block_kv * D key bytes, then the scales)."""
    num_blocks, block_kv, D = keys.shape
    flat = torch.empty(num_blocks, block_kv * (D + 4), dtype=torch.uint8, device=keys.device)
    flat[:, : block_kv * D] = keys.contiguous().view(torch.uint8).reshape(num_blocks, block_kv * D)
    flat[:, block_kv * D:] = scales.to(torch.float32).contiguous().view(torch.uint8).reshape(num_blocks, block_kv * 4)
    return flat.view(num_blocks, block_kv, 1, D + 4)


def unpack_kv_cache(kv_cache: torch.Tensor):
    """(keys e4m3fn [num_blocks, block_kv, D], scales float32 [num_blocks, block_kv]) of a packed cache
    (any block stride)."""
    num_blocks, block_kv, _, row = kv_cache.shape
    D = row - 4
    flat = kv_cache.reshape(num_blocks, block_kv * row)  # a block's bytes are dense
    keys = flat[:, : block_kv * D].contiguous().view(FP8).view(num_blocks, block_kv, D)
    scales = flat[:, block_kv * D:].contiguous().view(torch.float32).view(num_blocks, block_kv)
    return keys, scales


def quantize_kv_cache(x: torch.Tensor):
    """Per-key e4m3fn with scale amax / 448 (amax at least 1e-4), as vLLM's indexer and DeepGEMM's test
    write the cache: returns (kv_cache uint8 [num_blocks, block_kv, 1, D + 4], the dequantized keys
    float32 [num_blocks, block_kv, D])."""
    scale = x.abs().float().amax(dim=-1, keepdim=True).clamp(min=1e-4) / 448.0
    keys = (x.float() / scale).to(FP8)
    return pack_kv_cache(keys, scale.squeeze(-1)), keys.float() * scale


def row_keys(context_lens: torch.Tensor, next_n: int, max_context_len: int) -> torch.Tensor:
    """int64 [B * next_n]: the keys row (b, j) sees, context_lens[b] - next_n + j + 1 ([B] lens) or
    context_lens[b, j] ([B, next_n] lens), clamped to [0, max_context_len]."""
    lens = context_lens.to(torch.int64)
    if lens.dim() == 1:
        j = torch.arange(next_n, device=lens.device)
        keys = lens[:, None] - next_n + j[None, :] + 1
    else:
        keys = lens
    return keys.clamp(0, max_context_len).reshape(-1)


def visible_mask(context_lens, next_n: int, max_context_len: int) -> torch.Tensor:
    """Boolean [B * next_n, max_context_len]: True where row (b, j) sees key p."""
    keys = row_keys(context_lens, next_n, max_context_len)
    p = torch.arange(max_context_len, device=keys.device)
    return p[None, :] < keys[:, None]


def reference_paged_logits(q, kv_cache, weights, context_lens, block_table, max_context_len, clean_logits=True,
                           dequantized=None, max_chunk_bytes=1 << 28):
    """float64 logits [B * next_n, max_context_len]: -inf where a row sees no key when clean, NaN otherwise.

    q [B, next_n, H, D] (e4m3fn, or any float dtype: the bf16-input reference of the peers' criteria);
    each batch's keys are gathered through block_table from kv_cache (or, when given, from
    `dequantized` [num_blocks, block_kv, D] float keys whose scales are already applied: then the scale
    is 1). Only the visible blocks' table entries are read. Batches go in chunks so that the gathered
    keys and the [rows, H, keys] products stay under ``max_chunk_bytes``.
    """
    B, next_n, H, D = q.shape
    num_blocks, block_kv = kv_cache.shape[0], kv_cache.shape[1]
    keys8, scales = unpack_kv_cache(kv_cache)
    if dequantized is not None:
        key_values = dequantized.to(torch.float64)
        key_scales = torch.ones(num_blocks, block_kv, dtype=torch.float64, device=q.device)
    else:
        key_values = keys8.to(torch.float64)
        key_scales = scales.to(torch.float64)
    keys_per_row = row_keys(context_lens, next_n, max_context_len).view(B, next_n)
    batch_keys = keys_per_row.amax(dim=1) if B > 0 else keys_per_row.new_zeros(0)
    width = int(batch_keys.max().item()) if B > 0 else 0
    out = torch.full((B * next_n, max_context_len), float("-inf") if clean_logits else float("nan"),
                     dtype=torch.float64, device=q.device)
    if width == 0:
        return out
    w64 = weights.to(torch.float64).view(B, next_n, H)
    per_batch = max(1, width * (D + next_n * H) * 8)
    step = max(1, int(max_chunk_bytes // per_batch))
    positions = torch.arange(width, device=q.device)
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        visible = positions[None, :] < batch_keys[b0:b1, None]  # [b, width]
        columns = (positions // block_kv)[None, :].expand(b1 - b0, width)
        # Entries of invisible blocks are never read: their positions use block 0 and are masked out.
        safe_columns = torch.where(visible, columns, torch.zeros_like(columns))
        blocks = block_table[b0:b1].to(torch.int64).gather(1, safe_columns)
        blocks = torch.where(visible, blocks, torch.zeros_like(blocks))
        slots = (positions % block_kv)[None, :].expand(b1 - b0, width)
        k = key_values[blocks, slots]  # [b, width, D]
        s = key_scales[blocks, slots]  # [b, width]
        dots = torch.einsum("bjhd,bpd->bjhp", q[b0:b1].to(torch.float64), k)
        logits = torch.einsum("bjhp,bjh->bjp", torch.relu(dots * s[:, None, None, :]), w64[b0:b1])
        sees = positions[None, None, :] < keys_per_row[b0:b1, :, None]
        fill = float("-inf") if clean_logits else float("nan")
        logits = torch.where(sees, logits, torch.full((), fill, dtype=torch.float64, device=q.device))
        out[b0 * next_n: b1 * next_n, :width] = logits.reshape((b1 - b0) * next_n, width)
    return out


def random_block_table(blocks_per_batch, max_blocks: int, num_blocks: int, generator=None,
                       garbage=(-1, 10**9, -(2**31), 2**31 - 1)):
    """int32 [B, max_blocks]: batch b's first blocks_per_batch[b] entries are distinct blocks of a
    shuffled pool of num_blocks (no two batches share one); every later entry is garbage (cycling
    through `garbage`), which the op must never read."""
    B = len(blocks_per_batch)
    needed = sum(blocks_per_batch)
    if needed > num_blocks:
        raise ValueError(f"{needed} visible blocks do not fit a cache of {num_blocks}")
    pool = torch.randperm(num_blocks, generator=generator)
    table = torch.empty(B, max_blocks, dtype=torch.int64)
    cells = torch.arange(B * max_blocks).view(B, max_blocks)
    table.copy_(torch.tensor(garbage, dtype=torch.int64)[cells % len(garbage)])
    offset = 0
    for b, n in enumerate(blocks_per_batch):
        table[b, :n] = pool[offset: offset + n]
        offset += n
    return table.to(torch.int32)


def make_paged_case(context_lens, next_n: int, H: int, D: int, block_kv: int, max_context_len=None, lens_2d=False,
                    spare_blocks: int = 3, seed: int = 0, device="cpu"):
    """Fresh random, never-zero inputs of one decode step: q (e4m3fn), the packed cache (keys e4m3fn,
    scales > 0 spread over two decades), weights of both signs, context_lens int32 ([B], or [B, next_n]
    with each row's own length when lens_2d), a shuffled block table with garbage past each batch's
    visible blocks, and the metadata. `context_lens` is a list of the batches' lengths (with lens_2d,
    the last row's; earlier rows see a random prefix of it). Returns a dict of the op's arguments."""
    g = torch.Generator().manual_seed(seed)
    B = len(context_lens)
    lens = torch.tensor(context_lens, dtype=torch.int64).reshape(B)
    if max_context_len is None:
        max_context_len = max([int(v) for v in context_lens] + [0])
    if lens_2d:
        # DeepGEMM's test: rows see a random prefix, the last row the whole context.
        fractions = torch.rand(B, next_n, generator=g)
        per_row = ((lens.clamp(min=0)[:, None] + 1).double() * fractions).long()
        per_row[:, -1] = lens
        context = per_row
    else:
        context = lens
    keys = row_keys(context, next_n, max_context_len).view(B, next_n)
    batch_keys = keys.amax(dim=1).tolist() if B > 0 else []
    blocks_per_batch = [-(-k // block_kv) for k in batch_keys]
    max_blocks = max(1, -(-max_context_len // block_kv))
    num_blocks = sum(blocks_per_batch) + spare_blocks
    table = random_block_table(blocks_per_batch, max_blocks, num_blocks, generator=g)
    q = (torch.randn(B, next_n, H, D, generator=g) * 2.0).to(FP8)
    key_bytes = (torch.randn(num_blocks, block_kv, D, generator=g) * 2.0).to(FP8)
    scales = torch.exp(torch.rand(num_blocks, block_kv, generator=g) * 4.6 - 2.3) / 8.0
    weights = torch.randn(B * next_n, H, generator=g) * (D ** -0.5) * (H ** -0.5)
    args = dict(q=q, kv_cache=pack_kv_cache(key_bytes, scales), weights=weights, context_lens=context.to(torch.int32),
                block_table=table)
    args = {k: v.to(device) for k, v in args.items()}
    args["schedule_meta"] = get_paged_mqa_logits_metadata(args["context_lens"], block_kv, num_shares(device))
    args["max_context_len"] = max_context_len
    return args


def num_shares(device) -> int:
    """The metadata's share count callers pass: the GPU's SM count, or 8 on the CPU (whose path plans
    its own shares and reads only the metadata's shape)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8
