"""Host emulation of the sm90 linear-term split (csrc/sm90/linear_term.cuh), for its precision alone.

    python -m dev.sm90.linear_term_emulation [--rows 256] [--keys 4096]

The kernel sums relu(x_h) w_h over the heads as (sum_h |x_h| w_h + K . q') / 2, with
q' = sum_h w_h Q_h held as four e4m3 pieces (each a power-of-two scale 2^(e - 7), e the exponent of
the residual's largest magnitude, times the residual rounded to e4m3). This script forms the pieces
the same way and evaluates both sums in float64, so the error it prints is the pieces' alone (the
FP8 MMA's own accumulation error, ~1e-4, comes on top on the GPU): relative L2 over all logits and
the worst row's max |error| / max |reference|, for 1..4 pieces, both input sets, H 32 and 64.
"""

from __future__ import annotations

import argparse

import torch

from aiter.testing.mqa_logits import FP8, make_input_set


def pieces(q_prime: torch.Tensor, count: int):
    """[(scale [M, 1], piece [M, D] e4m3)] as build_linear_pieces forms them (q_prime float32)."""
    residual = q_prime.clone()
    out = []
    for _ in range(count):
        largest = residual.abs().amax(dim=1, keepdim=True)
        exponent = torch.floor(torch.log2(largest.clamp_min(2.0 ** -119)))
        usable = (largest >= 2.0 ** -119) & torch.isfinite(largest)
        scale = torch.where(usable, torch.exp2(exponent - 7), torch.zeros_like(largest))
        inverse = torch.where(usable, torch.exp2(7 - exponent), torch.zeros_like(largest))
        piece = (residual * inverse).to(FP8)
        residual = residual - piece.float() * scale
        out.append((scale, piece))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--keys", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args(argv)
    M, N, D = args.rows, args.keys, args.head_dim
    print("| inputs | H | pieces | rel L2 | worst row max err / max ref |")
    print("|---|---|---|---|---|")
    for name in ("make_inputs", "engine"):
        for H in (32, 64):
            q, kv, kv_scales, weights = make_input_set(name, M, N, H, D)
            x = torch.einsum("mhd,nd->mnh", q.double(), kv.double())
            w = weights.double()[:, None, :]
            scale = kv_scales.double()[None, :]
            reference = (x.clamp(min=0) * w).sum(-1) * scale
            abs_sum = (x.abs() * w).sum(-1)
            q_prime = (q.float() * weights[:, :, None]).sum(1)  # float32, as the kernel sums it
            for count in (1, 2, 3, 4):
                linear = torch.zeros(M, N, dtype=torch.float64)
                for piece_scale, piece in pieces(q_prime, count):
                    linear += piece_scale.double() * (piece.double() @ kv.double().T)
                err = 0.5 * (abs_sum + linear) * scale - reference
                rel = (err.norm() / reference.norm()).item()
                row = (err.abs().amax(1) / reference.abs().amax(1)).max().item()
                print(f"| {name} | {H} | {count} | {rel:.2e} | {row:.2e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
