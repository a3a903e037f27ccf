"""A decode step of the indexer as vLLM runs it, through vLLM's fused call form: top-2048 keys per row.

Each request already holds its context in the paged indexer K cache (uint8 blocks of block_kv keys:
D e4m3fn bytes each, then their float32 scales). This step brings next_n new tokens per request (1 +
the draft tokens of multi-token prediction): their keys are quantised per token (scale amax / 448,
rounded up to a power of two as vLLM's "ue8m0" scales are) and written into the cache at their slots
through the block table; then the metadata is computed from the new lengths, the logits of every
(request, token) row against its request's keys (row j of a request sees the context and the new
tokens up to itself), and the top-2048 keys of each row over what it sees, all in one call:
``fp8_fp4_paged_mqa_topk_indices(q, kv_cache, weights, seq_lens, block_table, max_model_len,
topk_indices)``, which vLLM's sparse indexer tries before logits + top-k. It computes its schedule on
the device and never holds the [rows, max_model_len] logits; the indices are token positions,
ascending, -1 after the last when a row sees fewer keys. The block table is as wide as the longest
model context, and its entries past a request's last block are unset (-1 here), which the op never
reads.

    python examples/vllm_indexer_decode.py [--device cuda] [--heads 64] [--next-n 2]

Prints the top-2048 agreement with the float64 reference (rows that see at least 2048 keys) and exits
non-zero below 99.9%.
"""

from __future__ import annotations

import argparse
import sys

import torch

from aiter import fp8_fp4_paged_mqa_topk_indices
from aiter.testing.paged_mqa_logits import reference_paged_logits, row_keys

TOPK = 2048
FP8 = torch.float8_e4m3fn
# Tokens each request holds before this step.
DEFAULT_CONTEXTS = (5000, 2100, 9000, 1000, 3000)


