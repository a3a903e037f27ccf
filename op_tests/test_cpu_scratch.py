"""The CPU path's bounded scratch (issue #8): depth and head chunking, peak memory, clear OOM errors.

The CPU path keeps "a few MiB per thread" of scratch whatever H and D (docs/operator.md,
"Memory"): shapes whose whole-depth working set would exceed csrc/cpu/fp8_mqa_logits_cpu.h's
bounds (one row's decoded Q > kQScratchBytes = 1 MiB, or the whole-depth K block > kKtScratchBytes =
256 KiB, i.e. depth > 1024 words: D > 1024 fp32, D > 2048 bf16 pairs) take the chunked path, which
must give exactly the whole-depth path's bits. Checked here:
  - the chunked path against the float64 reference at a large D and a large H, every SIMD variant;
  - forced chunking (AITER_FP8_MQA_CPU_CHUNKS, tiny chunks) bitwise equal to the default path, every
    variant, for any thread count;
  - peak RSS of D = 4M and H = 1M calls (subprocess, ru_maxrss) stays within inputs + a few MiB;
  - a failed scratch allocation is a RuntimeError naming the limit, not a bare std::bad_alloc.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import test_fp8_mqa_logits
from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
from test_fp8_mqa_logits import make_case, run_case

VARIANTS = ["generic", "avx2", "avx512", "avx512bf16"]
REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def best_variant() -> str:
    from aiter.ops import native

    saved = os.environ.pop("AITER_FP8_MQA_CPU_SIMD", None)
    try:
        return native.ops().cpu_simd_variant()
    finally:
        if saved is not None:
            os.environ["AITER_FP8_MQA_CPU_SIMD"] = saved


@pytest.fixture(params=VARIANTS)
def cpu_variant(request, monkeypatch):
    """Caps the CPU path at each SIMD variant this CPU runs (the others are skipped)."""
    variant = request.param
    if VARIANTS.index(variant) > VARIANTS.index(best_variant()):
        pytest.skip(f"this CPU does not run {variant}")
    monkeypatch.setenv("AITER_FP8_MQA_CPU_SIMD", variant)
    monkeypatch.delenv("AITER_FP8_MQA_CPU_CHUNKS", raising=False)
    return variant


# ---- correctness of the chunked path at the real thresholds -------------------------------------

# D = 20000: depth 20000 (fp32) / 10000 (bf16) words, far above 1024: 157 / 79 depth chunks.
# H = 70000, D = 8: one row's Q is 70000 * 8 * 4 = 2.2 MB (fp32) / 1.1 MB (bf16) > 1 MiB: 137 head
# chunks. H = 5000, D = 128: 2.6 / 1.3 MB, 10 head chunks. (H = 5000, D = 8 is only 160 KB a row and
# stays on the whole-depth path; it is in the forced-chunking test below.)
CHUNKED_CASES = [
    pytest.param(3, 300, 3, 20000, "random", id="D20000-random"),
    pytest.param(4, 130, 2, 20000, "causal", id="D20000-causal"),
    pytest.param(2, 70, 70000, 8, "multi_req", id="H70000-multi_req"),
    pytest.param(3, 65, 70000, 8, "random", id="H70000-random"),
    pytest.param(3, 65, 5000, 128, "random", id="H5000-D128-random"),
]


def cpu_rel_l2_bar(H):
    """The CPU bar (1e-6, set for H <= 64), widened for very many heads: the contract's head sum is
    a sequential fp32 sum of H terms of both signs, whose rounding error grows like 2^-24 sqrt(H)
    relative to the result (random walk), whatever the implementation. Measured at H = 70000:
    3-5e-6, bitwise the same as before chunking; bar 1.6e-5. H = 5000: 9e-7; bar 4.2e-6."""
    return max(test_fp8_mqa_logits.CPU_REL_L2_BAR, 2.0**-24 * math.sqrt(H))


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("M,N,H,D,mode", CHUNKED_CASES)
def test_chunked_path_against_reference(cpu_variant, monkeypatch, M, N, H, D, mode, clean):
    """Large D and large H (the chunked path) meet the CPU bar against the float64 reference (every
    check of run_case: relative L2, per-row bound, -inf pattern, a NaN-poisoned padded `out` left
    untouched outside the windows when not clean), the L2 bar widened for H > 280 (cpu_rel_l2_bar)."""
    monkeypatch.setattr(test_fp8_mqa_logits, "CPU_REL_L2_BAR", cpu_rel_l2_bar(H))
    run_case(M, N, H, D, mode, clean, "cpu", seed=M * 7 + D)


# ---- forced chunking gives the whole-depth path's bits ------------------------------------------

# Shapes on the whole-depth path by default, run again with tiny chunks: depth chunks of 7 or 1
# words (odd: pairs of the bf16 format at a chunk edge), head chunks of 4 or 8, 64-key spans.
FORCED_CASES = [
    pytest.param(19, 203, 7, 65, "random", id="H7-D65"),
    pytest.param(40, 300, 5000, 8, "causal", id="H5000-D8"),
    pytest.param(17, 129, 33, 128, "misaligned", id="H33-D128"),
    pytest.param(5, 700, 3, 1000, "multi_req", id="H3-D1000"),
    pytest.param(6, 66, 1, 3, "empty", id="H1-D3"),
]


@pytest.mark.parametrize("chunks", ["7,4,64", "1,8,128", "4096,4,64"])
@pytest.mark.parametrize("M,N,H,D,mode", FORCED_CASES)
def test_forced_chunking_is_bitwise_equal(cpu_variant, monkeypatch, M, N, H, D, mode, chunks):
    """AITER_FP8_MQA_CPU_CHUNKS forces the chunked path: every output bit (NaN-poisoned outside the
    windows when not clean) equals the default path's, for 1, 2 and 3 threads."""
    q, kv, scales, weights, ks, ke = make_case(M, N, H, D, mode, "cpu", seed=H + D)

    def run(clean):
        out = torch.full((M, N), float("nan"))
        fp8_mqa_logits(q, kv, scales, weights, ks, ke, clean_logits=clean, out=out)
        return out.view(torch.int32)

    for clean in (True, False):
        expected = run(clean)
        monkeypatch.setenv("AITER_FP8_MQA_CPU_CHUNKS", chunks)
        before = torch.get_num_threads()
        try:
            for threads in (1, 2, 3):
                torch.set_num_threads(threads)
                assert torch.equal(run(clean), expected), f"{threads} threads, clean={clean}"
        finally:
            torch.set_num_threads(before)
            monkeypatch.delenv("AITER_FP8_MQA_CPU_CHUNKS")


