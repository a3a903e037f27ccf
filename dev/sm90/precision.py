"""Where the op's error comes from on rows with very few keys (the contract's per-row bound).

Runs ``aiter.fp8_mqa_logits`` on the GPU (M = 1000 rows, N = 3 keys, H = 32 and 64, the window modes
that make 0-3-key rows) and prints per mode: for each in-window element err = |out - ref| against the
float64 reference, and T = sum_h |relu(kv_scale * q.k) * w|, the size of the terms before the head
sum cancels them. err / T near the FP8 tensor cores' accumulation precision (~1e-4) says the error
is the hardware's; the per-row bound (2e-3 * max|ref row| + 1e-6) then fails only where the logit
cancels to a tiny fraction of T (tunables.h: kExactKeys is the kernel's answer to that).

    python -m dev.sm90.precision
"""

import torch

import aiter
from aiter.testing.mqa_logits import make_inputs, make_windows, reference_logits, window_mask


def main():
    for mode in ("misaligned", "empty", "past_end", "causal"):
        for H in (32, 64):
            M, N = 1000, 3
            q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 0)
            ks, ke = make_windows(mode, M, N, "cuda", generator=torch.Generator().manual_seed(1))
            out = aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, clean_logits=True).double()
            ref = reference_logits(q, kv, s, w, ks, ke, True)
            terms = (torch.relu(torch.einsum("mhd,nd->mhn", q.double(), kv.double()) * s.double()[None, None])
                     * w.double()[:, :, None]).abs().sum(1)
            inside = window_mask(ks, ke, N)
            err = torch.where(inside, (out - ref).abs(), torch.zeros_like(ref))
            rel_terms = (err / terms.clamp_min(1e-30))[inside]
            bound = 2e-3 * torch.where(inside, ref.abs(), torch.zeros_like(ref)).amax(1) + 1e-6
            worst = (err.amax(1) / bound).max().item()
            cancel = (ref.abs() / terms.clamp_min(1e-30))[inside]
            print(f"{mode:10s} H={H}: max err/T {rel_terms.max().item():.2e}  median err/T "
                  f"{rel_terms.median().item():.2e}  worst row vs bound {worst:.2f}x  "
                  f"min |logit|/T {cancel.min().item():.1e}")


if __name__ == "__main__":
    main()
