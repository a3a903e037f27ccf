// The top-k kernel: one CTA per row, the row read from global memory twice.
//
//   coarse:  pass 1 histograms the top kCoarseBits bits of every choosable key (common/
//            indexer_topk_params.h: topk_key; key 0, NaN and -inf, is skipped); a scan from the top
//            fixes the bin B holding the k-th largest key and how many keys above B there are (< k).
//            A row with at most k choosable keys takes them all (no bin is fixed).
//   gather:  pass 2 lists the columns of the keys above B (all of them are chosen) and the (key,
//            column) pairs of B, the candidates, in shared memory. A bin of more than kCandidates keys
//            (many equal or nearly equal logits) sends the row to the multi-pass select
//            (radix_select.cuh), which reads it from global memory again.
//   fine:    two radix passes over the candidates' lower 20 bits fix the k-th largest key T exactly
//            and `need_equal`, how many keys equal to T the top k holds.
//   emit:    windows of kWindowCols columns in ascending order. A bitmap marks the window's chosen
//            columns (listed keys above B, candidates above T) and a second one its candidates equal
//            to T; a block scan of the second keeps the first need_equal of those in column order (the
//            lower columns win the tie), a block scan of the first gives each chosen column its slot.
//            The output is the column order whatever the thread timing: bitwise reproducible.
//   Slots past the chosen ones get -1 (and -inf values).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "common/indexer_topk_params.h"
#include "sm90/topk/radix_select.cuh"

