// The top-k kernel for rows held in shared memory: a cluster of C CTAs (1 <= C <= 8) per row, CTA c
// holding the c-th of C contiguous slices of the row's window, which it reads from global memory once.
//
//   load:    one thread issues bulk copies (cp.async.bulk, 16 KiB pieces, each completing its own
//            mbarrier) of the slice's 16-byte-aligned middle into shared memory, so the whole slice is
//            in flight at once and no registers hold it; a few threads load the unaligned head and tail.
//   coarse:  as each piece lands, the CTA histograms the top kCoarseBits bits of its choosable keys
//            (common/indexer_topk_params.h: topk_key; key 0, NaN and -inf, is skipped) in shared
//            memory, one increment per key (the atomic unit sums the lanes of one address); a
//            float32 slice's keys replace its values in the stage, for the passes after it.
//   pick:    every CTA reads the cluster's histograms through distributed shared memory and sums them,
//            in two steps (the sums of groups of bins, then the bins of the one group that holds the
//            wanted key), and fixes the bin holding the row's k-th largest key. Every CTA computes the
//            same integer sums, so all of them take the same decisions.
//   gather:  one pass over the staged keys: a key above that bin is chosen (a bit in the CTA's chosen
//            bitmap, the bits of 32 consecutive keys combined across lanes before one OR); the bin's
//            keys are listed as candidates (one slot reservation per warp step) when the CTA's own
//            count of the bin fits kCandidates (else the fine passes read all the staged keys instead).
//   fine:    two histogram passes over the candidates, of the next kFineBits bits of the keys that
//            match the bits fixed so far, each summed over the cluster as above, fix the k-th largest
//            key T exactly and `need_equal`, how many keys equal to T the top k holds. The bin's keys
//            above T join the chosen bitmap, those equal to T an equal bitmap. A row with at most k
//            choosable keys takes them all (T = 0).
//   emit:    the CTA's counts of chosen and equal keys go to the cluster, and CTA c adds those of the
//            CTAs before it. A key equal to T is kept while fewer than need_equal of them precede it
//            in column order (the lower columns win the tie); block scans over the bitmap words give
//            each chosen key its slot, the number of chosen keys before it in the row. The output is
//            the column order whatever the thread timing: bitwise reproducible.
//   The last CTA writes -1 (and -inf values) to the slots past the chosen ones.
//   The fine histograms and the candidate list reuse the coarse histogram's shared memory once every
//   CTA of the cluster has picked from it (a cluster barrier between pick and gather).
//
// Preconditions (the launcher's plan): stride1 == 1, and the staging buffer holds ceil(window / C)
// rounded up to the vector width, plus one vector.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "common/indexer_topk_params.h"
#include "sm90/ptx/barrier.cuh"
#include "sm90/ptx/tma.cuh"
#include "sm90/topk/keys.cuh"
#include "sm90/topk/warp_suffix_scan.cuh"

