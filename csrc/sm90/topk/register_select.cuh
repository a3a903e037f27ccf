// The top-k kernel for rows of at most kThreads * kKeys - 16 / sizeof(Elem) + 1 columns: each thread
// holds kKeys consecutive keys of a row in registers, so every pass after the load reads registers
// and every barrier is a CTA barrier (no cluster, no distributed shared memory).
//
//   load:    one thread issues bulk copies (cp.async.bulk, one mbarrier phase per row) of the window's
//            16-byte-aligned middle into shared memory; lanes of warp 1 load the unaligned head and
//            tail. Stage element i is column base_col + i; thread t takes elements
//            [t * kKeys, (t + 1) * kKeys) as keys (keys.cuh: key_of; key 0, NaN and -inf, and
//            everything outside the window, is never chosen). kKeys is odd, so the threads' reads
//            fall in distinct banks. Once the keys are in registers the stage takes the CTA's next row
//            (rows blockIdx.x, blockIdx.x + gridDim.x, ...), whose copy runs under this row's passes.
//            A warp whose keys all lie outside the window skips the fine passes and the emit's masks.
//   coarse:  a shared histogram of the top kCoarseBits bits of every key (one ATOMS.POPC.INC per key,
//            no branch: the atomic unit sums the lanes of one address); bin 0 holds only
//            never-chosen keys and is read as empty. A block scan from the top bin fixes the bin
//            holding the k-th largest key. A row with at most k choosable keys takes them all.
//   fine:    two more histograms, of the next kFineBits bits of the keys that match the bits fixed so
//            far, fix the k-th largest key T exactly, `need`, how many keys equal to T the top k
//            holds, and `equal`, how many the row holds.
//   emit:    each thread's mask of the keys it takes (bit i: key i): every key from T up, or, when
//            the row holds more keys equal to T than need (cut_ties), the keys above T and the first
//            of the equal ones. One block scan of each thread's (taken keys, keys equal to T), packed
//            in 16-bit halves, gives its first slot; an equal key is kept while fewer than need equal
//            keys precede it (the lower columns win the tie). Thread order is column order, so the
//            output is ascending columns whatever the timing: bitwise reproducible. The columns go to
//            shared memory by slot, then out in slot order with -1 past the chosen ones; values (and
//            -inf) are read from the logits, since the stage holds the next row by then.
//
// Grid: min(rows, one wave of ctas_per_sm<kKeys>() CTAs per SM), kThreads each; dynamic shared memory
// smem_bytes<Elem, kKeys>(). The launcher (topk_launcher.cu) sends rows here when the row width +
// 16 / sizeof(Elem) - 1 <= kThreads * kKeys and the columns are contiguous. A host emulation of the
// algorithm: dev/sm90/topk_register_emulation.py.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/indexer_topk_params.h"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/topk/keys.cuh"
#include "sm90/topk/warp_suffix_scan.cuh"

