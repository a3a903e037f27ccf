"""The indexer top-k (docs/operator.md, "Indexer top-k"): the unfused ops top_k_per_row_prefill /
top_k_per_row_decode on given logits, and the fused ops fp8_fp4_mqa_topk_indices /
fp8_fp4_paged_mqa_topk_indices (vLLM's call forms) and their functional forms.

What is checked, on the "cpu" device always and on "cuda" when torch sees a GPU (skipped otherwise,
saying so):
  - the unfused ops exactly (index for index) against a plain-torch statement of the rule on the same
    float32 / bfloat16 logits: the k largest choosable logits of the row's window, ties to the lower
    column (constructed ties: logits on a coarse grid), NaN and -inf never chosen, +inf chosen, the
    columns ascending, then -1; absolute columns; every window mode, k > window, empty rows, zero and
    negative lengths, [B] / [B, next_n] lengths, strided logits;
  - the fused ops bit for bit equal to the unfused op on the logits op's own output (so they select
    from the op's own float32 logits), and against the float64 reference: where two logits lie within
    the logits tolerance of the row's k-th value either may be chosen (the test allows exactly that
    and nothing else), every key clearly above the k-th is chosen, every chosen key is not clearly
    below it; recall and the exact-set rate are printed;
  - outputs pre-filled with garbage (every slot is written); all-zero context lengths; N = 0;
  - twenty calls, thread counts and workspace splits (one row per chunk .. all rows) bitwise identical;
  - on a GPU: the same, the GPU result equal to the CPU one where the logits agree, CUDA-graph capture
    with lengths changed between replays, and the workspace bound on peak memory;
  - every bad argument is an error naming it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import aiter
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from aiter.ops.indexer_topk import (fp8_fp4_mqa_topk_indices, fp8_fp4_paged_mqa_topk_indices, fp8_mqa_topk_indices,
                                    fp8_paged_mqa_topk_indices, top_k_per_row_decode, top_k_per_row_prefill)
from aiter.testing.mqa_logits import WINDOW_MODES, make_inputs, make_windows, mode_applies, reference_logits
from aiter.testing.paged_mqa_logits import make_paged_case, num_shares, reference_paged_logits, row_keys

GARBAGE = 0x5A5A5A5A
# The logits' own error bars (docs/operator.md): a row's max |error| <= rtol * max |ref of the row| + atol.
ROW_TOL = {"cpu": (2e-5, 1e-6), "cuda": (2e-3, 1e-6)}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the sm90 top-k kernel)")


# ---- the rule, stated in plain torch ----------------------------------------------------------------


def rule_topk(logits: torch.Tensor, begin: torch.Tensor, end: torch.Tensor, k: int) -> torch.Tensor:
    """int32 [rows, k]: the contract's answer on these logits (float32/bf16/float64), windows [begin, end)."""
    rows, width = logits.shape
    values = logits.double().cpu()
    cols = torch.arange(width)
    inside = (cols[None, :] >= begin.cpu()[:, None]) & (cols[None, :] < end.cpu()[:, None])
    choosable = inside & ~torch.isnan(values) & (values != float("-inf"))
    ranked = torch.where(choosable, values, torch.full_like(values, float("-inf")))
    # A stable descending sort keeps equal values in column order: the lower column wins the tie.
    order = torch.sort(ranked, dim=1, descending=True, stable=True).indices
    count = choosable.sum(dim=1).clamp(max=k)
    out = torch.full((rows, k), -1, dtype=torch.int32)
    for r in range(rows):
        n = int(count[r])
        out[r, :n] = order[r, :n].sort().values.to(torch.int32)
    return out


def prefill_windows(ks, ke, width):
    return ks.long().clamp(0, width), ke.long().clamp(0, width).maximum(ks.long().clamp(0, width))


def decode_windows(seq_lens, next_n, rows, width):
    keys = row_keys(seq_lens.cpu(), next_n, width)[:rows]
    return torch.zeros_like(keys), keys


def check_against_reference(ours, ref, begin, end, k, device, what):
    """ours vs the float64 reference logits `ref` [rows, width]: the allowance of the module docstring.
    Returns (recall, exact-set rate)."""
    rtol, atol = ROW_TOL[device]
    ours = ours.cpu()
    ref = ref.cpu()
    ref_idx = rule_topk(ref, begin, end, k)
    hits = total = exact = 0
    for r in range(ours.shape[0]):
        row = ours[r]
        n = int((ref_idx[r] >= 0).sum())
        chosen = row[:n]
        assert bool((row[n:] == -1).all()), f"{what}: row {r}: -1 padding after {n} keys, got {row.tolist()[:16]}"
        assert bool((chosen >= begin[r]).all() and (chosen < end[r]).all()), f"{what}: row {r}: index off its window"
        assert bool((chosen[1:] > chosen[:-1]).all()), f"{what}: row {r}: columns not strictly ascending"
        expect = set(ref_idx[r, :n].tolist())
        got = set(chosen.tolist())
        hits += len(expect & got)
        total += n
        exact += expect == got
        if expect != got:
            window = ref[r, int(begin[r]):int(end[r])]
            tol = rtol * float(window.abs().max()) + atol
            kth = min(float(ref[r, i]) for i in expect)
            for i in got - expect:  # chosen instead of a reference key: must tie with the k-th within tol
                assert float(ref[r, i]) >= kth - tol, (f"{what}: row {r}: chose {i} (ref {float(ref[r, i])}) far "
                                                       f"below the k-th value {kth} (tol {tol})")
            for i in expect - got:  # left out: must not be clearly above the k-th
                assert float(ref[r, i]) <= kth + tol, (f"{what}: row {r}: left out {i} (ref {float(ref[r, i])}) "
                                                       f"clearly above the k-th value {kth} (tol {tol})")
    recall = hits / total if total else 1.0
    rate = exact / max(1, ours.shape[0])
    print(f"{what}: recall {recall:.6f}, exact-set rate {rate:.4f} over {ours.shape[0]} rows")
    return recall, rate