namespace aiter {
namespace sm90 {
namespace topk {
namespace cluster_select {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCluster = 8;  // the portable cluster size
constexpr int kCoarseBits = 12;
constexpr int kFineBits = 10;
static_assert(kCoarseBits + 2 * kFineBits == 32, "three passes fix the whole key");
constexpr int kCoarseBins = 1 << kCoarseBits;
constexpr int kFineBins = 1 << kFineBits;
// Bins per group in the two-step cluster sum: 64 groups of 64 coarse bins, 32 groups of 32 fine bins.
constexpr int kCoarseGroup = 64;
constexpr int kFineGroup = 32;
// The keys of the threshold's coarse bin a CTA lists for the fine passes; a CTA whose bin holds more
// (near-equal logits) runs the fine passes over all its staged keys instead.
constexpr int kCandidates = 1024;
constexpr int kPieceBytes = 16384;
// The register budget leaves room for this many CTAs per SM (48 registers, no spills; shared memory
// holds 6 with a 4096-key float32 slice): the cluster barriers and remote reads of one CTA are hidden
// by the others' passes over their keys.
constexpr int kMinCtasPerSm = 5;
constexpr int kMaxPieces = 16;

// The coarse histogram is dead once the whole cluster has picked from it, so the fine histograms and
// the candidate list take its place: the smaller state lets more CTAs share an SM, which hides the
// latency of the cluster barriers and remote reads of each CTA behind the others' work.
struct FineState {
  uint32_t hist1[kFineBins];
  uint32_t hist2[kFineBins];
  uint32_t cand_key[kCandidates];  // the keys of the threshold bin and their staged indices
  uint32_t cand_idx[kCandidates];
};
static_assert(sizeof(FineState) <= kCoarseBins * sizeof(uint32_t), "the fine state fits the coarse histogram");
struct SharedState {
  union {
    uint32_t hist0[kCoarseBins];
    FineState fine;
  };
  uint32_t group0[kCoarseBins / kCoarseGroup];
  uint32_t group1[kFineBins / kFineGroup];
  uint32_t group2[kFineBins / kFineGroup];
  uint32_t reduced[64];  // the cluster's sums of the groups, then of one group's bins
  uint32_t n_cand;
  uint32_t cta_above, cta_equal;    // this CTA's keys above and equal to T, read by the later CTAs
  uint32_t base_above, base_equal;  // those of the CTAs before this one
  uint32_t pick_index, pick_remaining, pick_total;
  alignas(8) uint64_t bars[kMaxPieces];
  typename cub::BlockScan<uint32_t, kThreads>::TempStorage scan;
};
// The staging buffer follows the state, 128-byte aligned; the two emit bitmaps (one bit per staged
// element each) follow the staging buffer.
constexpr size_t kStageOffset = (sizeof(SharedState) + 127) / 128 * 128;
__host__ __device__ constexpr int64_t bitmap_words(int64_t stage_elems) { return (stage_elems + 31) / 32; }
__host__ __device__ constexpr int64_t bitmap_offset(int64_t stage_elems, int64_t elem_bytes) {
  return int64_t(kStageOffset) + (stage_elems * elem_bytes + 15) / 16 * 16;
}
__host__ __device__ constexpr int64_t smem_bytes(int64_t stage_elems, int64_t elem_bytes) {
  return bitmap_offset(stage_elems, elem_bytes) + 2 * 4 * bitmap_words(stage_elems);
}

// After the coarse pass a float32 stage holds each element's key in its place, so the later passes
// read keys instead of computing them again; a bfloat16 stage keeps its values (a key takes twice
// their room). The readers below read the stage after the coarse pass.
template <typename Elem>
constexpr bool kKeysInPlace = sizeof(Elem) == sizeof(uint32_t);
__device__ __forceinline__ uint32_t staged_key(float key_bits) { return __float_as_uint(key_bits); }
__device__ __forceinline__ uint32_t staged_key(uint16_t bits) { return key_of<uint16_t>(bits); }
// 16 staged bytes that hold key 0 only: zero bits of float32 keys, all-ones bits (NaN) of bfloat16.
template <typename Elem>
constexpr uint32_t kStagedNone = kKeysInPlace<Elem> ? 0u : ~0u;
// A chosen element's logit: from the logits themselves where the stage holds keys (a key loses the
// sign of a zero), else from the stage.
__device__ __forceinline__ float chosen_value(const float*, const float* src, int j) { return src[j]; }
__device__ __forceinline__ float chosen_value(const uint16_t* stage, const uint16_t*, int j) {
  return value_of(stage[j]);
}

// Adds 1 to hist[bin] for every lane of the warp with `count` set, one atomic per distinct bin; a warp
// with no such lane (the fine passes: most hold no key of the fixed prefix) skips the match.
__device__ __forceinline__ void warp_count(uint32_t* hist, uint32_t bin, bool count) {
  const uint32_t voters = __ballot_sync(0xFFFFFFFFu, count);
  if (voters == 0u) return;
  const uint32_t peers = __match_any_sync(0xFFFFFFFFu, bin) & voters;
  const uint32_t lanes_below = (1u << (threadIdx.x & 31)) - 1u;
  if (count && (peers & lanes_below) == 0u) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
}

// The keys of 16 staged bytes: 4 float32 or 8 bfloat16 logits, in column order.
__device__ __forceinline__ void keys_of(const uint4 raw, uint32_t (&keys)[4]) {
  keys[0] = fast_key(__uint_as_float(raw.x));
  keys[1] = fast_key(__uint_as_float(raw.y));
  keys[2] = fast_key(__uint_as_float(raw.z));
  keys[3] = fast_key(__uint_as_float(raw.w));
}
__device__ __forceinline__ void keys_of(const uint4 raw, uint32_t (&keys)[8]) {
  keys[0] = fast_key(__uint_as_float(raw.x << 16));
  keys[1] = fast_key(__uint_as_float(raw.x & 0xFFFF0000u));
  keys[2] = fast_key(__uint_as_float(raw.y << 16));
  keys[3] = fast_key(__uint_as_float(raw.y & 0xFFFF0000u));
  keys[4] = fast_key(__uint_as_float(raw.z << 16));
  keys[5] = fast_key(__uint_as_float(raw.z & 0xFFFF0000u));
  keys[6] = fast_key(__uint_as_float(raw.w << 16));
  keys[7] = fast_key(__uint_as_float(raw.w & 0xFFFF0000u));
}
__device__ __forceinline__ void staged_keys(const uint4 raw, uint32_t (&keys)[4]) {
  keys[0] = raw.x;
  keys[1] = raw.y;
  keys[2] = raw.z;
  keys[3] = raw.w;
}
__device__ __forceinline__ void staged_keys(const uint4 raw, uint32_t (&keys)[8]) { keys_of(raw, keys); }

// Calls f(key, j) for the staged elements j in [e0, e1) (both multiples of the vector width) after the
// coarse pass, 16 bytes per thread per step (conflict-free 128-bit shared loads). Every thread of the
// CTA makes the same calls, so f may vote across the warp; a thread past e1 passes key 0 (never
// counted).
template <typename Elem, typename F>
__device__ __forceinline__ void for_vector_keys(const Elem* stage, int e0, int e1, F&& f) {
  constexpr int kVec = 16 / sizeof(Elem);
  for (int b = e0; b < e1; b += kThreads * kVec) {
    const int j = b + int(threadIdx.x) * kVec;
    const bool live = j < e1;
    const uint4 raw = live ? *reinterpret_cast<const uint4*>(stage + j) : make_uint4(0, 0, 0, 0);
    uint32_t keys[kVec];
    staged_keys(raw, keys);
#pragma unroll
    for (int u = 0; u < kVec; ++u) f(live ? keys[u] : 0u, j + u);
  }
}

// The same for any staged elements [e0, e1) after the coarse pass, one per thread per step (the
// unaligned head and tail).
template <typename Elem, typename F>
__device__ __forceinline__ void for_single_keys(const Elem* stage, int e0, int e1, F&& f) {
  for (int b = e0; b < e1; b += kThreads) {
    const int j = b + int(threadIdx.x);
    f(j < e1 ? staged_key(stage[j]) : 0u, j);
  }
}

// The coarse histogram of the staged elements [e0, e1) (multiples of the vector width), 16 bytes per
// thread per step. A key adds 1 to its bin with a plain shared atomic: an add of 1 whose result is
// unused is one ATOMS.POPC.INC, which sums the lanes that share an address in the atomic unit, so no
// per-key match is needed. A step whose keys all fall in one bin (a row of near-equal logits) adds
// them with one atomic. Bin 0 is the bin of key 0 (NaN, -inf, and the lanes past e1), which no
// choosable key shares (the smallest, -FLT_MAX, is in bin 8): it counts them too, which keeps the
// loop free of branches, and the caller clears it afterwards. The lanes past e1 read all-ones bits, a
// NaN in either format (key 0); zero bits would be +0.0, a choosable key. A float32 stage gets its
// keys written back in place (kKeysInPlace).
template <typename Elem>
__device__ __forceinline__ void coarse_vector_keys(Elem* stage, int e0, int e1, uint32_t* hist) {
  constexpr int kVec = 16 / sizeof(Elem);
  for (int b = e0; b < e1; b += kThreads * kVec) {
    const int j = b + int(threadIdx.x) * kVec;
    const bool live = j < e1;
    const uint4 raw = live ? *reinterpret_cast<const uint4*>(stage + j) : make_uint4(~0u, ~0u, ~0u, ~0u);
    uint32_t keys[kVec];
    keys_of(raw, keys);
    if constexpr (kKeysInPlace<Elem>) {
      if (live) *reinterpret_cast<uint4*>(stage + j) = make_uint4(keys[0], keys[1], keys[2], keys[3]);
    }
    const uint32_t lead = __shfl_sync(0xFFFFFFFFu, keys[0] >> (32 - kCoarseBits), 0);
    bool one_bin = true;
#pragma unroll
    for (int u = 0; u < kVec; ++u) one_bin = one_bin && (keys[u] >> (32 - kCoarseBits)) == lead;
    if (__all_sync(0xFFFFFFFFu, one_bin)) {
      if ((threadIdx.x & 31) == 0) atomicAdd(&hist[lead], 32u * kVec);
    } else {
#pragma unroll
      for (int u = 0; u < kVec; ++u) atomicAdd(&hist[keys[u] >> (32 - kCoarseBits)], 1u);
    }
  }
}

// The coarse histogram of any staged elements [e0, e1), one per thread per step (the unaligned head
// and tail); a float32 stage gets their keys in place too.
template <typename Elem>
__device__ __forceinline__ void coarse_single_keys(Elem* stage, int e0, int e1, uint32_t* hist) {
  for (int j = e0 + int(threadIdx.x); j < e1; j += kThreads) {
    const uint32_t key = key_of<Elem>(stage[j]);
    atomicAdd(&hist[key >> (32 - kCoarseBits)], 1u);
    if constexpr (kKeysInPlace<Elem>) stage[j] = __uint_as_float(key);
  }
}

// The gather over the staged elements [e0, e1) (multiples of the vector width), 16 bytes per thread
// per step: sets bits[j] for the keys `chosen` accepts and, when `listed`, appends the keys
// `candidate` accepts (and their indices) to the candidate list. The lanes that cover 32 consecutive
// elements combine their bits by shuffles and one of them ORs them in (two words when the span
// straddles a word boundary), and a warp reserves the list slots of its whole step with one atomic,
// instead of an atomic per key. The list's order is the lanes' arrival order; nothing downstream
// depends on it. The lanes past e1 read key 0 (kStagedNone), which neither test accepts.
template <typename Elem, typename C, typename D>
__device__ __forceinline__ void gather_vector_keys(const Elem* stage, int e0, int e1, uint32_t* bits, C&& chosen,
                                                   bool listed, D&& candidate, SharedState& s) {
  constexpr int kVec = 16 / sizeof(Elem);
  constexpr int kSpan = 32 / kVec;  // lanes per 32 elements
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int b = e0; b < e1; b += kThreads * kVec) {
    const int j = b + int(threadIdx.x) * kVec;
    const bool live = j < e1;
    constexpr uint32_t kNone = kStagedNone<Elem>;
    const uint4 raw = live ? *reinterpret_cast<const uint4*>(stage + j) : make_uint4(kNone, kNone, kNone, kNone);
    uint32_t keys[kVec];
    staged_keys(raw, keys);
    uint32_t mine = 0;
#pragma unroll
    for (int u = 0; u < kVec; ++u) mine |= static_cast<uint32_t>(chosen(keys[u])) << u;
    uint32_t span = mine << ((lane % kSpan) * kVec);
#pragma unroll
    for (int d = 1; d < kSpan; d <<= 1) span |= __shfl_xor_sync(0xFFFFFFFFu, span, d);
    if (lane % kSpan == 0 && span != 0u) {
      const int off = j & 31;
      atomicOr(&bits[j >> 5], span << off);
      if (off != 0 && (span >> (32 - off)) != 0u) atomicOr(&bits[(j >> 5) + 1], span >> (32 - off));
    }
    if (listed) {
      uint32_t takers[kVec];
      uint32_t step_total = 0;
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        takers[u] = __ballot_sync(0xFFFFFFFFu, candidate(keys[u]));
        step_total += __popc(takers[u]);
      }
      if (step_total != 0u) {
        uint32_t base = 0;
        if (lane == 0) base = atomicAdd(&s.n_cand, step_total);
        base = __shfl_sync(0xFFFFFFFFu, base, 0);
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          if ((takers[u] >> lane) & 1u) {
            const uint32_t slot = base + __popc(takers[u] & lanes_below);
            s.fine.cand_key[slot] = keys[u];
            s.fine.cand_idx[slot] = static_cast<uint32_t>(j + u);
          }
          base += __popc(takers[u]);
        }
      }
    }
  }
}

// Warp 0: over counts[0..kN) (kN = 32 or 64), the largest index i such that the counts at >= i sum to
// at least `wanted`, and how many are still wanted at i; index 0 and remaining = wanted when the
// counts sum to less.
template <int kN>
__device__ __forceinline__ void pick_from_top(const uint32_t* counts, uint32_t wanted, SharedState& s) {
  constexpr int kPer = kN / 32;
  const int lane = threadIdx.x & 31;
  const WarpSuffixScan scan = warp_suffix_scan<kN>(counts);  // lane 0 owns the largest indices
  const int top = scan.top;
  const uint32_t total = scan.total;
  const uint32_t before = scan.before;
  if (before < wanted && scan.inclusive >= wanted) {
    uint32_t above = before;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const uint32_t c = counts[top - i];
      if (above < wanted && above + c >= wanted) {
        s.pick_index = static_cast<uint32_t>(top - i);
        s.pick_remaining = wanted - above;
      }
      above += c;
    }
  }
  if (lane == 0) {
    s.pick_total = total;
    if (total < wanted) {
      s.pick_index = 0;
      s.pick_remaining = wanted;
    }
  }
}

