// fp8_paged_mqa_logits on the host (the decode op): any H, D, block_kv and next_n; fp32 accumulation.
//
//   logits[r, p] = sum_h relu(scale(b, p) * dot(Q[b,j,h,:], K(b, p))) * w[r, h]   for p < keys(b, j)
//                  -inf for keys(b, j) <= p < max_context_len when clean_logits, else untouched
//   r = b * next_n + j; keys(b, j) = context_lens[b] - next_n + j + 1 (1-D lens) or context_lens[b, j]
//   (2-D), clamped to [0, max_context_len]; K(b, p) and scale(b, p) are slot p % block_kv of cache
//   block block_table[b, p / block_kv].
//
// Layouts: q [B][next_n][H][D] e4m3fn bytes (contiguous); kv_cache: block i at byte i * kv_block_stride,
// holding block_kv keys of D e4m3fn bytes (slot s at byte s * D), then block_kv float32 scales (slot s
// at byte block_kv * D + 4 s, read bytewise: not 4-byte aligned for every D); weights [B * next_n][H]
// f32, row stride weights_stride; context_lens [B] or [B][next_n] i32; block_table [B][max_blocks] i32,
// row stride block_table_stride; out [B * next_n][max_context_len] f32 or bf16, row stride out_stride
// (bf16 rounded once, at the store). schedule_meta is not read: the CPU plans its own shares.
//
// Scheme. The work is the scheduler's units (batch, cache block), for every row of the batch at once
// (common/work_scheduler.h); a task is one even share of all units (share_begin), and tasks are handed
// out dynamically. A task walks its units batch by batch: it decodes the batch's Q rows once
// ([next_n][H][D] floats), then takes its keys in groups of 64 logical positions, each key gathered
// through the block table, decoded and transposed into Kt[D][64] with its scale beside (a group may
// span several cache blocks, or part of one, so the micro-tiles stay full whatever block_kv is). For
// each row and each micro-tile of W x NV keys the row sees, the micro-kernel keeps 4 heads x NV
// vectors of accumulators in registers, broadcasts one Q element per head and depth step into the NV
// key vectors (acc += q * k, d ascending), then adds each head's relu(scale * acc) * w to the tile's
// logits, h ascending. Variants: avx512 (W 16, NV 4), avx2 (8, 2), generic (4, 2: SSE2 / NEON),
// picked at run time (no -march flags needed). The -inf tails are a separate pass over the rows.
//
// Two paths, one arithmetic, so that the per-thread scratch is bounded whatever H and D:
//   whole depth  (every common shape) the batch's decoded Q rows ([next_n][H][D] floats, <=
//                kPagedQScratchBytes) and the group's whole Kt[D][64] (<= kPagedKtScratchBytes).
//   chunked      when either would exceed its bound. Per key group and row, heads go in chunks of
//                kPagedHeadChunk (a multiple of the 4-head groups) and depth in chunks of
//                kPagedDepthChunk: Q[head chunk][depth chunk] and Kt[depth chunk][64] are decoded
//                per chunk (Kt once per group when the depth is a single chunk), and each micro-tile's
//                accumulators live in acc[head chunk][64] between depth chunks: a depth chunk loads
//                them (zero on the first), continues the FMA chain and stores them back; the last one
//                runs the whole-depth path's epilogue. A stored fp32 reloads exactly, so every logit
//                gets the whole-depth path's bits.
//
// The block table. A group reads each block_table entry it needs once (an atomic relaxed load: a
// racing writer cannot make the compiler read it twice), checks it with one unsigned compare and
// uses that same value: an entry outside [0, num_blocks) reads no memory (its keys decode as zero
// with a NaN scale, so their logits are NaN) and is recorded; the caller refuses the call.
//
// Precision and determinism (as the prefill CPU path): e4m3 values are exact in fp32 and a product of
// two has at most 8 significant bits, so every product is exact; the only rounding is the fp32 sum
// over d in a fixed order, then the scale (applied before the relu, as written), relu and the head
// sum in h order. Each key lane runs that same sequence, so a logit does not depend on which task,
// group or lane computed it: the output is bitwise identical for any thread count, and with the same
// variant it is the prefill CPU path's fp32 result for the same keys laid out contiguously.
#include "cpu/fp8_paged_mqa_logits_cpu.h"

