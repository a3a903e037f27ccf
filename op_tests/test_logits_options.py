"""The logits options on every backend present: bfloat16 logits, the compressed [M, max_seqlen_k]
layout (and both), 0-d kv_scales, the padded row stride of a new result, and their errors.

Each case runs through the public op on fresh random inputs with a NaN-poisoned ``out`` where one is
passed, against the float64 reference: bf16 logits within relative L2 4e-3 with the -inf pattern
exact (the contract's bar); on the CPU the bf16 result is bit for bit the float32 result rounded, and
the compressed result bit for bit the full layout's windows. A GPU whose kernel does not serve an
option yet must refuse it by name (is_supported says which), never return something else.
"""

from __future__ import annotations

import pytest
import torch

import aiter
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, is_supported
from aiter.testing.mqa_logits import (WINDOW_MODES, clamped_windows, compress_logits, make_inputs, make_windows,
                                      mode_applies, reference_logits, window_mask)

BF16_REL_L2_BAR = 4e-3
F32_REL_L2_BAR = {"cpu": 1e-6, "cuda": 5e-4}
SIZES = [(17, 129), (61, 1000), (128, 128), (129, 61)]


def _case(M, N, H, D, mode, device, seed):
    q, kv, s, w = make_inputs(M, N, H, D, device, seed)
    ks, ke = make_windows(mode, M, N, device, generator=torch.Generator().manual_seed(seed + 1))
    return q, kv, s, w, ks, ke


def _longest_window(ks, ke, N):
    s, e = clamped_windows(ks, ke, N)
    return int((e - s).clamp_min(0).max().item()) if ks.numel() else 0


def _served_or_refused(H, D, device, logits_dtype, compressed, call, clean_logits=True):
    """Runs `call` when the device's kernel serves the option; else checks that it is refused by name."""
    if is_supported(H, D, device, logits_dtype=logits_dtype, compressed=compressed, clean_logits=clean_logits):
        return call()
    if not is_supported(H, D, device):
        pytest.skip(f"no {device} kernel serves H={H}, D={D}")
    with pytest.raises(NotImplementedError, match="bfloat16 logits|compressed layout"):
        call()
    return None


def _check_values(result, ref, inside, device, dtype):
    got = result.double()[inside]
    want = ref[inside]
    assert not torch.isnan(got).any() and torch.isfinite(got).all(), "NaN or inf inside a window"
    norm = want.norm().item()
    rel = (got - want).norm().item() / norm if norm > 0 else (got - want).norm().item()
    bar = BF16_REL_L2_BAR if dtype == torch.bfloat16 else F32_REL_L2_BAR[device]
    assert rel <= bar, f"relative L2 {rel:.3e} > {bar:.0e}"


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("mode", WINDOW_MODES)
@pytest.mark.parametrize("M,N", SIZES, ids=[f"{m}x{n}" for m, n in SIZES])
def test_bf16_logits(device, M, N, mode, clean):
    if not mode_applies(mode, M, N):
        pytest.skip(f"{mode} windows need N % M == 0 and M even")
    H, D = (32, 128) if device == "cuda" else (4, 32)
    args = _case(M, N, H, D, mode, device, seed=M + N)
    out = torch.full((M, N + 3), float("nan"), dtype=torch.bfloat16, device=device)[:, :N]

    def run():
        return fp8_mqa_logits(*args, clean, out=out)

    if _served_or_refused(H, D, device, torch.bfloat16, False, run) is None:
        return
    new = fp8_mqa_logits(*args, clean, logits_dtype=torch.bfloat16)
    assert new.dtype == torch.bfloat16 and new.shape == (M, N)
    ref = reference_logits(*args, clean_logits=clean)
    inside = window_mask(args[4], args[5], N)
    for result in (out, new):
        _check_values(result, ref, inside, device, torch.bfloat16)
        if clean:
            assert torch.equal(torch.isneginf(result), ~inside), "-inf pattern differs from the windows"
    if not clean:
        assert torch.isnan(out[~inside]).all(), "an element outside the windows was written"
    if device == "cpu":  # rounded once, at the store: the float32 result rounded, bit for bit
        full = fp8_mqa_logits(*args, clean)
        assert torch.equal(new[inside], full.to(torch.bfloat16)[inside])


