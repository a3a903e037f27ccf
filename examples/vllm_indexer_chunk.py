"""A prefill indexer chunk as vLLM builds it, through vLLM's fused call form: top-2048 keys per row.

Several requests share one chunk: the K of every request (its cached prefix plus this chunk's tokens)
is gathered into one buffer, and each query token's window is its own request's keys up to and
including itself. vLLM's sparse indexer first tries ``fp8_fp4_mqa_topk_indices(q, kv, weights, ks,
ke, topk_indices)``, which writes the indices without materialising the logits: columns of the
chunk's K (absolute, not relative to ks), ascending, -1 after the last when a window is shorter.

    python examples/vllm_indexer_chunk.py [--device cuda] [--heads 64] [--scale 0.25]

Prints the top-2048 agreement with the float64 reference (rows with at least 2048 keys; shorter rows
must list exactly their window) and exits non-zero below 99.9%.
"""

from __future__ import annotations

import argparse
import sys

import torch

from aiter import fp8_fp4_mqa_topk_indices
from aiter.testing.mqa_logits import reference_logits

TOPK = 2048
# (cached prefix tokens, new tokens in this chunk) per request
DEFAULT_REQUESTS = ((3000, 1000), (6000, 512), (0, 1536), (9000, 1048))


def quantize_per_token(x: torch.Tensor):
    """e4m3 values and the float32 scale per token (amax / 448), as the indexer's K cache stores them."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-4)
    scale = amax / 448.0
    return (x.float() / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def build_chunk(requests, heads, head_dim, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    keys, ks, ke, offset = [], [], [], 0
    for cached, new in requests:
        total = cached + new
        keys.append(torch.randn(total, head_dim, generator=g, dtype=torch.bfloat16))
        pos = torch.arange(new)
        ks.append(torch.full((new,), offset, dtype=torch.int32))
        ke.append((offset + cached + pos + 1).to(torch.int32))  # causal within the request
        offset += total
    k_fp8, k_scale = quantize_per_token(torch.cat(keys))
    m = sum(new for _, new in requests)
    q_bf16 = torch.randn(m, heads, head_dim, generator=g, dtype=torch.bfloat16)
    q_fp8, q_scale = quantize_per_token(q_bf16)  # per (token, head); folded into the weights
    w = torch.randn(m, heads, generator=g) * q_scale * head_dim**-0.5 * heads**-0.5
    to = dict(device=device)
    return (q_fp8.to(**to), k_fp8.to(**to), k_scale.to(**to), w.to(**to), torch.cat(ks).to(**to),
            torch.cat(ke).to(**to))


def topk_in_window(logits: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, k: int):
    """Top-k columns per row over [ks, ke) only (-1 where the window is shorter)."""
    n = logits.shape[1]
    cols = torch.arange(n, device=logits.device)
    inside = (cols[None, :] >= ks[:, None].long()) & (cols[None, :] < ke[:, None].long())
    masked = torch.where(inside, logits.float(), torch.full_like(logits.float(), float("-inf")))
    vals, idx = masked.topk(min(k, n), dim=1)
    return torch.where(torch.isfinite(vals), idx, torch.full_like(idx, -1))


def agreement(requests=DEFAULT_REQUESTS, heads=64, head_dim=128, device="cuda", seed=0):
    q, k, k_scale, w, ks, ke = build_chunk(requests, heads, head_dim, device, seed)
    topk_indices = torch.full((q.shape[0], TOPK), -1, dtype=torch.int32, device=device)  # vLLM's buffer
    assert fp8_fp4_mqa_topk_indices((q, None), (k, k_scale), w, ks, ke, topk_indices)
    got_all = topk_indices.cpu().long()
    short_rows = ((ke - ks) < TOPK).nonzero().flatten().cpu()
    for r in short_rows.tolist():  # a window shorter than k: all of its keys, ascending, then -1
        window = torch.arange(int(ks[r]), int(ke[r]))
        want_row = torch.cat([window, torch.full((TOPK - len(window),), -1)])
        if not torch.equal(got_all[r], want_row):
            raise AssertionError(f"row {r}: a window of {len(window)} keys is not listed whole")
    ref = reference_logits(q, k, k_scale, w, ks, ke, clean_logits=True)
    long_rows = ((ke - ks) >= TOPK).nonzero().flatten()
    got = got_all[long_rows.cpu()]
    want = topk_in_window(ref[long_rows], ks[long_rows], ke[long_rows], TOPK).cpu()
    hits = sum(int(torch.isin(want[i], got[i]).sum()) for i in range(len(long_rows)))
    return hits / max(1, len(long_rows) * TOPK), len(long_rows), q.shape[0], k.shape[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where the op runs (default: cuda when a GPU is visible, else cpu)")
    ap.add_argument("--heads", type=int, default=64, help="query heads H (default 64, DeepSeek-V3.2's)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every request's token counts (default 1: a 4096-token chunk over 22K keys; "
                         "0.25 runs in seconds on a CPU)")
    args = ap.parse_args(argv)
    if not 0 < args.scale <= 4:
        ap.error(f"--scale must be in (0, 4], got {args.scale}")
    requests = tuple((int(c * args.scale), max(1, int(n * args.scale))) for c, n in DEFAULT_REQUESTS)
    frac, rows, m, n = agreement(requests=requests, heads=args.heads, device=args.device)
    ok = frac >= 0.999
    print(f"{'PASS' if ok else 'FAIL'}: M={m} N={n} H={args.heads} on {args.device}: "
          f"top-{TOPK} agreement {frac:.5f} over {rows} rows with >= {TOPK} keys")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