namespace aiter {
namespace sm90 {
namespace topk {
namespace register_select {

constexpr int kThreads = 1024;
constexpr int kCoarseBits = 12;
constexpr int kFineBits = 10;
static_assert(kCoarseBits + 2 * kFineBits == 32, "three passes fix the whole key");
constexpr int kCoarseBins = 1 << kCoarseBits;
constexpr int kFineBins = 1 << kFineBits;
static_assert(kCoarseBins % kThreads == 0 && kFineBins == kThreads, "each thread owns whole bins");
// The bulk copies' pieces: one mbarrier counts them all (its transaction count holds < 1 MiB).
constexpr int kPieceBytes = 32768;
// Keys per thread of the instances the launcher picks from (rows up to ~9K, ~17K and ~33K columns):
// the smallest that holds the row keeps the CTA's registers, and so its SM share, small.
constexpr int kKeysSmall = 9;
constexpr int kKeysMedium = 17;
constexpr int kKeysLarge = 33;

// What every thread reads of the staged row's window (stage element i is column base_col + i; the
// window is [lo, hi)): kept in shared memory, not in registers beside the keys.
struct StagedSpan {
  int64_t base_col;
  int lo, hi;
  bool bulk;      // its middle comes by bulk copy: wait for the mbarrier's phase
  uint32_t phase;  // the phase parity that copy completes
};

struct SharedState {
  uint32_t hist0[kCoarseBins];
  uint32_t hist1[kFineBins + 1];  // the last bin takes the keys outside the prefix
  uint32_t hist2[kFineBins + 1];
  int32_t chosen[kTopkMaxK];  // the row's chosen columns, by output slot
  uint32_t pick_bin, pick_remaining, pick_count;
  uint32_t warp_sums[kThreads / 32];
  uint32_t block_total;
  StagedSpan staged;
  int64_t row_base_col;  // the staged span's base_col for the row whose keys are in registers
  alignas(8) uint64_t bar;
};
// The shared state is static (its fields' addresses are constants in the instructions); the dynamic
// shared memory is the stage alone.
template <typename Elem, int kKeys>
constexpr size_t smem_bytes() {
  return (size_t(kThreads) * kKeys * sizeof(Elem) + 15) / 16 * 16;
}
template <typename Elem, int kKeys>
constexpr int64_t max_width() {
  return int64_t(kThreads) * kKeys - int64_t(16 / sizeof(Elem)) + 1;
}

// The whole CTA: the sum of `v` over the threads before this one, and over all of them in `total`. A
// shuffle scan per warp, then warp 0 scans the warps' sums: few registers live beside the keys.
__device__ __forceinline__ uint32_t block_exclusive_sum(uint32_t v, uint32_t* total, SharedState& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t inclusive = warp_inclusive_sum(v);
  if (lane == 31) s.warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t w = s.warp_sums[lane];
    const uint32_t w_inclusive = warp_inclusive_sum(w);
    s.warp_sums[lane] = w_inclusive - w;
    if (lane == 31) s.block_total = w_inclusive;
  }
  __syncthreads();
  *total = s.block_total;
  return s.warp_sums[warp] + inclusive - v;
}

struct Pick {
  uint32_t bin;        // the bin holding the wanted-th largest key
  uint32_t remaining;  // keys still wanted inside it
  uint32_t count;      // keys inside it
  uint32_t total;      // keys the histogram counts
};

// The whole CTA: over hist[0..kBins), the bin where the count of keys at or above it first reaches
// `wanted`, and how many are still wanted inside it (bin 0 and remaining = wanted when the counts
// sum to less); kSkipBin0: bin 0 is read as empty. Thread t sums the t-th group of kBins / kThreads
// bins from the top; an exclusive scan in thread order gives each group the count above it.
template <int kBins, bool kSkipBin0>
__device__ __forceinline__ Pick block_pick(const uint32_t* hist, uint32_t wanted, SharedState& s) {
  constexpr int kPer = kBins / kThreads;
  const int t = threadIdx.x;
  const int top = kBins - 1 - t * kPer;  // this thread's highest bin
  uint32_t c[kPer];
  uint32_t sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    c[i] = kSkipBin0 && top - i == 0 ? 0u : hist[top - i];
    sum += c[i];
  }
  uint32_t total = 0;
  uint32_t above = block_exclusive_sum(sum, &total, s);
  if (above < wanted && above + sum >= wanted) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (above < wanted && above + c[i] >= wanted) {
        s.pick_bin = static_cast<uint32_t>(top - i);
        s.pick_remaining = wanted - above;
        s.pick_count = c[i];
      }
      above += c[i];
    }
  }
  if (t == 0 && total < wanted) {
    s.pick_bin = 0;
    s.pick_remaining = wanted;
    s.pick_count = 0;
  }
  __syncthreads();
  const Pick out{s.pick_bin, s.pick_remaining, s.pick_count, total};
  __syncthreads();  // pick_* and the warp sums are written again by the next pick
  return out;
}

// Thread t of the CTA: its share of zeroing the three histograms.
__device__ __forceinline__ void clear_histograms(SharedState& s, int t) {
  for (int i = t; i < kCoarseBins; i += kThreads) s.hist0[i] = 0;
  s.hist1[t] = 0;
  s.hist2[t] = 0;
  if (t == 0) s.hist1[kFineBins] = s.hist2[kFineBins] = 0;
}

