"""The decode op fp8_paged_mqa_logits and its metadata (docs/operator.md, "The decode op").

Every correctness case goes through the public API on each device of the ``device`` fixture: "cpu"
always; "cuda" when torch sees a GPU, skipped (saying so) while no GPU backend has a paged kernel. The
inputs (aiter/testing/paged_mqa_logits.py) are fresh random e4m3 queries and keys in a paged cache
whose blocks are shuffled, with garbage (-1, 10^9, the int32 extremes) in every block_table entry past
a batch's last visible block; context lengths that are not multiples of block_kv, 0, and shorter than
next_n; [B] and [B, next_n] lengths. Checked against the float64 reference gathered through the block
table in plain torch:
  - clean_logits: the -inf pattern is exactly the complement of what each row sees; no NaN or inf inside;
  - relative L2 over the visible elements <= 1e-6 (CPU; bfloat16 logits 4e-3, and on the CPU bit for bit
    the float32 result rounded), every row's max error <= 2e-3 * its max |ref| + 1e-6;
  - twenty launches and any thread count bitwise identical; each SIMD variant bit for bit the prefill
    CPU path's fp32 result on the same keys laid out contiguously;
  - DeepGEMM's paged criteria (its tests/test_attention.py: bf16 inputs cast as it casts them,
    calc_diff < 1e-3 against the bf16-input reference and < 5e-6 / 3e-5 against the dequantized one);
  - the metadata: shape, dtype, device, its statement in Python, monotone, no host synchronisation;
  - opcheck and torch.compile(fullgraph) of both custom ops; the row pitch DeepGEMM gives callers;
  - every bad argument is an error naming it, from the real op and from the fake kernel alike.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import aiter
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from aiter.ops.fp8_paged_mqa_logits import (fp8_fp4_paged_mqa_logits, fp8_paged_mqa_logits,
                                            get_paged_mqa_logits_metadata, is_supported)
from aiter.testing.paged_mqa_logits import (make_paged_case, num_shares, quantize_kv_cache,
                                            random_block_table, reference_paged_logits, row_keys, unpack_kv_cache)

FP8 = torch.float8_e4m3fn
REL_L2_BAR = {"cpu": 1e-6, "cuda": 5e-4}
BF16_REL_L2_BAR = 4e-3
ROW_RTOL, ROW_ATOL = 2e-3, 1e-6
CPU_VARIANTS = ["generic", "avx2", "avx512"]
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def require_kernel(device, H=64, D=128, block_kv=64, next_n=1, logits_dtype=torch.float32):
    if not is_supported(H, D, device, block_kv=block_kv, next_n=next_n, logits_dtype=logits_dtype):
        pytest.skip(f"no {device} paged decode kernel serves H={H}, D={D}, block_kv={block_kv}, next_n={next_n} "
                    "(aiter.backends lists what each GPU paged kernel serves)")


def call(args, **kwargs):
    return fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                args["block_table"], args["schedule_meta"], args["max_context_len"], **kwargs)


def reference(args, clean=True, **kwargs):
    return reference_paged_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                  args["block_table"], args["max_context_len"], clean_logits=clean, **kwargs)


def check_result(out, ref, device, clean, logits_dtype=torch.float32):
    """The contract's bar (module docstring) on one result against the float64 reference."""
    rows = ref.shape[0]
    assert out.shape == ref.shape and out.dtype == logits_dtype
    inside = torch.isfinite(ref) if clean else ~torch.isnan(ref)
    got = out.double()
    if clean:
        assert torch.equal(torch.isneginf(got), ~inside), "the -inf pattern differs from what each row sees"
    assert torch.isfinite(got[inside]).all(), "NaN or inf where a row sees a key"
    if not inside.any():
        return
    diff = (got - ref).masked_fill(~inside, 0)
    want = ref.masked_fill(~inside, 0)
    rel = diff.norm().item() / max(want.norm().item(), 1e-300)
    bar = BF16_REL_L2_BAR if logits_dtype == torch.bfloat16 else REL_L2_BAR[device]
    assert rel <= bar, f"relative L2 {rel:.3e} > {bar:.0e}"
    if logits_dtype == torch.float32:
        row_err = diff.abs().amax(dim=1)
        row_max = want.abs().amax(dim=1)
        worst = (row_err - (ROW_RTOL * row_max + ROW_ATOL)).max().item() if rows else 0.0
        assert worst <= 0, "a row's max error exceeds 2e-3 * its max |ref| + 1e-6"


# ---- correctness against the float64 reference ------------------------------------------------------