def test_malformed_chunk_override_is_a_clear_error(monkeypatch):
    q, kv, scales, weights, ks, ke = make_case(2, 3, 4, 8, "causal", "cpu")
    monkeypatch.setenv("AITER_FP8_MQA_CPU_CHUNKS", "16,6,64")  # heads not a multiple of 4
    with pytest.raises(RuntimeError, match="AITER_FP8_MQA_CPU_CHUNKS"):
        fp8_mqa_logits(q, kv, scales, weights, ks, ke)


# ---- peak memory and allocation failures (subprocesses: ru_maxrss only ever grows) --------------

_PEAK_SCRIPT = textwrap.dedent(
    """
    import json, re, sys, torch
    from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
    M, N, H, D = map(int, sys.argv[1:5])
    fp8 = torch.float8_e4m3fn
    i32 = dict(dtype=torch.int32)
    def status(key):  # kB
        return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) << 10
    # Warm-up: loads the module, starts the thread pool, gives each thread its malloc arena.
    fp8_mqa_logits(torch.ones(2, 4, 8).to(fp8), torch.ones(3, 8).to(fp8), torch.ones(3),
                   torch.ones(2, 4), torch.zeros(2, **i32), torch.full((2,), 3, **i32))
    baseline = status("VmRSS")
    # Inputs, filled in small slices (no big temporaries): e4m3 bytes of both signs, never NaN.
    g = torch.Generator().manual_seed(0)
    def fp8_random(*shape):
        t = torch.empty(shape, dtype=torch.uint8)
        flat = t.view(-1)
        for i in range(0, flat.numel(), 1 << 16):
            n = min(1 << 16, flat.numel() - i)
            magnitude = torch.randint(0, 0x7F, (n,), dtype=torch.uint8, generator=g)
            sign = torch.randint(0, 2, (n,), dtype=torch.uint8, generator=g) << 7
            flat[i:i + n] = magnitude | sign
        return t.view(fp8)
    q, kv = fp8_random(M, H, D), fp8_random(N, D)
    scales = torch.full((N,), 0.5)
    weights = torch.full((M, H), 1.0 / H)
    ks, ke = torch.zeros(M, **i32), torch.full((M,), N, **i32)
    inputs = q.numel() + kv.numel() + 4 * (scales.numel() + weights.numel() + 2 * M)
    before = status("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM (the peak) to the current RSS
    out = fp8_mqa_logits(q, kv, scales, weights, ks, ke)
    peak = status("VmHWM")
    # The value, against float64 (after the measurement), in the contract's per-row bound:
    # max|out - ref| <= 2e-3 * max|ref| + 1e-6. A negative dot would make both sides relu(.) = 0:
    # then flip K's signs (in place) and run again, unmeasured.
    dots = torch.einsum("mhd,nd->mhn", q.double(), kv.double())
    if dots.sum() < 0:
        kv.view(torch.uint8).bitwise_xor_(0x80)
        dots = -dots
        out = fp8_mqa_logits(q, kv, scales, weights, ks, ke)
    ref = (torch.relu(dots * 0.5) * weights.double()[:, :, None]).sum(1)
    err = ((out.double() - ref).abs() / (2e-3 * ref.abs().amax() + 1e-6)).max().item()
    print(json.dumps(dict(baseline=baseline, inputs=inputs, before=before, peak=peak, row_err=err)))
    """
)


