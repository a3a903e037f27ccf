"""The Python API: custom-op registration (opcheck), both call forms, is_supported, torch.compile,
and that importing the package builds nothing. Correctness of the kernels is tested elsewhere; here
a result is compared with the float64 reference only to show the call reached the real op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import aiter
from aiter import backends
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, fp8_mqa_logits_deepgemm, is_supported
from aiter.testing.mqa_logits import make_inputs, make_windows, reference_logits

REPO = Path(__file__).resolve().parents[1]
FP8 = torch.float8_e4m3fn


def _case(M=17, N=61, H=4, D=32, mode="misaligned", seed=1):
    q, kv, s, w = make_inputs(M, N, H, D, "cpu", seed)
    ks, ke = make_windows(mode, M, N)
    return q, kv, s, w, ks, ke


def _assert_matches_reference(out, args, clean=True):
    ref = reference_logits(*args, clean_logits=clean)
    inside = torch.isfinite(ref)
    err = ((out.double() - ref)[inside].norm() / ref[inside].norm()).item()
    assert err < 1e-6, err
    if clean:
        assert torch.equal(torch.isinf(out), torch.isinf(ref))


def _opcheck_case(clean):
    """clean_logits=False leaves out-of-window elements unspecified (uninitialised in a fresh
    output), which opcheck would compare: give every row the full key range then."""
    q, kv, s, w, ks, ke = _case()
    if not clean:
        ks, ke = torch.zeros_like(ks), torch.full_like(ke, kv.shape[0])
    return q, kv, s, w, ks, ke


@pytest.mark.parametrize("clean", [True, False])
def test_opcheck_functional(fp8_aware_allclose, clean):
    args = _opcheck_case(clean)
    result = torch.library.opcheck(torch.ops.aiter.fp8_mqa_logits.default, (*args, clean, 0))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("max_seqlen_k,logits_dtype", [(0, torch.bfloat16), (70, None), (70, torch.bfloat16)],
                         ids=["bf16", "compressed", "compressed-bf16"])
def test_opcheck_functional_options(fp8_aware_allclose, max_seqlen_k, logits_dtype):
    args = _opcheck_case(True)
    result = torch.library.opcheck(torch.ops.aiter.fp8_mqa_logits.default,
                                   (*args, True, 0, max_seqlen_k, logits_dtype))
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("clean", [True, False])
def test_opcheck_out(fp8_aware_allclose, clean):
    args = _opcheck_case(clean)
    out = torch.full((17, 64), float("nan"))[:, :61]  # padded row stride
    result = torch.library.opcheck(torch.ops.aiter.fp8_mqa_logits_out.default, (*args, clean, out, 0))
    assert all(v == "SUCCESS" for v in result.values()), result


# Every custom op of the package, and whether it writes an argument.
CUSTOM_OPS = {"fp8_mqa_logits": False, "fp8_mqa_logits_out": True, "get_paged_mqa_logits_metadata": False,
              "fp8_paged_mqa_logits": False, "top_k_per_row_prefill": True, "top_k_per_row_decode": True}


@pytest.mark.parametrize("name", CUSTOM_OPS)
def test_every_custom_op_is_registered_alike(name):
    """One registration for every op (aiter/ops/_boundary.py): the implementation for every device,
    the Autograd kernel, the ADInplaceOrView kernel exactly when the op writes an argument, the fake."""
    qualname = f"aiter::{name}"
    has = {key: torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)
           for key in ("CompositeExplicitAutograd", "Autograd", "ADInplaceOrView", "Meta", "CPU", "CUDA")}
    assert has == {"CompositeExplicitAutograd": True, "Autograd": True, "ADInplaceOrView": CUSTOM_OPS[name],
                   "Meta": True, "CPU": False, "CUDA": False}, has
    schema = getattr(torch.ops.aiter, name).default._schema
    assert any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments) == CUSTOM_OPS[name]


def test_functional_returns_new_tensor():
    args = _case()
    out = fp8_mqa_logits(*args)
    assert out.shape == (17, 61) and out.dtype == torch.float32 and out.device == args[0].device
    _assert_matches_reference(out, args)
    assert aiter.fp8_mqa_logits is fp8_mqa_logits


def test_out_is_written_in_place_and_returned():
    args = _case()
    storage = torch.full((17, 64), float("nan"))
    out = storage[:, :61]
    got = fp8_mqa_logits(*args, out=out)
    assert got is out
    _assert_matches_reference(out, args)
    assert torch.isnan(storage[:, 61:]).all(), "columns past N of the padded buffer were touched"
    # clean_logits=False leaves the out-of-window part as it was here (unspecified by the contract,
    # so only the in-window part is compared).
    out2 = torch.full((17, 61), 5.0)
    fp8_mqa_logits(*args, clean_logits=False, out=out2, split_n=None)
    _assert_matches_reference(out2, args, clean=False)


def test_deepgemm_call_form_matches_aiter_form():
    q, kv, s, w, ks, ke = _case(mode="causal")
    a = fp8_mqa_logits(q, kv, s, w, ks, ke, True)
    for scales in (s, s.reshape(-1, 1)):
        b = fp8_mqa_logits_deepgemm(q, (kv, scales), w, ks, ke, clean_logits=True)
        assert torch.equal(a, b)
    c = fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke, False)
    inside = torch.isfinite(a)
    assert torch.equal(a[inside], c[inside])
    with pytest.raises(TypeError, match="kv must be the pair"):
        fp8_mqa_logits_deepgemm(q, kv, w, ks, ke)
    assert torch.equal(a, fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke, True, max_seqlen_k=0))


def test_deepgemm_compressed_layout_holds_each_window_from_column_0():
    """max_seqlen_k > 0 asks for DeepGEMM's compressed layout (vLLM's CUDA path always does): row m
    holds keys ks[m]..ke[m]-1 from column 0, the same values as the full layout's window."""
    q, kv, s, w, ks, ke = _case(mode="causal")
    full = fp8_mqa_logits(q, kv, s, w, ks, ke, True)
    packed = fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke, True, max_seqlen_k=61)
    assert packed.shape == (17, 61)
    for m in range(17):
        begin, end = int(ks[m].clamp(0, 61)), int(ke[m].clamp(0, 61))
        assert torch.equal(packed[m, : end - begin], full[m, begin:end])
        assert torch.isneginf(packed[m, end - begin:]).all()
    for bad in (-1, 2.0, True, None):
        with pytest.raises(ValueError, match=r"max_seqlen_k must be an int >= 0"):
            fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke, True, max_seqlen_k=bad)


