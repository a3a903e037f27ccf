"""GPU integration: CUDA-graph capture, torch.compile, no host sync, and the vLLM-style chunk.

Run on a GPU whose kernel this package has (sm_90a: H100/H200); skipped elsewhere with the reason.
The vLLM example also runs on the CPU path here (small), so its plumbing is tested without a GPU.
"""

import os
import sys

import pytest
import torch

from aiter.ops.fp8_mqa_logits import fp8_mqa_logits, is_supported
from aiter.testing.mqa_logits import make_inputs, make_windows

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import vllm_indexer_chunk  # noqa: E402

needs_gpu_kernel = pytest.mark.skipif(
    not (torch.cuda.is_available() and is_supported(32, 128, "cuda")),
    reason="needs a GPU with a native kernel (sm_90a: H100/H200)",
)


def _inputs(M=512, N=4096, H=32, mode="multi_req", seed=0):
    q, kv, s, w = make_inputs(M, N, H, 128, "cuda", seed)
    ks, ke = make_windows(mode, M, N, "cuda")
    return q, kv, s, w, ks, ke


@needs_gpu_kernel
@pytest.mark.parametrize("clean", [True, False])
def test_cuda_graph_capture_and_replay(clean):
    q, kv, s, w, ks, ke = _inputs()
    out = torch.full((q.shape[0], kv.shape[0]), float("nan"), device="cuda")
    fp8_mqa_logits(q, kv, s, w, ks, ke, clean, out=out)  # warm-up: builds / loads the module
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp8_mqa_logits(q, kv, s, w, ks, ke, clean, out=out)
    # New data in the captured buffers, including the windows: the graph must follow them.
    q2, kv2, s2, w2 = make_inputs(q.shape[0], kv.shape[0], q.shape[1], 128, "cuda", seed=1)
    ks2, ke2 = make_windows("causal", q.shape[0], kv.shape[0], "cuda")
    for dst, src in ((q, q2), (kv, kv2), (s, s2), (w, w2), (ks, ks2), (ke, ke2)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    eager = fp8_mqa_logits(q, kv, s, w, ks, ke, clean)
    torch.cuda.synchronize()
    if clean:
        assert torch.equal(out, eager)
    else:
        n = torch.arange(kv.shape[0], device="cuda")
        inside = (n[None] >= ks[:, None].long().clamp(0)) & (n[None] < ke[:, None].long().clamp(max=kv.shape[0]))
        assert torch.equal(out[inside], eager[inside])


@needs_gpu_kernel
def test_torch_compile_fullgraph():
    q, kv, s, w, ks, ke = _inputs(mode="causal")

    def indexer(q, kv, s, w, ks, ke):
        return fp8_mqa_logits(q, kv, s, w, ks, ke, True).topk(64, dim=1).values

    compiled = torch.compile(indexer, fullgraph=True)
    got = compiled(q, kv, s, w, ks, ke)
    want = indexer(q, kv, s, w, ks, ke)
    assert torch.equal(got, want)


@needs_gpu_kernel
def test_no_host_synchronisation():
    q, kv, s, w, ks, ke = _inputs()
    fp8_mqa_logits(q, kv, s, w, ks, ke, True)  # first use may build and synchronise
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = fp8_mqa_logits(q, kv, s, w, ks, ke, True)
        fp8_mqa_logits(q, kv, s, w, ks, ke, False, out=out)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_gpu_kernel
@pytest.mark.parametrize("heads", [32, 64])
def test_vllm_chunk_topk_agreement_gpu(heads):
    frac, rows, _, _ = vllm_indexer_chunk.agreement(heads=heads, device="cuda")
    print(f"vLLM-style chunk H={heads}: top-2048 agreement {frac:.5f} over {rows} rows")
    assert rows > 0 and frac >= 0.999


def test_vllm_chunk_topk_agreement_cpu():
    # Small enough for two cores, still with rows of >= 2048 keys.
    frac, rows, _, _ = vllm_indexer_chunk.agreement(requests=((2100, 24), (0, 16), (2500, 8)), heads=8, device="cpu")
    assert rows > 0 and frac >= 0.999


@needs_gpu_kernel
@pytest.mark.parametrize("heads", [32, 64])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
def test_long_chunk_of_mixed_windows_over_many_plan_rounds(heads, clean):
    """A chunk of 30000 rows (2500 / 5000 Q blocks: several rounds of the sm90 plan kernel's 1024
    threads) with windows of every kind mixed: empty, 1-8 keys (the exact path), short, long, clamped.
    Every in-window element is written and finite, the -inf pattern is exact with clean_logits and
    nothing outside a window is written without it (a NaN-poisoned out), and sampled rows match the
    float64 reference."""
    from test_fp8_mqa_logits import check_result  # noqa: E402  (op_tests is on sys.path under pytest)
    from aiter.testing.mqa_logits import reference_logits, window_mask

    M, N = 30000, 8192
    gen = torch.Generator().manual_seed(heads + clean)
    lengths = torch.tensor([0, 1, 2, 3, 5, 8, 9, 64, 300, 2000, N + 100])[torch.randint(0, 11, (M,), generator=gen)]
    ks = torch.randint(-50, N, (M,), generator=gen)
    ke = ks + lengths
    ks, ke = ks.to(torch.int32).cuda(), ke.clamp(max=2**31 - 1).to(torch.int32).cuda()
    q, kv, s, w = make_inputs(M, N, heads, 128, "cuda", seed=7)
    out = torch.full((M, N), float("nan"), device="cuda")
    fp8_mqa_logits(q, kv, s, w, ks, ke, clean, out=out)
    inside = window_mask(ks, ke, N)
    assert torch.isfinite(out[inside]).all(), "an in-window element is missing or not finite"
    if clean:
        assert torch.equal(torch.isneginf(out), ~inside), "the -inf pattern differs from the windows"
    else:
        assert torch.isnan(out[~inside]).all(), "an element outside the windows was written"
    rows = torch.randperm(M, generator=gen)[:256].cuda()
    ref = reference_logits(q[rows], kv, s, w[rows], ks[rows], ke[rows], clean)
    check_result(out[rows], ref, ks[rows], ke[rows], N, clean, "cuda")
