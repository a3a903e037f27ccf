// The multi-pass top-k of one row (the fallback of two_pass_select.cuh for a row whose threshold bin
// holds more candidates than a CTA keeps): an exact radix select on the order-preserving 32-bit key of each
// visible logit (common/indexer_topk_params.h: topk_key), then one pass in column order that writes
// the chosen columns ascending.
//
//   select:  four passes of 8 bits, most significant first. Each pass histograms the keys that match
//            the digits fixed so far and fixes the digit at which the count of larger keys reaches the
//            number still wanted. After the last pass the k-th largest key T is known exactly, with
//            `need_equal`, how many keys equal to T the top k holds.
//   emit:    tiles of consecutive columns in ascending order; a key above T is chosen, a key equal to T
//            is chosen while fewer than need_equal of them precede it (the lower columns win the tie).
//            A block scan of each tile's counts gives each chosen column its output slot, so the order
//            is the column order whatever the thread timing: the output is bitwise reproducible.
//   A row with at most k choosable keys (the first pass counts them) takes them all (T = 0: every
//   choosable key is above it). Key 0 (NaN, -inf) is never chosen. Slots past the chosen ones get -1.
//   When the caller gives room for the row's keys (`stage_keys` >= the window, `staged` in shared
//   memory), the first pass also stores them there and the later passes read them there.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cstdint>

#include "common/indexer_topk_params.h"
#include "sm90/topk/warp_suffix_scan.cuh"