def test_aiter_keyword_names_Q_and_KV():
    """aiter's Triton op names its first two parameters Q and KV: keyword call sites swap by import."""
    q, kv, s, w, ks, ke = _case(mode="causal")
    a = fp8_mqa_logits(q, kv, s, w, ks, ke)
    b = fp8_mqa_logits(Q=q, KV=kv, kv_scales=s, weights=w, cu_starts=ks, cu_ends=ke)
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match="both q and Q"):
        fp8_mqa_logits(q, kv, s, w, ks, ke, Q=q)
    with pytest.raises(TypeError, match="missing required argument.*weights"):
        fp8_mqa_logits(Q=q, KV=kv, kv_scales=s, cu_starts=ks, cu_ends=ke)


def test_bad_argument_is_a_clear_error():
    q, kv, s, w, ks, ke = _case()
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"\bkv must"):
        fp8_mqa_logits(q, kv.view(torch.uint8), s, w, ks, ke)


def test_is_supported():
    for H, D in ((1, 1), (3, 5), (32, 128), (64, 128), (128, 64)):
        assert is_supported(H, D, "cpu") and is_supported(H, D, torch.device("cpu"))
    assert not is_supported(0, 128, "cpu") and not is_supported(32, 0, "cpu")
    assert not is_supported("x", 128, "cpu") and not is_supported(None, 128)
    assert not is_supported(32, 128, "meta")
    assert not is_supported(32, 128, "bogus")
    if not torch.cuda.is_available():
        assert not is_supported(32, 128, "cuda")
        assert is_supported(7, 9)  # no GPU visible: the default device is the CPU
        return
    for H, D in ((32, 128), (64, 128), (16, 128), (32, 64), (16, 64), (8, 128), (32, 32), (48, 128)):
        got = is_supported(H, D, "cuda")
        # The support tables (capabilities.h; op_tests/test_backends.py checks the parse against
        # the compiled lists) against the answer for this device.
        if torch.version.hip:
            arch = torch.cuda.get_device_properties(0).gcnArchName
            table = backends.backends()["gfx950"]
            want = arch.startswith(table.arch_prefix) and H in table.heads and D in table.head_dims
        else:
            table = backends.backends()["sm90"]
            want = (torch.cuda.get_device_capability(0) == table.compute_capability and H in table.heads and
                    D in table.head_dims)
        assert got == want, (H, D)


