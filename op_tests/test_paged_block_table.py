"""Out-of-range block_table entries of fp8_paged_mqa_logits (docs/operator.md, "Bad block_table entries").

Every backend reads a visible block_table entry once, checks it where it uses it, and never lets a bad
one address kv_cache:
  - CPU: another thread flipping entries to 10^9 during calls crashes nothing (a subprocess, so that
    a crash fails the test instead of killing pytest); each call either returns the untouched table's
    result bit for bit or raises the ValueError naming block_table; one bad visible entry is refused by
    name (the first one in (batch, column) order) on the whole-depth and the chunked path.
  - sm90 (skipped without a CUDA GPU that runs the paged kernel, saying so): a bad entry is no fault;
    its keys' logits are NaN and every other logit is the good table's; the error naming block_table
    comes from check_block_table, or from the next call once the record has reached the host; the
    call after that, with a good table, works and is correct. A sticky CUDA error (a device-side
    assert, in a subprocess) is reported as such by both ops, not as an alignment problem.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from aiter.ops.fp8_paged_mqa_logits import check_block_table, fp8_paged_mqa_logits, is_supported
from aiter.testing.paged_mqa_logits import make_paged_case, reference_paged_logits

REPO = Path(__file__).resolve().parents[1]
BAD = 10**9


def call(args, **kwargs):
    return fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                args["block_table"], args["schedule_meta"], args["max_context_len"], **kwargs)


def _run_child(script, extra_env=None, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)


# ---- CPU --------------------------------------------------------------------------------------------

_RACE_SCRIPT = textwrap.dedent(
    """
    import re, threading, time, torch
    from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits
    from aiter.testing.paged_mqa_logits import make_paged_case
    torch.set_num_threads(2)
    args = make_paged_case([3000, 1700, 40, 2500], 2, 16, 64, 16, seed=11)
    table = args["block_table"]
    def call():
        return fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"], table,
                                    args["schedule_meta"], args["max_context_len"], clean_logits=True)
    want = call().view(torch.int32).clone()
    visible = [(0, c) for c in range(3000 // 16)] + [(3, c) for c in range(2500 // 16)]
    stop = threading.Event()
    def writer():
        g = torch.Generator().manual_seed(1)
        while not stop.is_set():
            picks = torch.randint(0, len(visible), (4,), generator=g).tolist()
            saved = [(visible[i], int(table[visible[i]])) for i in picks]
            for where, _ in saved:
                table[where] = 1000000000
            time.sleep(0.0005)
            for where, value in saved:
                table[where] = value
            time.sleep(0.002)
    thread = threading.Thread(target=writer)
    thread.start()
    ok = refused = 0
    pattern = re.compile(r"^fp8_paged_mqa_logits: block_table\\[[03], \\d+\\] = 1000000000 is not a block of kv_cache")
    deadline = time.time() + float(__import__("sys").argv[1] if len(__import__("sys").argv) > 1 else 4)
    try:
        while time.time() < deadline:
            try:
                out = call()
            except ValueError as e:
                assert pattern.match(str(e)), str(e)
                refused += 1
                continue
            assert torch.equal(out.view(torch.int32), want), "a call that read only good entries differs"
            ok += 1
    finally:
        stop.set()
        thread.join()
    print(f"ok={ok} refused={refused}")
    """
)


def test_cpu_racing_writer_never_crashes():
    """A thread flips visible entries to 10^9 and back while the op runs in a loop for 4 s: the
    process survives, and each call gives the untouched table's result bit for bit or the ValueError
    naming the flipped entry."""
    proc = _run_child(_RACE_SCRIPT, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    line = proc.stdout.strip().splitlines()[-1]
    counts = dict(part.split("=") for part in line.split())
    print(line)
    assert int(counts["ok"]) >= 1 and int(counts["refused"]) >= 1, line


@pytest.mark.parametrize("chunks", [None, "5,4"], ids=["whole-depth", "chunked"])
@pytest.mark.parametrize("block_kv", [16, 100], ids=["block16", "block100"])
def test_cpu_bad_visible_entry_is_refused_by_name(monkeypatch, chunks, block_kv):
    """One bad visible entry (negative, num_blocks, 10^9, int32 min) is a ValueError naming it; with two,
    the first in (batch, column) order is named. Blocks of 16 keys (several a key group) and of 100
    (a block spans key groups); the whole-depth and the chunked CPU paths."""
    if chunks:
        monkeypatch.setenv("AITER_FP8_PAGED_CPU_CHUNKS", chunks)
    args = make_paged_case([3 * block_kv + 5, 2 * block_kv + 1], 2, 6, 20, block_kv, seed=block_kv)
    num_blocks = args["kv_cache"].shape[0]
    good = call(args, clean_logits=True)
    for bad in (-1, num_blocks, BAD, -(2**31)):
        table = args["block_table"].clone()
        table[1, 2] = bad
        with pytest.raises(ValueError, match=rf"^fp8_paged_mqa_logits: block_table\[1, 2\] = {bad} is not a block of "
                                             rf"kv_cache \(num_blocks = {num_blocks}\), but batch 1 sees "
                                             rf"{2 * block_kv + 1} keys"):
            call(dict(args, block_table=table))
    table = args["block_table"].clone()
    table[1, 0] = BAD
    table[0, 3] = -7
    with pytest.raises(ValueError, match=r"block_table\[0, 3\] = -7 is not a block"):
        call(dict(args, block_table=table))
    assert torch.equal(call(args, clean_logits=True), good)  # the good table still works


# ---- sm90 -------------------------------------------------------------------------------------------

H, D, BLOCK_KV, NEXT_N = 64, 128, 64, 2


def _require_paged_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (the sm90 paged kernel's device-side block_table check)")
    if not is_supported(H, D, "cuda", block_kv=BLOCK_KV, next_n=NEXT_N):
        pytest.skip(f"no paged kernel on this GPU serves H={H}, D={D}, block_kv={BLOCK_KV}, next_n={NEXT_N}")


def _clear_records():
    try:
        check_block_table("cuda")
    except ValueError:
        pass


def _gpu_case():
    # Batch 2 has 2 keys (rows of 1 and 2 keys: the exact path); the others take the wgmma path.
    return make_paged_case([300, 130, 2, 64], NEXT_N, H, D, BLOCK_KV, seed=7, device="cuda")


@pytest.mark.parametrize("where,bad", [((1, 1), BAD), ((0, 4), -1), ((2, 0), BAD)],
                         ids=["tile-10^9", "tile-negative", "exact-row-10^9"])
def test_gpu_bad_entry_is_reported_and_the_next_good_call_works(where, bad):
    _require_paged_gpu()
    _clear_records()
    args = _gpu_case()
    good = call(args, clean_logits=True)
    table = args["block_table"].clone()
    table[where] = bad
    out = call(dict(args, block_table=table), clean_logits=True)  # no fault, no host sync
    torch.cuda.synchronize()
    # The entry's keys are NaN; every other logit is the good table's.
    b, column = where
    keys = torch.arange(out.shape[1], device="cuda")
    in_block = (keys >= column * BLOCK_KV) & (keys < (column + 1) * BLOCK_KV)
    rows = torch.arange(out.shape[0], device="cuda") // NEXT_N == b
    poisoned = rows[:, None] & in_block[None, :] & torch.isfinite(good)
    assert poisoned.any() and torch.isnan(out[poisoned]).all()
    assert torch.equal(out[~poisoned], good[~poisoned])
    with pytest.raises(ValueError, match=rf"^check_block_table: an earlier fp8_paged_mqa_logits call on cuda:\d+ read "
                                         rf"block_table\[{b}, {column}\] = {bad}, which is not a block of kv_cache"):
        check_block_table("cuda")
    check_block_table("cuda")  # reported once
    again = call(args, clean_logits=True)
    assert torch.equal(again, good)
    ref = reference_paged_logits(*(args[k].cpu() for k in ("q", "kv_cache", "weights", "context_lens", "block_table")),
                                 args["max_context_len"], clean_logits=True)
    assert torch.equal(torch.isneginf(again.cpu()), torch.isneginf(ref))
    inside = torch.isfinite(ref)
    rel = ((again.cpu().double() - ref)[inside].norm() / ref[inside].norm()).item()
    assert rel <= 5e-4, rel


def test_gpu_bad_entry_is_reported_by_the_next_call():
    """Without check_block_table: once the bad call's record has reached the host (here after a
    synchronize), the next call raises the error naming block_table, and the call after it works."""
    _require_paged_gpu()
    _clear_records()
    args = _gpu_case()
    good = call(args, clean_logits=True)
    table = args["block_table"].clone()
    table[3, 0] = BAD
    call(dict(args, block_table=table), clean_logits=True)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"^fp8_paged_mqa_logits: an earlier fp8_paged_mqa_logits call on cuda:\d+ "
                                         r"read block_table\[3, 0\] = 1000000000, which is not a block of kv_cache"):
        call(args, clean_logits=True)
    assert torch.equal(call(args, clean_logits=True), good)
    check_block_table("cuda")  # nothing left


def test_gpu_good_calls_do_not_synchronise():
    """The good path issues no synchronising call (a good launch adds nothing to the stream; the host reads
    the kernel's mapped record as it is)."""
    _require_paged_gpu()
    _clear_records()
    args = _gpu_case()
    call(args)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            call(args, clean_logits=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    check_block_table("cuda")


_STICKY_SCRIPT = textwrap.dedent(
    """
    import torch
    from aiter.ops.fp8_mqa_logits import fp8_mqa_logits
    from aiter.ops.fp8_paged_mqa_logits import fp8_paged_mqa_logits
    from aiter.testing.paged_mqa_logits import make_paged_case
    a = make_paged_case([300, 130], 2, 64, 128, 64, seed=1, device="cuda")
    def paged():
        return fp8_paged_mqa_logits(a["q"], a["kv_cache"], a["weights"], a["context_lens"], a["block_table"],
                                    a["schedule_meta"], a["max_context_len"], clean_logits=True)
    fp8 = torch.float8_e4m3fn
    q, kv = torch.ones(64, 64, 128, device="cuda").to(fp8), torch.ones(256, 128, device="cuda").to(fp8)
    pre = (q, kv, torch.ones(256, device="cuda"), torch.ones(64, 64, device="cuda"),
           torch.zeros(64, dtype=torch.int32, device="cuda"), torch.full((64,), 256, dtype=torch.int32, device="cuda"))
    paged(); fp8_mqa_logits(*pre); torch.cuda.synchronize()
    # A device-side assert: a sticky error, the CUDA context is unusable from here on.
    try:
        torch.zeros(4, device="cuda")[torch.tensor([100], device="cuda")] = 1.0
        torch.cuda.synchronize()
    except Exception as e:
        print("ASSERT", type(e).__name__)
    for name, fn in (("paged", paged), ("prefill", lambda: fp8_mqa_logits(*pre))):
        try:
            fn(); torch.cuda.synchronize()
            print(name, "no error")
        except Exception as e:
            print(name, type(e).__name__, str(e).replace(chr(10), " ")[:600])
    """
)


def test_gpu_sticky_error_is_reported_as_such():
    _require_paged_gpu()
    proc = _run_child(_STICKY_SCRIPT, {"TORCH_SHOW_CPP_STACKTRACES": "0"})
    out = proc.stdout
    print(out, proc.stderr[-2000:])
    for name in ("paged", "prefill"):
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert "no error" not in line, line
        # torch's own call may meet the sticky error first; if ours does, it names it.
        if "fp8_" in line:
            assert "sticky error" in line and "aligned" not in line, line