// Of this thread's keys whose top `kFixedBits` bits are `prefix`, a histogram of the next kFineBits
// bits in hist[0, kFineBins); every other key lands in hist[kFineBins], which no pick reads. Each
// key costs a subtraction, a shift, a min and the atomic: no compare, and no branch around it.
template <int kFixedBits, int kKeys>
__device__ __forceinline__ void count_next_bits(const uint32_t (&key)[kKeys], bool live, uint32_t prefix,
                                                uint32_t* hist) {
  if (!live) return;  // a dead warp's keys, all 0, match no prefix
  const uint32_t low = prefix << (32 - kFixedBits);
#pragma unroll
  for (int i = 0; i < kKeys; ++i)
    atomicAdd(&hist[min((key[i] - low) >> (32 - kFixedBits - kFineBits), uint32_t(kFineBins))], 1u);
}

struct Threshold {
  uint32_t key;    // the k-th largest key T
  uint32_t need;   // keys equal to T the top k holds
  uint32_t equal;  // keys equal to T the row holds
};

// The whole CTA, with `coarse` the bin holding the k-th largest key: two histograms of the next
// kFineBits bits of the keys of the fixed prefix fix T exactly (key 0 never matches: the coarse bin
// is not bin 0).
template <int kKeys>
__device__ __forceinline__ Threshold fine_threshold(const uint32_t (&key)[kKeys], bool live, const Pick& coarse,
                                                    SharedState& s) {
  count_next_bits<kCoarseBits>(key, live, coarse.bin, s.hist1);
  __syncthreads();
  const Pick fine1 = block_pick<kFineBins, false>(s.hist1, coarse.remaining, s);
  const uint32_t prefix = (coarse.bin << kFineBits) | fine1.bin;
  count_next_bits<kCoarseBits + kFineBits>(key, live, prefix, s.hist2);
  __syncthreads();
  const Pick fine2 = block_pick<kFineBins, false>(s.hist2, fine1.remaining, s);
  return Threshold{(prefix << kFineBits) | fine2.bin, fine2.remaining, fine2.count};
}

// A thread's keys as bits: bit i % 32 of word i / 32 is key i.
template <int kKeys>
struct KeyMask {
  static constexpr int kWords = (kKeys + 31) / 32;
  uint32_t word[kWords] = {};
  // Predicated: after the compare, one instruction sets the bit.
  __device__ __forceinline__ void set(int i, bool on) {
    if (on) word[i / 32] |= 1u << (i % 32);
  }
  __device__ __forceinline__ uint32_t count() const {
    uint32_t n = 0;
#pragma unroll
    for (int w = 0; w < kWords; ++w) n += __popc(word[w]);
    return n;
  }
};

// CTAs per SM an instance is built for: the small one fits two (32 registers a thread).
template <int kKeys>
constexpr int ctas_per_sm() {
  return kKeys <= kKeysSmall ? 2 : 1;
}

// Where a row's window lands in the stage: stage element i is column base_col + i, base_col the
// window's start rounded down to 16 bytes; [lo, hi) is the window, [a0, a1) its bulk-copied middle.
template <typename Elem>
struct StagedWindow {
  const Elem* aligned_src;
  int64_t base_col;
  int lo, hi, a0, a1;
  __device__ bool bulk() const { return a1 > a0; }
  __device__ StagedSpan span(uint32_t phase) const { return StagedSpan{base_col, lo, hi, bulk(), phase}; }
};

template <typename Elem>
__device__ __forceinline__ StagedWindow<Elem> staged_window(const TopkPerRowParams& p, int64_t row) {
  constexpr int kVec = 16 / sizeof(Elem);
  int64_t begin = 0, end = 0;
  topk_row_window(p, row, &begin, &end);
  const Elem* src = static_cast<const Elem*>(p.logits) + row * p.stride0 + begin;
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(src) % 16) / sizeof(Elem));
  StagedWindow<Elem> w;
  w.aligned_src = src - mis;
  w.base_col = begin - mis;
  w.lo = mis;
  w.hi = mis + static_cast<int>(end - begin);
  w.a0 = (w.lo + kVec - 1) / kVec * kVec;
  w.a1 = w.hi / kVec * kVec;
  return w;
}