def test_fake_kernels_on_meta_tensors():
    # Meta tensors carry no data: this also shows the Python path reads no tensor values.
    q = torch.empty(5, 4, 32, dtype=FP8, device="meta")
    kv = torch.empty(9, 32, dtype=FP8, device="meta")
    s = torch.empty(9, device="meta")
    w = torch.empty(5, 4, device="meta")
    ks = torch.empty(5, dtype=torch.int32, device="meta")
    out = fp8_mqa_logits(q, kv, s, w, ks, ks)
    assert out.shape == (5, 9) and out.dtype == torch.float32 and out.device.type == "meta"
    buf = torch.empty(5, 9, device="meta")
    assert fp8_mqa_logits(q, kv, s, w, ks, ks, out=buf) is buf
    assert torch.ops.aiter.fp8_mqa_logits_out(q, kv, s, w, ks, ks, True, buf, 0) is None
    with pytest.raises(ValueError, match="q must be 3-D"):
        fp8_mqa_logits(q[0], kv, s, w, ks, ks)
    # One meta tensor among CPU ones routes the call to the fake kernel: it must refuse, too.
    with pytest.raises(RuntimeError, match="kv is on cpu but q is on meta"):
        fp8_mqa_logits(q, torch.zeros(9, 32).to(FP8), s, w, ks, ks)


def test_torch_compile_fullgraph_cpu():
    torch._dynamo.reset()
    args = _case(mode="causal")

    def functional(q, kv, s, w, ks, ke):
        return fp8_mqa_logits(q, kv, s, w, ks, ke, clean_logits=True)

    def with_out(q, kv, s, w, ks, ke, out):
        fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke, clean_logits=False)  # traced, result unused
        fp8_mqa_logits(q, kv, s, w, ks, ke, False, out=out)
        return out

    eager = functional(*args)
    compiled = torch.compile(functional, fullgraph=True)(*args)
    assert torch.equal(compiled, eager)
    out = torch.zeros(17, 61)
    torch.compile(with_out, fullgraph=True)(*args, out)
    inside = torch.isfinite(eager)
    assert torch.equal(out[inside], eager[inside])


# ---- not differentiable: refused at the call, never a silently missing gradient -------------------------


def _wrapper(args):
    return fp8_mqa_logits(*args)


def _wrapper_out(args):
    return fp8_mqa_logits(*args, out=torch.empty(17, 61))


def _deepgemm_form(args):
    q, kv, s, w, ks, ke = args
    return fp8_mqa_logits_deepgemm(q, (kv, s), w, ks, ke)


def _functional_op(args):
    return torch.ops.aiter.fp8_mqa_logits(*args, True, 0)


def _out_op(args):
    out = torch.empty(17, 61)
    torch.ops.aiter.fp8_mqa_logits_out(*args, True, out, 0)
    return out


CALL_FORMS = [pytest.param(f, id=f.__name__.strip("_")) for f in (_wrapper, _wrapper_out, _deepgemm_form,
                                                                   _functional_op, _out_op)]
FLOAT_INPUTS = {"q": 0, "kv": 1, "kv_scales": 2, "weights": 3}


@pytest.mark.parametrize("name", FLOAT_INPUTS)
@pytest.mark.parametrize("form", CALL_FORMS)
def test_input_requiring_grad_is_refused(form, name):
    args = list(_case())
    args[FLOAT_INPUTS[name]] = args[FLOAT_INPUTS[name]].clone().requires_grad_()
    with pytest.raises(RuntimeError, match=rf"^fp8_mqa_logits: {name} requires grad, but the op is not differentiable"):
        form(args)
    if name == "weights":  # a non-leaf, as in a model (weights = proj(x) * scale)
        args[3] = args[3] * 1.0
        with pytest.raises(RuntimeError, match=r"\bweights requires grad"):
            form(args)


@pytest.mark.parametrize("form", CALL_FORMS)
def test_grad_free_calls_still_work(form):
    """no_grad, inference_mode, or inputs that do not require grad: the op runs as before."""
    args = list(_case())
    _assert_matches_reference(form(args), args)
    needs_grad = list(args)
    needs_grad[3] = needs_grad[3].clone().requires_grad_()
    with torch.no_grad():
        out = form(needs_grad)
    assert out.grad_fn is None and not out.requires_grad
    _assert_matches_reference(out, args)
    with torch.inference_mode():
        _assert_matches_reference(form(needs_grad), args)
        _assert_matches_reference(form([t.clone() for t in args]), args)  # inference tensors
    _assert_matches_reference(form([t.detach() for t in needs_grad]), args)