def tied_logits(rows, width, seed, dtype=torch.float32, specials=True):
    """Logits on a coarse grid (many exact ties), with NaN, -inf, +inf and -0.0 / +0.0 sprinkled in."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randint(-40, 40, (rows, width), generator=g).float() / 8.0)
    if specials:
        pick = torch.rand(rows, width, generator=g)
        x[pick < 0.03] = float("nan")
        x[(pick >= 0.03) & (pick < 0.06)] = float("-inf")
        x[(pick >= 0.06) & (pick < 0.065)] = float("inf")
        x[(pick >= 0.065) & (pick < 0.08)] = -0.0
    return x.to(dtype)


# ---- unfused ops: exact ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", WINDOW_MODES + ("random",))
def test_prefill_rule_exact(device, mode, dtype):
    rows, width = 24, 2600
    if not mode_applies(mode, rows, width):
        rows = 26  # 2600 % 26 == 0
    logits = tied_logits(rows, width, seed=hash(mode) % 1000, dtype=dtype).to(device)
    ks, ke = make_windows(mode, rows, width, device=device, generator=torch.Generator().manual_seed(3))
    begin, end = prefill_windows(ks.cpu(), ke.cpu(), width)
    for k in (1, 7, 512, 2048):
        indices = torch.full((rows, k), GARBAGE, dtype=torch.int32, device=device)
        values = torch.full((rows, k), float("nan"), dtype=torch.float32, device=device)
        top_k_per_row_prefill(logits, ks, ke, indices, values, rows, logits.stride(0), logits.stride(1), k)
        want = rule_topk(logits, begin, end, k)
        assert torch.equal(indices.cpu(), want), f"{mode} k={k}: differs from the rule"
        picked = want.clamp(min=0).long()
        want_values = torch.where(want >= 0, logits.cpu().float().gather(1, picked), torch.tensor(float("-inf")))
        assert torch.equal(values.cpu(), want_values), f"{mode} k={k}: values differ"


def test_prefill_strided_logits_and_output(device):
    base = tied_logits(40, 3000, seed=5).to(device)
    logits = base[::2, 100:2900]  # row stride 6000, 2800 columns
    rows = logits.shape[0]
    ks = torch.randint(0, 1500, (rows,), dtype=torch.int32, device=device)
    ke = ks + torch.randint(0, 1400, (rows,), dtype=torch.int32, device=device)
    out = torch.full((rows, 1100), GARBAGE, dtype=torch.int32, device=device)
    indices = out[:, :1024]  # row stride 1100 > k
    top_k_per_row_prefill(logits, ks, ke, indices, None, rows, logits.stride(0), logits.stride(1), 1024)
    begin, end = prefill_windows(ks.cpu(), ke.cpu(), logits.shape[1])
    assert torch.equal(indices.cpu(), rule_topk(logits, begin, end, 1024))
    assert bool((out[:, 1024:] == GARBAGE).all()), "columns past k were written"


@pytest.mark.parametrize("next_n,lens_2d", [(1, False), (2, False), (4, False), (2, True), (1, True)])
def test_decode_rule_exact(device, next_n, lens_2d):
    batches, width = 9, 3000
    rows = batches * next_n
    g = torch.Generator().manual_seed(next_n)
    lens = torch.tensor([0, -5, 1, next_n - 1, 700, 2048, 2049, 2999, 5000], dtype=torch.int32)
    if lens_2d:
        lens = torch.randint(-3, 4000, (batches, next_n), generator=g, dtype=torch.int32)
    lens = lens.to(device)
    logits = tied_logits(rows, width, seed=11 + next_n).to(device)
    for k in (512, 1024, 2048):
        indices = torch.full((rows, k), GARBAGE, dtype=torch.int32, device=device)
        top_k_per_row_decode(logits, next_n, lens, indices, rows, logits.stride(0), logits.stride(1), k)
        begin, end = decode_windows(lens, next_n, rows, width)
        assert torch.equal(indices.cpu(), rule_topk(logits, begin, end, k)), f"k={k}"


def test_decode_lengths_b_by_1(device):
    # vLLM passes [B, 1] lengths when there are no draft tokens: one length per batch.
    lens = torch.tensor([[5], [0], [3000]], dtype=torch.int32, device=device)
    logits = tied_logits(3, 2500, seed=2).to(device)
    a = torch.full((3, 512), GARBAGE, dtype=torch.int32, device=device)
    b = torch.full((3, 512), GARBAGE, dtype=torch.int32, device=device)
    top_k_per_row_decode(logits, 1, lens, a, 3, logits.stride(0), 1, 512)
    top_k_per_row_decode(logits, 1, lens.view(3), b, 3, logits.stride(0), 1, 512)
    assert torch.equal(a, b)
    assert bool((a[1] == -1).all())


def test_all_rows_empty(device):
    logits = torch.randn(6, 100, device=device)
    zeros = torch.zeros(6, dtype=torch.int32, device=device)
    out = torch.full((6, 512), GARBAGE, dtype=torch.int32, device=device)
    top_k_per_row_prefill(logits, zeros, zeros, out, None, 6, 100, 1, 512)
    assert bool((out == -1).all())
    out.fill_(GARBAGE)
    top_k_per_row_decode(logits, 2, zeros[:3], out, 6, 100, 1, 512)
    assert bool((out == -1).all())


def test_num_rows_leaves_later_rows(device):
    logits = torch.randn(5, 300, device=device)
    ks = torch.zeros(5, dtype=torch.int32, device=device)
    ke = torch.full((5,), 300, dtype=torch.int32, device=device)
    out = torch.full((5, 8), GARBAGE, dtype=torch.int32, device=device)
    top_k_per_row_prefill(logits, ks, ke, out, None, 3, 300, 1, 8)
    assert bool((out[3:] == GARBAGE).all()) and bool((out[:3] >= 0).all())


# ---- fused ops ------------------------------------------------------------------------------------


def prefill_case(mode, M, N, H=4, D=32, seed=0):
    q, kv, scales, weights = make_inputs(M, N, H, D, seed=seed)
    ks, ke = make_windows(mode, M, N, generator=torch.Generator().manual_seed(seed))
    return q, kv, scales, weights, ks, ke


@pytest.mark.parametrize("mode", WINDOW_MODES + ("random",))
def test_fused_prefill(device, mode):
    M, N = 32, 2560
    if device == "cuda":
        H, D = 32, 128
    else:
        H, D = 4, 32
    q, kv, scales, weights, ks, ke = [t.to(device) for t in prefill_case(mode, M, N, H, D, seed=7)]
    ref = reference_logits(q, kv, scales, weights, ks, ke, clean_logits=True)
    begin, end = prefill_windows(ks.cpu(), ke.cpu(), N)
    logits = fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)
    for k in (512, 1024, 2048):
        out = torch.full((M, k), GARBAGE, dtype=torch.int32, device=device)
        assert fp8_fp4_mqa_topk_indices((q, None), (kv, scales), weights, ks, ke, out) is True
        own = torch.full((M, k), GARBAGE, dtype=torch.int32, device=device)
        top_k_per_row_prefill(logits, ks, ke, own, None, M, logits.stride(0), logits.stride(1), k)
        assert torch.equal(out, own), f"{mode} k={k}: not the top-k of the op's own logits"
        check_against_reference(out, ref, begin, end, k, device, f"prefill {mode} k={k}")
        # The functional form, with a workspace of a single row per chunk: the same indices.
        alone = fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, k, workspace_bytes=1)
        assert torch.equal(alone, out)


@pytest.mark.parametrize("next_n,lens_2d", [(1, False), (2, False), (2, True)])
def test_fused_decode(device, next_n, lens_2d):
    H, D, block_kv = (4, 32, 16) if device == "cpu" else (32, 128, 64)
    lens = [0, 1, 5, 300, 1023, 2048, 2049, 3100]
    args = make_paged_case(lens, next_n, H, D, block_kv, max_context_len=3000, lens_2d=lens_2d, seed=3, device=device)
    B = len(lens)
    rows = B * next_n
    ref = reference_paged_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                 args["block_table"], 3000, clean_logits=True)
    begin, end = decode_windows(args["context_lens"], next_n, rows, 3000)
    logits = fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                  args["block_table"], args["schedule_meta"], 3000, False)
    for k in (512, 2048):
        out = torch.full((rows, k), GARBAGE, dtype=torch.int32, device=device)
        assert fp8_fp4_paged_mqa_topk_indices((args["q"], None), args["kv_cache"], args["weights"],
                                              args["context_lens"], args["block_table"], 3000, out) is True
        own = torch.full((rows, k), GARBAGE, dtype=torch.int32, device=device)
        top_k_per_row_decode(logits, next_n, args["context_lens"], own, rows, logits.stride(0), 1, k)
        assert torch.equal(out, own), f"k={k}: not the top-k of the op's own logits"
        check_against_reference(out, ref, begin, end, k, device, f"decode next_n={next_n} k={k}")
        split = fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                           args["block_table"], 3000, k, workspace_bytes=1)
        assert torch.equal(split, out), "a chunk of one batch gives other indices"


def test_fused_decode_zero_lengths_and_model_len(device):
    H, D, block_kv = (4, 32, 16) if device == "cpu" else (32, 128, 64)
    args = make_paged_case([0, 0, 0], 1, H, D, block_kv, max_context_len=256, seed=1, device=device)
    out = fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                     args["block_table"], 256, 512)
    assert bool((out == -1).all())
    out = fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                     args["block_table"], 0, 512)
    assert out.shape == (3, 512) and bool((out == -1).all())


def test_fused_decode_never_past_max_model_len(device):
    # A length past max_model_len is cut there (the logits have max_model_len columns).
    H, D, block_kv = (4, 32, 16) if device == "cpu" else (32, 128, 64)
    args = make_paged_case([900], 1, H, D, block_kv, max_context_len=900, seed=4, device=device)
    out = fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                     args["block_table"], 600, 512)
    assert int(out.max()) < 600 and bool((out >= 0).all())


def test_fused_prefill_no_keys(device):
    q, kv, scales, weights, ks, ke = [t.to(device) for t in prefill_case("causal", 4, 8)]
    out = fp8_mqa_topk_indices(q, kv[:0], scales[:0], weights, ks, ke, 512)
    assert out.shape == (4, 512) and bool((out == -1).all())


def test_fused_ties_lower_key_wins(device):
    # Keys repeated with equal scales give exactly equal logits: the lower key index must win each tie.
    M, N, H, D = 8, 1200, 4, 32
    q, kv, scales, weights = make_inputs(M, N, H, D, seed=9)
    kv = kv[torch.arange(N) % 37].contiguous()
    scales = torch.full((N,), 0.25)
    ks = torch.zeros(M, dtype=torch.int32)
    ke = torch.full((M,), N, dtype=torch.int32)
    if device == "cuda" and not aiter.is_supported(H, D, device):
        q, kv, weights = q.repeat(1, 8, 4)[:, :32], kv.repeat(1, 4), weights.repeat(1, 8)
    q, kv, scales, weights, ks, ke = [t.to(device) for t in (q, kv, scales, weights, ks, ke)]
    out = fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 512)
    logits = fp8_mqa_logits(q, kv, scales, weights, ks, ke, False)
    assert torch.equal(out.cpu(), rule_topk(logits, ks.cpu().long(), ke.cpu().long(), 512))
    # 1200 keys in 37 classes of ~32 equal logits: the chosen members of each class are its lowest keys.
    for r in range(M):
        chosen = set(out[r].tolist())
        for c in range(37):
            members = list(range(c, N, 37))
            taken = [i for i in members if i in chosen]
            assert taken == members[:len(taken)], f"row {r}: class {c} took {taken[:4]}.. not its lowest keys"


def test_fused_deterministic(device):
    M, N = 24, 3000
    H, D = (4, 32) if device == "cpu" else (32, 128)
    q, kv, scales, weights, ks, ke = [t.to(device) for t in prefill_case("multi_req", M, N, H, D, seed=2)]
    first = fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 1024)
    for _ in range(19):
        assert torch.equal(fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 1024), first)
    for workspace in (1, N * 4 * 5, N * 4 * 7, 1 << 30):
        assert torch.equal(fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 1024, workspace_bytes=workspace), first)
    # Batch splits: the rows of a call computed as two calls.
    halves = torch.cat([fp8_mqa_topk_indices(q[:11], kv, scales, weights[:11], ks[:11], ke[:11], 1024),
                        fp8_mqa_topk_indices(q[11:], kv, scales, weights[11:], ks[11:], ke[11:], 1024)])
    assert torch.equal(halves, first)
    if device == "cpu":
        threads = torch.get_num_threads()
        try:
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                assert torch.equal(fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 1024), first)
        finally:
            torch.set_num_threads(threads)


def test_unfused_deterministic_threads():
    logits = tied_logits(64, 5000, seed=13)
    lens = torch.randint(0, 6000, (64,), dtype=torch.int32)
    outs = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 4):
            torch.set_num_threads(n)
            out = torch.empty(64, 2048, dtype=torch.int32)
            top_k_per_row_decode(logits, 1, lens, out, 64, 5000, 1, 2048)
            outs.append(out)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(o, outs[0]) for o in outs)


# ---- bad inputs ------------------------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
    logits = torch.randn(4, 50)
    ks = torch.zeros(4, dtype=torch.int32)
    ke = torch.full((4,), 50, dtype=torch.int32)
    out = torch.empty(4, 8, dtype=torch.int32)
    call = lambda **kw: top_k_per_row_prefill(**{**dict(logits=logits, rowStarts=ks, rowEnds=ke, indices=out,  # noqa: E731
                                                        values=None, numRows=4, stride0=50, stride1=1, k=8), **kw})
    with pytest.raises(TypeError, match="logits must have dtype"):
        call(logits=logits.half())
    with pytest.raises(TypeError, match="rowStarts must have dtype torch.int32"):
        call(rowStarts=ks.long())
    with pytest.raises(TypeError, match="indices must have dtype torch.int32"):
        call(indices=out.long())
    with pytest.raises(TypeError, match="values must have dtype torch.float32"):
        call(values=torch.empty(4, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="k must be in"):
        call(k=0)
    with pytest.raises(ValueError, match="k must be in"):
        call(k=4097, indices=torch.empty(4, 4097, dtype=torch.int32))
    with pytest.raises(ValueError, match="indices must have at least"):
        call(k=16)
    with pytest.raises(ValueError, match="stride0 must be"):
        call(stride0=49)
    with pytest.raises(ValueError, match="stride1 must be"):
        call(stride1=2)
    with pytest.raises(ValueError, match="num_rows must be"):
        call(numRows=5)
    with pytest.raises(ValueError, match="rowEnds must be 1-D"):
        call(rowEnds=ke[:3])
    with pytest.raises(TypeError, match="numRows must be an int"):
        call(numRows=4.0)
    with pytest.raises(TypeError, match="stable must be a bool"):
        top_k_per_row_prefill(logits, ks, ke, out, None, 4, 50, 1, 8, stable=None)
    with pytest.raises(ValueError, match="seqLens must be"):
        top_k_per_row_decode(logits, 2, torch.zeros(2, 3, dtype=torch.int32), out, 4, 50, 1, 8)
    with pytest.raises(ValueError, match="next_n must be"):
        top_k_per_row_decode(logits, 0, ke, out, 4, 50, 1, 8)
    with pytest.raises(ValueError, match="seqLens has"):
        top_k_per_row_decode(logits, 1, ke[:2], out, 4, 50, 1, 8)

    q, kv, scales, weights, cks, cke = prefill_case("causal", 4, 64)
    f = fp8_fp4_mqa_topk_indices
    with pytest.raises(TypeError, match="topk_indices must have dtype torch.int32"):
        f((q, None), (kv, scales), weights, cks, cke, torch.empty(4, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="topk_indices must be 2-D"):
        f((q, None), (kv, scales), weights, cks, cke, torch.empty(3, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="at most 4096"):
        f((q, None), (kv, scales), weights, cks, cke, torch.empty(4, 4097, dtype=torch.int32))
    with pytest.raises(NotImplementedError, match="q scale"):
        f((q, torch.ones(4)), (kv, scales), weights, cks, cke, torch.empty(4, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match="kv must be the pair"):
        f((q, None), kv, weights, cks, cke, torch.empty(4, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="topk must be in"):
        fp8_mqa_topk_indices(q, kv, scales, weights, cks, cke, -1)
    with pytest.raises(ValueError, match="workspace_bytes must be"):
        fp8_mqa_topk_indices(q, kv, scales, weights, cks, cke, 8, workspace_bytes=0)
    # The logits op's own checks name its arguments through the fused op.
    with pytest.raises(TypeError, match="weights"):
        fp8_mqa_topk_indices(q, kv, scales, weights.double(), cks, cke, 8)
    args = make_paged_case([10, 20], 1, 4, 32, 16, seed=0)
    with pytest.raises(ValueError, match="max_model_len must be >= 0"):
        fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                   args["block_table"], -1, 8)
    with pytest.raises(TypeError, match="max_model_len must be an int"):
        fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                   args["block_table"], 20.0, 8)


def test_custom_ops_opcheck():
    logits = tied_logits(4, 300, seed=1, specials=False)
    ks = torch.tensor([0, 5, 100, 300], dtype=torch.int32)
    ke = torch.tensor([300, 6, 50, 300], dtype=torch.int32)
    out = torch.empty(4, 16, dtype=torch.int32)
    values = torch.empty(4, 16)
    # Every check: the schema (what is mutated), the fake kernels, the autograd registration, AOT dispatch.
    for args in ((logits, ks, ke, out, None, 4, 300, 1, 16), (logits, ks, ke, out, values, 4, 300, 1, 16),
                 (logits.clone().requires_grad_(), ks, ke, out, None, 4, 300, 1, 16)):
        torch.library.opcheck(torch.ops.aiter.top_k_per_row_prefill.default, args)
    torch.library.opcheck(torch.ops.aiter.top_k_per_row_decode.default, (logits, 1, ke, out, 4, 300, 1, 16))


@pytest.mark.parametrize("form", ["prefill", "decode"])
def test_custom_ops_write_as_torch_in_place_ops(form):
    """What the ops write follows torch's in-place rules (as fp8_mqa_logits_out's out): the version
    counter is bumped, an inference tensor is refused outside inference mode, and a float output that
    requires grad is refused. The logits may require grad: the indices are integers."""
    logits = tied_logits(4, 300, seed=2, specials=False)
    ks = torch.zeros(4, dtype=torch.int32)
    ke = torch.full((4,), 300, dtype=torch.int32)

    def run(out, values=None, logits=logits):
        if form == "prefill":
            torch.ops.aiter.top_k_per_row_prefill(logits, ks, ke, out, values, 4, 300, 1, 16)
        else:
            torch.ops.aiter.top_k_per_row_decode(logits, 1, ke, out, 4, 300, 1, 16)

    out = torch.full((4, 16), GARBAGE, dtype=torch.int32)
    before = out._version
    run(out, logits=logits.clone().requires_grad_())
    assert out._version == before + 1
    expected = out.clone()
    with torch.inference_mode():
        frozen = torch.full((4, 16), GARBAGE, dtype=torch.int32)
    with pytest.raises(RuntimeError, match=rf"^top_k_per_row_{form}: indices is an inference tensor"):
        run(frozen)
    with torch.inference_mode():
        run(frozen)
    assert torch.equal(frozen, expected)
    if form == "prefill":
        values = torch.empty(4, 16, requires_grad=True)
        with pytest.raises(RuntimeError, match=r"^top_k_per_row_prefill: values is a leaf tensor that requires grad"):
            run(out, values)
        with torch.no_grad():
            run(out, values)
        assert torch.equal(values.detach(), torch.gather(logits, 1, expected.long()))


def test_exports():
    for name in ("fp8_fp4_mqa_topk_indices", "fp8_fp4_paged_mqa_topk_indices", "fp8_mqa_topk_indices",
                 "fp8_paged_mqa_topk_indices", "top_k_per_row_prefill", "top_k_per_row_decode"):
        assert name in aiter.__all__ and callable(getattr(aiter, name))


# ---- GPU only ------------------------------------------------------------------------------------


@needs_gpu
def test_gpu_matches_cpu_on_same_logits():
    for dtype in (torch.float32, torch.bfloat16):
        logits = tied_logits(300, 40000, seed=21, dtype=dtype)
        ks = torch.randint(0, 20000, (300,), dtype=torch.int32)
        ke = ks + torch.randint(0, 25000, (300,), dtype=torch.int32)
        for k in (512, 1024, 2048, 4096):
            cpu = torch.full((300, k), GARBAGE, dtype=torch.int32)
            top_k_per_row_prefill(logits, ks, ke, cpu, None, 300, 40000, 1, k)
            gpu = torch.full((300, k), GARBAGE, dtype=torch.int32, device="cuda")
            g = logits.cuda()
            top_k_per_row_prefill(g, ks.cuda(), ke.cuda(), gpu, None, 300, 40000, 1, k)
            assert torch.equal(gpu.cpu(), cpu), f"{dtype} k={k}"


# A new process's first top-k calls, from threads started together: the module loads once, and the
# sm90 launcher asks the device once (SM count, shared-memory ceilings) while the others wait for it.
RACING_FIRST_CALLS = textwrap.dedent("""
    import sys
    import threading
    import torch
    from aiter import top_k_per_row_prefill

    device = sys.argv[1]
    rows, width, k, callers = 64, 20000, 1024, 8
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(rows, width, generator=gen).to(device)
    ks = torch.zeros(rows, dtype=torch.int32, device=device)
    ke = torch.randint(0, width + 1, (rows,), generator=gen, dtype=torch.int32).to(device)
    outs = [torch.full((rows, k), -7, dtype=torch.int32, device=device) for _ in range(callers)]
    barrier, errors = threading.Barrier(callers), []

    def call(i):
        try:
            barrier.wait()
            top_k_per_row_prefill(logits, ks, ke, outs[i], None, rows, width, 1, k)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if device != "cpu":
        torch.cuda.synchronize()
    assert not errors, errors
    lone = torch.full((rows, k), -7, dtype=torch.int32, device=device)
    top_k_per_row_prefill(logits, ks, ke, lone, None, rows, width, 1, k)
    assert all(torch.equal(out, lone) for out in outs), "a racing caller's indices differ from a lone call's"
    print("ok")
