"""The peers' own prefill test criteria, written here in our own code, over their case lists.

- DeepGEMM (tests/test_attention.py, its sm90 enumeration): logits fp32 or bf16; the compressed layout
  without clean_logits or the full one with it; causal or context-parallel windows; H 32 / 64;
  D 32 / 64 / 128. Inputs are bf16 randoms, q cast to e4m3, kv cast per row with scale amax / 448.
  Criteria: the -inf mask (compressed results expanded to the full layout first) equals the
  reference's, and calc_diff = 1 - 2 sum(x y) / sum(x^2 + y^2) < 1e-3 against the reference on the
  bf16 inputs; also, as the contract adds, < 5e-6 (fp32 logits) / 3e-5 (bf16) against the reference
  on the dequantized fp8 inputs. Their sizes are M 2048 / 8192 x N 8192 / 65536; here M and N are
  divided by PEER_SCALE (default 32, so the CPU runs them in CI; AITER_PEER_SCALE=1 on a GPU runs
  their sizes).
- aiter (op_tests/triton_tests/attention/test_fp8_mqa_logits.py): s_q x s_k from 1x1 to 1024x1560,
  H 32 / 64, D 64 / 128, cp on / off, clean on / off, through aiter's module path and argument order;
  the -inf mask equal to the reference's and calc_diff < 1e-3 against the reference on bf16 inputs
  (and, as the contract adds, < 5e-6 against the dequantized reference). Where the exact result on
  the fp8 inputs itself misses the bf16 bar, the case is an expected failure that still holds us to
  the exact result (check_against_references says why).

A GPU whose kernel does not serve a case's H, D or option skips it, saying which (the counts of a run
are in the closing note of the issue that asked for them).
"""

from __future__ import annotations

import os

import pytest
import torch

from aiter import fp8_fp4_mqa_logits
from aiter.ops.fp8_mqa_logits import is_supported
from aiter.ops.triton.attention.fp8_mqa_logits import fp8_mqa_logits as aiter_form
from aiter.testing.mqa_logits import make_windows, reference_logits

FP8 = torch.float8_e4m3fn
PEER_SCALE = int(os.environ.get("AITER_PEER_SCALE", "32"))


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denominator) if denominator > 0 else 0.0


def cast_rows_to_fp8(kv: torch.Tensor):
    """Per-row e4m3 with scale amax / 448 (amax at least 1e-4), as both peers' tests quantise K."""
    scale = kv.abs().float().amax(dim=1, keepdim=True).clamp(min=1e-4) / 448.0
    return (kv.float() / scale).to(FP8), scale.squeeze(1)


def causal_windows(M: int, N: int, device):
    """The peers' causal windows: row i sees keys [0, N - M + i) (one key fewer than the contract's
    causal mode, aiter.testing's make_windows("causal"))."""
    ks = torch.zeros(M, dtype=torch.int32, device=device)
    return ks, torch.arange(M, dtype=torch.int32, device=device) + (N - M)


def raw_window_mask(ks, ke, N):
    """[M, N] True inside [ks, ke) taken as raw bounds, as both peers' tests mask."""
    n = torch.arange(N, device=ks.device)
    return (n[None, :] >= ks[:, None]) & (n[None, :] < ke[:, None])


