"""Bad input to fp8_mqa_logits: each case is a clear error of the right type whose message names the
offending argument, through the public API; never a crash, a hang or a garbage result.

Types (csrc/binding/fp8_mqa_logits_binding.cpp): TypeError for a dtype, ValueError for a rank, shape,
stride, size, alignment or an `out` overlapping an input, RuntimeError for mixed devices,
NotImplementedError for a shape or device no compiled kernel serves. The fake kernels refuse the same
inputs the same way. Also: M == 0 or N == 0 returns the empty result.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, fp8_mqa_logits_deepgemm, is_supported
from aiter.testing.mqa_logits import make_inputs, make_windows, reference_logits

FP8 = torch.float8_e4m3fn
M, N, H, D = 5, 40, 4, 16  # the CPU path takes any H and D; small keeps each case instant


def good_args(device="cpu", m=M, n=N, h=H, d=D):
    q, kv, scales, weights = make_inputs(m, n, h, d, device, seed=0)
    ks, ke = make_windows("causal", m, n, device)
    return {"q": q, "kv": kv, "kv_scales": scales, "weights": weights, "cu_starts": ks, "cu_ends": ke}


def call(args, **kwargs):
    return fp8_mqa_logits(args["q"], args["kv"], args["kv_scales"], args["weights"], args["cu_starts"],
                          args["cu_ends"], **kwargs)


def strided(t, step=2):
    """A non-contiguous tensor with t's shape and values (every `step`-th element of a wider buffer)."""
    wide = torch.zeros(*t.shape[:-1], t.shape[-1] * step, dtype=t.dtype, device=t.device)
    if t.dtype == FP8:
        wide.view(torch.uint8)[..., ::step] = t.view(torch.uint8)
    else:
        wide[..., ::step] = t
    return wide[..., ::step]


def one_byte(t, dtype):
    return t.view(torch.uint8).view(dtype)