namespace aiter {
namespace sm90 {
namespace topk {

constexpr int kCoarseBits = 12;
constexpr int kCoarseBins = 1 << kCoarseBits;
constexpr int kCoarseShift = 32 - kCoarseBits;
constexpr int kFineBits = 10;  // two fine passes cover the kCoarseShift lower bits
constexpr int kFineBins = 1 << kFineBits;
static_assert(2 * kFineBits == kCoarseShift, "the fine passes cover the bits below the coarse bin");
constexpr int kCandidates = 4096;
// The histogram's words hold the two bitmaps of the emit windows.
constexpr int kWindowWords = kCoarseBins / 2;
constexpr int64_t kWindowCols = int64_t(kWindowWords) * 32;
constexpr int kWordsPerThread = kWindowWords / kThreads;
static_assert(kWordsPerThread * kThreads == kWindowWords, "each thread scans whole words of a window");
static_assert(kCoarseBins % kThreads == 0 && kFineBins % kThreads == 0, "each thread owns whole bins");
// Dynamic shared memory: the histogram / bitmaps, the candidates' keys and columns, the columns above B.
constexpr size_t kSmemWords = size_t(kCoarseBins) + 2 * kCandidates + kTopkMaxK;
constexpr size_t kSmemBytes = kSmemWords * sizeof(uint32_t);

struct BinChoice {
  uint32_t bin;        // the bin holding the wanted-th largest key
  uint32_t remaining;  // keys still wanted inside that bin
  uint32_t total;      // keys counted
};

// The CTA: the largest bin b of `hist` (kBinsN counts) such that the bins >= b hold at least `wanted`
// keys, and how many are still wanted inside b. Ends with a barrier; the result is in *out.
template <int kBinsN>
__device__ __forceinline__ void pick_bin(const uint32_t* hist, uint32_t wanted, BinChoice* out,
                                         typename cub::BlockScan<uint32_t, kThreads>::TempStorage& scan) {
  constexpr int kPer = kBinsN / kThreads;
  // Thread t owns the bins [kBinsN - (t + 1) * kPer, kBinsN - t * kPer): thread 0 the largest.
  const int top = kBinsN - int(threadIdx.x) * kPer - 1;
  uint32_t counts[kPer];
  uint32_t sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    counts[i] = hist[top - i];
    sum += counts[i];
  }
  uint32_t before = 0, total = 0;
  cub::BlockScan<uint32_t, kThreads>(scan).ExclusiveSum(sum, before, total);
  if (before < wanted && before + sum >= wanted) {
    uint32_t above = before;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (above < wanted && above + counts[i] >= wanted) {
        out->bin = static_cast<uint32_t>(top - i);
        out->remaining = wanted - above;
      }
      above += counts[i];
    }
  }
  if (threadIdx.x == 0) {
    out->total = total;
    if (total < wanted) {  // every key is wanted: no bin crosses
      out->bin = 0;
      out->remaining = wanted;
    }
  }
  __syncthreads();
}

// Adds 1 to hist[bin] for every lane of the warp with `count` set, one atomic per distinct bin: the
// keys of a row crowd into few bins, and same-address shared atomics serialise.
__device__ __forceinline__ void warp_count(uint32_t* hist, uint32_t bin, bool count) {
  const uint32_t voters = __ballot_sync(0xFFFFFFFFu, count);
  const uint32_t peers = __match_any_sync(0xFFFFFFFFu, bin) & voters;
  const int lane = threadIdx.x & 31;
  if (count && (__ffs(peers) - 1) == lane) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
}

// Appends `value` to list[*size ...] for every lane with `take` set (warp-aggregated); returns the slot
// of this lane (meaningful when take is set). The list may overflow its capacity: callers check.
__device__ __forceinline__ uint32_t warp_append_slot(uint32_t* size, bool take) {
  const uint32_t takers = __ballot_sync(0xFFFFFFFFu, take);
  if (takers == 0u) return 0u;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(takers) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(size, static_cast<uint32_t>(__popc(takers)));
  base = __shfl_sync(0xFFFFFFFFu, base, leader);
  return base + static_cast<uint32_t>(__popc(takers & ((1u << lane) - 1u)));
}

// Thread t's keys of the columns base + t + u * kThreads of the row at `row_offset` (0 for a column
// at or past `end`): all kLoadsInFlight loads issue before any key is used, so that they overlap.
__device__ __forceinline__ void load_step(const TopkPerRowParams& p, int64_t row_offset, int64_t base, int64_t end,
                                          uint32_t (&keys)[kLoadsInFlight]) {
#pragma unroll
  for (int u = 0; u < kLoadsInFlight; ++u) {
    const int64_t c = base + threadIdx.x + int64_t(u) * kThreads;
    keys[u] = c < end ? key_at(p, row_offset + c * p.stride1) : 0u;
  }
}

__global__ void __launch_bounds__(kThreads, 2) top_k_per_row_kernel(const TopkPerRowParams p) {
  using BlockScan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ BinChoice choice;
  __shared__ uint32_t n_above, n_cand;
  extern __shared__ uint32_t smem[];
  uint32_t* hist = smem;                          // kCoarseBins; later the two window bitmaps
  uint32_t* cand_key = smem + kCoarseBins;        // kCandidates
  uint32_t* cand_col = cand_key + kCandidates;    // kCandidates
  uint32_t* above_col = cand_col + kCandidates;   // kTopkMaxK

  const int64_t row = blockIdx.x;
  int64_t begin = 0, end = 0;
  topk_row_window(p, row, &begin, &end);
  const int64_t row_offset = row * p.stride0;
  const uint32_t k = static_cast<uint32_t>(p.k);
  const int64_t step = int64_t(kThreads) * kLoadsInFlight;

  // ---- coarse: pass 1 ----
  for (int i = threadIdx.x; i < kCoarseBins; i += kThreads) hist[i] = 0;
  if (threadIdx.x == 0) {
    n_above = 0;
    n_cand = 0;
  }
  __syncthreads();
  // Every thread runs the same iterations (the warp-wide votes need the whole warp).
  for (int64_t base = begin; base < end; base += step) {
    uint32_t keys[kLoadsInFlight];
    load_step(p, row_offset, base, end, keys);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) warp_count(hist, keys[u] >> kCoarseShift, keys[u] != 0u);
  }
  __syncthreads();
  pick_bin<kCoarseBins>(hist, k, &choice, scan_storage);
  const BinChoice coarse = choice;
  const bool take_all = coarse.total <= k;
  const uint32_t bin = coarse.bin;

