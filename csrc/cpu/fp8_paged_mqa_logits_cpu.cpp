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
// picked at run time (cpu/simd_level.h; no -march flags needed), each its own translation unit,
// cpu/fp8_paged_mqa_logits_cpu_<variant>.cpp, over the task bodies of
// cpu/fp8_paged_mqa_logits_cpu_kernels.h. The -inf tails are a separate pass over the rows.
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

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "common/work_scheduler.h"
#include "cpu/aligned_scratch.h"
#include "cpu/bf16_round.h"
#include "cpu/fp8_paged_mqa_logits_cpu_tasks.h"
#include "cpu/simd_level.h"

namespace aiter {
namespace {

using cpu::kPagedKeyGroup;
using cpu::round_up;
using scheduler::ceil_div;
using namespace cpu::paged;

struct Variant {
  const char* name;
  TaskFn run;
};

// Every variant, by SimdLevel; a level without a name runs the nearest narrower one (avx512bf16:
// bf16 pairs are the prefill path's alone; or a level this build does not hold).
constexpr Variant kVariants[cpu::kSimdLevels] = {
    {"generic", task_generic},
#if AITER_CPU_BUILDS_AVX2
    {"avx2", task_avx2},
#else
    {nullptr, nullptr},
#endif
#if AITER_CPU_BUILDS_AVX512
    {"avx512", task_avx512},
#else
    {nullptr, nullptr},
#endif
    {nullptr, nullptr},
};

// The widest variant this CPU runs, capped by AITER_FP8_MQA_CPU_SIMD (cpu/simd_level.h).
const Variant& pick_variant() { return cpu::pick_variant(kVariants); }

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
  if (!cpu::parse_counts(env, 2, values) || values[0] < 1 || values[0] > (1 << 20) || values[1] < 4 ||
      values[1] % 4 != 0 || values[1] > 4096)
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
      cpu::AlignedScratch<float> scratch(plan.scratch_floats, "fp8_paged_mqa_logits",
                                         "the per-thread limit is about kPagedQScratchBytes + kPagedKtScratchBytes");
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