@pytest.mark.parametrize("use_op", [False, True], ids=["wrapper", "op"])
def test_out_that_requires_grad_is_refused(use_op):
    """As torch's own out= functions do; under no_grad (an optimizer-style update) it is written."""
    args = _case()

    def run(out):
        if use_op:
            torch.ops.aiter.fp8_mqa_logits_out(*args, True, out, 0)
        else:
            fp8_mqa_logits(*args, out=out)

    leaf = torch.zeros(17, 61, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^fp8_mqa_logits: out is a leaf tensor that requires grad"):
        run(leaf)
    assert torch.equal(leaf.detach(), torch.zeros(17, 61))
    with pytest.raises(RuntimeError, match=r"^fp8_mqa_logits: out is a tensor that requires grad"):
        run(leaf * 1.0)
    with torch.no_grad():
        run(leaf)
    _assert_matches_reference(leaf.detach(), args)


@pytest.mark.parametrize("use_op", [False, True], ids=["wrapper", "op"])
def test_inference_tensor_out_is_refused_outside_inference_mode(use_op):
    """torch refuses an in-place write to an inference tensor outside inference mode, even under
    no_grad; inside inference mode it is fine."""
    args = _case()

    def run(args, out):
        if use_op:
            torch.ops.aiter.fp8_mqa_logits_out(*args, True, out, 0)
        else:
            fp8_mqa_logits(*args, out=out)

    with torch.inference_mode():
        out = torch.zeros(17, 61)
        inference_args = [t.clone() for t in args]
    with pytest.raises(RuntimeError, match=r"^fp8_mqa_logits: out is an inference tensor"):
        run(args, out)
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"\bout is an inference tensor"):
        run(args, out)
    # Every argument an inference tensor: no Autograd kernel runs, the ADInplaceOrView one refuses.
    with pytest.raises(RuntimeError, match=r"^fp8_mqa_logits: out is an inference tensor"):
        run(inference_args, out)
    assert torch.equal(out, torch.zeros(17, 61))
    with torch.inference_mode():
        run(args, out)
        _assert_matches_reference(out, args)
        run(inference_args, out)
        _assert_matches_reference(out, args)


def test_out_version_counter_is_bumped():
    """Autograd sees the write (as for torch's in-place ops): a tensor saved for backward and then
    overwritten by the op makes backward fail instead of using the new values."""
    args = _case()
    out = torch.zeros(17, 61)
    before = out._version
    fp8_mqa_logits(*args, out=out)
    torch.ops.aiter.fp8_mqa_logits_out(*args, True, out, 0)
    assert out._version == before + 2
    x = torch.ones(17, 61, requires_grad=True)
    saved = torch.zeros(17, 61)
    y = (x * saved).sum()  # saves `saved` for backward
    fp8_mqa_logits(*args, out=saved)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_forward_mode_tangent_is_refused():
    import torch.autograd.forward_ad as fwAD

    args = list(_case())
    with fwAD.dual_level():
        args[3] = fwAD.make_dual(args[3], torch.ones_like(args[3]))
        with pytest.raises(RuntimeError, match=r"^fp8_mqa_logits: weights carries a forward-mode AD tangent"):
            fp8_mqa_logits(*args)


def test_dispatch_modes_still_see_the_op():
    """The Autograd kernels call the implementation directly only when nothing sits below them: a
    TorchDispatchMode (as FakeTensorMode, functionalization or a profiler use) still gets the call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    args = _case()
    out = torch.empty(17, 61)
    with Record():
        _assert_matches_reference(fp8_mqa_logits(*args), args)
        fp8_mqa_logits(*args, out=out)
    _assert_matches_reference(out, args)
    assert torch.ops.aiter.fp8_mqa_logits.default in seen and torch.ops.aiter.fp8_mqa_logits_out.default in seen


def test_torch_compile_refuses_grad_too():
    torch._dynamo.reset()
    q, kv, s, w, ks, ke = _case(mode="causal")
    compiled = torch.compile(lambda w: fp8_mqa_logits(q, kv, s, w, ks, ke), fullgraph=True)
    with pytest.raises(Exception, match=r"\bweights requires grad, but the op is not differentiable"):
        compiled(w.clone().requires_grad_())
    with torch.no_grad():
        _assert_matches_reference(compiled(w.clone().requires_grad_()), (q, kv, s, w, ks, ke))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: host-sync detection is a CUDA feature")
def test_no_host_sync_on_gpu():
    if not is_supported(32, 128, "cuda"):
        pytest.skip("no native kernel on this GPU")
    args = [t.cuda() for t in _case(M=64, N=512, H=32, D=128, mode="causal")]
    fp8_mqa_logits(*args)  # first use builds / loads outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fp8_mqa_logits(*args)
        fp8_mqa_logits(*args, out=torch.empty(64, 512, device="cuda"))
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_import_builds_nothing(tmp_path):
    cache = tmp_path / "jit"
    script = textwrap.dedent(
        """
        import json, sys
        import aiter, torch
        print(json.dumps({
            "ops": [hasattr(torch.ops.aiter, n) for n in ("fp8_mqa_logits", "fp8_mqa_logits_out")],
            "core_imported": "aiter.jit.core" in sys.modules,
            "cpp_extension_imported": "torch.utils.cpp_extension" in sys.modules,
        }))
        """
    )
    env = dict(os.environ, AITER_JIT_DIR=os.fspath(cache), PYTHONPATH=os.fspath(REPO))
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert info["ops"] == [True, True]
    assert not info["core_imported"] and not info["cpp_extension_imported"], info
    assert not cache.exists(), "import aiter touched the JIT cache"
    assert "building" not in p.stderr