// Thread 0: the bulk copies of the window's middle, counted by one mbarrier phase.
template <typename Elem>
__device__ __forceinline__ void issue_bulk(const StagedWindow<Elem>& w, Elem* stage, uint64_t* bar) {
  constexpr int kPieceElems = kPieceBytes / sizeof(Elem);
  mbar_arrive_expect_tx(bar, static_cast<uint32_t>(w.a1 - w.a0) * sizeof(Elem));
  for (int e0 = w.a0; e0 < w.a1; e0 += kPieceElems) {
    const uint32_t bytes = static_cast<uint32_t>(min(kPieceElems, w.a1 - e0)) * sizeof(Elem);
    bulk_copy_to_shared(stage + e0, w.aligned_src + e0, bytes, bar);
  }
}

// A lane of warp 1: the window element outside the bulk-copied middle it loads (lanes 0-15 the head,
// 16-31 the tail; a window without a middle, under two vectors long, is all head), or -1.
template <typename Elem>
__device__ __forceinline__ int edge_index(const StagedWindow<Elem>& w, int lane) {
  const int head_stop = w.bulk() ? w.a0 : w.hi;
  const int j = lane < 16 ? w.lo + lane : w.a1 + lane - 16;
  const bool in = lane < 16 ? j < head_stop : (w.bulk() && j < w.hi);
  return in ? j : -1;
}