def bf16_reference(q, kv, weights, ks, ke):
    """Both peers' reference: relu(q . k) x w summed over heads on the bf16 inputs, -inf outside
    [ks, ke) (unclamped bounds, as theirs)."""
    N = kv.shape[0]
    inside = raw_window_mask(ks, ke, N)
    out = torch.empty(q.shape[0], N, dtype=torch.float64, device=q.device)
    step = max(1, (1 << 27) // max(1, q.shape[1] * N))
    for m0 in range(0, q.shape[0], step):
        score = torch.einsum("mhd,nd->mhn", q[m0:m0 + step].double(), kv.double()).relu()
        out[m0:m0 + step] = torch.einsum("mhn,mh->mn", score, weights[m0:m0 + step].double())
    return out.masked_fill(~inside, float("-inf"))


def expand_compressed(logits, ks, ke, N):
    """A compressed [M, W] result in the full layout, -inf outside each window (the peers' check)."""
    full = torch.full((logits.shape[0], N), float("-inf"), dtype=torch.float64, device=logits.device)
    for m in range(logits.shape[0]):
        begin, end = int(ks[m]), int(ke[m])
        if end > begin:
            full[m, begin:end] = logits[m, : end - begin].double()
    return full


def require(H, D, device, logits_dtype=torch.float32, compressed=False):
    # DeepGEMM's compressed cases run without clean_logits, its full ones with it.
    if not is_supported(H, D, device, logits_dtype=logits_dtype, compressed=compressed, clean_logits=not compressed):
        pytest.skip(f"the {device} kernel does not serve H={H}, D={D}, {logits_dtype}"
                    f"{', compressed' if compressed else ''} (yet)")


def check_against_references(logits, ref_bf16, ref_dequant, dequant_bar):
    ref_mask = torch.isneginf(ref_bf16)
    assert torch.equal(torch.isneginf(logits), ref_mask), "the -inf mask differs from the reference's"
    if ref_mask.all():
        return
    got = logits.double().masked_fill(ref_mask, 0)
    diff = calc_diff(got, ref_bf16.masked_fill(ref_mask, 0))
    if diff >= 1e-3 and ref_dequant is not None:
        # Where the exact result on the fp8 inputs is itself 1e-3 or more from the bf16-input
        # reference (a few logits, all quantisation error: aiter's 1 x 16 case with torch 2.11's
        # inputs), no fp8 kernel can meet that bar: the case then holds us to the exact result and
        # is reported as an expected failure with both numbers.
        floor = calc_diff(ref_dequant.masked_fill(ref_mask, 0), ref_bf16.masked_fill(ref_mask, 0))
        if floor >= 1e-3:
            exact = calc_diff(got, ref_dequant.masked_fill(ref_mask, 0))
            assert exact < dequant_bar, f"calc_diff against the dequantized reference {exact:.3e}"
            pytest.xfail(f"the bf16-input bar is out of reach on these fp8 inputs: the exact fp8 result is "
                         f"{floor:.3e} from it (ours {diff:.3e}; ours vs the exact fp8 result {exact:.1e})")
    assert diff < 1e-3, f"calc_diff against the bf16-input reference {diff:.3e}"
    if ref_dequant is not None:
        diff = calc_diff(got, ref_dequant.masked_fill(ref_mask, 0))
        assert diff < dequant_bar, f"calc_diff against the dequantized reference {diff:.3e} >= {dequant_bar:.0e}"


# ---- DeepGEMM ---------------------------------------------------------------------------------------

DEEPGEMM_CASES = [
    pytest.param(M // PEER_SCALE, N // PEER_SCALE, H, D, dtype, compressed, cp,
                 id=f"M{M}-N{N}-H{H}-D{D}-{'bf16' if dtype == torch.bfloat16 else 'f32'}-"
                    f"{'compressed' if compressed else 'clean'}-{'cp' if cp else 'causal'}")
    for M in (2048, 8192) for N in (8192, 65536) for H in (32, 64) for D in (32, 64, 128)
    for dtype in (torch.float32, torch.bfloat16) for compressed in (True, False) for cp in (False, True)
]


@pytest.mark.parametrize("M,N,H,D,logits_dtype,compressed,cp", DEEPGEMM_CASES)
def test_deepgemm_prefill_criteria(device, M, N, H, D, logits_dtype, compressed, cp):
    require(H, D, device, logits_dtype, compressed)
    gen = torch.Generator().manual_seed(M + N + H + D)
    q = torch.randn(M, H, D, generator=gen, dtype=torch.bfloat16).to(device)
    kv = torch.randn(N, D, generator=gen, dtype=torch.bfloat16).to(device)
    weights = torch.randn(M, H, generator=gen).to(device)
    ks, ke = make_windows("cp", M, N, device) if cp else causal_windows(M, N, device)
    q_fp8 = q.to(FP8)
    kv_fp8, scales = cast_rows_to_fp8(kv)
    if compressed:
        width = int((ke - ks).max())
        logits = fp8_fp4_mqa_logits((q_fp8, None), (kv_fp8, scales), weights, ks, ke, clean_logits=False,
                                    max_seqlen_k=width, logits_dtype=logits_dtype)
        assert logits.shape == (M, width) and logits.dtype == logits_dtype
        logits = expand_compressed(logits, ks, ke, N)
    else:
        logits = fp8_fp4_mqa_logits((q_fp8, None), (kv_fp8, scales), weights, ks, ke, logits_dtype=logits_dtype)
        assert logits.shape == (M, N) and logits.dtype == logits_dtype
    ref_dequant = reference_logits(q_fp8, kv_fp8, scales, weights, ks, ke, clean_logits=True)
    check_against_references(logits, bf16_reference(q, kv, weights, ks, ke), ref_dequant,
                             3e-5 if logits_dtype == torch.bfloat16 else 5e-6)


# ---- aiter ------------------------------------------------------------------------------------------

AITER_SIZES = [(1, 1), (1, 16), (1, 113), (17, 76), (61, 113), (61, 1024), (128, 1024), (1024, 1024), (1024, 1560)]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("cp", [False, True], ids=["causal", "cp"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("H", [32, 64])
@pytest.mark.parametrize("s_q,s_k", AITER_SIZES, ids=[f"{m}x{n}" for m, n in AITER_SIZES])
def test_aiter_prefill_criteria(device, s_q, s_k, H, D, cp, clean):
    require(H, D, device)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(s_q, H, D, generator=gen, dtype=torch.bfloat16).to(device)
    kv = torch.randn(s_k, D, generator=gen, dtype=torch.bfloat16).to(device)
    kv_fp8, scales = cast_rows_to_fp8(kv)
    kv = (kv_fp8.float() * scales[:, None]).to(torch.bfloat16)  # aiter's test references the dequantized K
    weights = torch.randn(s_q, H, generator=gen).to(device)
    use_cp = cp and s_k % s_q == 0 and s_q % 2 == 0
    ks, ke = make_windows("cp", s_q, s_k, device) if use_cp else causal_windows(s_q, s_k, device)
    q_fp8 = q.to(FP8)
    kv_fp8, scales = cast_rows_to_fp8(kv)
    scales = scales.squeeze()  # 0-d when s_k == 1, as aiter's quantiser leaves it
    logits = aiter_form(q_fp8, kv_fp8, scales, weights, ks, ke, clean)
    assert logits.shape == (s_q, s_k)
    if not clean:  # the peer's check: the window's values, -inf elsewhere
        logits = logits.masked_fill(~raw_window_mask(ks, ke, s_k), float("-inf"))
    ref_dequant = reference_logits(q_fp8, kv_fp8, scales.reshape(-1), weights, ks, ke, clean_logits=True)
    check_against_references(logits, bf16_reference(q, kv, weights, ks, ke), ref_dequant, 5e-6)