#include "common/e4m3.h"
#include "common/work_scheduler.h"
#include "cpu/bf16_round.h"
#include "cpu/simd_lanes.h"
#include "cpu/simd_level.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace aiter {
namespace {

using cpu::kPagedKeyGroup;
using scheduler::ceil_div;
constexpr int kHeadGroup = 4;  // heads whose accumulators share the registers of one micro-tile

template <int W>
using Lanes = cpu::Simd<W>;

// A micro-tile of W x NV consecutive key lanes of a transposed K group.
template <int W, int NV>
struct MicroTile {
  static constexpr int kKeys = W * NV;
  static_assert(kPagedKeyGroup % kKeys == 0, "a key group holds whole micro-tiles");
  typedef typename Lanes<W>::floats vf;

  // logits[k] += relu(scales[k] * sum_d q[h][d] * kt[d][k]) * w[h] for the HG heads from q (rows D
  // floats apart), h ascending; kt's rows are kPagedKeyGroup floats apart.
  template <int HG>
  static AITER_CPU_INLINE void heads(const float* __restrict q, int64_t D, const float* __restrict kt,
                                     const float* __restrict scales, const float* __restrict w,
                                     float* __restrict logits) {
    vf acc[HG][NV];
    for (int h = 0; h < HG; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    for (int64_t d = 0; d < D; ++d) {
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(kt + d * kPagedKeyGroup + v * W);
      for (int h = 0; h < HG; ++h) {
        const vf qb = q[h * D + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    cpu::head_group_epilogue<W, NV, HG>(acc, scales, w, logits);
  }

  // One depth chunk of heads(): the accumulators start at zero (first) or from `saved` ([HG][NV][W]
  // floats), run the same FMA chain over the chunk's `depth` steps (q's rows q_stride floats apart),
  // and are stored back, or on the last chunk go through heads()'s epilogue: the same bits.
  template <int HG>
  static AITER_CPU_INLINE void heads_chunk(const float* __restrict q, int64_t q_stride, int64_t depth,
                                           const float* __restrict kt, float* __restrict saved, bool first,
                                           bool last, const float* __restrict scales, const float* __restrict w,
                                           float* __restrict logits) {
    vf acc[HG][NV];
    for (int h = 0; h < HG; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(saved + (h * NV + v) * W);
    for (int64_t d = 0; d < depth; ++d) {
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(kt + d * kPagedKeyGroup + v * W);
      for (int h = 0; h < HG; ++h) {
        const vf qb = q[h * q_stride + d] - vf{};
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    if (last) {
      cpu::head_group_epilogue<W, NV, HG>(acc, scales, w, logits);
    } else {
      for (int h = 0; h < HG; ++h)
        for (int v = 0; v < NV; ++v) *reinterpret_cast<vf*>(saved + (h * NV + v) * W) = acc[h][v];
    }
  }

  // heads_chunk for the `heads` (1..4) heads of one head group.
  static AITER_CPU_INLINE void head_group_chunk(int heads, const float* q, int64_t q_stride, int64_t depth,
                                                const float* kt, float* saved, bool first, bool last,
                                                const float* scales, const float* w, float* logits) {
    switch (heads) {
      case 4:
        heads_chunk<4>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      case 3:
        heads_chunk<3>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      case 2:
        heads_chunk<2>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      default:
        heads_chunk<1>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
    }
  }

  // logits[0, kKeys) = the tile's logits over all H heads of one query row.
  static AITER_CPU_INLINE void all_heads(const float* q_row, int64_t H, int64_t D, const float* kt,
                                         const float* scales, const float* w, float* logits) {
    for (int k = 0; k < kKeys; ++k) logits[k] = 0.0f;
    int64_t h = 0;
    for (; h + kHeadGroup <= H; h += kHeadGroup) heads<kHeadGroup>(q_row + h * D, D, kt, scales, w + h, logits);
    switch (H - h) {  // the last, partial head group
      case 3:
        heads<3>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      case 2:
        heads<2>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      case 1:
        heads<1>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      default:
        break;
    }
  }
};

// Keys row j of batch b sees (scheduler::paged_row_keys, limited to max_context_len).
AITER_CPU_INLINE int64_t row_keys(const Fp8PagedMqaLogitsParams& p, int64_t b, int64_t j) {
  const int32_t len = p.context_lens[p.lens_per_row ? b * p.next_n + j : b];
  return scheduler::paged_row_keys(len, p.next_n, j, p.lens_per_row, p.max_context_len);
}

// Columns [first, first + count) of output row r: `values`, stored as logits_dtype.
AITER_CPU_INLINE void store_columns(const Fp8PagedMqaLogitsParams& p, int64_t r, int64_t first, const float* values,
                                    int64_t count) {
  if (p.logits_dtype == LogitsDtype::kFloat32) {
    std::memcpy(static_cast<float*>(p.out) + r * p.out_stride + first, values, count * sizeof(float));
  } else {
    uint16_t* row = static_cast<uint16_t*>(p.out) + r * p.out_stride + first;
    for (int64_t i = 0; i < count; ++i) row[i] = cpu::bf16_bits(values[i]);
  }
}

// The first out-of-range block_table entry the tasks read (the smallest (batch, column) of those
// seen): the slow path of a caller bug, so a mutex is enough.
class FaultLog {
 public:
  void record(int64_t batch, int64_t column, int32_t value, int64_t num_blocks) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (first_.found && (first_.batch < batch || (first_.batch == batch && first_.column <= column))) return;
    first_ = PagedBlockTableFault{1, static_cast<int32_t>(batch), static_cast<int32_t>(column), value, num_blocks};
  }
  PagedBlockTableFault first() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return first_;
  }

 private:
  std::mutex mutex_;
  PagedBlockTableFault first_{};
};

// How the units are cut into tasks, and each thread's scratch.
struct Plan {
  const int64_t* unit_ends;  // [B]: units of batches 0..b (the scheduler's inclusive prefix sums)
  int64_t total_units;
  int64_t tasks;
  bool chunked;
  int64_t depth_chunk, head_chunk;  // chunked path only
  // Per-thread scratch, in floats, each part a multiple of 16 (64-byte aligned). Whole depth: the
  // decoded Q rows of a batch, the transposed K group, its scales, a micro-tile's logits. Chunked:
  // the Q chunk of a row, the K group's depth chunk, the accumulators of a head chunk, the scales
  // and the group's logits of a row.
  int64_t q_floats;
  int64_t kt_floats;
  int64_t acc_floats;
  int64_t scratch_floats;
  FaultLog* faults;
};

// The group's keys [group_begin, group_begin + group_keys) of batch b: each key's K row (nullptr for
// an out-of-range block_table entry) and scale (NaN for one). Returns whether every entry was good.
AITER_CPU_INLINE bool gather_group(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                   int64_t group_begin, int64_t group_keys, const uint8_t** key_rows,
                                   float* scales) {
  const int32_t* entries = p.block_table + b * p.block_table_stride;
  const int64_t block_kv = p.block_kv, D = p.D;
  bool good = true;
  int64_t column = -1;
  const uint8_t* block = nullptr;
  for (int64_t l = 0; l < group_keys; ++l) {
    const int64_t key = group_begin + l;
    if (key / block_kv != column) {
      column = key / block_kv;
      const int32_t id = __atomic_load_n(entries + column, __ATOMIC_RELAXED);
      if (is_cache_block(id, p.num_blocks)) {
        block = p.kv_cache + static_cast<int64_t>(id) * p.kv_block_stride;
      } else {
        block = nullptr;
        good = false;
        plan.faults->record(b, column, id, p.num_blocks);
      }
    }
    const int64_t slot = key % block_kv;
    if (block != nullptr) {
      key_rows[l] = block + slot * D;
      std::memcpy(&scales[l], block + block_kv * D + 4 * slot, sizeof(float));
    } else {
      key_rows[l] = nullptr;
      scales[l] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  // Lanes past the last key: finite, and never stored.
  std::memset(scales + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
  return good;
}

// Depth [d0, d0 + depth) of the group's keys into kt[depth][kPagedKeyGroup]: a bad entry's keys and
// the lanes past the last key are zero.
AITER_CPU_INLINE void decode_group(const uint8_t* const* key_rows, int64_t group_keys, int64_t d0, int64_t depth,
                                   float* kt) {
  const float* table = e4m3_table();
  for (int64_t l = 0; l < group_keys; ++l) {
    const uint8_t* k = key_rows[l];
    if (k != nullptr) {
      k += d0;
      for (int64_t d = 0; d < depth; ++d) kt[d * kPagedKeyGroup + l] = table[k[d]];
    } else {
      for (int64_t d = 0; d < depth; ++d) kt[d * kPagedKeyGroup + l] = 0.0f;
    }
  }
  if (group_keys < kPagedKeyGroup) {
    for (int64_t d = 0; d < depth; ++d)
      std::memset(kt + d * kPagedKeyGroup + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
  }
}

// Keys [key_begin, key_end) of batch b, for each of its rows that sees them (whole-depth path).
template <class Tile>
AITER_CPU_INLINE void run_batch_keys(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                     int64_t key_begin, int64_t key_end, float* scratch) {
  const int64_t H = p.H, D = p.D, next_n = p.next_n;
  float* q_rows = scratch;                    // [next_n][H][D]
  float* kt = q_rows + plan.q_floats;         // [D][kPagedKeyGroup]
  float* scales = kt + plan.kt_floats;        // [kPagedKeyGroup]
  float* logits = scales + kPagedKeyGroup;    // [Tile::kKeys]
  const float* table = e4m3_table();
  const uint8_t* key_rows[kPagedKeyGroup];

  for (int64_t j = 0; j < next_n; ++j) {
    if (row_keys(p, b, j) <= key_begin) continue;  // sees none of these keys
    const uint8_t* q = p.q + (b * next_n + j) * H * D;
    float* decoded = q_rows + j * H * D;
    for (int64_t i = 0; i < H * D; ++i) decoded[i] = table[q[i]];
  }

  for (int64_t group_begin = key_begin; group_begin < key_end; group_begin += kPagedKeyGroup) {
    const int64_t group_keys = std::min<int64_t>(kPagedKeyGroup, key_end - group_begin);
    gather_group(p, plan, b, group_begin, group_keys, key_rows, scales);
    decode_group(key_rows, group_keys, 0, D, kt);

    for (int64_t j = 0; j < next_n; ++j) {
      const int64_t end = std::min(group_begin + group_keys, row_keys(p, b, j));
      if (end <= group_begin) continue;
      const int64_t r = b * next_n + j;
      const float* q_row = q_rows + j * H * D;
      const float* w_row = p.weights + r * p.weights_stride;
      for (int64_t t = 0; group_begin + t < end; t += Tile::kKeys) {
        Tile::all_heads(q_row, H, D, kt + t, scales + t, w_row, logits);
        store_columns(p, r, group_begin + t, logits, std::min<int64_t>(Tile::kKeys, end - group_begin - t));
      }
    }
  }
}

// The same keys on the chunked path (scheme at the top): per group and row, head chunks, depth chunks.
template <class Tile>
AITER_CPU_INLINE void run_batch_keys_chunked(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                             int64_t key_begin, int64_t key_end, float* scratch) {
  constexpr int64_t kTiles = kPagedKeyGroup / Tile::kKeys;
  const int64_t H = p.H, D = p.D, next_n = p.next_n;
  const int64_t depth_chunk = plan.depth_chunk, head_chunk = plan.head_chunk;
  float* q_chunk = scratch;                   // [head_chunk][depth_chunk]
  float* kt = q_chunk + plan.q_floats;        // [depth_chunk][kPagedKeyGroup]
  float* acc = kt + plan.kt_floats;           // [head_chunk / 4][kTiles][4][Tile::kKeys]
  float* scales = acc + plan.acc_floats;      // [kPagedKeyGroup]
  float* logits = scales + kPagedKeyGroup;    // [kPagedKeyGroup]
  const float* table = e4m3_table();
  const uint8_t* key_rows[kPagedKeyGroup];
  const bool single_depth_chunk = D <= depth_chunk;

  for (int64_t group_begin = key_begin; group_begin < key_end; group_begin += kPagedKeyGroup) {
    const int64_t group_keys = std::min<int64_t>(kPagedKeyGroup, key_end - group_begin);
    gather_group(p, plan, b, group_begin, group_keys, key_rows, scales);
    if (single_depth_chunk) decode_group(key_rows, group_keys, 0, D, kt);

    for (int64_t j = 0; j < next_n; ++j) {
      const int64_t end = std::min(group_begin + group_keys, row_keys(p, b, j));
      if (end <= group_begin) continue;
      const int64_t r = b * next_n + j;
      const int64_t tiles = ceil_div(end - group_begin, Tile::kKeys);
      const uint8_t* q_row = p.q + r * H * D;
      const float* w_row = p.weights + r * p.weights_stride;
      std::memset(logits, 0, sizeof(float) * kPagedKeyGroup);
      for (int64_t h0 = 0; h0 < H; h0 += head_chunk) {
        const int64_t heads = std::min(head_chunk, H - h0);
        for (int64_t d0 = 0; d0 < D; d0 += depth_chunk) {
          const int64_t depth = std::min(depth_chunk, D - d0);
          if (!single_depth_chunk) decode_group(key_rows, group_keys, d0, depth, kt);
          for (int64_t h = 0; h < heads; ++h) {
            const uint8_t* q = q_row + (h0 + h) * D + d0;
            float* decoded = q_chunk + h * depth;
            for (int64_t d = 0; d < depth; ++d) decoded[d] = table[q[d]];
          }
          for (int64_t g = 0; g < heads; g += kHeadGroup) {
            for (int64_t t = 0; t < tiles; ++t) {
              const int64_t lane = t * Tile::kKeys;
              Tile::head_group_chunk(static_cast<int>(std::min<int64_t>(kHeadGroup, heads - g)), q_chunk + g * depth,
                                     depth, depth, kt + lane, acc + ((g / kHeadGroup) * kTiles + t) * 4 * Tile::kKeys,
                                     d0 == 0, d0 + depth >= D, scales + lane, w_row + h0 + g, logits + lane);
            }
          }
        }
      }
      store_columns(p, r, group_begin, logits, end - group_begin);
    }
  }
}

// One task: share `task` of the units, batch by batch.
template <class Tile>
AITER_CPU_INLINE void run_task(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  const int64_t first = scheduler::share_begin(plan.total_units, plan.tasks, task);
  int64_t left = scheduler::share_begin(plan.total_units, plan.tasks, task + 1) - first;
  scheduler::PagedUnit at = scheduler::paged_unit(plan.unit_ends, p.batches, first);
  while (left > 0 && at.batch < p.batches) {
    const int64_t b = at.batch;
    const int64_t units = plan.unit_ends[b] - (b > 0 ? plan.unit_ends[b - 1] : 0);
    const int64_t take = std::min(left, units - at.block);
    if (take > 0) {
      const int64_t batch_keys =
          scheduler::paged_batch_keys(p.context_lens, b, p.next_n, p.lens_per_row, p.max_context_len);
      const int64_t key_begin = at.block * p.block_kv;
      const int64_t key_end = std::min((at.block + take) * p.block_kv, batch_keys);
      if (plan.chunked)
        run_batch_keys_chunked<Tile>(p, plan, b, key_begin, key_end, scratch);
      else
        run_batch_keys<Tile>(p, plan, b, key_begin, key_end, scratch);
      left -= take;
    }
    at = scheduler::PagedUnit{b + 1, 0};
  }
}

using TaskFn = void (*)(const Fp8PagedMqaLogitsParams&, const Plan&, int64_t, float*);

// SIMD variants. Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512), 11 of the 16 ymm (avx2), the same shape in 16-byte
// vectors (generic).
void task_generic(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  run_task<MicroTile<4, 2>>(p, plan, task, scratch);
}
#ifdef AITER_CPU_X86
__attribute__((target("avx2,fma"))) void task_avx2(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task,
                                                   float* scratch) {
  run_task<MicroTile<8, 2>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512(const Fp8PagedMqaLogitsParams& p, const Plan& plan,
                                                             int64_t task, float* scratch) {
  run_task<MicroTile<16, 4>>(p, plan, task, scratch);
}
#endif

struct Variant {
  const char* name;
  TaskFn run;
};

// The widest variant this CPU runs (bf16 pairs are the prefill path's alone: its avx512bf16 level runs
// avx512 here).
Variant pick_variant() {
  switch (cpu::simd_level()) {
#ifdef AITER_CPU_X86
    case cpu::SimdLevel::kAvx512Bf16:
    case cpu::SimdLevel::kAvx512:
      return {"avx512", task_avx512};
    case cpu::SimdLevel::kAvx2:
      return {"avx2", task_avx2};
#endif
    default:
      return {"generic", task_generic};
  }
}

int64_t round_up(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

struct AlignedScratch {
  float* ptr;
  explicit AlignedScratch(int64_t floats) {
    const size_t bytes = static_cast<size_t>(round_up(floats * 4, 64));
    ptr = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (ptr == nullptr)
      throw std::runtime_error("fp8_paged_mqa_logits (CPU): out of memory allocating a thread's " +
                               std::to_string(bytes) + "-byte scratch (the per-thread limit is about "
                               "kPagedQScratchBytes + kPagedKtScratchBytes)");
  }
  ~AlignedScratch() { std::free(ptr); }
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
};

// The chunk sizes: the defaults, or AITER_FP8_PAGED_CPU_CHUNKS = "<depth>,<heads>", which forces the
// chunked path at any shape (tests compare its bits with the whole-depth path's).
struct Chunks {
  bool forced;
  int64_t depth, heads;
};

Chunks pick_chunks() {
  const Chunks defaults{false, cpu::kPagedDepthChunk, cpu::kPagedHeadChunk};
  const char* env = std::getenv("AITER_FP8_PAGED_CPU_CHUNKS");
  if (env == nullptr || *env == '\0') return defaults;
  long long values[2];
  const char* cursor = env;
  for (int i = 0; i < 2; ++i) {
    char* end;
    values[i] = std::strtoll(cursor, &end, 10);
    if (end == cursor || *end != (i < 1 ? ',' : '\0')) values[0] = 0;  // malformed
    cursor = *end ? end + 1 : end;
  }
  if (values[0] < 1 || values[0] > (1 << 20) || values[1] < 4 || values[1] % 4 != 0 || values[1] > 4096)
    throw std::runtime_error(std::string("fp8_paged_mqa_logits (CPU): AITER_FP8_PAGED_CPU_CHUNKS='") + env +
                             "' is not <depth: 1 to 2^20>,<heads: a multiple of 4, at most 4096>");
  return {true, values[0], values[1]};
}

// The scheduler's units of every batch as inclusive prefix sums; returns the total.
int64_t unit_ends_of(const int32_t* context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                     int64_t block_kv, int64_t key_limit, std::vector<int64_t>& unit_ends) {
  unit_ends.resize(static_cast<size_t>(batches));
  int64_t total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    total += ceil_div(scheduler::paged_batch_keys(context_lens, b, next_n, lens_per_row, key_limit), block_kv);
    unit_ends[static_cast<size_t>(b)] = total;
  }
  return total;
}

void fill_tails_neg_inf(const Fp8PagedMqaLogitsParams& p) {
  const int64_t rows = p.batches * p.next_n;
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.max_context_len)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const int64_t keys = row_keys(p, r / p.next_n, r % p.next_n);
                       if (p.logits_dtype == LogitsDtype::kFloat32) {
                         float* row = static_cast<float*>(p.out) + r * p.out_stride;
                         std::fill(row + keys, row + p.max_context_len, -std::numeric_limits<float>::infinity());
                       } else {
                         uint16_t* row = static_cast<uint16_t*>(p.out) + r * p.out_stride;
                         std::fill(row + keys, row + p.max_context_len,
                                   cpu::bf16_bits(-std::numeric_limits<float>::infinity()));
                       }
                     }
                   });
}

}  // namespace

const char* fp8_paged_mqa_logits_cpu_variant() { return pick_variant().name; }

PagedBlockTableFault fp8_paged_mqa_logits_cpu(const Fp8PagedMqaLogitsParams& p) {
  if (p.batches <= 0 || p.next_n <= 0 || p.max_context_len <= 0) return PagedBlockTableFault{};
  std::vector<int64_t> unit_ends;
  FaultLog faults;
  Plan plan;
  plan.faults = &faults;
  plan.total_units = unit_ends_of(p.context_lens, p.batches, p.next_n, p.lens_per_row, p.block_kv,
                                  p.max_context_len, unit_ends);
  plan.unit_ends = unit_ends.data();
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  plan.tasks = std::min<int64_t>(plan.total_units, threads * cpu::kPagedTasksPerThread);
  const Chunks chunks = pick_chunks();
  const int64_t H = p.H, D = p.D;
  plan.chunked = chunks.forced || p.next_n * H * D * 4 > cpu::kPagedQScratchBytes ||
                 D * kPagedKeyGroup * 4 > cpu::kPagedKtScratchBytes;
  if (plan.chunked) {
    plan.depth_chunk = std::min<int64_t>(D, chunks.depth);
    plan.head_chunk = std::min<int64_t>(H, chunks.heads);
    plan.q_floats = round_up(plan.head_chunk * plan.depth_chunk, 16);
    plan.kt_floats = plan.depth_chunk * kPagedKeyGroup;
    plan.acc_floats = round_up(plan.head_chunk, kHeadGroup) * kPagedKeyGroup;
  } else {
    plan.depth_chunk = plan.head_chunk = 0;
    plan.q_floats = round_up(p.next_n * H * D, 16);
    plan.kt_floats = D * kPagedKeyGroup;
    plan.acc_floats = 0;
  }
  plan.scratch_floats = plan.q_floats + plan.kt_floats + plan.acc_floats + 2 * kPagedKeyGroup;

  if (plan.tasks > 0) {
    const TaskFn run = pick_variant().run;
    // Which thread runs a task changes no value (the determinism note at the top).
    std::atomic<int64_t> next_task{0};
    const int64_t workers = std::min(threads, plan.tasks);
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      AlignedScratch scratch(plan.scratch_floats);
      for (;;) {
        const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
        if (task >= plan.tasks) break;
        run(p, plan, task, scratch.ptr);
      }
    });
  }
  if (p.clean_logits) fill_tails_neg_inf(p);
  return faults.first();
}

void paged_mqa_logits_metadata_cpu(const int32_t* context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                                   int64_t block_kv, int64_t num_shares, int32_t* schedule_meta) {
  std::vector<int64_t> unit_ends;
  const int64_t total = unit_ends_of(context_lens, batches, lens_per_row ? next_n : 1, lens_per_row, block_kv,
                                     std::numeric_limits<int64_t>::max(), unit_ends);
  for (int64_t share = 0; share <= num_shares; ++share) {
    // share_begin's total * part / parts, in 128 bits: without the max_context_len clamp the units of
    // long int32 lengths times a share count can pass 2^63.
    const int64_t first = static_cast<int64_t>(static_cast<__int128>(total) * share / num_shares);
    const scheduler::PagedUnit at = scheduler::paged_unit(unit_ends.data(), batches, first);
    schedule_meta[2 * share] = static_cast<int32_t>(at.batch);
    schedule_meta[2 * share + 1] = static_cast<int32_t>(at.block);
  }
}

}  // namespace aiter