// The sum of the word at `local`'s offset in the shared memory of CTAs 0 .. n - 1 of the cluster
// (n <= kMaxCluster): all the remote loads issue before the first one is waited for.
__device__ __forceinline__ uint32_t cluster_sum(const cooperative_groups::cluster_group& cl, uint32_t* local, int n) {
  uint32_t v[kMaxCluster];
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) v[r] = r < n ? *cl.map_shared_rank(local, r) : 0u;
  uint32_t sum = 0;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) sum += v[r];
  return sum;
}

struct Pick {
  uint32_t bin;        // the bin holding the wanted-th largest key of the cluster's histogram
  uint32_t remaining;  // keys still wanted inside it
  uint32_t total;      // keys the cluster's histogram counts
};

// The whole cluster: picks from the sum over the cluster of `hist` (kBins counts, at the same offset
// in every CTA) with `groups` (its sums over kGroup bins each). Every CTA returns the same Pick.
template <int kBins, int kGroup>
__device__ __forceinline__ Pick cluster_pick(const cooperative_groups::cluster_group& cl, SharedState& s,
                                             uint32_t* hist, uint32_t* groups, uint32_t wanted) {
  constexpr int kGroups = kBins / kGroup;
  static_assert(kGroups <= 64 && kGroup <= 64 && kGroups >= 32 && kGroup >= 32, "pick_from_top's sizes");
  const int n = static_cast<int>(cl.num_blocks());
  const int t = threadIdx.x;
  if (t < kGroups) {
    s.reduced[t] = cluster_sum(cl, groups + t, n);
  }
  __syncthreads();
  if (t < 32) pick_from_top<kGroups>(s.reduced, wanted, s);
  __syncthreads();
  Pick out;
  out.total = s.pick_total;
  const uint32_t group = s.pick_index;
  const uint32_t in_group = s.pick_remaining;
  __syncthreads();  // reduced and pick_* are rewritten
  if (out.total < wanted) {
    out.bin = 0;
    out.remaining = wanted;
    return out;
  }
  if (t < kGroup) {
    s.reduced[t] = cluster_sum(cl, hist + group * kGroup + t, n);
  }
  __syncthreads();
  if (t < 32) pick_from_top<kGroup>(s.reduced, in_group, s);
  __syncthreads();
  out.bin = group * kGroup + s.pick_index;
  out.remaining = s.pick_remaining;
  __syncthreads();
  return out;
}