# (id, how to break the good arguments, extra kwargs, expected exception type, regex on the message)
BAD_INPUTS = [
    # q / kv: one-byte dtypes other than e4m3fn are rejected by dtype, not accepted by size
    ("q-uint8", lambda a: a.update(q=one_byte(a["q"], torch.uint8)), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Byte"),
    ("q-int8", lambda a: a.update(q=one_byte(a["q"], torch.int8)), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Char"),
    ("q-e5m2", lambda a: a.update(q=one_byte(a["q"], torch.float8_e5m2)), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Float8_e5m2"),
    ("q-e4m3fnuz", lambda a: a.update(q=one_byte(a["q"], torch.float8_e4m3fnuz)), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Float8_e4m3fnuz"),
    ("q-bool", lambda a: a.update(q=one_byte(a["q"], torch.bool)), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn"),
    ("q-float32", lambda a: a.update(q=a["q"].float()), {}, TypeError, r"\bq must have dtype torch\.float8_e4m3fn, got Float"),
    ("kv-uint8", lambda a: a.update(kv=one_byte(a["kv"], torch.uint8)), {}, TypeError, r"\bkv must have dtype torch\.float8_e4m3fn, got Byte"),
    ("kv-int8", lambda a: a.update(kv=one_byte(a["kv"], torch.int8)), {}, TypeError, r"\bkv must have dtype torch\.float8_e4m3fn, got Char"),
    ("kv-e5m2", lambda a: a.update(kv=one_byte(a["kv"], torch.float8_e5m2)), {}, TypeError, r"\bkv must have dtype torch\.float8_e4m3fn, got Float8_e5m2"),
    ("kv-e4m3fnuz", lambda a: a.update(kv=one_byte(a["kv"], torch.float8_e4m3fnuz)), {}, TypeError, r"\bkv must have dtype torch\.float8_e4m3fn, got Float8_e4m3fnuz"),
    ("kv-bfloat16", lambda a: a.update(kv=a["kv"].bfloat16()), {}, TypeError, r"\bkv must have dtype torch\.float8_e4m3fn"),
    # scales, weights, bounds, out: wrong dtypes
    ("kv_scales-float64", lambda a: a.update(kv_scales=a["kv_scales"].double()), {}, TypeError, r"\bkv_scales must have dtype torch\.float32, got Double"),
    ("kv_scales-bfloat16", lambda a: a.update(kv_scales=a["kv_scales"].bfloat16()), {}, TypeError, r"\bkv_scales must have dtype torch\.float32"),
    ("weights-float16", lambda a: a.update(weights=a["weights"].half()), {}, TypeError, r"\bweights must have dtype torch\.float32, got Half"),
    ("weights-float64", lambda a: a.update(weights=a["weights"].double()), {}, TypeError, r"\bweights must have dtype torch\.float32, got Double"),
    ("cu_starts-int64", lambda a: a.update(cu_starts=a["cu_starts"].long()), {}, TypeError, r"\bcu_starts must have dtype torch\.int32, got Long \(int64 bounds are not accepted"),
    ("cu_ends-int64", lambda a: a.update(cu_ends=a["cu_ends"].long()), {}, TypeError, r"\bcu_ends must have dtype torch\.int32, got Long \(int64 bounds are not accepted"),
    ("cu_starts-float32", lambda a: a.update(cu_starts=a["cu_starts"].float()), {}, TypeError, r"\bcu_starts must have dtype torch\.int32, got Float"),
    ("cu_ends-int16", lambda a: a.update(cu_ends=a["cu_ends"].short()), {}, TypeError, r"\bcu_ends must have dtype torch\.int32, got Short"),
    ("out-float16", lambda a: None, {"out": torch.empty(M, N, dtype=torch.float16)}, TypeError, r"\bout must have dtype torch\.float32 or torch\.bfloat16, got Half"),
    ("out-float64", lambda a: None, {"out": torch.empty(M, N, dtype=torch.float64)}, TypeError, r"\bout must have dtype torch\.float32 or torch\.bfloat16, got Double"),
    # ranks and shapes
    ("q-rank2", lambda a: a.update(q=a["q"][:, 0]), {}, ValueError, r"\bq must be 3-D \[M, H, D\]"),
    ("q-rank4", lambda a: a.update(q=a["q"][None]), {}, ValueError, r"\bq must be 3-D \[M, H, D\]"),
    ("kv-rank3", lambda a: a.update(kv=a["kv"][None]), {}, ValueError, r"\bkv must be 2-D \[N, D\]"),
    ("kv-rank1", lambda a: a.update(kv=a["kv"].flatten()), {}, ValueError, r"\bkv must be 2-D \[N, D\]"),
    ("kv-head-dim-mismatch", lambda a: a.update(kv=make_inputs(M, N, H, D + 16)[1]), {}, ValueError, r"\bkv\.size\(1\) must be q's head dim D = 16"),
    ("kv_scales-too-short", lambda a: a.update(kv_scales=a["kv_scales"][:-1]), {}, ValueError, r"\bkv_scales\.size\(0\) must be kv's N = 40"),
    ("kv_scales-N-by-2", lambda a: a.update(kv_scales=a["kv_scales"][:, None].repeat(1, 2)), {}, ValueError, r"\bkv_scales must be \[N\], \[N, 1\] or \(when N == 1\) 0-d"),
    ("kv_scales-1-by-N", lambda a: a.update(kv_scales=a["kv_scales"][None, :]), {}, ValueError, r"\bkv_scales must be \[N\], \[N, 1\] or \(when N == 1\) 0-d"),
    ("weights-heads-mismatch", lambda a: a.update(weights=a["weights"][:, :-1].contiguous()), {}, ValueError, r"\bweights\.size\(1\) must be q's H = 4"),
    ("weights-rows-mismatch", lambda a: a.update(weights=a["weights"][:-1]), {}, ValueError, r"\bweights\.size\(0\) must be q's M = 5"),
    ("weights-rank1", lambda a: a.update(weights=a["weights"].flatten()), {}, ValueError, r"\bweights must be 2-D \[M, H\]"),
    ("weights-rank3", lambda a: a.update(weights=a["weights"][None]), {}, ValueError, r"\bweights must be 2-D \[M, H\]"),
    ("cu_starts-too-short", lambda a: a.update(cu_starts=a["cu_starts"][:-1]), {}, ValueError, r"\bcu_starts\.size\(0\) must be q's M = 5"),
    ("cu_ends-too-long", lambda a: a.update(cu_ends=torch.cat([a["cu_ends"], a["cu_ends"]])), {}, ValueError, r"\bcu_ends\.size\(0\) must be q's M = 5"),
    ("cu_ends-rank2", lambda a: a.update(cu_ends=a["cu_ends"][:, None]), {}, ValueError, r"\bcu_ends must be 1-D \[M\]"),
    ("cu_starts-rank0", lambda a: a.update(cu_starts=a["cu_starts"][0]), {}, ValueError, r"\bcu_starts must be 1-D \[M\]"),
    ("out-wrong-N", lambda a: None, {"out": torch.empty(M, N + 1)}, ValueError, r"\bout\.size\(1\) must be kv's N = 40"),
    ("out-wrong-M", lambda a: None, {"out": torch.empty(M + 1, N)}, ValueError, r"\bout\.size\(0\) must be q's M = 5"),
    ("out-rank1", lambda a: None, {"out": torch.empty(M * N)}, ValueError, r"\bout must be 2-D \[M, N\]"),
    ("q-zero-heads", lambda a: a.update(q=a["q"][:, :0], weights=a["weights"][:, :0]), {}, ValueError, r"\bq must have H >= 1 heads and head dim D >= 1"),
    ("q-zero-head-dim", lambda a: a.update(q=a["q"][..., :0], kv=a["kv"][:, :0]), {}, ValueError, r"\bq must have H >= 1 heads and head dim D >= 1"),
    # strides
    ("q-non-contiguous", lambda a: a.update(q=strided(a["q"])), {}, ValueError, r"\bq must be contiguous"),
    ("kv-non-contiguous", lambda a: a.update(kv=strided(a["kv"])), {}, ValueError, r"\bkv must be contiguous"),
    ("kv-transposed", lambda a: a.update(kv=a["kv"].t().contiguous().t()), {}, ValueError, r"\bkv must be contiguous"),
    ("kv_scales-non-contiguous", lambda a: a.update(kv_scales=strided(a["kv_scales"])), {}, ValueError, r"\bkv_scales must be contiguous"),
    ("cu_starts-non-contiguous", lambda a: a.update(cu_starts=strided(a["cu_starts"])), {}, ValueError, r"\bcu_starts must be contiguous"),
    ("cu_ends-non-contiguous", lambda a: a.update(cu_ends=strided(a["cu_ends"], 3)), {}, ValueError, r"\bcu_ends must be contiguous"),
    ("weights-column-major", lambda a: a.update(weights=a["weights"].t().contiguous().t()), {}, ValueError, r"\bweights must have a contiguous last dim \(stride\(1\) == 1\)"),
    ("weights-every-other-head", lambda a: a.update(weights=strided(a["weights"])), {}, ValueError, r"\bweights must have a contiguous last dim"),
    ("weights-overlapping-rows", lambda a: a.update(weights=torch.randn(M * H).as_strided((M, H), (H - 1, 1))), {}, ValueError, r"\bweights row stride \(stride\(0\) = 3\) must be >= H = 4"),
    ("out-transposed", lambda a: None, {"out": torch.empty(N, M).t()}, ValueError, r"\bout must have a contiguous last dim \(stride\(1\) == 1\)"),
    ("out-every-other-column", lambda a: None, {"out": torch.empty(M, 2 * N)[:, ::2]}, ValueError, r"\bout must have a contiguous last dim"),
    ("out-overlapping-rows", lambda a: None, {"out": torch.empty(M * N).as_strided((M, N), (N - 1, 1))}, ValueError, r"\bout row stride \(stride\(0\) = 39\) must be >= N = 40"),
    ("out-broadcast-row", lambda a: None, {"out": torch.empty(N).expand(M, N)}, ValueError, r"\bout row stride \(stride\(0\) = 0\) must be >= N = 40"),
    # layouts and scalar arguments
    ("kv_scales-sparse", lambda a: a.update(kv_scales=a["kv_scales"].to_sparse()), {}, ValueError, r"\bkv_scales must be a dense \(strided\) tensor, got layout Sparse"),
    ("weights-sparse", lambda a: a.update(weights=a["weights"].to_sparse()), {}, ValueError, r"\bweights must be a dense \(strided\) tensor"),
    ("split_n-negative", lambda a: None, {"split_n": -1}, ValueError, r"\bsplit_n must be >= 0"),
    ("split_n-on-cpu", lambda a: None, {"split_n": 2}, ValueError, r"\bsplit_n .*fixed grid \(gfx950\); the CPU path has none"),
    ("split_n-half", lambda a: None, {"split_n": 0.5}, TypeError, r"^fp8_mqa_logits: split_n must be an int or None .*, got float 0\.5"),
    ("split_n-str", lambda a: None, {"split_n": "0"}, TypeError, r"^fp8_mqa_logits: split_n must be an int or None .*, got str '0'"),
    ("split_n-False", lambda a: None, {"split_n": False}, TypeError, r"^fp8_mqa_logits: split_n must be an int or None .*, got bool False"),
    ("split_n-True", lambda a: None, {"split_n": True}, TypeError, r"^fp8_mqa_logits: split_n must be an int or None .*, got bool True"),
    ("logits_dtype-str", lambda a: None, {"logits_dtype": "float32"}, TypeError, r"^fp8_mqa_logits: logits_dtype must be torch\.float32 or torch\.bfloat16 \(a torch\.dtype, not a string\), got str 'float32'"),
    ("max_seqlen_k-beyond-2^48-bytes", lambda a: None, {"max_seqlen_k": 2**62}, ValueError, r"^fp8_mqa_logits: the logits \[M = 5, max_seqlen_k = 4611686018427387904\] would take more than 2\^48 bytes: max_seqlen_k \(or M\) is too large"),
    ("max_seqlen_k-int64-max", lambda a: None, {"max_seqlen_k": 2**63 - 1}, ValueError, r"\bthe logits \[M = 5, max_seqlen_k = 9223372036854775807\] would take more than 2\^48 bytes"),
    # devices a CPU-only machine can check: "meta" tensors mixed with CPU ones
    ("kv-on-meta", lambda a: a.update(kv=a["kv"].to("meta")), {}, RuntimeError, r"\bkv is on meta but q is on cpu"),
    ("weights-on-meta", lambda a: a.update(weights=a["weights"].to("meta")), {}, RuntimeError, r"\bweights is on meta but q is on cpu"),
    ("out-on-meta", lambda a: None, {"out": torch.empty(M, N, device="meta")}, RuntimeError, r"\bout is on meta but q is on cpu"),
]


@pytest.mark.parametrize("breaker,kwargs,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_INPUTS])
def test_bad_input_is_a_clear_error(breaker, kwargs, error, pattern):
    args = good_args()
    breaker(args)
    sentinel = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor) and v.device.type != "meta"}
    with pytest.raises(error, match=pattern):
        call(args, **kwargs)
    for k, v in sentinel.items():  # a rejected `out` is not written
        assert torch.equal(kwargs[k].contiguous().view(torch.uint8), v.contiguous().view(torch.uint8))


def test_bad_input_list_is_long_and_distinct():
    ids = [c[0] for c in BAD_INPUTS]
    assert len(ids) == len(set(ids)) and len(ids) >= 25


def test_none_instead_of_a_tensor_is_a_type_error():
    args = good_args()
    args["q"] = None
    with pytest.raises(TypeError):
        call(args)


def test_good_arguments_after_bad_ones_still_work():
    """The module keeps working after a rejected call (no state left half-updated)."""
    args = good_args()
    bad = dict(args, cu_starts=args["cu_starts"].long())
    with pytest.raises(TypeError):
        call(bad)
    out = call(args)
    ref = reference_logits(*args.values())
    inside = torch.isfinite(ref)
    assert torch.equal(torch.isneginf(out), ~inside)
    assert ((out.double() - ref)[inside].norm() / ref[inside].norm()).item() < 1e-6


# ---- out sharing memory with an input --------------------------------------------------------------
INPUT_NAMES = ("q", "kv", "kv_scales", "weights", "cu_starts", "cu_ends")


def move_into_out_rows(args, name, padded):
    """Moves args[name] into a float32 buffer that also backs a new `out` [M, N] (row pitch N, or N + 8
    when padded), its bytes starting at out's row 1; fp8 and int32 inputs are .view(dtype)s of the
    same bytes. Returns (out, buffer)."""
    t = args[name]
    pitch = N + 8 if padded else N
    nbytes = t.numel() * t.element_size()
    start = pitch * 4
    buf = torch.full((max(M * pitch * 4, start + nbytes) // 4 + 1,), 3.0)
    raw = buf.view(torch.uint8)[start : start + nbytes]
    raw.copy_(t.contiguous().view(-1).view(torch.uint8))
    args[name] = raw.view(t.dtype).view(t.shape)
    return buf[: M * pitch].view(M, pitch)[:, :N], buf


def weights_beside_out(args, first_col):
    """out = buf[:, :N] and weights = buf[:, first_col:first_col + H] of one [M, N + H + 1] buffer."""
    buf = torch.full((M, N + H + 1), 3.0)
    buf[:, first_col : first_col + H] = args["weights"]
    args["weights"] = buf[:, first_col : first_col + H]
    return buf[:, :N], buf


def scales_in_out_buffer(args, offset):
    """out = buf[:, :N] of a [M, 2N] buffer and kv_scales = N floats of the same buffer from `offset`."""
    buf = torch.full((M, 2 * N), 3.0)
    buf.view(-1)[offset : offset + N] = args["kv_scales"]
    args["kv_scales"] = buf.view(-1)[offset : offset + N]
    return buf[:, :N], buf


# (id, input name, how to build out (and move the input) from the good arguments)
OVERLAPPING_OUT = [
    *[(f"{name}-in-out", name, lambda a, n=name: move_into_out_rows(a, n, padded=False)) for name in INPUT_NAMES],
    *[(f"{name}-in-padded-out", name, lambda a, n=name: move_into_out_rows(a, n, padded=True)) for name in INPUT_NAMES],
    ("weights-padded-last-column", "weights", lambda a: weights_beside_out(a, N - 1)),
    ("kv_scales-over-row-0-end", "kv_scales", lambda a: scales_in_out_buffer(a, N - 1)),
    ("kv_scales-over-row-1-start", "kv_scales", lambda a: scales_in_out_buffer(a, N + 1)),
]
# The same buffers with no byte shared: accepted (the padding between out's rows is not out's).
DISJOINT_OUT = [
    ("weights-in-out-padding", lambda a: weights_beside_out(a, N)),
    ("kv_scales-between-rows-0-and-1", lambda a: scales_in_out_buffer(a, N)),
    ("kv_scales-after-last-row", lambda a: scales_in_out_buffer(a, (M - 1) * 2 * N + N)),
]


@pytest.mark.parametrize("name,build", [pytest.param(*c[1:], id=c[0]) for c in OVERLAPPING_OUT])
def test_out_overlapping_an_input_is_refused(name, build):
    args = good_args()
    out, buf = build(args)
    before = buf.clone()
    with pytest.raises(ValueError, match=rf"\bout overlaps {name} in memory"):
        call(args, out=out)
    assert torch.equal(buf.view(torch.uint8), before.view(torch.uint8)), "a refused call wrote the buffer"


@pytest.mark.parametrize("build", [pytest.param(c[1], id=c[0]) for c in DISJOINT_OUT])
def test_out_sharing_a_buffer_without_overlap_is_accepted(build):
    args = good_args()
    ref = reference_logits(*args.values())
    out, buf = build(args)
    inputs = {k: v.clone() for k, v in args.items()}
    assert call(args, out=out) is out
    inside = torch.isfinite(ref)
    assert torch.equal(torch.isneginf(out), ~inside)
    assert ((out.double() - ref)[inside].norm() / ref[inside].norm()).item() < 1e-6
    for k, v in inputs.items():
        assert torch.equal(args[k].view(torch.uint8), v.view(torch.uint8)), f"{k} was overwritten"


# ---- the fake kernels refuse what the real op refuses -------------------------------------------------


def call_fake(args, kwargs):
    """The call under FakeTensorMode (torch.compile and torch.export trace so), aliasing kept."""
    mode = FakeTensorMode()
    fake = {k: mode.from_tensor(v) for k, v in args.items()}
    fake_kwargs = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with mode:
        return call(fake, **fake_kwargs)


@pytest.mark.parametrize("breaker,kwargs,error,pattern", [pytest.param(*c[1:], id=c[0]) for c in BAD_INPUTS])
def test_fake_kernel_refuses_bad_input_like_the_real_op(breaker, kwargs, error, pattern):
    args = good_args()
    breaker(args)
    with pytest.raises(error, match=pattern):
        call_fake(args, kwargs)


@pytest.mark.parametrize("name,build", [pytest.param(*c[1:], id=c[0]) for c in OVERLAPPING_OUT])
def test_fake_kernel_refuses_overlapping_out(name, build):
    args = good_args()
    out, _ = build(args)
    with pytest.raises(ValueError, match=rf"\bout overlaps {name} in memory"):
        call_fake(args, {"out": out})


@pytest.mark.parametrize("build", [pytest.param(c[1], id=c[0]) for c in DISJOINT_OUT])
def test_fake_kernel_accepts_what_the_real_op_accepts(build):
    args = good_args()
    assert call_fake(args, {}).shape == (M, N)
    out, _ = build(args)
    assert call_fake(args, {"out": out}).shape == (M, N)


def test_export_refuses_inconsistent_shapes_at_trace_time():
    """torch.export traces with fake tensors: a wrong-sized input is refused there, naming it."""

    class Indexer(torch.nn.Module):
        def forward(self, q, kv, kv_scales, weights, cu_starts, cu_ends):
            return fp8_mqa_logits(q, kv, kv_scales, weights, cu_starts, cu_ends)

    args = good_args()
    args["weights"] = args["weights"][:-1]
    with pytest.raises(ValueError, match=r"\bweights\.size\(0\) must be q's M = 5"):
        torch.export.export(Indexer(), tuple(args.values()))


# ---- clean_logits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "False", "True", 0, 1, 1.0, torch.tensor(True)],
                         ids=["None", "str-False", "str-True", "0", "1", "1.0", "tensor"])
def test_clean_logits_must_be_a_bool(value):
    args = good_args()
    with pytest.raises(TypeError, match=r"^fp8_mqa_logits: clean_logits must be a bool"):
        call(args, clean_logits=value)
    with pytest.raises(TypeError, match=r"^fp8_mqa_logits_deepgemm: clean_logits must be a bool"):
        fp8_mqa_logits_deepgemm(args["q"], (args["kv"], args["kv_scales"]), args["weights"], args["cu_starts"],
                                args["cu_ends"], value)


def test_logits_dtype_str_in_deepgemm_form_is_a_clear_error():
    from aiter.ops.fp8_mqa_logits import fp8_fp4_mqa_logits

    args = good_args()
    with pytest.raises(TypeError, match=r"^fp8_fp4_mqa_logits: logits_dtype must be torch\.float32 or torch\.bfloat16 "
                                        r"\(a torch\.dtype, not a string\), got str 'bfloat16'"):
        fp8_fp4_mqa_logits((args["q"], None), (args["kv"], args["kv_scales"]), args["weights"], args["cu_starts"],
                           args["cu_ends"], logits_dtype="bfloat16")


def _overcommit_always():
    try:
        return open("/proc/sys/vm/overcommit_memory").read().strip() == "1"
    except OSError:
        return False


@pytest.mark.skipif(_overcommit_always(), reason="vm.overcommit_memory = 1 may map a 160 TiB logits tensor")
def test_unallocatable_logits_name_max_seqlen_k():
    """A result within the 2^48-byte bound that the allocator cannot provide (5 rows of 2^43 float32
    columns: 160 TiB, more than a 47-bit address space) is an OutOfMemoryError naming max_seqlen_k,
    not the allocator's bare message."""
    args = good_args()
    with pytest.raises(torch.OutOfMemoryError, match=r"^fp8_mqa_logits: cannot allocate the logits \[M = 5, "
                                                     r"max_seqlen_k = 8796093022208\] on cpu: max_seqlen_k \(or M\) is too large"):
        call(args, max_seqlen_k=2**43)
    call(args)  # the module still works


# ---- M == 0 or N == 0 ------------------------------------------------------------------------------


def _gpu_ok(device):
    if device != "cpu" and not is_supported(32, 128, device):
        pytest.skip(f"no {device} kernel serves H=32, D=128 here")


@pytest.mark.parametrize("m,n", [(0, 40), (5, 0), (0, 0)], ids=["M0", "N0", "M0N0"])
def test_empty_sizes_return_the_empty_result(device, m, n):
    _gpu_ok(device)
    args = good_args(device, m, n, 32, 128)
    result = call(args)
    assert result.shape == (m, n) and result.dtype == torch.float32 and result.device.type == device
    out = torch.empty(m, n, device=device)
    returned = call(args, out=out, clean_logits=False)
    assert returned.data_ptr() == out.data_ptr() and returned.shape == (m, n)


def test_empty_rows_with_padded_out_leave_the_buffer_untouched(device):
    """N == 0 with an `out` view into a wider buffer: nothing is written anywhere."""
    _gpu_ok(device)
    args = good_args(device, 4, 0, 32, 128)
    buf = torch.full((4, 8), 7.0, device=device)
    call(args, out=buf[:, :0])
    assert torch.equal(buf, torch.full_like(buf, 7.0))


# ---- GPU-only checks ---------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_gpu
@pytest.mark.parametrize("name", ["kv", "kv_scales", "weights", "cu_starts", "cu_ends"])
def test_gpu_mixed_devices(name):
    args = good_args("cuda", 8, 64, 32, 128)
    args[name] = args[name].cpu()
    with pytest.raises(RuntimeError, match=rf"\b{name} is on cpu but q is on cuda"):
        call(args)


@needs_gpu
def test_gpu_out_on_cpu():
    args = good_args("cuda", 8, 64, 32, 128)
    with pytest.raises(RuntimeError, match=r"\bout is on cpu but q is on cuda"):
        call(args, out=torch.empty(8, 64))


# (H, D) each GPU backend does not serve (its csrc/<backend>/capabilities.h; the test below checks
# that the tables leave them out).
UNSUPPORTED_HEAD_SHAPES = {
    "sm90": [(4, 128), (48, 128), (32, 96), (64, 256), (128, 64)],
    "gfx950": [(4, 128), (8, 128), (48, 128), (32, 32), (16, 32), (32, 96), (64, 256), (128, 64)],
}


def _gpu_backend_name():
    from aiter import backends

    backend = backends.gpu_backend_for(torch, torch.cuda.current_device()) if torch.cuda.is_available() else None
    return backend.name if backend is not None else None


@needs_gpu
@pytest.mark.parametrize("h,d", sorted({hd for shapes in UNSUPPORTED_HEAD_SHAPES.values() for hd in shapes}),
                         ids=lambda v: str(v))
def test_gpu_unsupported_heads_or_head_dim(h, d):
    if (h, d) not in UNSUPPORTED_HEAD_SHAPES.get(_gpu_backend_name(), [(h, d)]):
        pytest.skip(f"this GPU's kernel serves H={h}, D={d}")
    assert not is_supported(h, d, "cuda")
    args = good_args("cuda", 8, 64, h, d)
    with pytest.raises(NotImplementedError, match=r"kernel serves H in \{[0-9, ]+\} and D in \{[0-9, ]+\}, got q|no kernel for"):
        call(args)


@needs_gpu
@pytest.mark.parametrize("name", ["q", "kv"])
def test_gpu_misaligned_fp8_pointer(name):
    """A contiguous view 1 byte into its storage: the GPU kernels need 16-byte aligned rows."""
    args = good_args("cuda", 8, 64, 32, 128)
    if not is_supported(32, 128, "cuda"):
        pytest.skip("no GPU kernel for H=32, D=128 on this GPU")
    t = args[name]
    raw = torch.empty(t.numel() + 16, dtype=torch.uint8, device="cuda")
    view = raw[1 : 1 + t.numel()].view(t.shape).view(FP8)
    view.view(torch.uint8).copy_(t.view(torch.uint8))
    args[name] = view
    with pytest.raises(ValueError, match=rf"\b{name}'s data pointer must be 16-byte aligned"):
        call(args)


def test_gpu_tensor_without_gpu_backend_is_a_clear_error():
    """On a GPU that no backend of this package runs on, a CUDA tensor is refused with the GPUs that
    have one (no GPU module is loaded for it)."""
    from aiter.jit import targets

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if targets.device_target("cuda:0") is not None:
        pytest.skip(f"a backend of this package runs on cuda:0 ({targets.device_target('cuda:0')})")
    with pytest.raises(NotImplementedError, match=r"no GPU backend of this package is loaded for it"):
        call(good_args("cuda", 8, 64, 32, 128))


def test_unsupported_lists_match_the_capabilities():
    """The lists above are what each backend's capabilities.h leaves out (read by aiter.backends)."""
    from aiter import backends

    for name, shapes in UNSUPPORTED_HEAD_SHAPES.items():
        backend = backends.backends()[name]
        assert not any(backend.serves(h, d) for h, d in shapes), name
        served = [(h, d) for h in backend.heads for d in backend.head_dims]
        assert all(backend.serves(h, d) for h, d in served)