def _run_child(script, args, extra_env=None, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


# (M, N, H, D, allowed growth of the peak over the RSS just before the call, inputs included). Before
# chunking the D = 4M call grew by ~520 MiB (avx512bf16; ~1 GiB with fp32 operands) and the H = 1M
# one by 17 MiB (avx512bf16; 33 MiB fp32); chunked, both grow by ~2 MiB (2 threads' scratch).
PEAK_CASES = [
    pytest.param(1, 1, 1, 4 << 20, 32 * MiB, id="D4M"),
    pytest.param(1, 1, 1 << 20, 8, 8 * MiB, id="H1M-D8"),
]


def _can_reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _can_reset_peak_rss(),
                    reason="needs Linux's /proc/self/clear_refs to reset the peak RSS")
@pytest.mark.parametrize("M,N,H,D,allowed", PEAK_CASES)
def test_peak_rss_of_huge_d_and_h(M, N, H, D, allowed):
    """Peak RSS (VmHWM, reset just before the call) stays below the RSS before the call (torch's
    baseline + the inputs) + a few MiB of scratch; the value meets the contract's row bound."""
    import json

    r = json.loads(_run_child(_PEAK_SCRIPT, [M, N, H, D]))
    growth = r["peak"] - r["before"]
    print(f"M={M} N={N} H={H} D={D}: baseline {r['baseline'] / MiB:.0f} MiB + inputs "
          f"{r['inputs'] / MiB:.1f} MiB -> {r['before'] / MiB:.0f} MiB before the call, peak "
          f"{r['peak'] / MiB:.0f} MiB: +{growth / MiB:.1f} MiB (allowed {allowed / MiB:.0f}); error "
          f"{r['row_err']:.2e} of the row bound")
    assert growth < allowed
    assert r["row_err"] <= 1.0