def quantize_keys(k: torch.Tensor):
    """Per-token e4m3fn keys and their float32 scales (amax / 448 rounded up to a power of two)."""
    amax = k.abs().float().amax(dim=-1, keepdim=True).clamp_min(1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
    return (k.float() / scale).to(FP8), scale.squeeze(-1)


def write_keys(kv_cache, block_table, request, positions, keys_fp8, scales):
    """Writes the keys of `request` at token `positions` into their slots of the paged cache."""
    num_blocks, block_kv, _, row = kv_cache.shape
    D = row - 4
    flat = kv_cache.view(num_blocks, block_kv * row)  # a block: block_kv * D key bytes, then the scales
    blocks = block_table[request, positions // block_kv].long()[:, None]
    slots = (positions % block_kv)[:, None]
    flat[blocks, slots * D + torch.arange(D)] = keys_fp8.view(torch.uint8)
    flat[blocks, block_kv * D + slots * 4 + torch.arange(4)] = scales.to(torch.float32)[:, None].view(torch.uint8)


def decode_step(contexts=DEFAULT_CONTEXTS, next_n=2, heads=64, head_dim=128, block_kv=64, max_model_len=16384,
                device="cuda", seed=0, num_sms=132):
    """Builds the cache of `contexts`, runs one decode step; returns (top-k indices, reference logits,
    lengths). `num_sms` is what vLLM passes DeepGEMM's metadata; the fused op schedules itself."""
    g = torch.Generator().manual_seed(seed)
    B = len(contexts)
    max_blocks = -(-max_model_len // block_kv)
    new_lens = torch.tensor(contexts, dtype=torch.int64) + next_n
    blocks_needed = (-(-new_lens // block_kv)).tolist()
    num_blocks = sum(blocks_needed) + 8  # a pool with free blocks, handed out shuffled
    pool = torch.randperm(num_blocks, generator=g)
    block_table = torch.full((B, max_blocks), -1, dtype=torch.int32)
    taken = 0
    for b, n in enumerate(blocks_needed):
        block_table[b, :n] = pool[taken:taken + n].to(torch.int32)
        taken += n
    kv_cache = torch.zeros(num_blocks, block_kv, 1, head_dim + 4, dtype=torch.uint8)
    for b, context in enumerate(contexts):  # the context the earlier steps wrote
        k, s = quantize_keys(torch.randn(context, head_dim, generator=g, dtype=torch.bfloat16))
        write_keys(kv_cache, block_table, b, torch.arange(context), k, s)

    # This step: next_n new tokens per request; their keys go into the cache first.
    for b, context in enumerate(contexts):
        k, s = quantize_keys(torch.randn(next_n, head_dim, generator=g, dtype=torch.bfloat16))
        write_keys(kv_cache, block_table, b, torch.arange(context, context + next_n), k, s)
    q_bf16 = torch.randn(B, next_n, heads, head_dim, generator=g, dtype=torch.bfloat16)
    q_amax = q_bf16.abs().float().amax(dim=-1).clamp_min(1e-4)
    q_scale = q_amax / 448.0
    q = (q_bf16.float() / q_scale[..., None]).to(FP8)
    # The query scale, head_dim^-0.5 and heads^-0.5 are folded into the weights, as the model does.
    weights = (torch.randn(B * next_n, heads, generator=g) * q_scale.view(B * next_n, heads)
               * head_dim**-0.5 * heads**-0.5)
    seq_lens = new_lens.to(torch.int32)

    to = dict(device=device)
    q, kv_cache, weights, seq_lens, block_table = (t.to(**to) for t in (q, kv_cache, weights, seq_lens, block_table))
    del num_sms
    topk_indices = torch.full((B * next_n, TOPK), -1, dtype=torch.int32, device=device)  # vLLM's buffer
    assert fp8_fp4_paged_mqa_topk_indices((q, None), kv_cache, weights, seq_lens, block_table, max_model_len,
                                          topk_indices)
    cpu = [t.cpu() for t in (q, kv_cache, weights, seq_lens, block_table)]
    reference = reference_paged_logits(*cpu, max_model_len, clean_logits=True)
    return topk_indices.cpu().long(), reference, row_keys(seq_lens.cpu(), next_n, max_model_len)


def topk_of_visible(logits: torch.Tensor, lengths: torch.Tensor, k: int):
    """Top-k key indices per row over the keys it sees (-1 where it sees fewer), as vLLM's top-k per
    row masks by the lengths (the logits past them are unspecified without clean_logits)."""
    cols = torch.arange(logits.shape[1])
    masked = torch.where(cols[None, :] < lengths[:, None], logits.double(), torch.tensor(float("-inf")).double())
    vals, idx = masked.topk(min(k, logits.shape[1]), dim=1)
    return torch.where(torch.isfinite(vals), idx, torch.full_like(idx, -1))


def agreement(**kwargs):
    indices, reference, lengths = decode_step(**kwargs)
    for r in (lengths < TOPK).nonzero().flatten().tolist():  # fewer keys than k: all of them, then -1
        seen = int(lengths[r])
        want_row = torch.cat([torch.arange(seen), torch.full((TOPK - seen,), -1)])
        if not torch.equal(indices[r], want_row):
            raise AssertionError(f"row {r}: its {seen} keys are not listed whole")
    long_rows = (lengths >= TOPK).nonzero().flatten()
    got = indices[long_rows]
    want = topk_of_visible(reference[long_rows], lengths[long_rows], TOPK)
    hits = sum(int(torch.isin(want[i], got[i]).sum()) for i in range(len(long_rows)))
    return hits / max(1, len(long_rows) * TOPK), len(long_rows), indices.shape[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where the op runs (default: cuda when a GPU is visible, else cpu)")
    ap.add_argument("--heads", type=int, default=64, help="query heads H (default 64)")
    ap.add_argument("--next-n", type=int, default=2, help="query tokens per request and step (MTP; default 2)")
    ap.add_argument("--contexts", default=",".join(map(str, DEFAULT_CONTEXTS)),
                    help="comma-separated context length of each request (default %(default)s)")
    args = ap.parse_args(argv)
    try:
        contexts = tuple(int(c) for c in args.contexts.split(","))
    except ValueError:
        ap.error(f"--contexts must be comma-separated integers, got {args.contexts!r}")
    if not contexts or min(contexts) < args.next_n:
        ap.error(f"--contexts: every length must be >= next_n = {args.next_n}")
    if max(contexts) > 16384:
        ap.error(f"--contexts: lengths are at most the example's max_model_len = 16384, got {max(contexts)}")
    num_sms = (torch.cuda.get_device_properties(args.device).multi_processor_count
               if torch.device(args.device).type == "cuda" else 8)
    frac, rows, total = agreement(contexts=contexts, heads=args.heads, next_n=args.next_n, device=args.device,
                                  num_sms=num_sms)
    ok = frac >= 0.999
    print(f"{'PASS' if ok else 'FAIL'}: {total} rows (B={len(contexts)}, next_n={args.next_n}, H={args.heads}) "
          f"on {args.device}: top-{TOPK} agreement {frac:.5f} over {rows} rows that see >= {TOPK} keys")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
