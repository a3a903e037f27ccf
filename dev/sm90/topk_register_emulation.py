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
    """block_pick: thread t sums the t-th group of bins from the top; an exclusive scan of the groups.
    Returns (bin, remaining, count in the bin, total)."""
    per = len(hist) // THREADS
    groups = hist[::-1].reshape(THREADS, per).astype(np.int64)
    sums = groups.sum(1)
    above = np.cumsum(sums) - sums
    total = int(sums.sum())
    if total < wanted:
        return 0, wanted, 0, total
    t = int(np.nonzero((above < wanted) & (above + sums >= wanted))[0][0])
    run = int(above[t])
    for i in range(per):
        if run < wanted <= run + groups[t, i]:
            return len(hist) - 1 - t * per - i, wanted - run, int(groups[t, i]), total
        run += int(groups[t, i])
    raise AssertionError("the crossing group holds the crossing bin")


def fine_threshold(keys: np.ndarray, coarse_bin: int, remaining: int):
    """fine_threshold: two 10-bit histograms of the keys of the fixed prefix; (T, need, equal)."""
    sel = keys[(keys >> (32 - COARSE_BITS)) == coarse_bin]
    hist1 = np.bincount((sel >> (32 - COARSE_BITS - FINE_BITS)) & ((1 << FINE_BITS) - 1), minlength=1 << FINE_BITS)
    fine1_bin, remaining, _, _ = block_pick(hist1, remaining)
    prefix = (coarse_bin << FINE_BITS) | fine1_bin
    sel = keys[(keys >> FINE_BITS) == prefix]
    hist2 = np.bincount(sel & ((1 << FINE_BITS) - 1), minlength=1 << FINE_BITS)
    fine2_bin, need, equal, _ = block_pick(hist2, remaining)
    return (prefix << FINE_BITS) | fine2_bin, need, equal


def emulate_row(x_row: np.ndarray, row: int, stride0: int, begin: int, end: int, k: int, elem: int, keys: int,
                paths: dict):
    mis = ((row * stride0 + begin) * elem % 16) // elem  # the base pointer is 16-byte aligned
    base_col = begin - mis
    lo, hi = mis, mis + end - begin
    assert hi <= THREADS * keys, "the launcher sends only rows that fit"
    stage_keys = np.zeros(THREADS * keys, np.uint32)
    stage_keys[lo:hi] = fast_key(x_row[begin:end])
    key = stage_keys.reshape(THREADS, keys)  # thread t holds stage elements [t * keys, (t + 1) * keys)
    warp_first = np.arange(THREADS // 32) * 32 * keys
    live = np.repeat((warp_first < hi) & (warp_first + 32 * keys > lo), 32)
    assert not key[~live].any(), "a dead warp holds a choosable key"

    hist0 = np.bincount(key.ravel() >> (32 - COARSE_BITS), minlength=1 << COARSE_BITS)
    hist0[0] = 0  # read as empty
    coarse_bin, remaining, count, total = block_pick(hist0, k)
    take_all = total <= k
    threshold, need, equal_count = 1, 0, 0  # take_all: every key from 1 up
    if not take_all:
        threshold, need, equal_count = fine_threshold(key.ravel(), coarse_bin, remaining)
    paths["take_all" if take_all else "fine"] += 1

    # emit: per thread a mask of the keys it takes (bit i: key i), then slots by a block scan.
    cut_ties = equal_count > need
    paths["cut_ties"] += int(cut_ties)
    bit = np.uint64(1) << np.arange(keys, dtype=np.uint64)
    if cut_ties:
        take = ((key > threshold) * bit).sum(1, dtype=np.uint64)
        equal = ((key == threshold) * bit).sum(1, dtype=np.uint64)
    else:
        take = ((key >= threshold) * bit).sum(1, dtype=np.uint64)
        equal = np.zeros(THREADS, np.uint64)
    take[~live] = 0
    equal[~live] = 0
    popc = lambda m: np.array([bin(int(v)).count("1") for v in m], np.uint32)  # noqa: E731
    packed = popc(take) + (popc(equal) << np.uint32(16))
    before = (np.cumsum(packed, dtype=np.uint32) - packed).astype(np.uint32)
    assert np.array_equal(before & 0xFFFF, np.cumsum(popc(take)) - popc(take)), "the low half carried"
    out = np.full(k, -1, np.int64)
    written = np.zeros(k, np.int64)
    for t in range(THREADS):
        equal_before = min(int(before[t]) >> 16, need)
        m, e = int(take[t]), int(equal[t])
        kept = equal_before
        while e and kept < need:  # this thread keeps its first need - equal_before equal keys
            m |= e & -e
            e &= e - 1
            kept += 1
        slot = (int(before[t]) & 0xFFFF) + equal_before
        while m:
            i = (m & -m).bit_length() - 1
            assert slot < k, "a slot past k"
            out[slot] = base_col + t * keys + i
            written[slot] += 1
            slot += 1
            m &= m - 1
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
    paths = {"take_all": 0, "fine": 0, "cut_ties": 0}
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
                    got = emulate_row(xf[r], r, stride0, int(ks[r]), int(ke[r]), k, elem, keys, paths)
                    assert np.array_equal(got, cpu[r].numpy()), (dtype, width, k, r)
                    checked += 1
            print(f"{dtype} width {width} (kKeys {keys}): ok (rows checked {checked})", flush=True)
    assert used == set(INSTANCES)
    assert all(paths.values()), f"a path no row took: {paths}"
    print(f"emulation equals the CPU path on {checked} rows; instances {sorted(used)}; rows per path {paths}")


if __name__ == "__main__":
    main()
