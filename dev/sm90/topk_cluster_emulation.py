"""Host emulation of the sm90 cluster top-k kernel (csrc/sm90/topk/cluster_select.cuh) and its plan
(csrc/sm90/topk/topk_launcher.cu: plan_cluster), step by step on the same 32-bit keys, against the CPU
path of top_k_per_row_prefill: random rows and adversarial ones (all-equal values, many ties at the
k-th value, near-equal bins past the candidate list, NaN / -inf / +inf / -0.0 mixes, rows shorter than
k, empty rows), k = 1 .. 4096, float32 and bfloat16, misaligned windows and row pitches, clusters of 1
to 8 CTAs. Also checks the kernel's fast_key against topk_key on every special value and random bits.

    cd <worktree> && AITER_JIT_DIR=... python -m dev.sm90.topk_cluster_emulation [--rows N] [--seed S]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from aiter.ops.indexer_topk import top_k_per_row_prefill
from dev.sm90.topk_two_pass_emulation import keys_of, make_row

THREADS = 256
MAX_CLUSTER = 8
COARSE_BITS, FINE_BITS = 12, 10
CANDIDATES = 1024
TARGET_SLICE, MIN_SLICE = 8192, 1024
SMEM_OPTIN = 232448  # H100 / H200 opt-in shared memory per CTA
STATE_BYTES = 18560  # kStageOffset: sizeof(SharedState) rounded to 128 bytes (nvcc 13.0)
PIECE_BYTES, MAX_PIECES = 16384, 16


def fast_key(x: np.ndarray) -> np.ndarray:
    """cluster_select.cuh: fast_key (x + 0.0, sign flip, one unsigned range test)."""
    u = (x.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    mask = ((u.view(np.int32) >> 31).view(np.uint32) | np.uint32(0x80000000))
    key = u ^ mask
    ok = (key - np.uint32(0x00800000)) <= np.uint32(0xFF800000 - 0x00800000)
    return np.where(ok, key, np.uint32(0)).astype(np.uint32)


def check_fast_key(rng):
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FC00000, 0xFFC00000,
                        0x7FFFFFFF, 0xFFFFFFFF, 0x00000001, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000,
                        0x80800000], dtype=np.uint32)
    x = np.concatenate([bits, special]).view(np.float32)
    with np.errstate(invalid="ignore"):
        assert np.array_equal(fast_key(x), keys_of(x)), "fast_key differs from topk_key"


def plan_cluster(rows, width, elem, sms):
    vec = 16 // elem
    width = max(1, width)
    cluster = -(-width // TARGET_SLICE)
    fill = min(-(-2 * sms // rows), max(1, width // MIN_SLICE))
    cluster = min(MAX_CLUSTER, max(cluster, fill))
    chunk = -(-(-(-width // cluster)) // vec) * vec
    stage = chunk + vec
    smem = STATE_BYTES + -(-stage * elem // 16) * 16 + 8 * -(-stage // 32)
    if smem > SMEM_OPTIN or stage * elem > PIECE_BYTES * MAX_PIECES or rows * cluster >= 1 << 31:
        return None
    return cluster, stage


def pick_from_top(counts, wanted):
    """pick_from_top: the largest i with sum(counts[i:]) >= wanted, the remainder; (0, wanted) if short."""
    total = int(counts.sum())
    if total < wanted:
        return 0, wanted, total
    above = np.concatenate([np.cumsum(counts[::-1])[::-1][1:], [0]])  # keys at indices > i
    i = int(np.nonzero(above + counts >= wanted)[0].max())
    return i, wanted - int(above[i]), total


def cluster_pick(hists, group, wanted):
    """cluster_pick: the cluster's sum in two steps (groups, then the picked group's bins)."""
    full = np.sum(hists, axis=0)
    g, in_group, total = pick_from_top(full.reshape(-1, group).sum(axis=1), wanted)
    if total < wanted:
        return 0, wanted, total
    b, rem, _ = pick_from_top(full[g * group:(g + 1) * group], in_group)
    return g * group + b, rem, total


RESCANS = [0]  # CTAs whose bin overflows the candidate list (the fine passes read all staged keys)


def popcount(w: int) -> int:
    return bin(w).count("1")


def gathered_bits(c, above: np.ndarray, vec: int) -> np.ndarray:
    """The gather's chosen bitmap as the kernel builds it: in the bulk-copied middle [a0, a1) the lanes
    covering 32 consecutive elements (starting at a0 + 32 m) OR their combined bits into the word(s)
    the span straddles; the head and tail set one bit per element. Returns the bitmap as bools."""
    lo, hi = c["lo"], c["hi"]
    a0, a1 = -(-lo // vec) * vec, hi // vec * vec
    words = [0] * (-(-hi // 32) + 1)
    singles = list(range(lo, a0)) + list(range(a1, hi)) if a1 > a0 else list(range(lo, hi))
    for j in singles:
        if above[j]:
            words[j >> 5] |= 1 << (j & 31)
    if a1 > a0:
        for j in range(a0, a1, 32):
            seg = above[j:min(j + 32, a1)]
            seg = np.concatenate([seg, np.zeros(32 - seg.size, bool)])
            span = int(np.packbits(seg, bitorder="little").view("<u4")[0])
            if span:
                off = j & 31
                words[j >> 5] |= (span << off) & 0xFFFFFFFF
                if off:
                    words[(j >> 5) + 1] |= span >> (32 - off)
    assert not any(w >> 32 for w in words) and not words[-1], "a bit past the slice"
    packed = np.array(words, dtype="<u4").view(np.uint8)
    return np.unpackbits(packed, bitorder="little")[:above.size].astype(bool)


def emulate_row(x_row: np.ndarray, row: int, stride0: int, begin: int, end: int, k: int, cluster: int, stage_cap: int,
                vec: int):
    """The kernel on one row: x_row is the whole logits row (float32 values); returns int32 [k]."""
    n = end - begin
    chunk = -(-(-(-n // cluster)) // vec) * vec
    ctas = []
    for rank in range(cluster):
        s0 = min(end, begin + rank * chunk)
        s1 = min(end, s0 + chunk)
        mis = (row * stride0 + s0) % vec  # the row base of a 16-byte-aligned tensor
        lo, hi = mis, mis + (s1 - s0)
        assert hi <= stage_cap, "the slice overflows the staging buffer"
        keys = np.zeros(hi, dtype=np.uint32)
        keys[lo:hi] = fast_key(x_row[s0:s1])
        ctas.append(dict(s0=s0, mis=mis, lo=lo, hi=hi, keys=keys, base_col=s0 - mis))
    coarse_shift = 32 - COARSE_BITS
    hist0 = []
    for c in ctas:
        # Every staged key is counted, key 0 (NaN, -inf, the lanes past the slice) in bin 0, which no
        # choosable key shares and which is cleared before the sums.
        h = np.bincount((c["keys"][c["lo"]:] >> coarse_shift).astype(np.int64), minlength=1 << COARSE_BITS)
        assert int(h[0]) == int((c["keys"][c["lo"]:] == 0).sum()), "a choosable key in bin 0"
        h[0] = 0
        hist0.append(h)
    bin0, rem0, total = cluster_pick(hist0, 64, k)
    take_all = total <= k
    for c, h in zip(ctas, hist0):
        key = c["keys"]
        b = key >> coarse_shift
        c["chosen"] = gathered_bits(c, (key != 0) & (take_all | (b > bin0)), vec)
        c["equal"] = np.zeros(key.size, dtype=bool)
        c["listed"] = (not take_all) and int(h[bin0]) <= CANDIDATES
        in_bin = np.nonzero((key != 0) & (b == bin0) & (not take_all))[0]
        # The kernel's list is in arrival order (warp timing); the result must not depend on it.
        c["cand"] = np.random.permutation(in_bin) if c["listed"] else None
        RESCANS[0] += (not take_all) and not c["listed"]
    threshold = need_equal = 0
    if not take_all:
        prefix, wanted, fixed = bin0, rem0, COARSE_BITS
        for _ in range(2):
            shift = 32 - fixed - FINE_BITS
            hists = []
            for c in ctas:
                keys = c["keys"][c["cand"]] if c["listed"] else c["keys"]
                sel = keys[(keys != 0) & ((keys >> (32 - fixed)) == prefix)]
                hists.append(np.bincount(((sel >> shift) & ((1 << FINE_BITS) - 1)).astype(np.int64),
                                         minlength=1 << FINE_BITS))
            d, wanted, _ = cluster_pick(hists, 32, wanted)
            prefix = (prefix << FINE_BITS) | d
            fixed += FINE_BITS
        threshold, need_equal = prefix, wanted
        for c in ctas:
            idx = c["cand"] if c["listed"] else np.arange(c["keys"].size)
            key = c["keys"][idx]
            inb = (key != 0) & (key >= threshold) & ((key >> coarse_shift) == bin0)
            c["chosen"][idx[inb & (key > threshold)]] = True
            c["equal"][idx[inb & (key == threshold)]] = True
    # Emit: bitmaps of 32-bit words, thread t owning words [t * per, (t + 1) * per).
    out = np.full(k, -1, dtype=np.int64)
    base_above = base_equal = 0
    for c in ctas:
        words = -(-c["hi"] // 32)
        pad = words * 32 - c["keys"].size
        chosen = np.concatenate([c["chosen"], np.zeros(pad, bool)]).reshape(words, 32)
        equal = np.concatenate([c["equal"], np.zeros(pad, bool)]).reshape(words, 32)
        cw = [int(w) for w in np.packbits(chosen, axis=1, bitorder="little").view("<u4").ravel()]
        ew = [int(w) for w in np.packbits(equal, axis=1, bitorder="little").view("<u4").ravel()]
        rank_equal = base_equal
        for w in range(words):  # the threads' words in order: the block scan's exclusive prefix
            e = ew[w]
            allowed = need_equal - rank_equal if rank_equal < need_equal else 0
            rank_equal += popcount(e)
            while popcount(e) > allowed:
                e &= ~(1 << (e.bit_length() - 1))
            cw[w] |= e
        slot = base_above + min(base_equal, need_equal)
        for w in range(words):
            word = cw[w]
            while word and slot < k:
                bit = (word & -word).bit_length() - 1
                word &= word - 1
                out[slot] = c["base_col"] + w * 32 + bit
                slot += 1
        base_above += int(c["chosen"].sum())
        base_equal += int(c["equal"].sum())
    chosen_total = total if take_all else k
    assert (out[:chosen_total] >= 0).all() and (out[chosen_total:] == -1).all()
    return out.astype(np.int32)


def adversarial_rows(rng, width, k):
    """Rows that stress the tie rule and the candidate list's capacity."""
    rows = []
    x = np.full(width, 0.5, np.float32)  # all equal: the lowest columns win
    rows.append(x)
    x = (rng.integers(0, 4, width) / 4.0).astype(np.float32)  # 4 values: many ties at the k-th
    rows.append(x)
    x = np.full(width, 1.0, np.float32)  # ties exactly at the k-th: k // 2 keys above, the rest equal
    x[rng.choice(width, size=min(width, k // 2), replace=False)] = 2.0
    rows.append(x)
    x = (1.0 + rng.random(width) * 1e-3).astype(np.float32)  # one coarse bin: past the candidate list
    rows.append(x)
    x = np.full(width, -np.inf, np.float32)  # nothing choosable but a few keys
    x[rng.choice(width, size=min(width, 3), replace=False)] = -1.0
    x[::7] = np.nan
    rows.append(x)
    x = rng.standard_normal(width).astype(np.float32)  # -0.0 and +0.0 tie at the k-th
    x[rng.random(width) < 0.5] = -0.0
    x[rng.random(width) < 0.2] = 0.0
    x[rng.random(width) < 0.1] = 5.0
    rows.append(x)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=6, help="random rows per (width, kind, k)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    np.random.seed(args.seed)
    check_fast_key(rng)
    print("fast_key equals topk_key on 2^20 random bit patterns and the special values")
    checked = listed_rows = 0
    clusters = set()
    for width in (0, 1, 37, 2048, 5000, 8192, 20000, 32768, 50000, 65536 + 5, 131072, 131072 + 17):
        for k in (1, 7, 512, 1024, 2048, 4096):
            xs = [make_row(rng, width, kind) for kind in ("normal", "grid", "narrow", "equal", "relu")
                  for _ in range(max(1, args.rows // (4 if width > 32768 else 1)))]
            if width:
                xs += adversarial_rows(rng, width, k)
            rows = len(xs)
            # An odd row pitch and random windows: slices start off 16-byte boundaries.
            stride0 = width + 3
            x = np.zeros((rows, max(1, stride0)), np.float32)
            for r, xr in enumerate(xs):
                x[r, :width] = xr
            x = x[:, :width] if width else np.zeros((rows, 0), np.float32)
            ks = rng.integers(0, max(1, width // 3), rows).astype(np.int32)
            ke = np.minimum(ks + rng.integers(0, width + 1, rows), width).astype(np.int32)
            ks[0], ke[0] = 0, width
            if rows > 1:
                ke[1] = ks[1]
            if rows > 2:
                ks[2], ke[2] = 1, width  # starts off a vector boundary
            for dtype, elem in ((torch.float32, 4), (torch.bfloat16, 2)):
                full = torch.zeros((rows, max(1, stride0)), dtype=dtype)
                full[:, :width] = torch.from_numpy(x).to(dtype)
                t = full[:, :width]
                xf = t.float().numpy()
                cpu = torch.full((rows, k), 0x5A5A5A5A, dtype=torch.int32)
                top_k_per_row_prefill(t, torch.from_numpy(ks), torch.from_numpy(ke), cpu, None, rows, t.stride(0), 1, k)
                for nrows in (rows, 1, 4096):  # the plan's cluster size depends on the rows count
                    plan = plan_cluster(nrows, width, elem, args.sms)
                    if plan is None:
                        continue
                    cluster, stage = plan
                    clusters.add(cluster)
                    for r in range(rows):
                        got = emulate_row(xf[r], r, t.stride(0), int(ks[r]), int(ke[r]), k, cluster, stage, 16 // elem)
                        assert np.array_equal(got, cpu[r].numpy()), (width, k, dtype, r, cluster)
                        checked += 1
        print(f"width {width}: ok (rows checked {checked})", flush=True)
    print(f"emulation equals the CPU path on {checked} rows; cluster sizes {sorted(clusters)}; {RESCANS[0]} CTAs "
          f"past the candidate list")


if __name__ == "__main__":
    main()