// Elem: float (float32 logits) or uint16_t (the bits of bfloat16 logits). A CTA takes rows blockIdx.x,
// blockIdx.x + gridDim.x, ...: once its threads hold a row's keys in registers, the next row's copy
// into the stage runs under this row's passes. Chosen values are read from the logits, since the
// stage holds the next row by then.
template <typename Elem, int kKeys>
__global__ void __launch_bounds__(kThreads, ctas_per_sm<kKeys>()) register_select_kernel(const TopkPerRowParams p) {
  const int t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  __shared__ SharedState s;
  extern __shared__ __align__(128) unsigned char smem[];
  Elem* stage = reinterpret_cast<Elem*>(smem);
  const uint32_t k = static_cast<uint32_t>(p.k);

  // ---- the first row's load ----
  uint32_t row = blockIdx.x;  // rows < 2^31 (the launcher checks): row + gridDim.x does not wrap
  if (t == 0) {
    mbar_init(&s.bar, 1);
    fence_barrier_init();
    s.staged = staged_window<Elem>(p, row).span(0);
  }
  clear_histograms(s, t);
  __syncthreads();
  if (t == 0 || warp == 1) {
    const StagedWindow<Elem> w = staged_window<Elem>(p, row);
    if (t == 0 && w.bulk()) issue_bulk(w, stage, &s.bar);
    if (warp == 1) {
      const int j = edge_index(w, lane);
      if (j >= 0) stage[j] = w.aligned_src[j];
    }
  }

  for (; row < static_cast<uint32_t>(p.rows); row += gridDim.x) {
    const StagedSpan span = s.staged;  // written before the previous row's last barriers
    if (span.bulk) mbar_wait(&s.bar, span.phase);
    if (t == 0) s.row_base_col = span.base_col;  // the previous row's last reads were before its last barrier
    __syncthreads();  // the edges' stores, and the previous row's cleared histograms, are seen
    const int first = t * kKeys;
    // A warp whose keys all lie outside the window holds only key 0: it skips the fine passes and the
    // emit's masks (the same in all its lanes, so no lane waits on another).
    const int warp_first = warp * 32 * kKeys;
    const bool live = warp_first < span.hi && warp_first + 32 * kKeys > span.lo;
    uint32_t key[kKeys];
    if (first >= span.lo && first + kKeys <= span.hi) {  // most threads: every key in the window
#pragma unroll
      for (int i = 0; i < kKeys; ++i) key[i] = key_of(stage[first + i]);
    } else {
#pragma unroll
      for (int i = 0; i < kKeys; ++i) {
        const int j = first + i;
        key[i] = j >= span.lo && j < span.hi ? key_of(stage[j]) : 0u;
      }
    }
    __syncthreads();  // every key is in registers: the stage takes the next row

    const uint32_t next = row + gridDim.x;
    if (next < static_cast<uint32_t>(p.rows) && t == 0) {
      const StagedWindow<Elem> w = staged_window<Elem>(p, next);
      s.staged = w.span(span.bulk ? span.phase ^ 1u : span.phase);
      if (w.bulk()) issue_bulk(w, stage, &s.bar);
    }

    // ---- coarse ----
    // Every key is counted without a branch: key 0 (never chosen) lands in bin 0, which holds no
    // choosable key (the smallest, -FLT_MAX's, is 0x00800000), and the pick reads bin 0 as empty.
    static_assert((0x00800000u >> (32 - kCoarseBits)) > 0, "bin 0 holds only never-chosen keys");
#pragma unroll
    for (int i = 0; i < kKeys; ++i) {
      uint32_t bin = key[i] >> (32 - kCoarseBits);
      asm("" : "+r"(bin));  // the address as one multiply-add of the bin, not a shift, a mask and an add
      atomicAdd(&s.hist0[bin], 1u);
    }
    // Warp 1 loads the next row's edges here and stores them after the pick, whose barriers hide the
    // loads' latency.
    int edge = -1;
    Elem edge_value{};
    if (next < static_cast<uint32_t>(p.rows) && warp == 1) {
      const StagedWindow<Elem> w = staged_window<Elem>(p, next);
      edge = edge_index(w, lane);
      if (edge >= 0) edge_value = w.aligned_src[edge];
    }
    __syncthreads();
    const Pick coarse = block_pick<kCoarseBins, true>(s.hist0, k, s);
    if (edge >= 0) stage[edge] = edge_value;
    const bool take_all = coarse.total <= k;

    // ---- fine ----
    Threshold th{1u, 0u, 0u};  // take_all: every key from 1 up (all but key 0)
    if (!take_all) th = fine_threshold(key, live, coarse, s);
    // The picks are done: the histograms are cleared for the next row (the loop's first barrier
    // orders this before its counts).
    clear_histograms(s, t);

    // ---- emit: chosen columns in ascending order ----
    // Keys above T are all taken. When the row holds more keys equal to T than the top k, only the
    // first `need` of them in column order are (cut_ties); otherwise every key from T up is.
    const bool cut_ties = th.equal > th.need;
    KeyMask<kKeys> take, equal;
    if (live) {
      if (cut_ties) {
#pragma unroll
        for (int i = 0; i < kKeys; ++i) {
          take.set(i, key[i] > th.key);
          equal.set(i, key[i] == th.key);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kKeys; ++i) take.set(i, key[i] >= th.key);
      }
    }
    // Per thread at most kKeys < 2^16 of each, and at most kThreads * kKeys < 2^16 in the whole row:
    // the low half's sums never carry into the high half.
    static_assert(kThreads * kKeys < 65536, "the packed counts fit 16 bits");
    const uint32_t counts = take.count() + (equal.count() << 16);
    uint32_t all_counts = 0;
    const uint32_t before = block_exclusive_sum(counts, &all_counts, s);
    const uint32_t equal_before = min(before >> 16, th.need);
    if (cut_ties) {  // this thread keeps its first need - equal_before keys equal to T
      uint32_t kept = equal_before;
#pragma unroll
      for (int w = 0; w < KeyMask<kKeys>::kWords; ++w) {
        for (uint32_t e = equal.word[w]; e != 0 && kept < th.need; e &= e - 1, ++kept) take.word[w] |= e & (~e + 1);
      }
    }
    // Slots are scattered over the threads: the columns go to shared memory first, then out in order.
    int32_t* slot = s.chosen + (before & 0xFFFFu) + equal_before;
    const int32_t first_col = static_cast<int32_t>(s.row_base_col) + first;  // columns are below 2^31
#pragma unroll
    for (int w = 0; w < KeyMask<kKeys>::kWords; ++w) {
      for (uint32_t m = take.word[w]; m != 0; m &= m - 1) *slot++ = first_col + w * 32 + __ffs(m) - 1;
    }
    __syncthreads();
    const uint32_t chosen = take_all ? coarse.total : k;
    int32_t* out = p.indices + int64_t(row) * p.indices_stride;
    const Elem* logits_row = static_cast<const Elem*>(p.logits) + int64_t(row) * p.stride0;
    float* vals = p.values != nullptr ? p.values + int64_t(row) * p.values_stride : nullptr;
    for (uint32_t i = t; i < k; i += kThreads) {
      const int32_t col = i < chosen ? s.chosen[i] : -1;
      out[i] = col;
      if (vals != nullptr) vals[i] = col >= 0 ? value_of(logits_row[col]) : -__int_as_float(0x7f800000);
    }
  }
}

}  // namespace register_select
}  // namespace topk
}  // namespace sm90
}  // namespace aiter