# (id, batch context lengths, next_n, H, D, block_kv, [B, next_n] lens, max_context_len or None = longest)
CASES = [
    ("n1-b64-H64-D128", [1, 64, 65, 130, 0, 200], 1, 64, 128, 64, False, None),
    ("n2-b16-H32-D128", [0, 1, 2, 17, 33, 100, 16], 2, 32, 128, 16, False, None),
    ("n4-b64-H32-D64-2d", [4, 70, 3, 129], 4, 32, 64, 64, True, None),
    ("n4-b16-H64-D64", [4, 3, 50, 0, 16, 1], 4, 64, 64, 16, False, None),
    ("n2-b64-H64-D128-2d", [300, 1, 64, 0], 2, 64, 128, 64, True, None),
    ("n1-b16-H32-D128-2d", [31, 32, 33, 0, 7], 1, 32, 128, 16, True, None),
    ("n2-b16-lens-past-max_context_len", [100, 300, 150, 151], 2, 32, 128, 16, False, 150),
    ("n1-b64-max_context_len-wider", [10, 20, 0], 1, 32, 128, 64, False, 500),
    ("n4-b16-lens-below-next_n", [-5, 0, 2, 3, 4], 4, 32, 128, 16, False, None),
    # the CPU path takes any H, D, block_kv and next_n
    ("n3-b7-H5-D37", [0, 6, 7, 8, 50, 13], 3, 5, 37, 7, False, None),
    ("n2-b1-H1-D1", [3, 1, 0, 9], 2, 1, 1, 1, False, None),
    ("n5-b13-H7-D200-2d", [40, 13, 26, 1], 5, 7, 200, 13, True, None),
    ("n1-b256-H3-D130", [600, 255, 257], 1, 3, 130, 256, False, None),
]
GPU_SHAPES = {(H, D, block_kv, next_n) for H in (32, 64) for D in (64, 128) for block_kv in (16, 64)
              for next_n in (1, 2, 4)}


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("lens,next_n,H,D,block_kv,lens_2d,max_len", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_logits_match_reference(device, lens, next_n, H, D, block_kv, lens_2d, max_len, clean, logits_dtype):
    if device != "cpu" and (H, D, block_kv, next_n) not in GPU_SHAPES:
        pytest.skip("a shape only the CPU path serves")
    require_kernel(device, H, D, block_kv, next_n, logits_dtype)
    args = make_paged_case(lens, next_n, H, D, block_kv, max_len, lens_2d, seed=len(lens) + H + D, device=device)
    out = call(args, clean_logits=clean, logits_dtype=logits_dtype)
    check_result(out, reference(args, clean), device, clean, logits_dtype)
    if device == "cpu" and logits_dtype == torch.bfloat16:
        f32 = call(args, clean_logits=clean)
        inside = ~torch.isnan(reference(args, False))
        assert torch.equal(out[inside], f32[inside].bfloat16()), "bf16 logits are not the f32 ones rounded"


@pytest.mark.parametrize("B", [1, 2, 3, 17, 256, 4096])
def test_batch_sizes(device, B):
    """Many batches with short contexts (decode with a large batch), every length from 0 up."""
    next_n = 2 if B <= 256 else 1
    block_kv = 16 if B % 2 else 64
    require_kernel(device, 64, 128, block_kv, next_n)
    g = torch.Generator().manual_seed(B)
    lens = torch.randint(0, 40 if B > 256 else 200, (B,), generator=g).tolist()
    args = make_paged_case(lens, next_n, 64, 128, block_kv, max(lens) + 5, seed=B, device=device)
    check_result(call(args, clean_logits=True), reference(args), device, True)


def test_garbage_past_the_last_visible_block_is_never_read(device):
    """Entries of block_table past a batch's last visible block may hold anything (-1, 10^9, the int32
    extremes; make_paged_case puts them there): the result is that of a table of valid blocks there."""
    require_kernel(device, 32, 128, 16, 2)
    args = make_paged_case([0, 5, 16, 17, 40], 2, 32, 128, 16, max_context_len=160, seed=3, device=device)
    keys = row_keys(args["context_lens"].cpu(), 2, 160).view(5, 2).amax(dim=1)
    visible = torch.arange(10)[None, :] < ((keys + 15) // 16)[:, None]
    assert (args["block_table"].cpu()[~visible] < 0).any() and (args["block_table"].cpu()[~visible] >= 10**9).any()
    valid = dict(args, block_table=torch.where(visible.to(device), args["block_table"], 0))
    assert torch.equal(call(args, clean_logits=True), call(valid, clean_logits=True))


def test_kv_cache_with_padded_blocks(device):
    """Blocks stride(0) bytes apart with a gap between them (a cache allocated with other buffers); D =
    36 leaves the scales unaligned on the CPU-only shape. A GPU kernel reads the blocks with TMA, so
    there the gap keeps the stride a multiple of 16 bytes, and a stride that is not is refused by name."""
    for D in ((36,) if device == "cpu" else ()) + (128,):
        if device != "cpu":
            require_kernel(device, 32, D, 16, 1)
        args = make_paged_case([20, 45, 3], 1, 32, D, 16, seed=D, device=device)
        cache = args["kv_cache"]
        gap = 40 if device == "cpu" else 48
        wide = torch.full((cache.shape[0], cache[0].numel() + gap), 0xFF, dtype=torch.uint8, device=device)
        wide[:, : cache[0].numel()] = cache.reshape(cache.shape[0], -1)
        padded = wide[:, : cache[0].numel()].view(cache.shape[0], 16, 1, D + 4)
        assert padded.stride(0) == cache[0].numel() + gap
        got = call(dict(args, kv_cache=padded), clean_logits=True)
        assert torch.equal(got, call(args, clean_logits=True))
        if device != "cpu":
            odd = torch.zeros((cache.shape[0], cache[0].numel() + 40), dtype=torch.uint8, device=device)
            odd = odd[:, : cache[0].numel()].view(cache.shape[0], 16, 1, D + 4)
            with pytest.raises(ValueError, match=r"kv_cache's blocks must lie a multiple of 16 bytes apart"):
                call(dict(args, kv_cache=odd), clean_logits=True)


@pytest.mark.parametrize("pad", [1, 4], ids=["rows-unaligned", "rows-aligned"])
def test_weights_with_padded_rows(device, pad):
    """weights as a view with row stride H + pad (a slice of a wider buffer): rows 16-byte aligned go to
    the sm90 kernel's Q slots by bulk copies, unaligned ones are read by the math threads; both give
    the contiguous result, bit for bit, on every backend."""
    require_kernel(device, 32, 128, 64, 2)
    args = make_paged_case([300, 65, 7, 128], 2, 32, 128, 64, seed=pad, device=device)
    weights = args["weights"]
    wide = torch.full((weights.shape[0], weights.shape[1] + pad), float("nan"), device=device)
    wide[:, : weights.shape[1]] = weights
    padded = wide[:, : weights.shape[1]]
    assert padded.stride(0) == weights.shape[1] + pad
    assert torch.equal(call(dict(args, weights=padded), clean_logits=True), call(args, clean_logits=True))


def test_twenty_launches_are_bitwise_identical(device):
    require_kernel(device, 64, 128, 64, 2)
    args = make_paged_case([700, 1, 0, 129, 64], 2, 64, 128, 64, seed=9, device=device)
    first = call(args, clean_logits=True)
    visible = torch.isfinite(first)
    for _ in range(20):
        again = call(args, clean_logits=True)
        assert torch.equal(again.view(torch.int32), first.view(torch.int32))
        assert torch.equal(call(args)[visible].view(torch.int32), first[visible].view(torch.int32))


def test_empty_shapes(device):
    require_kernel(device, 32, 128, 16, 2)
    args = make_paged_case([], 2, 32, 128, 16, max_context_len=40, device=device)
    out = call(args, clean_logits=True)
    assert out.shape == (0, 40) and out.dtype == torch.float32
    args = make_paged_case([5, 9], 2, 32, 128, 16, max_context_len=0, device=device)
    assert call(args, clean_logits=True).shape == (4, 0)
    args = make_paged_case([0, 0, 1], 2, 32, 128, 16, max_context_len=33, device=device)
    out = call(args, clean_logits=True)
    assert torch.isneginf(out[:5]).all() and torch.isfinite(out[5, :1]).all() and torch.isneginf(out[5, 1:]).all()


# ---- the CPU path ------------------------------------------------------------------------------------


def test_cpu_result_independent_of_thread_count():
    args = make_paged_case([900, 3, 0, 250, 64, 65, 1000], 2, 32, 128, 16, seed=21)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 3, 5):
            torch.set_num_threads(threads)
            results.append(call(args, clean_logits=True))
    finally:
        torch.set_num_threads(before)
    for r in results[1:]:
        assert torch.equal(r.view(torch.int32), results[0].view(torch.int32))


@pytest.fixture(params=CPU_VARIANTS)
def cpu_variant(request, monkeypatch):
    """Caps the CPU paths at each SIMD variant this CPU runs (the others are skipped)."""
    from aiter.ops import native

    monkeypatch.delenv("AITER_FP8_MQA_CPU_SIMD", raising=False)
    best = native.ops().paged_cpu_simd_variant()
    if CPU_VARIANTS.index(request.param) > CPU_VARIANTS.index(best):
        pytest.skip(f"this CPU does not run {request.param}")
    monkeypatch.setenv("AITER_FP8_MQA_CPU_SIMD", request.param)
    assert native.ops().paged_cpu_simd_variant() == request.param
    return request.param


def test_cpu_simd_variant_is_the_prefill_paths_arithmetic(cpu_variant):
    """Each variant meets the bar and gives, bit for bit, the prefill CPU path's fp32 result of the same
    variant on the same keys laid out contiguously (one arithmetic: products exact, fp32 sums over d
    ascending, then scale, relu and the head sum in h order)."""
    lens, next_n, H, D, block_kv = [130, 0, 77, 1, 64], 3, 7, 65, 16
    args = make_paged_case(lens, next_n, H, D, block_kv, seed=31)
    paged = call(args, clean_logits=True)
    check_result(paged, reference(args), "cpu", True)
    keys, scales = unpack_kv_cache(args["kv_cache"])
    keys_per_row = row_keys(args["context_lens"], next_n, args["max_context_len"]).view(len(lens), next_n)
    for b, n in enumerate(keys_per_row.amax(dim=1).tolist()):
        if n == 0:
            continue
        blocks = args["block_table"][b, : -(-n // block_kv)].long()
        kv = keys[blocks].reshape(-1, D)[:n].contiguous()
        kv_scales = scales[blocks].reshape(-1)[:n].contiguous()
        ends = keys_per_row[b].to(torch.int32)
        prefill = fp8_mqa_logits(args["q"][b], kv, kv_scales, args["weights"][b * next_n:(b + 1) * next_n],
                                 torch.zeros_like(ends), ends, True)
        assert torch.equal(paged[b * next_n:(b + 1) * next_n, :n].view(torch.int32), prefill.view(torch.int32))


def test_cpu_block_table_entry_a_row_needs_is_checked():
    """A visible entry that is no block of kv_cache is a ValueError naming it (the kernel checks each
    entry where it reads it, and reads nothing through a bad one; test_paged_block_table.py has more)."""
    args = make_paged_case([40, 17], 2, 8, 32, 16, seed=5)
    num_blocks = args["kv_cache"].shape[0]
    for bad in (-1, num_blocks, 10**9):
        table = args["block_table"].clone()
        table[1, 1] = bad
        with pytest.raises(ValueError, match=rf"\bblock_table\[1, 1\] = {bad} is not a block of kv_cache "
                                             rf"\(num_blocks = {num_blocks}\), but batch 1 sees 17 keys"):
            call(dict(args, block_table=table))


# ---- DeepGEMM's paged criteria -----------------------------------------------------------------------


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denominator) if denominator > 0 else 0.0


PAGED_PEER_SCALE = 32
# DeepGEMM's sm90 enumeration (batch 256 / 4096, average context 8192 / 65536 with batch * average
# <= 32M tokens, next_n 1 / 2, H 32 / 64, D 128, block_kv 64, bf16 and fp32 logits), the batch and
# the lengths divided by PAGED_PEER_SCALE so that the CPU runs them in seconds. "2d-noclean" is its
# call ([B, next_n] lens, each row a random prefix, no clean); "1d-clean" the contract's other form.
PEER_CASES = [
    pytest.param(B // PAGED_PEER_SCALE, avg // PAGED_PEER_SCALE, next_n, H, dtype, form,
                 id=f"B{B}-L{avg}-n{next_n}-H{H}-{'bf16' if dtype == torch.bfloat16 else 'f32'}-{form}")
    for B in (256, 4096) for avg in (8192, 65536) if B * avg <= 32 * 1024 * 1024
    for next_n in (1, 2) for H in (32, 64) for dtype in (torch.bfloat16, torch.float32)
    for form in ("2d-noclean", "1d-clean")
]


@pytest.mark.parametrize("B,avg,next_n,H,logits_dtype,form", PEER_CASES)
def test_deepgemm_paged_criteria(device, B, avg, next_n, H, logits_dtype, form):
    D, block_kv = 128, 64
    require_kernel(device, H, D, block_kv, next_n, logits_dtype)
    g = torch.Generator().manual_seed(B + avg + next_n + H)
    lens = torch.randint(int(0.7 * avg), int(1.3 * avg), (B,), generator=g)
    blocks = ((lens + block_kv - 1) // block_kv).tolist()
    max_len = max(blocks) * block_kv
    q = torch.randn(B, next_n, H, D, generator=g, dtype=torch.bfloat16)
    weights = torch.randn(B * next_n, H, generator=g)
    x = torch.randn(sum(blocks), block_kv, D, generator=g, dtype=torch.bfloat16)
    kv_cache, dequantized = quantize_kv_cache(x)
    table = random_block_table(blocks, max(blocks), sum(blocks), generator=g)
    if form == "2d-noclean":
        context = ((lens[:, None] + 1) * torch.rand(B, next_n, generator=g)).int()
        context[:, -1] = lens
        clean = False
    else:
        context, clean = lens.int(), True
    q_fp8 = q.to(FP8)
    args = dict(q=q_fp8, kv_cache=kv_cache, weights=weights, context_lens=context.to(torch.int32), block_table=table,
                max_context_len=max_len)
    args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    args["schedule_meta"] = get_paged_mqa_logits_metadata(args["context_lens"], block_kv, num_shares(device))
    logits = fp8_fp4_paged_mqa_logits((args["q"], None), args["kv_cache"], args["weights"], args["context_lens"],
                                      args["block_table"], args["schedule_meta"], max_len, clean_logits=clean,
                                      logits_dtype=logits_dtype)
    assert logits.dtype == logits_dtype and logits.shape == (B * next_n, max_len)
    cpu_args = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    mask = ~torch.isfinite(reference(cpu_args))  # what no row sees
    if clean:
        assert torch.equal(torch.isneginf(logits.cpu()), mask), "the -inf mask differs from the reference's"
    got = logits.cpu().double().masked_fill(mask, 0)
    ref_bf16 = reference(dict(cpu_args, q=q), dequantized=x.reshape(-1, block_kv, D)).masked_fill(mask, 0)
    ref_dequant = reference(dict(cpu_args, q=q_fp8.to(torch.bfloat16)),
                            dequantized=dequantized.to(torch.bfloat16)).masked_fill(mask, 0)
    diff, dequant_diff = calc_diff(got, ref_bf16), calc_diff(got, ref_dequant)
    assert diff < 1e-3, f"calc_diff against the bf16-input reference {diff:.3e}"
    bar = 3e-5 if logits_dtype == torch.bfloat16 else 5e-6
    assert dequant_diff < bar, f"calc_diff against the dequantized reference {dequant_diff:.3e} >= {bar:.0e}"
    exact = reference(cpu_args).masked_fill(mask, 0)
    assert (got - exact).norm().item() <= (BF16_REL_L2_BAR if logits_dtype == torch.bfloat16
                                           else REL_L2_BAR[device]) * exact.norm().item()


# ---- the metadata ------------------------------------------------------------------------------------


def schedule_statement(context_lens, block_kv, num_sms):
    """The metadata's content in Python (common/fp8_paged_mqa_logits_params.h): batch b has
    ceil(keys_b / block_kv) units, keys_b the most keys a row of b sees; share p of num_sms starts at
    unit total * p // num_sms, stored as (its batch, its block within the batch); the end is (B, 0)."""
    lens = context_lens.to(torch.int64).clamp(min=0)
    keys = lens if lens.dim() == 1 else (lens.amax(dim=1) if lens.shape[1] else lens.new_zeros(lens.shape[0]))
    units = ((keys + block_kv - 1) // block_kv).tolist()
    total = sum(units)
    rows = []
    for p in range(num_sms + 1):
        u, b = total * p // num_sms, 0
        while b < len(units) and u >= units[b]:
            u -= units[b]
            b += 1
        rows.append((b, u if b < len(units) else 0))
    return torch.tensor(rows, dtype=torch.int32)


METADATA_CASES = [
    ("1d", [37, 0, 100, 5, 64, 65], 16, 4),
    ("1d-one-share", [37, 0, 100], 64, 1),
    ("1d-more-shares-than-units", [3, 0, 70], 64, 132),
    ("1d-all-empty", [0, 0, -4], 16, 8),
    ("2d", [[5, 9], [0, 0], [30, 200], [1, 1]], 16, 7),
    ("2d-last-row-not-longest", [[90, 10], [0, 300]], 64, 5),
    ("1d-int32-max", [2**31 - 1, 1, 2**31 - 1], 1, 132),
    ("1d-empty-batch", [], 64, 3),
]


@pytest.mark.parametrize("lens,block_kv,num_sms", [pytest.param(*c[1:], id=c[0]) for c in METADATA_CASES])
def test_metadata_schedule(lens, block_kv, num_sms):
    context_lens = torch.tensor(lens, dtype=torch.int32).reshape(len(lens), -1) if lens and isinstance(lens[0], list) \
        else torch.tensor(lens, dtype=torch.int32)
    meta = get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms)
    assert meta.shape == (num_sms + 1, 2) and meta.dtype == torch.int32 and meta.is_contiguous()
    assert torch.equal(meta, schedule_statement(context_lens, block_kv, num_sms))
    pairs = [tuple(r) for r in meta.tolist()]
    assert pairs == sorted(pairs), "shares do not start in (batch, block) order"
    assert pairs[-1] == (len(lens), 0)


def test_metadata_random_lengths_and_fake_kernel():
    g = torch.Generator().manual_seed(7)
    for B, next_n, block_kv, num_sms in [(1, 1, 64, 132), (33, 2, 16, 78), (4096, 1, 64, 132), (500, 4, 7, 3)]:
        lens = torch.randint(-3, 5000, (B, next_n), generator=g, dtype=torch.int32)
        for context in (lens[:, -1].contiguous(), lens):
            meta = get_paged_mqa_logits_metadata(context, block_kv, num_sms)
            assert torch.equal(meta, schedule_statement(context, block_kv, num_sms))
            fake = get_paged_mqa_logits_metadata(context.to("meta"), block_kv, num_sms)
            assert fake.shape == meta.shape and fake.dtype == torch.int32 and fake.device.type == "meta"


@needs_gpu
def test_metadata_and_logits_without_host_sync_on_gpu():
    require_kernel("cuda", 64, 128, 64, 2)
    args = make_paged_case([700, 1, 0, 129], 2, 64, 128, 64, device="cuda")
    call(args)  # first use builds / loads outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        meta = get_paged_mqa_logits_metadata(args["context_lens"], 64, num_shares("cuda"))
        call(dict(args, schedule_meta=meta), clean_logits=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_gpu
def test_gpu_tensors_without_a_paged_kernel_are_refused_naming_it():
    if is_supported(64, 128, "cuda", block_kv=64, next_n=1):
        pytest.skip("a GPU backend serves the paged op here")
    cpu_args = make_paged_case([70, 3], 1, 64, 128, 64)
    args = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in cpu_args.items()}
    with pytest.raises(NotImplementedError, match=r"context_lens is on cuda.*no GPU backend.*paged decode kernel"):
        get_paged_mqa_logits_metadata(args["context_lens"], 64, 132)
    with pytest.raises(NotImplementedError, match=r"\bq is on cuda.*no GPU backend.*paged decode kernel.*sm90"):
        call(args)


# ---- the row pitch, the custom ops, torch.compile --------------------------------------------------------


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_row_pitch_is_deepgemms(logits_dtype):
    """DeepGEMM allocates [B * next_n, align(align(max_context_len, 256), 1024 bytes / element)] and
    returns the [:, :max_context_len] view; callers read the pitch through stride(0)."""
    per_1024 = 1024 // torch.empty((), dtype=logits_dtype).element_size()
    for L in (1, 255, 256, 257, 1000, 1025):
        args = make_paged_case([3, 1], 1, 4, 16, 16, max_context_len=L)
        out = call(args, logits_dtype=logits_dtype)
        want = -(-(-(-L // 256) * 256) // per_1024) * per_1024
        assert out.shape == (2, L) and out.stride() == (want, 1)
        with FakeTensorMode() as mode:
            fake = call({k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()},
                        logits_dtype=logits_dtype)
        assert fake.shape == out.shape and fake.stride() == out.stride() and fake.dtype == out.dtype


def _op_args(args):
    return (args["q"], args["kv_cache"], args["weights"], args["context_lens"], args["block_table"],
            args["schedule_meta"], args["max_context_len"])


@pytest.mark.parametrize("logits_dtype", [None, torch.bfloat16], ids=["f32", "bf16"])
def test_opcheck(fp8_aware_allclose, logits_dtype):
    # clean_logits=True: a fresh result is then fully written (opcheck compares whole outputs).
    args = make_paged_case([40, 0, 17], 2, 4, 32, 16, seed=2)
    result = torch.library.opcheck(torch.ops.aiter.fp8_paged_mqa_logits.default, (*_op_args(args), True, logits_dtype))
    assert all(v == "SUCCESS" for v in result.values()), result
    result = torch.library.opcheck(torch.ops.aiter.get_paged_mqa_logits_metadata.default,
                                   (args["context_lens"], 16, 5))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_torch_compile_fullgraph():
    """A decode step's indexer part as one graph: metadata, logits, top-k."""
    torch._dynamo.reset()
    args = make_paged_case([300, 45, 20, 129], 2, 8, 64, 16, max_context_len=320, seed=4)

    def step(q, kv_cache, weights, context_lens, block_table):
        meta = get_paged_mqa_logits_metadata(context_lens, 16, 8)
        logits = fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, meta, 320, clean_logits=True)
        return logits, logits.topk(16, dim=1).indices

    inputs = (args["q"], args["kv_cache"], args["weights"], args["context_lens"], args["block_table"])
    eager = step(*inputs)
    compiled = torch.compile(step, fullgraph=True)(*inputs)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])


def test_exports_and_call_forms():
    assert aiter.fp8_paged_mqa_logits is fp8_paged_mqa_logits
    assert aiter.fp8_fp4_paged_mqa_logits is fp8_fp4_paged_mqa_logits
    assert aiter.get_paged_mqa_logits_metadata is get_paged_mqa_logits_metadata
    args = make_paged_case([77, 5], 2, 8, 32, 16, seed=6)
    a = call(args, clean_logits=True)
    b = fp8_fp4_paged_mqa_logits(q=(args["q"], None), kv_cache=args["kv_cache"], weights=args["weights"],
                                 context_lens=args["context_lens"], block_table=args["block_table"],
                                 schedule_meta=args["schedule_meta"], max_context_len=args["max_context_len"],
                                 clean_logits=True, logits_dtype=torch.float32, indices=None)
    c = torch.ops.aiter.fp8_paged_mqa_logits(*_op_args(args), True)
    assert torch.equal(a, b) and torch.equal(a, c)
    # DeepGEMM's legacy positional form: (..., max_context_len, clean_logits, indices)
    d = fp8_paged_mqa_logits(*_op_args(args), True, None)
    assert torch.equal(a, d)
    meta = get_paged_mqa_logits_metadata(context_lens=args["context_lens"], block_kv=16, num_sms=8, indices=None)
    assert torch.equal(meta, args["schedule_meta"])


def test_is_supported():
    for shape in ((1, 1, 1, 1), (64, 128, 64, 1), (5, 37, 7, 3)):
        assert is_supported(*shape[:2], "cpu", block_kv=shape[2], next_n=shape[3])
    assert is_supported(32, 128, "cpu", logits_dtype=torch.bfloat16)
    assert not is_supported(32, 128, "cpu", logits_dtype=torch.float16)
    assert not is_supported(0, 128, "cpu") and not is_supported(32, 128, "cpu", block_kv=0)
    assert not is_supported("x", 128, "cpu") and not is_supported(32, 128, "bogus")
    assert not is_supported(32, 128, "meta") and not is_supported(32, 128, "cuda")  # no paged GPU kernel yet


# ---- not differentiable ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q", "weights"])
def test_input_requiring_grad_is_refused(name):
    args = make_paged_case([20, 3], 1, 4, 16, 16)
    args[name] = args[name].clone().requires_grad_()
    with pytest.raises(RuntimeError, match=rf"^fp8_paged_mqa_logits: {name} requires grad, but the op is not "
                                           "differentiable"):
        call(args)
    with torch.no_grad():
        out = call(args, clean_logits=True)
    assert out.grad_fn is None
    check_result(out, reference({k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in args.items()}),
                 "cpu", True)


# ---- bad arguments: a clear error naming the argument, from the real op and the fake kernel -------------

B0, NEXT_N0, H0, D0, BLOCK_KV0 = 3, 2, 4, 16, 8


def good_args():
    return make_paged_case([20, 0, 13], NEXT_N0, H0, D0, BLOCK_KV0, max_context_len=24, seed=0)


def one_byte(t, dtype):
    return t.view(torch.uint8).view(dtype)


def strided(t, step=2):
    """A non-contiguous tensor with t's shape and values (every step-th element of a wider buffer)."""
    wide = torch.zeros(*t.shape[:-1], t.shape[-1] * step, dtype=t.dtype)
    if t.dtype == FP8:
        wide.view(torch.uint8)[..., ::step] = t.view(torch.uint8)
    else:
        wide[..., ::step] = t
    return wide[..., ::step]


def cache_with(args, **change):
    """kv_cache rebuilt with another shape: num_blocks, block_kv, heads or row bytes."""
    c = args["kv_cache"]
    shape = list(c.shape)
    for key, dim in (("num_blocks", 0), ("block_kv", 1), ("heads", 2), ("row", 3)):
        if key in change:
            shape[dim] = change[key]
    return torch.zeros(shape, dtype=torch.uint8)


# (id, how to break the good arguments, expected exception type, regex on the message)
BAD_INPUTS = [
    # dtypes
    ("q-uint8", lambda a: a.update(q=one_byte(a["q"], torch.uint8)), TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Byte \(the bytes are decoded as e4m3fn"),
    ("q-e5m2", lambda a: a.update(q=one_byte(a["q"], torch.float8_e5m2)), TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Float8_e5m2"),
    ("q-bfloat16", lambda a: a.update(q=a["q"].bfloat16()), TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got BFloat16"),
    ("kv_cache-e4m3fn", lambda a: a.update(kv_cache=one_byte(a["kv_cache"], FP8)), TypeError, r"\bkv_cache must have dtype torch\.uint8, got Float8_e4m3fn \(each block's bytes"),
    ("kv_cache-int8", lambda a: a.update(kv_cache=one_byte(a["kv_cache"], torch.int8)), TypeError, r"\bkv_cache must have dtype torch\.uint8, got Char"),
    ("weights-bfloat16", lambda a: a.update(weights=a["weights"].bfloat16()), TypeError, r"\bweights must have dtype torch\.float32, got BFloat16"),
    ("context_lens-int64", lambda a: a.update(context_lens=a["context_lens"].long()), TypeError, r"\bcontext_lens must have dtype torch\.int32, got Long \(int64 is not accepted: pass \.to\(torch\.int32\)\)"),
    ("context_lens-float32", lambda a: a.update(context_lens=a["context_lens"].float()), TypeError, r"\bcontext_lens must have dtype torch\.int32, got Float"),
    ("block_table-int64", lambda a: a.update(block_table=a["block_table"].long()), TypeError, r"\bblock_table must have dtype torch\.int32, got Long \(int64 is not accepted"),
    ("schedule_meta-int64", lambda a: a.update(schedule_meta=a["schedule_meta"].long()), TypeError, r"\bschedule_meta must have dtype torch\.int32, got Long"),
    # ranks
    ("q-rank3", lambda a: a.update(q=a["q"][0]), ValueError, r"\bq must be 4-D \[B, next_n, H, D\], got shape \[2, 4, 16\]"),
    ("kv_cache-rank3", lambda a: a.update(kv_cache=a["kv_cache"][:, :, 0]), ValueError, r"\bkv_cache must be 4-D \[num_blocks, block_kv, 1, D \+ 4\]"),
    ("weights-rank3", lambda a: a.update(weights=a["weights"].view(B0, NEXT_N0, H0)), ValueError, r"\bweights must be 2-D \[B \* next_n, H\]"),
    ("context_lens-rank3", lambda a: a.update(context_lens=a["context_lens"].view(B0, 1, 1)), ValueError, r"\bcontext_lens must be 1-D \[B\] or 2-D \[B, next_n\], got shape \[3, 1, 1\]"),
    ("context_lens-rank0", lambda a: a.update(context_lens=a["context_lens"][0]), ValueError, r"\bcontext_lens must be 1-D \[B\] or 2-D \[B, next_n\]"),
    ("block_table-rank1", lambda a: a.update(block_table=a["block_table"].flatten()), ValueError, r"\bblock_table must be 2-D \[B, max_blocks\]"),
    ("schedule_meta-rank1", lambda a: a.update(schedule_meta=a["schedule_meta"].flatten()), ValueError, r"\bschedule_meta must be 2-D \[num_sms \+ 1, 2\]"),
    # sizes
    ("q-zero-next_n", lambda a: a.update(q=a["q"][:, :0], weights=a["weights"][:0]), ValueError, r"\bq must have next_n >= 1 tokens per batch, H >= 1 heads and head dim D >= 1"),
    ("q-zero-heads", lambda a: a.update(q=a["q"][:, :, :0], weights=a["weights"][:, :0]), ValueError, r"\bq must have next_n >= 1 tokens per batch, H >= 1 heads"),
    ("kv_cache-zero-block_kv", lambda a: a.update(kv_cache=cache_with(a, block_kv=0)), ValueError, r"\bkv_cache must have block_kv >= 1 keys per block"),
    ("kv_cache-block_kv-beyond-int32", lambda a: a.update(kv_cache=cache_with(a, num_blocks=0, block_kv=2**40)), ValueError, r"\bkv_cache must have block_kv <= 2\^31 - 1 keys per block \(context lengths are int32"),
    ("kv_cache-two-heads", lambda a: a.update(kv_cache=cache_with(a, heads=2)), ValueError, r"\bkv_cache\.size\(2\) must be one K head = 1"),
    ("kv_cache-row-D", lambda a: a.update(kv_cache=cache_with(a, row=D0)), ValueError, r"\bkv_cache\.size\(3\) must be D \+ 4 \(q's head dim D, then a float32 scale\) = 20, got shape"),
    ("kv_cache-row-D+8", lambda a: a.update(kv_cache=cache_with(a, row=D0 + 8)), ValueError, r"\bkv_cache\.size\(3\) must be D \+ 4"),
    ("weights-rows-B", lambda a: a.update(weights=a["weights"][:B0]), ValueError, r"\bweights\.size\(0\) must be q's B \* next_n = 6"),
    ("weights-heads", lambda a: a.update(weights=a["weights"][:, :-1].contiguous()), ValueError, r"\bweights\.size\(1\) must be q's H = 4"),
    ("context_lens-B", lambda a: a.update(context_lens=a["context_lens"][:-1]), ValueError, r"\bcontext_lens\.size\(0\) must be q's B = 3"),
    ("context_lens-next_n", lambda a: a.update(context_lens=a["context_lens"][:, None].repeat(1, 3)), ValueError, r"\bcontext_lens\.size\(1\) must be q's next_n = 2"),
    ("block_table-B", lambda a: a.update(block_table=a["block_table"][:-1]), ValueError, r"\bblock_table\.size\(0\) must be q's B = 3"),
    ("block_table-too-narrow", lambda a: a.update(block_table=a["block_table"][:, :2]), ValueError, r"\bblock_table has 2 columns of block_kv = 8 keys, fewer than max_context_len = 24 keys; .* at least 3 columns"),
    ("schedule_meta-three-columns", lambda a: a.update(schedule_meta=torch.zeros(9, 3, dtype=torch.int32)), ValueError, r"\bschedule_meta\.size\(1\) must be 2 \(batch, block\) = 2"),
    ("schedule_meta-one-row", lambda a: a.update(schedule_meta=a["schedule_meta"][:1]), ValueError, r"\bschedule_meta must have num_sms \+ 1 >= 2 rows"),
    # scalars
    ("max_context_len-too-big", lambda a: a.update(max_context_len=2**31), ValueError, r"\bmax_context_len must be >= 0 and fit in int32"),
    # strides and layouts
    ("q-non-contiguous", lambda a: a.update(q=strided(a["q"])), ValueError, r"\bq must be contiguous"),
    ("kv_cache-keys-apart", lambda a: a.update(kv_cache=strided(a["kv_cache"].squeeze(2)).unsqueeze(2)), ValueError, r"\bkv_cache must hold each block's block_kv \* \(D \+ 4\) bytes densely \(stride\(3\) == 1"),
    ("kv_cache-blocks-overlap", lambda a: a.update(kv_cache=a["kv_cache"].as_strided(a["kv_cache"].shape, (100, D0 + 4, D0 + 4, 1))), ValueError, r"\bkv_cache must hold each block's .*stride\(0\) >= block_kv \* \(D \+ 4\) = 160\), got strides \[100, 20, 20, 1\]"),
    ("weights-column-major", lambda a: a.update(weights=a["weights"].t().contiguous().t()), ValueError, r"\bweights must have a contiguous last dim \(stride\(1\) == 1\)"),
    ("context_lens-non-contiguous", lambda a: a.update(context_lens=strided(a["context_lens"])), ValueError, r"\bcontext_lens must be contiguous"),
    ("block_table-column-major", lambda a: a.update(block_table=a["block_table"].t().contiguous().t()), ValueError, r"\bblock_table must have a contiguous last dim"),
    ("schedule_meta-transposed", lambda a: a.update(schedule_meta=torch.zeros(2, 9, dtype=torch.int32).t()), ValueError, r"\bschedule_meta must be contiguous"),
    ("weights-sparse", lambda a: a.update(weights=a["weights"].to_sparse()), ValueError, r"\bweights must be a dense \(strided\) tensor, got layout Sparse"),
    # devices a CPU-only machine can check: meta tensors mixed with CPU ones
    ("kv_cache-on-meta", lambda a: a.update(kv_cache=a["kv_cache"].to("meta")), RuntimeError, r"\bkv_cache is on meta but q is on cpu"),
    ("block_table-on-meta", lambda a: a.update(block_table=a["block_table"].to("meta")), RuntimeError, r"\bblock_table is on meta but q is on cpu"),
    ("schedule_meta-on-meta", lambda a: a.update(schedule_meta=a["schedule_meta"].to("meta")), RuntimeError, r"\bschedule_meta is on meta but q is on cpu"),
]


def test_bad_input_list_is_long_and_distinct():
    ids = [c[0] for c in BAD_INPUTS]
    assert len(ids) == len(set(ids)) and len(ids) >= 30


@pytest.mark.parametrize("breaker,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_INPUTS])
def test_bad_input_is_a_clear_error(breaker, error, pattern):
    args = good_args()
    breaker(args)
    with pytest.raises(error, match=r"^fp8_paged_mqa_logits: .*" + pattern):
        call(args)


def call_fake(args):
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with mode:
        return call(fake)


@pytest.mark.parametrize("breaker,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_INPUTS])
def test_fake_kernel_refuses_bad_input_like_the_real_op(breaker, error, pattern):
    args = good_args()
    breaker(args)
    with pytest.raises(error, match=r"^fp8_paged_mqa_logits: .*" + pattern):
        call_fake(args)


def test_fake_kernel_accepts_the_good_arguments():
    out = call_fake(good_args())
    assert out.shape == (B0 * NEXT_N0, 24) and out.dtype == torch.float32


# (id, call, expected exception type, regex): the Python entries' own checks and the metadata's.
BAD_CALLS = [
    ("clean_logits-None", lambda a: call(a, clean_logits=None), TypeError, r"^fp8_paged_mqa_logits: clean_logits must be a bool"),
    ("clean_logits-str", lambda a: call(a, clean_logits="True"), TypeError, r"^fp8_paged_mqa_logits: clean_logits must be a bool"),
    ("max_context_len-negative", lambda a: call(dict(a, max_context_len=-1)), ValueError, r"^fp8_paged_mqa_logits: max_context_len must be an int >= 0"),
    ("max_context_len-float", lambda a: call(dict(a, max_context_len=24.0)), ValueError, r"^fp8_paged_mqa_logits: max_context_len must be an int >= 0"),
    ("logits_dtype-float16", lambda a: call(a, logits_dtype=torch.float16), ValueError, r"^fp8_paged_mqa_logits: logits_dtype must be torch\.float32 or torch\.bfloat16, got torch\.float16"),
    ("logits_dtype-str", lambda a: call(a, logits_dtype="float32"), TypeError, r"^fp8_paged_mqa_logits: logits_dtype must be torch\.float32 or torch\.bfloat16 \(a torch\.dtype, not a string\), got str 'float32'"),
    ("fp4-logits_dtype-str", lambda a: fp8_fp4_paged_mqa_logits((a["q"], None), *_op_args(a)[1:], logits_dtype="bfloat16"), TypeError, r"^fp8_fp4_paged_mqa_logits: logits_dtype must be torch\.float32 or torch\.bfloat16 \(a torch\.dtype"),
    ("metadata-block_kv-2^62", lambda a: get_paged_mqa_logits_metadata(a["context_lens"], 2**62, 8), ValueError, r"^get_paged_mqa_logits_metadata: block_kv must be <= 2\^31 - 1 \(context lengths are int32"),
    ("indices", lambda a: call(a, indices=torch.zeros(3, dtype=torch.int32)), NotImplementedError, r"^fp8_paged_mqa_logits: indices \(DeepGEMM's varlen batching"),
    ("fp4-q-scale", lambda a: fp8_fp4_paged_mqa_logits((a["q"], torch.ones(3)), *_op_args(a)[1:]), NotImplementedError, r"^fp8_fp4_paged_mqa_logits: a q scale means FP4 queries"),
    ("fp4-q-not-a-pair", lambda a: fp8_fp4_paged_mqa_logits(a["q"], *_op_args(a)[1:]), TypeError, r"^fp8_fp4_paged_mqa_logits: q must be the pair"),
    ("metadata-block_kv-0", lambda a: get_paged_mqa_logits_metadata(a["context_lens"], 0, 8), ValueError, r"^get_paged_mqa_logits_metadata: block_kv must be an int >= 1"),
    ("metadata-num_sms-0", lambda a: get_paged_mqa_logits_metadata(a["context_lens"], 8, 0), ValueError, r"^get_paged_mqa_logits_metadata: num_sms must be an int >= 1"),
    ("metadata-indices", lambda a: get_paged_mqa_logits_metadata(a["context_lens"], 8, 8, indices=a["context_lens"]), NotImplementedError, r"^get_paged_mqa_logits_metadata: indices"),
]
# Bad metadata arguments that reach the custom op (the real one and the fake kernel alike).
BAD_METADATA = [
    ("int64", lambda lens: (lens.long(), 8, 8), TypeError, r"context_lens must have dtype torch\.int32, got Long \(int64 is not accepted"),
    ("rank3", lambda lens: (lens.view(3, 1, 1), 8, 8), ValueError, r"context_lens must be 1-D \[B\] or 2-D \[B, next_n\]"),
    ("non-contiguous", lambda lens: (strided(lens), 8, 8), ValueError, r"context_lens must be contiguous"),
    ("block_kv-0", lambda lens: (lens, 0, 8), ValueError, r"block_kv must be >= 1 \(keys per cache block\), got 0"),
    ("block_kv-2^31", lambda lens: (lens, 2**31, 8), ValueError, r"block_kv must be <= 2\^31 - 1 \(context lengths are int32, so no row sees more keys than that\), got 2147483648"),
    ("block_kv-2^63-1", lambda lens: (lens, 2**63 - 1, 8), ValueError, r"block_kv must be <= 2\^31 - 1 .*got 9223372036854775807"),
    ("num_sms-0", lambda lens: (lens, 8, 0), ValueError, r"num_sms must be >= 1 and < 2\^31 - 1"),
    ("num_sms-int32-max", lambda lens: (lens, 8, 2**31 - 1), ValueError, r"num_sms must be >= 1 and < 2\^31 - 1"),
]


@pytest.mark.parametrize("bad_call,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_CALLS])
def test_bad_call_is_a_clear_error(bad_call, error, pattern):
    with pytest.raises(error, match=pattern):
        bad_call(good_args())


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
@pytest.mark.parametrize("bad,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_METADATA])
def test_bad_metadata_argument_is_a_clear_error(bad, error, pattern, fake):
    lens = torch.tensor([5, 0, 70], dtype=torch.int32)
    context_lens, block_kv, num_sms = bad(lens)
    op = torch.ops.aiter.get_paged_mqa_logits_metadata
    with pytest.raises(error, match=r"^get_paged_mqa_logits_metadata: " + pattern):
        if fake:
            with FakeTensorMode() as mode:
                op(mode.from_tensor(context_lens), block_kv, num_sms)
        else:
            op(context_lens, block_kv, num_sms)


def test_good_arguments_after_bad_ones_still_work():
    args = good_args()
    with pytest.raises(ValueError):
        call(dict(args, block_table=args["block_table"][:, :1]))
    check_result(call(args, clean_logits=True), reference(args), "cpu", True)


def test_metadata_of_the_largest_block_kv_is_exact():
    """block_kv = 2^31 - 1 (the largest accepted) gives the same schedule as any block_kv above every
    length (one unit per batch with keys): no overflow in the unit count."""
    lens = torch.tensor([5, 0, 70, 2**31 - 1, 9], dtype=torch.int32)
    same_units = torch.tensor([5, 0, 70, 1, 9], dtype=torch.int32)  # with block_kv = 100: one unit a batch too
    for shares in (1, 3, 7):
        assert torch.equal(get_paged_mqa_logits_metadata(lens, 2**31 - 1, shares),
                           get_paged_mqa_logits_metadata(same_units, 100, shares))


def _huge_logits_args(rows):
    """Arguments whose logits are [rows, 2^31 - 1] float32: an empty cache of blocks of 2^31 - 1 keys,
    every length 0 (nothing is read)."""
    i32 = dict(dtype=torch.int32)
    return dict(q=torch.zeros(rows, 1, 1, 1).to(FP8), kv_cache=torch.zeros(0, 2**31 - 1, 1, 5, dtype=torch.uint8),
                weights=torch.zeros(rows, 1), context_lens=torch.zeros(rows, **i32),
                block_table=torch.zeros(rows, 1, **i32), schedule_meta=torch.zeros(2, 2, **i32),
                max_context_len=2**31 - 1)


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
def test_logits_beyond_2_48_bytes_name_max_context_len(fake):
    """A result no machine holds (2^16 rows of 2^31 - 1 columns: 2^49 bytes) is a ValueError naming
    max_context_len before anything is allocated, from the real op and the fake kernel alike."""
    args = _huge_logits_args(1 << 16)
    with pytest.raises(ValueError, match=r"^fp8_paged_mqa_logits: the logits \[B \* next_n = 65536, max_context_len = "
                                         r"2147483647\] would take more than 2\^48 bytes .*max_context_len \(or B \* "
                                         r"next_n\) is too large"):
        call_fake(args) if fake else call(args)


def _overcommit_always():
    try:
        return open("/proc/sys/vm/overcommit_memory").read().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(_overcommit_always(), reason="vm.overcommit_memory = 1 may map a 192 TiB logits tensor")
def test_unallocatable_logits_name_max_context_len():
    """A result within the bound that the allocator cannot provide (24576 rows of 2^31 - 1 float32
    columns: 192 TiB, more than a 47-bit address space) is an OutOfMemoryError naming max_context_len."""
    args = _huge_logits_args(24576)
    with pytest.raises(torch.OutOfMemoryError, match=r"^fp8_paged_mqa_logits: cannot allocate the logits \[B \* next_n "
                                                     r"= 24576, max_context_len = 2147483647\] .* on cpu: max_context_len"):
        call(args)
    check_result(call(good_args(), clean_logits=True), reference(good_args()), "cpu", True)


def test_schedule_meta_is_not_trusted_on_the_cpu():
    """The CPU path plans its own shares: any [S + 1, 2] int32 schedule gives the same logits (a GPU
    kernel will read it; a mismatched one is the caller's error there, as in DeepGEMM)."""
    args = good_args()
    want = call(args, clean_logits=True)
    for meta in (torch.zeros(2, 2, dtype=torch.int32), torch.full((133, 2), -7, dtype=torch.int32)):
        assert torch.equal(call(dict(args, schedule_meta=meta), clean_logits=True), want)
    assert math.isfinite(want[0, 0].item())


# ---- the vLLM-style decode step (examples/vllm_indexer_decode.py) ---------------------------------------


def _example():
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    return importlib.import_module("vllm_indexer_decode")


def test_example_writes_keys_where_the_block_table_says():
    example = _example()
    g = torch.Generator().manual_seed(1)
    cache = torch.zeros(6, 16, 1, 36, dtype=torch.uint8)
    table = torch.tensor([[4, 1, -1], [0, 5, 2]], dtype=torch.int32)
    positions = torch.tensor([0, 15, 16, 20, 31])
    keys, scales = example.quantize_keys(torch.randn(5, 32, generator=g))
    example.write_keys(cache, table, 1, positions, keys, scales)
    stored_keys, stored_scales = unpack_kv_cache(cache)
    blocks, slots = table[1, positions // 16].long(), positions % 16
    assert torch.equal(stored_keys[blocks, slots].view(torch.uint8), keys.view(torch.uint8))
    assert torch.equal(stored_scales[blocks, slots], scales)
    assert int(cache.view(6, -1)[[1, 3, 4]].count_nonzero()) == 0, "a block of another batch was written"


def test_example_decode_step_top2048_agreement():
    frac, rows, total = _example().agreement(contexts=(2100, 0, 2500), next_n=2, heads=8, device="cpu", num_sms=4)
    assert total == 6 and rows == 4 and frac >= 0.999