""")


def test_racing_first_calls(device):
    # The module is built here first (a build is test_jit's race), so the child's threads race its
    # load and the first calls.
    top_k_per_row_prefill(torch.zeros(1, 8, device=device), torch.zeros(1, dtype=torch.int32, device=device),
                          torch.full((1,), 8, dtype=torch.int32, device=device),
                          torch.empty(1, 4, dtype=torch.int32, device=device), None, 1, 8, 1, 4)
    done = subprocess.run([sys.executable, "-c", RACING_FIRST_CALLS, device], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


@needs_gpu
def test_gpu_decode_cuda_graph_changing_lengths():
    H, D, block_kv, next_n = 32, 128, 64, 2
    lens = [4000, 3000, 2500, 100]
    args = make_paged_case(lens, next_n, H, D, block_kv, max_context_len=4096, seed=5, device="cuda")
    out = torch.full((len(lens) * next_n, 2048), GARBAGE, dtype=torch.int32, device="cuda")
    call = lambda: fp8_fp4_paged_mqa_topk_indices((args["q"], None), args["kv_cache"], args["weights"],  # noqa: E731
                                                   args["context_lens"], args["block_table"], 4096, out)
    call()  # warm-up: builds and loads outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    # Each batch's cache blocks cover its first length, so the lengths only shrink from there.
    for new_lens in ([4000, 3000, 2500, 100], [10, 0, 2049, 99], [2500, 2999, 1, 1]):
        args["context_lens"].copy_(torch.tensor(new_lens, dtype=torch.int32))
        out.fill_(GARBAGE)
        graph.replay()
        torch.cuda.synchronize()
        eager = fp8_paged_mqa_topk_indices(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                           args["block_table"], 4096, 2048)
        assert torch.equal(out, eager), f"graph replay with lengths {new_lens} differs from eager"


@needs_gpu
def test_gpu_prefill_cuda_graph_changing_windows():
    M, N, H, D = 64, 8192, 32, 128
    q, kv, scales, weights, ks, ke = [t.cuda() for t in prefill_case("causal", M, N, H, D, seed=6)]
    out = torch.full((M, 2048), GARBAGE, dtype=torch.int32, device="cuda")
    call = lambda: fp8_fp4_mqa_topk_indices((q, None), (kv, scales), weights, ks, ke, out)  # noqa: E731
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for mode in ("multi_req", "misaligned", "empty"):
        nks, nke = make_windows(mode, M, N)
        ks.copy_(nks)
        ke.copy_(nke)
        out.fill_(GARBAGE)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fp8_mqa_topk_indices(q, kv, scales, weights, ks, ke, 2048)), mode


@needs_gpu
def test_gpu_workspace_bound():
    # 512 x 131072 rows: the fused op's extra memory stays within its workspace and the output.
    M, N, H, D = 512, 131072, 32, 128  # 256 MiB of float32 logits: twice the workspace
    q, kv, scales, weights, ks, ke = [t.cuda() for t in prefill_case("causal", M, N, H, D, seed=8)]
    out = torch.empty((M, 2048), dtype=torch.int32, device="cuda")
    fp8_fp4_mqa_topk_indices((q, None), (kv, scales), weights, ks, ke, out)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fp8_fp4_mqa_topk_indices((q, None), (kv, scales), weights, ks, ke, out)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    full = M * N * 4
    print(f"extra memory {extra / 2**20:.1f} MiB for {full / 2**20:.0f} MiB of float32 logits")
    assert full >= 2 * aiter.ops.indexer_topk.WORKSPACE_BYTES
    assert extra <= aiter.ops.indexer_topk.WORKSPACE_BYTES + (4 << 20)


def test_bench_rows_on_the_cpu():
    from aiter.bench import indexer_topk as bench
    from aiter.bench import machine

    timer = machine.CpuTimer(iters=1, budget_s=0.0)
    pre = bench.prefill_row("causal", 8, 600, 4, 64, torch.device("cpu"), timer, None, rounds=2)
    dec = bench.decode_row(4, 2, 600, 1, 64, torch.device("cpu"), timer, None, None, rounds=2)
    for row in (pre, dec):
        assert row["fused_us"] > 0 and row["unfused_us"] > 0 and row["peer_topk_us"] > 0
        assert row["fused_aa"] > 0  # the fused call timed against itself in the same rounds
    table = bench.to_markdown({"header": "h", "prefill": [pre], "decode": [dec]})
    assert table.count("\n| ") >= 4 and "fused A/A" in table


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_wide_rows_and_crowded_bins(dtype):
    # Rows of 32K keys (the register kernel) and 131K keys (the cluster kernel, 8 CTAs per row), rows
    # whose threshold bin holds more keys than a cluster CTA lists (near-equal and all-equal logits:
    # fine passes over every staged key), NaN / -inf / ties.
    g = torch.Generator().manual_seed(31)
    for width in (32768, 131072 + 17):
        rows = 6
        x = torch.randn(rows, width, generator=g)
        x[1] = 1.0 + torch.rand(width, generator=g) * 0.01  # one coarse bin: more than kCandidates
        x[2] = 0.5  # all equal: the lowest columns win
        x[2, ::97] = 2.0
        x[3] = tied_logits(1, width, seed=32)[0]
        x[4, ::3] = float("nan")
        x[4, 1::3] = float("-inf")
        x = x.to(dtype)
        ks = torch.tensor([0, 0, 0, 5, 100, 70000 if width > 70000 else 3], dtype=torch.int32)
        ke = torch.full((rows,), width, dtype=torch.int32)
        for k in (1, 2048, 4096):
            ref = rule_topk(x.float(), ks.long(), ke.long(), k)
            gpu = torch.full((rows, k), GARBAGE, dtype=torch.int32, device="cuda")
            vals = torch.full((rows, k), float("nan"), device="cuda")
            top_k_per_row_prefill(x.cuda(), ks.cuda(), ke.cuda(), gpu, vals, rows, width, 1, k)
            assert torch.equal(gpu.cpu(), ref), f"{dtype} width={width} k={k}"
            want = torch.where(ref >= 0, x.float().gather(1, ref.clamp(min=0).long()), torch.tensor(float("-inf")))
            assert torch.equal(vals.cpu(), want), f"values {dtype} width={width} k={k}"


def _adversarial_rows(width, k, g):
    """Rows for the GPU kernels' edge cases, each [width] float32."""
    rows = [torch.randn(width, generator=g)]
    rows.append(torch.full((width,), 0.5))  # all equal: the lowest columns win
    x = torch.ones(width)  # the k-th value tied many times: k // 2 above it, every other key equal to it
    x[torch.randperm(width, generator=g)[: max(1, k // 2)]] = 2.0
    rows.append(x)
    rows.append(1.0 + torch.rand(width, generator=g) * 1e-3)  # one coarse bin: past the candidate list
    x = torch.randn(width, generator=g)
    x[::3] = float("nan")
    x[1::3] = float("-inf")
    rows.append(x)
    x = torch.randn(width, generator=g)  # -0.0 and +0.0 tie
    x[torch.rand(width, generator=g) < 0.6] = -0.0
    x[torch.rand(width, generator=g) < 0.2] = 0.0
    rows.append(x)
    rows.append(tied_logits(1, width, seed=width + k)[0])
    x = torch.full((width,), float("-inf"))  # fewer choosable keys than k
    x[torch.randperm(width, generator=g)[:5]] = torch.randn(5, generator=g)
    rows.append(x)
    return torch.stack(rows)


def _register_capacity(keys, dtype):
    """register_select.cuh: max_width, the widest row an instance of `keys` keys per thread holds."""
    return 1024 * keys - 16 // torch.empty(0, dtype=dtype).element_size() + 1


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_select_kernel_edges(dtype):
    # The register kernel (rows up to ~33K columns: each instance, at its capacity and one past it) and
    # the cluster kernel (1 to 8 CTAs per row), row pitches and windows off 16-byte boundaries (the
    # first 8 rows see whole windows at 8 successive offsets; later ones windows that end early too),
    # every adversarial row kind, k from 1 to 4096: bit for bit the CPU path's indices and the logits
    # themselves as values.
    g = torch.Generator().manual_seed(41)
    cap = [_register_capacity(keys, dtype) for keys in (9, 17, 33)]
    cases = ((37, 7), (3000, 512), (8192, 2048), (cap[0], 2048), (cap[0] + 1, 4096), (12000, 1024),
             (cap[1], 4096), (cap[1] + 1, 2048), (20000, 1024), (cap[2], 1), (cap[2] + 1, 2048),
             (65536 + 5, 4096), (131072, 2048), (131072 + 17, 512))
    for width, k in cases:
        base = _adversarial_rows(width, k, g)
        # Few rows: the cluster grows to fill the SMs; many: it stays small, and the register kernel's
        # CTAs take several rows each (more rows than CTAs in a wave: 264 for the smallest instance).
        for copies in (1, 24) if width > cap[2] else (1, 24, 40):
            x = base.repeat(copies, 1)
            rows = x.shape[0]
            pitch = width + 3  # odd row pitch: each row's slices sit at another 16-byte offset
            full = torch.zeros(rows, pitch, dtype=dtype)
            full[:, :width] = x.to(dtype)
            logits = full[:, :width]
            ks = torch.randint(0, max(1, width // 4), (rows,), generator=g, dtype=torch.int32)
            ke = torch.full((rows,), width, dtype=torch.int32)
            ks[:8] = 0
            if rows > 8:
                ks[8], ke[8] = 1, 1  # empty
                ke[9] = ks[9] + min(width - int(ks[9]), k // 2 + 1)  # shorter than k
            if rows > 10:  # every other later row's window ends early: warps on both sides hold no key
                span = torch.randint(0, width + 1, (rows - 10,), generator=g, dtype=torch.int32)
                ke[10::2] = torch.minimum(ks[10::2] + span[::2], ke[10::2])
            cpu = torch.full((rows, k), GARBAGE, dtype=torch.int32)
            cpu_vals = torch.full((rows, k), float("nan"))
            top_k_per_row_prefill(logits, ks, ke, cpu, cpu_vals, rows, pitch, 1, k)
            gpu = torch.full((rows, k), GARBAGE, dtype=torch.int32, device="cuda")
            vals = torch.full((rows, k), float("nan"), device="cuda")
            g_full = full.cuda()
            g_logits = g_full[:, :width]
            top_k_per_row_prefill(g_logits, ks.cuda(), ke.cuda(), gpu, vals, rows, pitch, 1, k)
            assert torch.equal(gpu.cpu(), cpu), f"{dtype} width={width} k={k} rows={rows}"
            assert torch.equal(vals.cpu(), cpu_vals), f"values {dtype} width={width} k={k} rows={rows}"
            again = torch.full_like(gpu, GARBAGE)
            top_k_per_row_prefill(g_logits, ks.cuda(), ke.cuda(), again, None, rows, pitch, 1, k)
            assert torch.equal(again, gpu), "two runs differ"


@needs_gpu
def test_gpu_two_pass_paths():
    # What the cluster plan does not take: a column stride, and rows too wide to stage in 8 CTAs'
    # shared memory; both run the two-pass kernel, with the same answer as the CPU path.
    g = torch.Generator().manual_seed(43)
    x = tied_logits(6, 9000, seed=44)
    strided = x.t().contiguous().t()  # stride(1) = 6
    ks = torch.tensor([0, 5, 100, 0, 3, 8999], dtype=torch.int32)
    ke = torch.full((6,), 9000, dtype=torch.int32)
    cpu = torch.full((6, 2048), GARBAGE, dtype=torch.int32)
    top_k_per_row_prefill(strided, ks, ke, cpu, None, 6, strided.stride(0), strided.stride(1), 2048)
    gs = strided.cuda()
    gpu = torch.full((6, 2048), GARBAGE, dtype=torch.int32, device="cuda")
    top_k_per_row_prefill(gs, ks.cuda(), ke.cuda(), gpu, None, 6, gs.stride(0), gs.stride(1), 2048)
    assert torch.equal(gpu.cpu(), cpu)
    wide = torch.randn(2, 600000, generator=g)
    ks, ke = torch.tensor([0, 7], dtype=torch.int32), torch.tensor([600000, 599999], dtype=torch.int32)
    cpu = torch.full((2, 4096), GARBAGE, dtype=torch.int32)
    top_k_per_row_prefill(wide, ks, ke, cpu, None, 2, 600000, 1, 4096)
    gpu = torch.full((2, 4096), GARBAGE, dtype=torch.int32, device="cuda")
    top_k_per_row_prefill(wide.cuda(), ks.cuda(), ke.cuda(), gpu, None, 2, 600000, 1, 4096)
    assert torch.equal(gpu.cpu(), cpu)


@needs_gpu
@pytest.mark.parametrize("batches", [1, 64, 256])
def test_gpu_decode_rows_match_cpu(batches):
    # Decode rows of 8K-64K positions (the cluster spreads few rows over the SMs), next_n = 2.
    g = torch.Generator().manual_seed(batches)
    width, next_n = 65536, 2
    lens = torch.randint(1, width + 1, (batches,), generator=g, dtype=torch.int32)
    lens[0] = width
    logits = torch.randn(batches * next_n, width, generator=g)
    cpu = torch.full((batches * next_n, 2048), GARBAGE, dtype=torch.int32)
    top_k_per_row_decode(logits, next_n, lens, cpu, batches * next_n, width, 1, 2048)
    gpu = torch.full((batches * next_n, 2048), GARBAGE, dtype=torch.int32, device="cuda")
    top_k_per_row_decode(logits.cuda(), next_n, lens.cuda(), gpu, batches * next_n, width, 1, 2048)
    assert torch.equal(gpu.cpu(), cpu)