// groups[g] = sum of hist[g * kGroup .. (g + 1) * kGroup). Each thread sums a run of consecutive bins
// with 16-byte loads, then the threads of a group combine theirs by shuffles: a few instructions per
// thread where a warp per group would take a shuffle tree per group. The runs' 16-byte chunks are
// read in a rotated order so that the 8 lanes of a load phase hit distinct banks.
template <int kBins, int kGroup>
__device__ __forceinline__ void group_sums(const uint32_t* hist, uint32_t* groups) {
  constexpr int kRun = kBins / kThreads;  // bins per thread
  constexpr int kChunks = kRun / 4;       // 16-byte loads per thread
  constexpr int kPerGroup = kGroup / kRun;  // threads per group
  static_assert(kBins % kThreads == 0 && kRun % 4 == 0 && kGroup % kRun == 0, "a run is whole chunks of one group");
  static_assert(kPerGroup >= 1 && kPerGroup <= 32 && (kPerGroup & (kPerGroup - 1)) == 0, "a group is a lane span");
  const uint4* run = reinterpret_cast<const uint4*>(hist) + threadIdx.x * kChunks;
  uint32_t v = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const uint4 q = run[(c + (threadIdx.x >> 1)) % kChunks];
    v += q.x + q.y + q.z + q.w;
  }
