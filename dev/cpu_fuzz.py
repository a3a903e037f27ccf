"""Bitwise fuzz of the CPU paths across two builds: random shapes, every window mode, float32 and
bfloat16 logits, the full and the compressed layout, clean or not, whole-depth and forced-chunked,
for prefill and paged decode, under every SIMD variant this CPU runs.

    python -m dev.cpu_fuzz save /tmp/before.pt     # in the old tree (its own AITER_JIT_DIR)
    python -m dev.cpu_fuzz compare /tmp/before.pt  # in the new tree: exit 1 on any differing bit

The cases depend only on the seed, so both runs see the same inputs; outputs are compared as raw
bits (NaN patterns included). A variant only one of the two builds has is reported, not compared.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

VARIANTS = ["generic", "avx2", "avx512", "avx512bf16"]
WINDOWS = ["full", "causal", "random", "empty", "requests"]


def _e4m3(gen, *shape):
    x = torch.randn(*shape, generator=gen) * 2.0
    return x.to(torch.float8_e4m3fn)


def _windows(gen, mode, M, N):
    if mode == "full":
        ks, ke = torch.zeros(M, dtype=torch.int64), torch.full((M,), N, dtype=torch.int64)
    elif mode == "causal":
        ke = torch.clamp(torch.arange(M) * N // max(M, 1) + 1, max=N)
        ks = torch.zeros(M, dtype=torch.int64)
    elif mode == "random":
        a = torch.randint(-3, N + 4, (M,), generator=gen)
        b = torch.randint(-3, N + 4, (M,), generator=gen)
        ks, ke = torch.minimum(a, b), torch.maximum(a, b)
        ks[::5] = ke[::5] + 1  # some inverted (empty) rows
    elif mode == "empty":
        ks = torch.full((M,), N // 2, dtype=torch.int64)
        ke = ks.clone()
    else:  # several requests, each causal over its own key range
        cuts = sorted(torch.randint(0, N + 1, (3,), generator=gen).tolist())
        bounds = [0] + cuts + [N]
        ks = torch.empty(M, dtype=torch.int64)
        ke = torch.empty(M, dtype=torch.int64)
        for m in range(M):
            r = m * 4 // M
            lo, hi = bounds[r], bounds[r + 1]
            ks[m] = lo
            ke[m] = lo + (hi - lo) * (m + 1) // M + 1 if hi > lo else lo
    return ks.to(torch.int32), ke.to(torch.int32)


def prefill_cases(seed):
    from aiter.ops.fp8_mqa_logits import fp8_mqa_logits

    gen = torch.Generator().manual_seed(seed)
    shapes = [(1, 1, 1, 1), (19, 203, 7, 65), (64, 640, 32, 128), (33, 129, 64, 128), (5, 70, 5, 3)]
    for _ in range(10):
        shapes.append(tuple(int(torch.randint(lo, hi, (1,), generator=gen)) for lo, hi in
                            ((1, 80), (1, 400), (1, 70), (1, 200))))
    i = 0
    for (M, N, H, D) in shapes:
        q, kv = _e4m3(gen, M, H, D), _e4m3(gen, N, D)
        scales = torch.rand(N, generator=gen) + 0.01
        weights = torch.randn(M, H, generator=gen)
        for mode in WINDOWS:
            ks, ke = _windows(gen, mode, M, N)
            clean = bool(i % 2)
            dtype = torch.bfloat16 if i % 3 == 1 else torch.float32
            widths = (ke.clamp(0, N) - ks.clamp(0, N)).clamp(min=0)
            compressed = i % 4 >= 2 and int(widths.max()) > 0
            i += 1
            max_seqlen_k = int(widths.max()) + (i % 3) if compressed else 0

            def run(q=q, kv=kv, scales=scales, weights=weights, ks=ks, ke=ke, clean=clean, dtype=dtype,
                    max_seqlen_k=max_seqlen_k):
                cols = max_seqlen_k or N
                out = torch.full((M, cols), float("nan"), dtype=dtype)
                fp8_mqa_logits(q, kv, scales, weights, ks, ke, clean, out=out, max_seqlen_k=max_seqlen_k)
                return out

            yield f"prefill M{M} N{N} H{H} D{D} {mode} clean{int(clean)} {dtype} msk{max_seqlen_k}", run


def paged_cases(seed):
    from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata

    gen = torch.Generator().manual_seed(seed + 1)
    for i in range(24):
        B = int(torch.randint(1, 5, (1,), generator=gen))
        next_n = int(torch.randint(1, 4, (1,), generator=gen))
        H = [1, 3, 7, 32, 64, 13][i % 6]
        D = [1, 65, 128, 31, 200, 8][(i // 2) % 6]
        block_kv = [1, 16, 64, 7][i % 4]
        max_context_len = int(torch.randint(1, 300, (1,), generator=gen))
        per_row = i % 5 == 4
        lens = torch.randint(0, max_context_len + 1, (B, next_n) if per_row else (B,), generator=gen)
        if not per_row:
            lens = torch.clamp(lens, min=next_n - 1) if i % 2 else lens
        lens = lens.to(torch.int32)
        max_blocks = -(-max_context_len // block_kv) + 1
        num_blocks = B * max_blocks + 3
        keys = _e4m3(gen, num_blocks, block_kv, D).view(torch.uint8)
        kscale = (torch.rand(num_blocks, block_kv, generator=gen) + 0.01).view(torch.uint8).view(
            num_blocks, block_kv * 4)
        cache = torch.cat([keys.reshape(num_blocks, block_kv * D), kscale], dim=1)
        cache = cache.view(num_blocks, block_kv, 1, D + 4)
        table = torch.randperm(num_blocks, generator=gen)[: B * max_blocks].view(B, max_blocks).to(torch.int32)
        q = _e4m3(gen, B, next_n, H, D)
        weights = torch.randn(B * next_n, H, generator=gen)
        clean = bool(i % 2)
        dtype = torch.bfloat16 if i % 3 == 2 else torch.float32
        meta = get_paged_mqa_logits_metadata(lens, block_kv, 4)

        def run(q=q, cache=cache, weights=weights, lens=lens, table=table, meta=meta, mcl=max_context_len,
                clean=clean, dtype=dtype, next_n=next_n, per_row=per_row):
            out = fp8_paged_mqa_logits(q, cache, weights, lens, table, meta, mcl, clean, logits_dtype=dtype)
            if not clean:  # the columns a row does not see are unspecified: zero them for the compare
                j = torch.arange(next_n)
                keys = lens if per_row else lens[:, None] - next_n + j[None, :] + 1
                keys = keys.clamp(0, mcl).reshape(-1, 1)
                out = out.masked_fill(torch.arange(out.shape[1])[None, :] >= keys, 0)
            return out

        yield (f"paged B{B} n{next_n} H{H} D{D} bkv{block_kv} L{max_context_len} rows{int(per_row)} "
               f"clean{int(clean)} {dtype}"), run


CHUNKS = {"whole": {}, "chunked": {"AITER_FP8_MQA_CPU_CHUNKS": "16,4,64", "AITER_FP8_PAGED_CPU_CHUNKS": "16,4"}}


def outputs(seed):
    from aiter.ops import native

    os.environ.pop("AITER_FP8_MQA_CPU_SIMD", None)
    best = native.ops().cpu_simd_variant()
    results = {}
    for variant in VARIANTS[: VARIANTS.index(best) + 1]:
        os.environ["AITER_FP8_MQA_CPU_SIMD"] = variant
        for chunk_name, env in CHUNKS.items():
            for name in ("AITER_FP8_MQA_CPU_CHUNKS", "AITER_FP8_PAGED_CPU_CHUNKS"):
                os.environ.pop(name, None)
            os.environ.update(env)
            for cases in (prefill_cases(seed), paged_cases(seed)):
                for label, run in cases:
                    out = run()
                    bits = out.view(torch.int16 if out.dtype == torch.bfloat16 else torch.int32)
                    results[f"{variant} {chunk_name} {label}"] = bits.clone()
    for name in ("AITER_FP8_MQA_CPU_SIMD", "AITER_FP8_MQA_CPU_CHUNKS", "AITER_FP8_PAGED_CPU_CHUNKS"):
        os.environ.pop(name, None)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev.cpu_fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["save", "compare"])
    parser.add_argument("file")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    got = outputs(args.seed)
    if args.mode == "save":
        torch.save(got, args.file)
        print(f"saved {len(got)} outputs to {args.file}")
        return 0
    want = torch.load(args.file)
    shared = sorted(set(got) & set(want))
    only = sorted(set(got) ^ set(want))
    bad = [k for k in shared if not torch.equal(got[k], want[k])]
    variants = sorted({k.split()[0] for k in shared}, key=VARIANTS.index)
    print(f"compared {len(shared)} outputs (variants {', '.join(variants)}): {len(bad)} differ; "
          f"{len(only)} in one run only")
    for k in bad[:20]:
        print("  differs:", k)
    return 1 if bad or not shared else 0


if __name__ == "__main__":
    sys.exit(main())
