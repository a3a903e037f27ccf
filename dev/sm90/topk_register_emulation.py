"""Host emulation of the sm90 register top-k kernel (csrc/sm90/topk/register_select.cuh) and the
launcher's choice of instance (topk_launcher.cu: launch_register), step by step on the same 32-bit
keys, against the CPU path of top_k_per_row_prefill: random and adversarial rows, k = 1 .. 4096,
float32 and bfloat16, odd row pitches and windows off 16-byte boundaries, widths at each instance's
capacity. The emit step's packed 16-bit scan is emulated in uint32 arithmetic, so a carry between its
halves would show; every output slot must be written exactly once.

    cd <worktree> && AITER_JIT_DIR=... python -m dev.sm90.topk_register_emulation [--rows N] [--seed S]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from aiter.ops.indexer_topk import top_k_per_row_prefill
from dev.sm90.topk_cluster_emulation import adversarial_rows, check_fast_key, fast_key
from dev.sm90.topk_two_pass_emulation import make_row

THREADS = 1024
INSTANCES = (9, 17, 33)  # kKeysSmall, kKeysMedium, kKeysLarge
COARSE_BITS, FINE_BITS = 12, 10


def max_width(keys: int, elem: int) -> int:
    return THREADS * keys - 16 // elem + 1


def instance(width: int, elem: int):
    """launch_register: the smallest instance whose capacity holds the row width (None: another kernel)."""
    return next((keys for keys in INSTANCES if width <= max_width(keys, elem)), None)


def block_pick(hist: np.ndarray, wanted: int):
    """block_pick: thread t sums the t-th group of bins from the top; an exclusive scan of the groups."""
    per = len(hist) // THREADS
    groups = hist[::-1].reshape(THREADS, per).astype(np.int64)
    sums = groups.sum(1)
    above = np.cumsum(sums) - sums
    total = int(sums.sum())
    if total < wanted:
        return 0, wanted, total
    t = int(np.nonzero((above < wanted) & (above + sums >= wanted))[0][0])
    run = int(above[t])
    for i in range(per):
        if run < wanted <= run + groups[t, i]:
            return len(hist) - 1 - t * per - i, wanted - run, total
        run += int(groups[t, i])
    raise AssertionError("the crossing group holds the crossing bin")


def emulate_row(x_row: np.ndarray, row: int, stride0: int, begin: int, end: int, k: int, elem: int, keys: int):
    mis = ((row * stride0 + begin) * elem % 16) // elem  # the base pointer is 16-byte aligned
    base_col = begin - mis
    lo, hi = mis, mis + end - begin
    assert hi <= THREADS * keys, "the launcher sends only rows that fit"
    stage_keys = np.zeros(THREADS * keys, np.uint32)
    stage_keys[lo:hi] = fast_key(x_row[begin:end])
    key = stage_keys.reshape(THREADS, keys)  # thread t holds stage elements [t * keys, (t + 1) * keys)

    live = key[key != 0]
    hist0 = np.bincount(live >> (32 - COARSE_BITS), minlength=1 << COARSE_BITS)
    coarse_bin, remaining, total = block_pick(hist0, k)
    take_all = total <= k
    threshold, need_equal = 0, 0
    if not take_all:
        prefix = coarse_bin
        sel = key[(key >> (32 - COARSE_BITS)) == prefix]
        hist1 = np.bincount((sel >> (32 - COARSE_BITS - FINE_BITS)) & ((1 << FINE_BITS) - 1), minlength=1 << FINE_BITS)
        fine1_bin, remaining, _ = block_pick(hist1, remaining)
        prefix = (prefix << FINE_BITS) | fine1_bin
        sel = key[(key >> FINE_BITS) == prefix]
        hist2 = np.bincount(sel & ((1 << FINE_BITS) - 1), minlength=1 << FINE_BITS)
        fine2_bin, need_equal, _ = block_pick(hist2, remaining)
        threshold = (prefix << FINE_BITS) | fine2_bin

    above_t = (key > threshold).sum(1).astype(np.uint32)
    equal_t = ((key == threshold) & (not take_all)).sum(1).astype(np.uint32)
    packed = above_t + (equal_t << np.uint32(16))
    before = (np.cumsum(packed, dtype=np.uint32) - packed).astype(np.uint32)
    assert np.array_equal(before & 0xFFFF, np.cumsum(above_t) - above_t), "the low half carried"
    # Per key, as each thread walks its keys in order: the equal keys before it decide whether an
    # equal key is kept, the kept keys before it in its thread offset its slot.
    equal = (key == threshold) & (not take_all)
    equal_rank = (before >> 16).astype(np.int64)[:, None] + np.cumsum(equal, 1) - equal
    take = (key > threshold) | (equal & (equal_rank < need_equal))
    start = (before & 0xFFFF).astype(np.int64) + np.minimum(before >> 16, need_equal).astype(np.int64)
    slot = start[:, None] + np.cumsum(take, 1) - take
    columns = base_col + np.arange(THREADS * keys).reshape(THREADS, keys)
    out = np.full(k, -1, np.int64)
    assert (slot[take] < k).all(), "a slot past k"
    written = np.bincount(slot[take], minlength=k)
    out[slot[take]] = columns[take]
    chosen = total if take_all else k
    assert (written[:chosen] == 1).all() and (written[chosen:] == 0).all(), "a slot written twice or never"
    return out.astype(np.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3, help="random rows per (width, kind, k)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    check_fast_key(rng)
    checked, used = 0, set()
    for dtype, elem in ((torch.float32, 4), (torch.bfloat16, 2)):
        widths = [1, 37, 2048, 5000] + [max_width(keys, elem) + d for keys in INSTANCES for d in (-1, 0, 1)]
        for width in widths:
            keys = instance(width, elem)
            if keys is None:
                continue
            used.add(keys)
            for k in (1, 7, 512, 2048, 4096):
                xs = [make_row(rng, width, kind) for kind in ("normal", "grid", "narrow", "equal", "relu")
                      for _ in range(args.rows)] + adversarial_rows(rng, width, k)
                rows = len(xs)
                stride0 = width + 3  # an odd row pitch: each row's window starts at another 16-byte offset
                full = torch.zeros((rows, stride0), dtype=dtype)
                full[:, :width] = torch.from_numpy(np.stack(xs)).to(dtype)
                t = full[:, :width]
                xf = t.float().numpy()
                ks = rng.integers(0, max(1, width // 3), rows).astype(np.int32)
                ke = np.minimum(ks + rng.integers(0, width + 1, rows), width).astype(np.int32)
                ks[0], ke[0] = 0, width  # the whole row: at the instance's capacity with the row's offset
                ks[1], ke[1] = ks[1], ks[1]  # empty
                ks[2], ke[2] = min(1, width), width  # starts off a vector boundary
                ks[3:11], ke[3:11] = 0, width  # whole rows at every 16-byte offset the odd pitch gives
                cpu = torch.full((rows, k), 0x5A5A5A5A, dtype=torch.int32)
                top_k_per_row_prefill(t, torch.from_numpy(ks), torch.from_numpy(ke), cpu, None, rows, stride0, 1, k)
                for r in range(rows):
                    got = emulate_row(xf[r], r, stride0, int(ks[r]), int(ke[r]), k, elem, keys)
                    assert np.array_equal(got, cpu[r].numpy()), (dtype, width, k, r)
                    checked += 1
            print(f"{dtype} width {width} (kKeys {keys}): ok (rows checked {checked})", flush=True)
    assert used == set(INSTANCES)
    print(f"emulation equals the CPU path on {checked} rows; instances {sorted(used)}")


if __name__ == "__main__":
    main()