@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("mode", WINDOW_MODES)
@pytest.mark.parametrize("M,N", SIZES, ids=[f"{m}x{n}" for m, n in SIZES])
def test_compressed_logits(device, M, N, mode, clean, logits_dtype):
    if not mode_applies(mode, M, N):
        pytest.skip(f"{mode} windows need N % M == 0 and M even")
    H, D = (32, 128) if device == "cuda" else (4, 32)
    args = _case(M, N, H, D, mode, device, seed=2 * M + N)
    ks, ke = args[4], args[5]
    width = _longest_window(ks, ke, N) + 5  # a tail on every row
    out = torch.full((M, width + 3), float("nan"), dtype=logits_dtype, device=device)[:, :width]

    def run():
        return fp8_mqa_logits(*args, clean, out=out, max_seqlen_k=width)

    if _served_or_refused(H, D, device, logits_dtype, True, run, clean_logits=clean) is None:
        return
    new = aiter.fp8_fp4_mqa_logits((args[0], None), (args[1], args[2]), args[3], ks, ke, clean, max_seqlen_k=width,
                                   logits_dtype=logits_dtype)
    assert new.shape == (M, width) and new.dtype == logits_dtype
    ref = compress_logits(reference_logits(*args, clean_logits=True), ks, ke, width)
    s, e = clamped_windows(ks, ke, N)
    inside = torch.arange(width, device=device)[None, :] < (e - s).clamp_min(0)[:, None]
    for result in (out, new):
        _check_values(result, ref, inside, device, logits_dtype)
        if clean:
            assert torch.equal(torch.isneginf(result), ~inside), "the tail is not exactly -inf"
    if not clean:
        assert torch.isnan(out[~inside]).all(), "the tail was written without clean_logits"
    if device == "cpu":  # the full layout's windows, bit for bit
        full = fp8_mqa_logits(*args, clean, logits_dtype=logits_dtype)
        assert torch.equal(new[inside], compress_logits(full, ks, ke, width)[inside])


# Every (H, D) the sm90 kernel serves at the corners, in every logits format: each is a kernel
# instance of its own there (H 8 and 16 pack 48 and 24 query rows per Q tile; D 32 and 64 use the
# 32- and 64-byte swizzles). On the CPU the same cases check the portable path at those shapes.
HEAD_SHAPES = [(8, 32), (8, 128), (16, 64), (16, 128), (32, 32), (32, 64), (64, 32), (64, 64), (64, 128)]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("compressed", [False, True], ids=["full", "compressed"])
@pytest.mark.parametrize("H,D", HEAD_SHAPES, ids=[f"h{h}d{d}" for h, d in HEAD_SHAPES])
def test_head_shapes_in_every_format(device, H, D, compressed, logits_dtype, clean):
    M, N = 97, 1000  # rows past the last full Q block at every H; 16 key tiles
    args = _case(M, N, H, D, "random", device, seed=H * 100 + D)  # short, empty and long windows
    ks, ke = args[4], args[5]
    width = _longest_window(ks, ke, N) + 5 if compressed else N
    out = torch.full((M, width + 3), float("nan"), dtype=logits_dtype, device=device)[:, :width]

    def run():
        return fp8_mqa_logits(*args, clean, out=out, max_seqlen_k=width if compressed else 0)

    if _served_or_refused(H, D, device, logits_dtype, compressed, run, clean_logits=clean) is None:
        return
    ref = reference_logits(*args, clean_logits=True)
    if compressed:
        ref = compress_logits(ref, ks, ke, width)
        s, e = clamped_windows(ks, ke, N)
        inside = torch.arange(width, device=device)[None, :] < (e - s).clamp_min(0)[:, None]
    else:
        inside = window_mask(ks, ke, N)
    _check_values(out, ref, inside, device, logits_dtype)
    if clean:
        assert torch.equal(torch.isneginf(out), ~inside), "-inf pattern differs from the windows"
    else:
        assert torch.isnan(out[~inside]).all(), "an element outside the windows was written"


def test_compressed_window_longer_than_max_seqlen_k_is_refused_on_cpu():
    args = _case(17, 129, 4, 32, "causal", "cpu", seed=3)
    longest = _longest_window(args[4], args[5], 129)
    with pytest.raises(ValueError, match=r"row \d+'s window .* more than max_seqlen_k = %d" % (longest - 1)):
        fp8_mqa_logits(*args, max_seqlen_k=longest - 1)
    assert fp8_mqa_logits(*args, max_seqlen_k=longest).shape == (17, longest)