#pragma unroll
  for (int delta = kPerGroup / 2; delta > 0; delta >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, delta);
  if (threadIdx.x % kPerGroup == 0) groups[threadIdx.x / kPerGroup] = v;
}

__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// Elem: float (float32 logits) or uint16_t (the bits of bfloat16 logits). Grid: rows x C CTAs of
// kThreads, clusters of C along x; dynamic shared memory: smem_bytes(stage_capacity, sizeof(Elem)),
// where stage_capacity >= ceil(window / C) rounded up to the vector width, plus one vector.
template <typename Elem>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm)
    cluster_select_kernel(const TopkPerRowParams p, const int stage_capacity) {
  namespace cg = cooperative_groups;
  constexpr int kVec = 16 / sizeof(Elem);
  constexpr int kPieceElems = kPieceBytes / sizeof(Elem);
  const cg::cluster_group cl = cg::this_cluster();
  const int n_cta = static_cast<int>(cl.num_blocks());
  const int rank = static_cast<int>(cl.block_rank());
  const int t = threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  extern __shared__ __align__(128) unsigned char smem[];
  SharedState& s = *reinterpret_cast<SharedState*>(smem);
  Elem* stage = reinterpret_cast<Elem*>(smem + kStageOffset);

  const int64_t row = blockIdx.x / n_cta;
  int64_t begin = 0, end = 0;
  topk_row_window(p, row, &begin, &end);
  const uint32_t k = static_cast<uint32_t>(p.k);
  // The slice: columns [s0, s1). Slices start a multiple of kVec columns apart, so each has the same
  // offset `mis` from a 16-byte boundary; column c is staged at stage[c - (s0 - mis)].
  const int64_t chunk = ((end - begin + n_cta - 1) / n_cta + kVec - 1) / kVec * kVec;
  const int64_t s0 = min(end, begin + rank * chunk);
  const int64_t s1 = min(end, s0 + chunk);
  const Elem* src = static_cast<const Elem*>(p.logits) + row * p.stride0 + s0;
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(src) % 16) / sizeof(Elem));
  const Elem* aligned_src = src - mis;  // 16-byte aligned; stage[i] is aligned_src[i]
  const int64_t base_col = s0 - mis;
  const int lo = mis, hi = mis + static_cast<int>(s1 - s0);
  const int a0 = (lo + kVec - 1) / kVec * kVec, a1 = hi / kVec * kVec;  // the bulk-copied middle
  const int pieces = a1 > a0 ? (a1 - a0 + kPieceElems - 1) / kPieceElems : 0;

  // ---- load: bulk copies of the middle, plain loads of the head and tail ----
  if (t == 0) {
    for (int i = 0; i < pieces; ++i) mbar_init(&s.bars[i], 1);
    fence_barrier_init();
    for (int i = 0; i < pieces; ++i) {
      const int e0 = a0 + i * kPieceElems;
      const uint32_t bytes = static_cast<uint32_t>(min(kPieceElems, a1 - e0)) * sizeof(Elem);
      mbar_arrive_expect_tx(&s.bars[i], bytes);
      bulk_copy_to_shared(stage + e0, aligned_src + e0, bytes, &s.bars[i]);
    }
  }
  if (warp == 1) {
    // Without a bulk-copied middle the slice is shorter than two vectors: all of it is head.
    const int head_stop = pieces > 0 ? a0 : hi;
    for (int i = lo + lane; i < head_stop; i += 32) stage[i] = aligned_src[i];
    if (pieces > 0)
      for (int i = a1 + lane; i < hi; i += 32) stage[i] = aligned_src[i];
  }
  for (int i = t; i < kCoarseBins; i += kThreads) s.hist0[i] = 0;
  {
    uint32_t* bits = reinterpret_cast<uint32_t*>(smem + bitmap_offset(stage_capacity, sizeof(Elem)));
    for (int64_t i = t; i < 2 * bitmap_words(stage_capacity); i += kThreads) bits[i] = 0;
  }
  if (t == 0) s.n_cand = 0;
  __syncthreads();

  // ---- coarse: piece by piece as they land, then the unaligned head and tail ----
  for (int i = 0; i < pieces; ++i) {
    mbar_wait(&s.bars[i], 0);
    coarse_vector_keys(stage, a0 + i * kPieceElems, min(a1, a0 + (i + 1) * kPieceElems), s.hist0);
  }
  // The elements no bulk copy brought: all of a slice shorter than two vectors.
  const int head_end = pieces > 0 ? a0 : hi;
  coarse_single_keys(stage, lo, head_end, s.hist0);
  if (pieces > 0) coarse_single_keys(stage, a1, hi, s.hist0);
  __syncthreads();
  if (t == 0) s.hist0[0] = 0;  // the unchosen keys' bin
  __syncthreads();
  group_sums<kCoarseBins, kCoarseGroup>(s.hist0, s.group0);
  cl.sync();  // every CTA's histogram and group sums are complete (and every CTA of the cluster runs)
  const Pick coarse = cluster_pick<kCoarseBins, kCoarseGroup>(cl, s, s.hist0, s.group0, k);
  const bool take_all = coarse.total <= k;

  // ---- gather: the keys above the threshold's bin are chosen (chosen bitmap); those of the bin are
  // listed as candidates when they fit ----
  const int64_t stage_elems = stage_capacity;
  uint32_t* chosen_bits = reinterpret_cast<uint32_t*>(smem + bitmap_offset(stage_elems, sizeof(Elem)));
  uint32_t* equal_bits = chosen_bits + bitmap_words(stage_elems);
  const int words = (hi + 31) / 32;
  const uint32_t bin0 = coarse.bin;
  const bool listed = !take_all && s.hist0[bin0] <= kCandidates;  // this CTA's own count of the bin
  // Every CTA of the cluster is done reading the coarse histograms (this one's included) before the
  // fine state overwrites them.
  cluster_arrive();
  cluster_wait();
  for (int i = t; i < kFineBins; i += kThreads) {
    s.fine.hist1[i] = 0;
    s.fine.hist2[i] = 0;
  }
  // One compare per key each. Above bin0 means at least the first key of the next bin (the sum wraps
  // to "none" past the top bin); taking all means every key but key 0. Without take_all, bin0 holds
  // the k-th largest choosable key, so it is not bin 0 (cleared after the coarse pass) and no key of
  // it is key 0; with take_all nothing is a candidate (no key's bin is kNoBin).
  constexpr uint32_t kNoBin = ~0u;
  const uint32_t above_from = take_all ? 0u : ((bin0 + 1u) << (32 - kCoarseBits)) - 1u;
  const uint32_t candidate_bin = take_all ? kNoBin : bin0;
  const auto is_above = [&](uint32_t key) { return key > above_from; };
  const auto is_candidate = [&](uint32_t key) { return (key >> (32 - kCoarseBits)) == candidate_bin; };
  const auto list = [&](uint32_t key, int j) {
    if (listed) {
      const bool in_bin = is_candidate(key);
      const uint32_t takers = __ballot_sync(0xFFFFFFFFu, in_bin);
      if (takers != 0u) {
        const int leader = __ffs(takers) - 1;
        uint32_t base = 0;
        if (lane == leader) base = atomicAdd(&s.n_cand, static_cast<uint32_t>(__popc(takers)));
        base = __shfl_sync(0xFFFFFFFFu, base, leader);
        if (in_bin) {
          const uint32_t slot = base + __popc(takers & ((1u << lane) - 1u));
          s.fine.cand_key[slot] = key;
          s.fine.cand_idx[slot] = static_cast<uint32_t>(j);
        }
      }
    }
  };
  const auto gather = [&](uint32_t key, int j) {
    if (is_above(key)) atomicOr(&chosen_bits[j >> 5], 1u << (j & 31));
    list(key, j);
  };
  if (pieces > 0) {
    gather_vector_keys(stage, a0, a1, chosen_bits, is_above, listed, is_candidate, s);
    for_single_keys(stage, a1, hi, gather);
  }
  for_single_keys(stage, lo, head_end, gather);
  __syncthreads();
  const int candidates = static_cast<int>(s.n_cand);

  // ---- fine: the next 10 bits, twice, over the candidates (or all staged keys) of the fixed prefix ----
  uint32_t threshold = 0, need_equal = 0;
  if (!take_all) {  // the same in every CTA of the cluster: the cluster barriers below match
    uint32_t prefix = bin0, wanted = coarse.remaining;  // the fixed top bits, as a number
    int fixed = kCoarseBits;
    uint32_t* hists[2] = {s.fine.hist1, s.fine.hist2};
    uint32_t* groups[2] = {s.group1, s.group2};
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int shift = 32 - fixed - kFineBits;
      uint32_t* hist = hists[pass];
      const auto count_fine = [&](uint32_t key, int) {
        warp_count(hist, (key >> shift) & (kFineBins - 1), key != 0u && (key >> (32 - fixed)) == prefix);
      };
      if (listed) {
        for (int b = 0; b < candidates; b += kThreads) {
          const int c = b + t;
          count_fine(c < candidates ? s.fine.cand_key[c] : 0u, 0);
        }
      } else {
        if (pieces > 0) {
          for_vector_keys(stage, a0, a1, count_fine);
          for_single_keys(stage, a1, hi, count_fine);
        }
        for_single_keys(stage, lo, head_end, count_fine);
      }
      __syncthreads();
      group_sums<kFineBins, kFineGroup>(hist, groups[pass]);
      cl.sync();
      const Pick fine = cluster_pick<kFineBins, kFineGroup>(cl, s, hist, groups[pass], wanted);
      prefix = (prefix << kFineBits) | fine.bin;
      wanted = fine.remaining;
      fixed += kFineBits;
    }
    threshold = prefix;
    need_equal = wanted;

    // The bin's keys above T are chosen too; those equal to T are marked for the tie rule.
    const auto mark = [&](uint32_t key, int j) {
      if (key != 0u && key >= threshold && (key >> (32 - kCoarseBits)) == bin0)
        atomicOr(&(key > threshold ? chosen_bits : equal_bits)[j >> 5], 1u << (j & 31));
    };
    if (listed) {
      for (int c = t; c < candidates; c += kThreads)
        mark(s.fine.cand_key[c], static_cast<int>(s.fine.cand_idx[c]));
    } else {
      if (pieces > 0) {
        for_vector_keys(stage, a0, a1, mark);
        for_single_keys(stage, a1, hi, mark);
      }
      for_single_keys(stage, lo, head_end, mark);
    }
  }
  __syncthreads();

  // ---- emit: chosen columns in ascending order ----
  // Thread t owns the bitmap words [t * per, (t + 1) * per): consecutive columns, thread after thread.
  using BlockScan = cub::BlockScan<uint32_t, kThreads>;
  auto& scan_storage = s.scan;
  const int per = (words + kThreads - 1) / kThreads;
  const int wb = min(words, t * per), we = min(words, wb + per);
  uint32_t above = 0, equal = 0;
  for (int w = wb; w < we; ++w) {
    above += __popc(chosen_bits[w]);
    equal += __popc(equal_bits[w]);
  }
  uint32_t equal_before = 0, equal_total = 0;
  BlockScan(scan_storage).ExclusiveSum(equal, equal_before, equal_total);
  __syncthreads();
  uint32_t above_before = 0, above_total = 0;
  BlockScan(scan_storage).ExclusiveSum(above, above_before, above_total);
  if (t == 0) {
    s.cta_above = above_total;
    s.cta_equal = equal_total;
  }
  cl.sync();
  if (t == 0) {
    s.base_above = cluster_sum(cl, &s.cta_above, rank);
    s.base_equal = cluster_sum(cl, &s.cta_equal, rank);
  }
  __syncthreads();
  // The last read of another CTA's shared memory is done: arrive now, wait before exiting, so that no
  // CTA leaves while another may still read its counts.
  cluster_arrive();
  // Keep the equal keys whose rank over the whole row (column order) is below need_equal; a chosen
  // key's slot is the count of chosen keys before it: the earlier CTAs', then this CTA's in order.
  uint32_t rank_equal = s.base_equal + equal_before;
  uint32_t chosen_here = 0;
  for (int w = wb; w < we; ++w) {
    uint32_t e = equal_bits[w];
    const uint32_t allowed = rank_equal < need_equal ? need_equal - rank_equal : 0u;
    rank_equal += __popc(e);
    while (static_cast<uint32_t>(__popc(e)) > allowed) e &= ~(0x80000000u >> __clz(e));  // drop the highest column
    const uint32_t c = chosen_bits[w] | e;
    chosen_bits[w] = c;
    chosen_here += __popc(c);
  }
  uint32_t slot_before = 0, slot_total = 0;
  __syncthreads();
  BlockScan(scan_storage).ExclusiveSum(chosen_here, slot_before, slot_total);
  uint32_t slot = s.base_above + min(s.base_equal, need_equal) + slot_before;
  int32_t* out = p.indices + row * p.indices_stride;
  float* vals = p.values != nullptr ? p.values + row * p.values_stride : nullptr;
  for (int w = wb; w < we && slot < k; ++w) {
    uint32_t c = chosen_bits[w];
    while (c != 0u && slot < k) {
      const int j = w * 32 + __ffs(c) - 1;
      c &= c - 1u;
      out[slot] = static_cast<int32_t>(base_col + j);
      if (vals != nullptr) vals[slot] = chosen_value(stage, aligned_src, j);
      ++slot;
    }
  }
  if (rank == n_cta - 1) {
    const uint32_t chosen = take_all ? coarse.total : k;
    for (uint32_t i = chosen + t; i < k; i += kThreads) {
      out[i] = -1;
      if (vals != nullptr) vals[i] = -__int_as_float(0x7f800000);
    }
  }
  cluster_wait();
}

}  // namespace cluster_select
}  // namespace topk
}  // namespace sm90
}  // namespace aiter