  // ---- gather: pass 2 ----
  for (int64_t base = begin; base < end; base += step) {
    uint32_t keys[kLoadsInFlight];
    load_step(p, row_offset, base, end, keys);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const uint32_t c = static_cast<uint32_t>(base + threadIdx.x + int64_t(u) * kThreads);
      const uint32_t key_bin = keys[u] >> kCoarseShift;
      const bool above = keys[u] != 0u && (take_all || key_bin > bin);
      const bool in_bin = keys[u] != 0u && !take_all && key_bin == bin;
      const uint32_t a = warp_append_slot(&n_above, above);
      if (above) above_col[a] = c;  // fewer than k keys lie above the bin (all of them when take_all)
      const uint32_t s = warp_append_slot(&n_cand, in_bin);
      if (in_bin && s < kCandidates) {
        cand_key[s] = keys[u];
        cand_col[s] = c;
      }
    }
  }
  __syncthreads();
  const uint32_t candidates = n_cand;
  const uint32_t listed = n_above;
  if (candidates > kCandidates) {
    // The candidate list's words are free again: the multi-pass select stages the row there when it fits.
    radix_select_row(p, row, int64_t(2 * kCandidates + kTopkMaxK), cand_key);
    return;
  }

  // ---- fine: the lower 20 bits of the candidates ----
  uint32_t threshold = 0, need_equal = 0;
  if (!take_all) {
    uint32_t prefix = bin << kCoarseShift, wanted = coarse.remaining;
    for (int pass = 0; pass < 2; ++pass) {
      const int shift = kFineBits * (1 - pass);
      const uint32_t mask = ~((1u << (shift + kFineBits)) - 1u);  // the bits fixed so far
      for (int i = threadIdx.x; i < kFineBins; i += kThreads) hist[i] = 0;
      __syncthreads();
      for (uint32_t i0 = 0; i0 < candidates; i0 += kThreads) {
        const uint32_t i = i0 + threadIdx.x;
        const uint32_t key = i < candidates ? cand_key[i] : 0u;
        warp_count(hist, (key >> shift) & (kFineBins - 1), i < candidates && (key & mask) == prefix);
      }
      __syncthreads();
      pick_bin<kFineBins>(hist, wanted, &choice, scan_storage);
      prefix |= choice.bin << shift;
      wanted = choice.remaining;
      __syncthreads();  // choice and hist are rewritten next
    }
    threshold = prefix;
    need_equal = wanted;
  }

  // ---- emit: chosen columns in ascending order, window by window ----
  int32_t* out = p.indices + row * p.indices_stride;
  float* vals = p.values != nullptr ? p.values + row * p.values_stride : nullptr;
  uint32_t* chosen_bits = hist;
  uint32_t* equal_bits = hist + kWindowWords;
  uint32_t slot_base = 0, equal_base = 0;  // over the windows before this one
  for (int64_t w0 = begin; w0 < end && slot_base < k; w0 += kWindowCols) {
    for (int i = threadIdx.x; i < 2 * kWindowWords; i += kThreads) hist[i] = 0;
    __syncthreads();
    const int64_t w1 = w0 + kWindowCols;
    for (uint32_t i = threadIdx.x; i < listed; i += kThreads) {
      const int64_t c = above_col[i];
      if (c >= w0 && c < w1) atomicOr(&chosen_bits[(c - w0) >> 5], 1u << ((c - w0) & 31));
    }
    for (uint32_t i = threadIdx.x; i < candidates; i += kThreads) {
      const int64_t c = cand_col[i];
      const uint32_t key = cand_key[i];
      if (c >= w0 && c < w1 && key >= threshold)
        atomicOr(&(key > threshold ? chosen_bits : equal_bits)[(c - w0) >> 5], 1u << ((c - w0) & 31));
    }
    __syncthreads();
    const int first_word = int(threadIdx.x) * kWordsPerThread;
    uint32_t chosen[kWordsPerThread], equal[kWordsPerThread];
    uint32_t equal_count = 0;
#pragma unroll
    for (int i = 0; i < kWordsPerThread; ++i) {
      chosen[i] = chosen_bits[first_word + i];
      equal[i] = equal_bits[first_word + i];
      equal_count += __popc(equal[i]);
    }
    uint32_t equal_before = 0, equal_total = 0;
    BlockScan(scan_storage).ExclusiveSum(equal_count, equal_before, equal_total);
    __syncthreads();
    // Keep the equal keys ranked below need_equal over the whole row (column order).
    uint32_t rank = equal_base + equal_before;
    uint32_t chosen_count = 0;
#pragma unroll
    for (int i = 0; i < kWordsPerThread; ++i) {
      uint32_t w = equal[i];
      const uint32_t allowed = rank < need_equal ? need_equal - rank : 0u;
      rank += __popc(w);
      while (static_cast<uint32_t>(__popc(w)) > allowed) w &= ~(0x80000000u >> __clz(w));  // drop the highest column
      chosen[i] |= w;
      chosen_count += __popc(chosen[i]);
    }
    uint32_t chosen_before = 0, chosen_total = 0;
    BlockScan(scan_storage).ExclusiveSum(chosen_count, chosen_before, chosen_total);
    uint32_t slot = slot_base + chosen_before;
#pragma unroll
    for (int i = 0; i < kWordsPerThread; ++i) {
      uint32_t w = chosen[i];
      while (w != 0u) {
        const int bit = __ffs(w) - 1;
        w &= w - 1u;
        const int64_t c = w0 + int64_t(first_word + i) * 32 + bit;
        if (slot < k) {
          out[slot] = static_cast<int32_t>(c);
          if (vals != nullptr) vals[slot] = logit_at(p, row_offset + c * p.stride1);
        }
        ++slot;
      }
    }
    slot_base += chosen_total;
    equal_base += equal_total;
    __syncthreads();  // the bitmaps and the scan storage are rewritten by the next window
  }
  for (uint32_t s = min(slot_base, k) + threadIdx.x; s < k; s += kThreads) {
    out[s] = -1;
    if (vals != nullptr) vals[s] = -__int_as_float(0x7f800000);
  }
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