namespace aiter {
namespace sm90 {
namespace topk {

constexpr int kThreads = 512;
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr int kBinsPerLane = kBins / 32;
// Loads each thread has in flight in a histogram pass, and consecutive columns per thread in the
// emitting pass: enough independent loads per SM to cover the memory latency with one CTA per row.
constexpr int kLoadsInFlight = 16;
constexpr int kEmitRun = 16;
static_assert(kThreads * kEmitRun < (1 << 16), "a tile's counts are scanned as two 16-bit halves");

__device__ __forceinline__ uint32_t key_at(const TopkPerRowParams& p, int64_t offset) {
  if (p.logits_bf16) {
    const uint16_t bits = __ldg(static_cast<const unsigned short*>(p.logits) + offset);
    return topk_key(__uint_as_float(static_cast<uint32_t>(bits) << 16));
  }
  return topk_key(__ldg(static_cast<const float*>(p.logits) + offset));
}

__device__ __forceinline__ float logit_at(const TopkPerRowParams& p, int64_t offset) {
  if (p.logits_bf16)
    return __uint_as_float(static_cast<uint32_t>(__ldg(static_cast<const unsigned short*>(p.logits) + offset)) << 16);
  return __ldg(static_cast<const float*>(p.logits) + offset);
}

struct SelectState {
  uint32_t digit;      // the digit this pass fixes
  uint32_t remaining;  // keys still wanted among those matching the fixed digits, after this pass
  uint32_t total;      // keys counted by this pass
};

// Warp 0: the largest digit d such that the keys of digits >= d number at least `wanted`, and how many
// are still wanted among the keys of digit d. `hist` holds kBins counts.
__device__ __forceinline__ void pick_digit(const uint32_t* hist, uint32_t wanted, SelectState* out) {
  const int lane = threadIdx.x & 31;
  // Lane l owns digits [kBins - (l + 1) * kBinsPerLane, kBins - l * kBinsPerLane): lane 0 the largest.
  const WarpSuffixScan scan = warp_suffix_scan<kBins>(hist);
  const int top = scan.top;
  const uint32_t total = scan.total;
  const uint32_t before = scan.before;  // keys of the digits above this lane's
  const bool crosses = before < wanted && scan.inclusive >= wanted;
  if (crosses) {
    uint32_t above = before;
    for (int i = 0; i < kBinsPerLane; ++i) {
      const uint32_t count = hist[top - i];
      if (above + count >= wanted) {
        out->digit = static_cast<uint32_t>(top - i);
        out->remaining = wanted - above;
        break;
      }
      above += count;
    }
  }
  if (lane == 0) {
    out->total = total;
    if (total < wanted) {  // every key is wanted: no digit crosses
      out->digit = 0;
      out->remaining = wanted;
    }
  }
}

// Row `row` by the whole CTA (kThreads threads). `stage_keys`: the keys `staged` holds (0: none).
__device__ __forceinline__ void radix_select_row(const TopkPerRowParams& p, const int64_t row, const int64_t stage_keys,
                                              uint32_t* staged) {
  using BlockScan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename BlockScan::TempStorage scan_storage;
  __shared__ uint32_t hist[kBins];
  __shared__ SelectState state;

  int64_t begin = 0, end = 0;
  topk_row_window(p, row, &begin, &end);
  const int64_t row_offset = row * p.stride0;
  const uint32_t k = static_cast<uint32_t>(p.k);
  const bool stage = end - begin <= stage_keys;  // the same for every thread of the CTA
  // The key of column c (begin <= c < end): from global memory on the first pass (staging it when there
  // is room), from shared memory afterwards when staged.
  auto key_of = [&](int64_t c, bool first) -> uint32_t {
    if (stage && !first) return staged[c - begin];
    const uint32_t key = key_at(p, row_offset + c * p.stride1);
    if (stage) staged[c - begin] = key;
    return key;
  };

  // ---- select: the k-th largest key, digit by digit ----
  // Thread t reads the columns begin + t + j * kThreads (coalesced), kLoadsInFlight of them before it
  // counts any, so that the loads overlap.
  uint32_t prefix = 0, mask = 0, wanted = k;
  bool take_all = false;
  for (int pass = 0; pass < 32 / kRadixBits; ++pass) {
    const int shift = 32 - kRadixBits * (pass + 1);
    for (int i = threadIdx.x; i < kBins; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t base = begin + threadIdx.x; base < end; base += int64_t(kThreads) * kLoadsInFlight) {
      uint32_t keys[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const int64_t c = base + int64_t(u) * kThreads;
        keys[u] = c < end ? key_of(c, pass == 0) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u)
        if (keys[u] != 0u && (keys[u] & mask) == prefix) atomicAdd(&hist[(keys[u] >> shift) & (kBins - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) pick_digit(hist, wanted, &state);
    __syncthreads();
    const SelectState s = state;
    if (pass == 0 && s.total <= k) {
      take_all = true;
      break;
    }
    prefix |= s.digit << shift;
    mask |= static_cast<uint32_t>(kBins - 1) << shift;
    wanted = s.remaining;
    __syncthreads();  // state and hist are rewritten by the next pass
  }
  // Chosen: every key above `threshold`, and the first `need_equal` keys equal to it (column order).
  const uint32_t threshold = take_all ? 0u : prefix;
  const uint32_t need_equal = take_all ? 0u : wanted;

  // ---- emit: chosen columns in ascending order ----
  // A tile is kThreads runs of kEmitRun consecutive columns, thread t's run after thread t - 1's. One
  // block scan of (keys above, keys equal) per tile gives every column its rank: a column's slot is
  // the number of chosen columns before it, i.e. (keys above before it) + min(equal keys before it,
  // need_equal).
  int32_t* out = p.indices + row * p.indices_stride;
  float* vals = p.values != nullptr ? p.values + row * p.values_stride : nullptr;
  uint32_t above_base = 0, equal_base = 0;  // over the tiles before this one
  const int64_t tile_width = int64_t(kThreads) * kEmitRun;
  for (int64_t tile = begin; tile < end && above_base + min(equal_base, need_equal) < k; tile += tile_width) {
    const int64_t first = tile + int64_t(threadIdx.x) * kEmitRun;
    uint32_t keys[kEmitRun];
#pragma unroll
    for (int u = 0; u < kEmitRun; ++u) keys[u] = first + u < end ? key_of(first + u, false) : 0u;
    uint32_t above = 0, equal = 0;
#pragma unroll
    for (int u = 0; u < kEmitRun; ++u) {
      above += keys[u] > threshold ? 1u : 0u;
      equal += (keys[u] != 0u && keys[u] == threshold) ? 1u : 0u;
    }
    // Both counts of a tile fit in 16 bits (kThreads * kEmitRun < 2^16): one scan carries the pair.
    uint32_t before = 0, total = 0;
    BlockScan(scan_storage).ExclusiveSum(above | (equal << 16), before, total);
    __syncthreads();
    uint32_t above_rank = above_base + (before & 0xFFFFu);
    uint32_t equal_rank = equal_base + (before >> 16);
    const uint32_t done_equal = min(equal_base, need_equal);
    const uint32_t slot_base = above_base + done_equal;  // the chosen columns of earlier tiles
#pragma unroll
    for (int u = 0; u < kEmitRun; ++u) {
      const bool is_above = keys[u] > threshold;
      const bool is_equal = keys[u] != 0u && keys[u] == threshold;
      if (is_above || (is_equal && equal_rank < need_equal)) {
        const uint32_t slot = slot_base + (above_rank - above_base) + (min(equal_rank, need_equal) - done_equal);
        out[slot] = static_cast<int32_t>(first + u);
        if (vals != nullptr) vals[slot] = logit_at(p, row_offset + (first + u) * p.stride1);
      }
      above_rank += is_above ? 1u : 0u;
      equal_rank += is_equal ? 1u : 0u;
    }
    above_base += total & 0xFFFFu;
    equal_base += total >> 16;
  }
  const uint32_t chosen = min(above_base + min(equal_base, need_equal), k);
  for (uint32_t slot = chosen + threadIdx.x; slot < k; slot += kThreads) {
    out[slot] = -1;
    if (vals != nullptr) vals[slot] = -__int_as_float(0x7f800000);
  }
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