def test_compressed_with_no_keys_is_all_tail():
    q, kv, s, w = make_inputs(3, 1, 4, 32, "cpu", seed=5)
    empty_kv = kv[:0]
    ks = torch.zeros(3, dtype=torch.int32)
    got = fp8_mqa_logits(q, empty_kv, s[:0], w, ks, ks, True, max_seqlen_k=4)
    assert got.shape == (3, 4) and torch.isneginf(got).all()


@pytest.mark.parametrize("logits_dtype,per_row", [(torch.float32, 64), (torch.bfloat16, 128)], ids=["f32", "bf16"])
@pytest.mark.parametrize("width", [1, 61, 64, 129])
def test_new_result_row_stride_is_256_bytes_aligned(width, logits_dtype, per_row):
    q, kv, s, w = make_inputs(5, 129, 4, 32, "cpu", seed=7)
    ks = torch.zeros(5, dtype=torch.int32)
    ke = torch.full((5,), width, dtype=torch.int32)
    got = fp8_mqa_logits(q, kv, s, w, ks, ke, max_seqlen_k=width, logits_dtype=logits_dtype)
    assert got.shape == (5, width) and got.stride() == (-(-width // per_row) * per_row, 1)
    full = fp8_mqa_logits(q, kv, s, w, ks, ke, logits_dtype=logits_dtype)
    assert full.stride(0) * full.element_size() % 256 == 0 and full.stride(0) >= 129


def test_zero_dim_kv_scales_when_one_key(device):
    H, D = (32, 128) if device == "cuda" else (4, 32)
    if not is_supported(H, D, device):
        pytest.skip(f"no {device} kernel serves H={H}, D={D}")
    q, kv, s, w = make_inputs(3, 1, H, D, device, seed=9)
    ks = torch.zeros(3, dtype=torch.int32, device=device)
    ke = torch.ones(3, dtype=torch.int32, device=device)
    got = fp8_mqa_logits(q, kv, s.reshape(()), w, ks, ke)
    assert torch.equal(got, fp8_mqa_logits(q, kv, s, w, ks, ke))
    q2, kv2, s2, w2 = make_inputs(3, 2, H, D, device, seed=9)
    with pytest.raises(ValueError, match=r"kv_scales must be \[N\], \[N, 1\] or \(when N == 1\) 0-d"):
        fp8_mqa_logits(q2, kv2, s2[0], w2, ks, ke)


def test_option_errors_name_the_argument():
    q, kv, s, w, ks, ke = _case(17, 61, 4, 32, "causal", "cpu", seed=11)
    with pytest.raises(ValueError, match="logits_dtype must be torch.float32 or torch.bfloat16"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, logits_dtype=torch.float16)
    with pytest.raises(TypeError, match="out must have dtype torch.float32 or torch.bfloat16"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, out=torch.empty(17, 61, dtype=torch.float16))
    with pytest.raises(TypeError, match="out has dtype .* but logits_dtype is"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, out=torch.empty(17, 61), logits_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"out.size\(1\) must be max_seqlen_k = 70"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, out=torch.empty(17, 61), max_seqlen_k=70)
    with pytest.raises(ValueError, match=r"max_seqlen_k must be an int >= 0"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, max_seqlen_k=-2)
    # The same refusals from the custom op's fake kernel (meta tensors), in the same words.
    meta = [t.to("meta") for t in (q, kv, s, w, ks, ke)]
    with pytest.raises(ValueError, match="logits_dtype must be torch.float32 or torch.bfloat16"):
        torch.ops.aiter.fp8_mqa_logits(*meta, True, 0, 0, torch.float16)
    with pytest.raises(ValueError, match=r"out.size\(1\) must be max_seqlen_k = 70"):
        torch.ops.aiter.fp8_mqa_logits_out(*meta, True, torch.empty(17, 61, device="meta"), 0, 70)
    got = torch.ops.aiter.fp8_mqa_logits(*meta, True, 0, 70, torch.bfloat16)
    assert got.shape == (17, 70) and got.dtype == torch.bfloat16 and got.stride() == (128, 1)


def test_deepgemm_fp4_queries_are_refused():
    q, kv, s, w, ks, ke = _case(17, 61, 4, 32, "causal", "cpu", seed=13)
    with pytest.raises(NotImplementedError, match="FP4"):
        aiter.fp8_fp4_mqa_logits((q, torch.ones(17, 4)), (kv, s), w, ks, ke)
    with pytest.raises(TypeError, match="q must be the pair"):
        aiter.fp8_fp4_mqa_logits(q, (kv, s), w, ks, ke)
    # DeepGEMM's keyword names and defaults.
    got = aiter.fp8_fp4_mqa_logits(q=(q, None), kv=(kv, s), weights=w, cu_seq_len_k_start=ks, cu_seq_len_k_end=ke)
    assert got.dtype == torch.float32 and torch.equal(got, fp8_mqa_logits(q, kv, s, w, ks, ke, True))


def test_aiter_triton_module_paths():
    from aiter.ops.triton.attention.fp8_mqa_logits import fp8_mqa_logits as newer
    from aiter.ops.triton.fp8_mqa_logits import fp8_mqa_logits as older

    assert older is fp8_mqa_logits and newer is fp8_mqa_logits
    q, kv, s, w, ks, ke = _case(17, 61, 4, 32, "causal", "cpu", seed=15)
    got = older(q, kv, s, w, ks, ke)  # aiter's order; -inf outside the windows by default
    assert torch.equal(torch.isneginf(got), ~window_mask(ks, ke, 61))


def test_is_supported_options():
    for dtype in (torch.float32, torch.bfloat16):
        for compressed in (False, True):
            assert is_supported(32, 128, "cpu", logits_dtype=dtype, compressed=compressed, clean_logits=True)
    assert not is_supported(32, 128, "cpu", logits_dtype=torch.float16)
    assert not is_supported(32, 128, "cpu", compressed="yes")


def test_window_longer_than_max_seqlen_k_never_writes_past_it_on_a_gpu():
    """On a GPU the windows are not read on the host: a window longer than max_seqlen_k (a caller's
    broken guarantee) stores its first max_seqlen_k keys and nothing past the row's width."""
    if not torch.cuda.is_available() or not is_supported(32, 128, "cuda", compressed=True, clean_logits=False):
        pytest.skip("needs a GPU kernel that serves the compressed layout")
    M, N, width = 40, 512, 100
    q, kv, s, w = make_inputs(M, N, 32, 128, "cuda", seed=17)
    ks = torch.zeros(M, dtype=torch.int32, device="cuda")
    ke = torch.full((M,), N, dtype=torch.int32, device="cuda")
    buf = torch.full((M, 128), float("nan"), device="cuda")
    fp8_mqa_logits(q, kv, s, w, ks, ke, False, out=buf[:, :width], max_seqlen_k=width)
    assert torch.isnan(buf[:, width:]).all(), "a column past max_seqlen_k was written"
    full = fp8_mqa_logits(q, kv, s, w, ks, ke, False)
    assert torch.equal(buf[:, :width], full[:, :width])


@pytest.mark.parametrize("heads", [32, 64])
def test_short_window_longer_than_max_seqlen_k_stores_its_first_keys_on_a_gpu(heads):
    """The same broken guarantee on rows of 1..8 keys (the sm90 exact path, which spreads a short
    call's rows over CTAs key by key at H = 32): windows of 6 keys into max_seqlen_k = 3 columns store
    their first three keys' logits, exactly as the full layout does, and nothing past the width."""
    if not torch.cuda.is_available() or not is_supported(heads, 128, "cuda", compressed=True, clean_logits=False):
        pytest.skip("needs a GPU kernel that serves the compressed layout")
    M, N, width = 40, 512, 3
    q, kv, s, w = make_inputs(M, N, heads, 128, "cuda", seed=19)
    ks = (torch.arange(M, dtype=torch.int32, device="cuda") + 10)
    ke = ks + 6
    buf = torch.full((M, 8), float("nan"), device="cuda")
    fp8_mqa_logits(q, kv, s, w, ks, ke, False, out=buf[:, :width], max_seqlen_k=width)
    assert torch.isnan(buf[:, width:]).all(), "a column past max_seqlen_k was written"
    full = fp8_mqa_logits(q, kv, s, w, ks, ke, False)
    first_keys = ks.long().unsqueeze(1) + torch.arange(width, device="cuda")
    assert torch.equal(buf[:, :width], full.gather(1, first_keys))