_OOM_SCRIPT = textwrap.dedent(
    """
    import resource, torch
    from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
    fp8 = torch.float8_e4m3fn
    i32 = dict(dtype=torch.int32)
    D = 1 << 20
    args = (torch.ones(1, 1, D).to(fp8), torch.ones(1, D).to(fp8), torch.ones(1),
            torch.ones(1, 1), torch.zeros(1, **i32), torch.ones(1, **i32))
    fp8_mqa_logits(*args)  # warm-up (module, threads, arenas)
    out = torch.empty(1, 1)
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), resource.RLIM_INFINITY))
    try:
        fp8_mqa_logits(*args, out=out)
        print("no error")
    except BaseException as e:
        print(f"{type(e).__name__}: {e}")
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs RLIMIT_AS and /proc")
def test_scratch_allocation_failure_is_a_clear_error():
    """With the address space capped at +64 MiB and the override forcing a scratch of 200+ MiB
    (D = 1M in a single depth chunk: a K chunk of 1M words x 64 keys), the call fails with a
    RuntimeError that names the limit, not a bare MemoryError: std::bad_alloc. (The bounded
    default scratch, ~1 MiB, is too small to make fail this way.)"""
    line = _run_child(_OOM_SCRIPT, [], {"AITER_FP8_MQA_CPU_CHUNKS": "1048576,4,256"})
    assert line.startswith("RuntimeError:"), line
    assert "out of memory" in line and "kQScratchBytes + kKtScratchBytes" in line, line


# ---- the paged CPU path: the same bounds ----------------------------------------------------------

# csrc/cpu/fp8_paged_mqa_logits_cpu.h: a batch's decoded Q rows (next_n * H * D floats) above
# kPagedQScratchBytes = 1 MiB, or a key group's Kt[D][64] above kPagedKtScratchBytes = 256 KiB
# (D > 1024), take the chunked path, which gives the whole-depth path's bits.
PAGED_CHUNKED_CASES = [
    pytest.param([130, 0, 77, 3], 2, 3, 2000, 16, id="D2000"),
    pytest.param([70, 65, 1], 1, 2100, 128, 64, id="H2100-D128"),
    pytest.param([40, 17, 90], 3, 5, 1500, 100, id="n3-D1500-block100"),
]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "noclean"])
@pytest.mark.parametrize("lens,next_n,H,D,block_kv", PAGED_CHUNKED_CASES)
def test_paged_chunked_path_against_reference(cpu_variant, lens, next_n, H, D, block_kv, clean):
    """Large D and large H (the paged chunked path) meet the CPU bar against the float64 reference,
    the L2 bar widened for many heads as for prefill (cpu_rel_l2_bar)."""
    import test_paged_mqa_logits as paged

    from aiter.testing.paged_mqa_logits import make_paged_case

    args = make_paged_case(lens, next_n, H, D, block_kv, seed=D + H)
    saved = dict(paged.REL_L2_BAR)
    paged.REL_L2_BAR["cpu"] = cpu_rel_l2_bar(H)
    try:
        paged.check_result(paged.call(args, clean_logits=clean), paged.reference(args, clean), "cpu", clean)
    finally:
        paged.REL_L2_BAR.update(saved)


PAGED_FORCED_CASES = [
    pytest.param([130, 0, 77, 1, 64], 3, 7, 65, 16, id="H7-D65"),
    pytest.param([300, 5, 129], 2, 33, 128, 64, id="H33-D128"),
    pytest.param([40, 2, 17], 1, 1, 3, 7, id="H1-D3"),
]


@pytest.mark.parametrize("chunks", ["7,4", "1,8", "4096,4", "64,64"])
@pytest.mark.parametrize("lens,next_n,H,D,block_kv", PAGED_FORCED_CASES)
def test_paged_forced_chunking_is_bitwise_equal(cpu_variant, monkeypatch, lens, next_n, H, D, block_kv, chunks):
    """AITER_FP8_PAGED_CPU_CHUNKS forces the paged chunked path: every output bit (clean, and the seen
    columns when not clean) equals the whole-depth path's, for 1, 2 and 3 threads."""
    import test_paged_mqa_logits as paged

    from aiter.testing.paged_mqa_logits import make_paged_case

    args = make_paged_case(lens, next_n, H, D, block_kv, seed=H + D)
    expected = paged.call(args, clean_logits=True).view(torch.int32)
    seen = torch.isfinite(expected.view(torch.float32))
    monkeypatch.setenv("AITER_FP8_PAGED_CPU_CHUNKS", chunks)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert torch.equal(paged.call(args, clean_logits=True).view(torch.int32), expected), f"{threads} threads"
            assert torch.equal(paged.call(args).view(torch.int32)[seen], expected[seen])
    finally:
        torch.set_num_threads(before)


def test_paged_malformed_chunk_override_is_a_clear_error(monkeypatch):
    from aiter.testing.paged_mqa_logits import make_paged_case
    import test_paged_mqa_logits as paged

    args = make_paged_case([20, 3], 1, 4, 16, 16)
    for bad in ("16,6", "0,4", "8", "8,4,64", "x,4"):
        monkeypatch.setenv("AITER_FP8_PAGED_CPU_CHUNKS", bad)
        with pytest.raises(RuntimeError, match="AITER_FP8_PAGED_CPU_CHUNKS"):
            paged.call(args)


_PAGED_PEAK_SCRIPT = textwrap.dedent(
    """
    import json, re, sys, torch
    from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits
    from aiter.testing.paged_mqa_logits import reference_paged_logits
    next_n, H, D, keys = map(int, sys.argv[1:5])
    i32 = dict(dtype=torch.int32)
    def status(key):  # kB
        return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) << 10
    def run(q, cache, weights, lens, table):
        return fp8_paged_mqa_logits(q, cache, weights, lens, table, torch.zeros(2, 2, **i32), keys,
                                    clean_logits=True)
    # Warm-up: loads the module, starts the thread pool, gives each thread its malloc arena.
    run(torch.ones(1, next_n, 4, 8).to(torch.float8_e4m3fn), torch.ones(1, keys, 1, 12, dtype=torch.uint8),
        torch.ones(next_n, 4), torch.full((1,), keys, **i32), torch.zeros(1, 1, **i32))
    baseline = status("VmRSS")
    g = torch.Generator().manual_seed(0)
    def fp8_bytes(n):  # e4m3 bytes of both signs, never NaN, filled in small slices
        t = torch.empty(n, dtype=torch.uint8)
        for i in range(0, n, 1 << 16):
            m = min(1 << 16, n - i)
            t[i:i + m] = torch.randint(0, 0x7F, (m,), dtype=torch.uint8, generator=g) | (
                torch.randint(0, 2, (m,), dtype=torch.uint8, generator=g) << 7)
        return t
    q = fp8_bytes(next_n * H * D).view(torch.float8_e4m3fn).view(1, next_n, H, D)
    # One block of `keys` keys: keys * D key bytes, then the float32 scales. With one head, each key is
    # q itself (so every dot is > 0 and the value check cannot pass on relu zeros alone).
    cache = torch.empty(1, keys, 1, D + 4, dtype=torch.uint8)
    flat = cache.view(-1)
    for k in range(keys):
        flat[k * D:(k + 1) * D] = q.view(torch.uint8).view(-1)[:D] if H == 1 else fp8_bytes(D)
    flat[keys * D:].view(torch.float32).fill_(0.5)
    weights = torch.full((next_n, H), 1.0 / H)
    lens, table = torch.full((1,), keys, **i32), torch.zeros(1, 1, **i32)
    before = status("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM (the peak) to the current RSS
    out = run(q, cache, weights, lens, table)
    peak = status("VmHWM")
    # The value, against float64, within the worst-case bound of its fp32 sums (D terms over d, then H
    # over h: (D + H) 2^-24 of the sum of the terms' magnitudes): at these depths the contract's
    # per-row bound, set for real head dims, is below what any sequential fp32 sum can promise.
    ref = reference_paged_logits(q, cache, weights, lens, table, keys, clean_logits=True)
    k = cache.view(-1)[:keys * D].view(torch.float8_e4m3fn).view(keys, D).double().abs()
    magnitude = torch.einsum("jhd,kd->jhk", q[0].double().abs(), k)
    magnitude = (magnitude * 0.5 * weights.double().abs()[:, :, None]).sum(1)
    inside = torch.isfinite(ref)  # with [B] lengths, the batch's first rows see fewer keys: -inf after
    assert torch.equal(torch.isneginf(out), ~inside)
    err = ((out.double() - ref)[inside].abs() / ((D + H) * 2.0**-24 * magnitude[inside] + 1e-30)).max().item()
    print(json.dumps(dict(baseline=baseline, before=before, peak=peak, row_err=err)))
    """
)

# (next_n, H, D, keys, allowed growth of the peak over the RSS just before the call). Whole-depth, the
# D = 4M call would take 64 x 4M floats (1 GiB) of K per thread and the H = 1M one 32 MiB of Q;
# chunked, both grow by the small scratch and the logits.
PAGED_PEAK_CASES = [
    pytest.param(1, 1, 4 << 20, 3, 16 * MiB, id="D4M"),
    pytest.param(2, 1 << 19, 8, 5, 16 * MiB, id="n2-H512K-D8"),
]


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _can_reset_peak_rss(),
                    reason="needs Linux's /proc/self/clear_refs to reset the peak RSS")
@pytest.mark.parametrize("next_n,H,D,keys,allowed", PAGED_PEAK_CASES)
def test_paged_peak_rss_of_huge_d_and_h(next_n, H, D, keys, allowed):
    """The paged CPU path's peak RSS (VmHWM, reset just before the call) stays within the RSS before
    the call (inputs included) + a few MiB, as prefill's; the value is within its fp32 sums' worst-case
    bound of the float64 result."""
    import json

    r = json.loads(_run_child(_PAGED_PEAK_SCRIPT, [next_n, H, D, keys], timeout=300))
    growth = r["peak"] - r["before"]
    print(f"next_n={next_n} H={H} D={D} keys={keys}: {r['before'] / MiB:.0f} MiB before the call, peak "
          f"{r['peak'] / MiB:.0f} MiB: +{growth / MiB:.1f} MiB (allowed {allowed / MiB:.0f}); error "
          f"{r['row_err']:.2e} of the fp32 bound")
    assert growth < allowed
    assert r["row_err"] <= 1.0
