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

// How the units are cut into tasks, and each thread's scratch.
struct Plan {
  const int64_t* unit_ends;  // [B]: units of batches 0..b (the scheduler's inclusive prefix sums)
  int64_t total_units;
  int64_t tasks;
  // Per-thread scratch, in floats, each part a multiple of 16 (64-byte aligned): decoded Q rows of a
  // batch, the transposed K group, its scales, a micro-tile's logits.
  int64_t q_floats;
  int64_t kt_floats;
  int64_t scratch_floats;
};

// Keys [key_begin, key_end) of batch b, for each of its rows that sees them.
template <class Tile>
AITER_CPU_INLINE void run_batch_keys(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                     int64_t key_begin, int64_t key_end, float* scratch) {
  const int64_t H = p.H, D = p.D, next_n = p.next_n, block_kv = p.block_kv;
  float* q_rows = scratch;                    // [next_n][H][D]
  float* kt = q_rows + plan.q_floats;         // [D][kPagedKeyGroup]
  float* scales = kt + plan.kt_floats;        // [kPagedKeyGroup]
  float* logits = scales + kPagedKeyGroup;    // [Tile::kKeys]
  const float* table = e4m3_table();

  for (int64_t j = 0; j < next_n; ++j) {
    if (row_keys(p, b, j) <= key_begin) continue;  // sees none of these keys
    const uint8_t* q = p.q + (b * next_n + j) * H * D;
    float* decoded = q_rows + j * H * D;
    for (int64_t i = 0; i < H * D; ++i) decoded[i] = table[q[i]];
  }
  const int32_t* blocks = p.block_table + b * p.block_table_stride;

  for (int64_t group_begin = key_begin; group_begin < key_end; group_begin += kPagedKeyGroup) {
    const int64_t group_keys = std::min<int64_t>(kPagedKeyGroup, key_end - group_begin);
    for (int64_t l = 0; l < group_keys; ++l) {
      const int64_t key = group_begin + l;
      const uint8_t* block = p.kv_cache + static_cast<int64_t>(blocks[key / block_kv]) * p.kv_block_stride;
      const int64_t slot = key % block_kv;
      const uint8_t* k = block + slot * D;
      for (int64_t d = 0; d < D; ++d) kt[d * kPagedKeyGroup + l] = table[k[d]];
      std::memcpy(&scales[l], block + block_kv * D + 4 * slot, sizeof(float));
    }
    if (group_keys < kPagedKeyGroup) {  // lanes past the last key: finite, and never stored
      for (int64_t d = 0; d < D; ++d)
        std::memset(kt + d * kPagedKeyGroup + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
      std::memset(scales + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
    }

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
      run_batch_keys<Tile>(p, plan, b, at.block * p.block_kv, std::min((at.block + take) * p.block_kv, batch_keys),
                           scratch);
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
                               std::to_string(bytes) + "-byte scratch ((next_n * H * D + 64 * D + 128) floats)");
  }
  ~AlignedScratch() { std::free(ptr); }
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
};

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

void fp8_paged_mqa_logits_cpu(const Fp8PagedMqaLogitsParams& p) {
  if (p.batches <= 0 || p.next_n <= 0 || p.max_context_len <= 0) return;
  std::vector<int64_t> unit_ends;
  Plan plan;
  plan.total_units = unit_ends_of(p.context_lens, p.batches, p.next_n, p.lens_per_row, p.block_kv,
                                  p.max_context_len, unit_ends);
  plan.unit_ends = unit_ends.data();
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  plan.tasks = std::min<int64_t>(plan.total_units, threads * cpu::kPagedTasksPerThread);
  plan.q_floats = round_up(p.next_n * p.H * p.D, 16);
  plan.kt_floats = static_cast<int64_t>(p.D) * kPagedKeyGroup;
  plan.scratch_floats = plan.q_floats + plan.kt_floats + 2 * kPagedKeyGroup;

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
