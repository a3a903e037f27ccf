// fp8_mqa_logits on the host: any H and D, the exact contract semantics, fp32 accumulation.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * dot(Q[m,h,:], K[n,:])) * w[m,h]   for s_m <= n < e_m
//                  -inf elsewhere when clean_logits, else untouched
//   s_m = clamp(ks[m], 0, N), e_m = clamp(ke[m], 0, N); s_m >= e_m is an empty row.
//
// Layouts: q [M][H][D] and kv [N][D] e4m3fn bytes (contiguous); kv_scales [N] f32; weights [M][H] f32
// with row stride weights_stride; ks, ke [M] i32; out [M][W] f32 or bf16 with row stride out_stride:
// the full layout (W = N, key n at column n) or the compressed one (W = max_seqlen_k, key n of row m
// at column n - s_m, -inf past e_m - s_m when clean). Values are rounded to bf16 once, at the store.
//
// Scheme. A task is (a block of <= 16 query rows) x (a chunk of keys), walked over the union of its
// rows' windows in blocks of 64 keys. Each block is decoded and transposed to Kt[depth][64] so that
// one SIMD vector holds consecutive keys; the micro-kernel keeps HG = 4 heads x NV vectors of
// accumulators in registers, broadcasts one Q element per head and depth step, and multiplies it into
// the NV key vectors. Two operand formats:
//   fp32        depth = D; acc += q * k (one FMA per product). Variants avx512, avx2, generic.
//   bf16 pairs  depth = ceil(D / 2); (d, d+1) packed in 32 bits, vdpbf16ps adds both products per
//               lane: twice the products per instruction. Variant avx512bf16 (Zen 4, Sapphire Rapids).
// The best variant the CPU runs is picked at run time (cpu/simd_level.h; no -march flags needed);
// each variant is its own translation unit, cpu/fp8_mqa_logits_cpu_<variant>.cpp, over the shared
// task bodies of cpu/fp8_mqa_logits_cpu_kernels.h.
//
// Two paths, one arithmetic. The per-thread scratch is bounded by a constant (<= 1.25 MiB) whatever
// M, N, H and D (tunables and their reasons in fp8_mqa_logits_cpu.h):
//   whole depth  (every common shape) a task decodes its rows' Q once ([rows][H][depth], rows shrunk
//                so that it stays <= kQScratchBytes), each key block's whole Kt[depth][64]
//                (<= kKtScratchBytes), and runs each head group's full depth in registers.
//   chunked      when one row's Q (H * depth words) or the whole-depth Kt block would exceed those
//                bounds. A task has rows x head-chunk <= kChunkRowHeads (heads first: up to 512
//                heads of 1 row, or 32 heads of 16 rows). Its keys go in spans of kSpanKeys; per span,
//                heads in chunks (a multiple of HG unless all H) and, inside, depth in chunks of
//                kDepthChunk words. Q[rows][head chunk][depth chunk] is decoded once per (span, head
//                chunk, depth chunk), the span's K blocks Kt[depth chunk][64] once per (head chunk,
//                depth chunk), or once per span when the depth is a single chunk (then they serve
//                every head chunk). The accumulators of every (row, head, key lane) of the span live
//                in acc[rows][head chunk][span] between depth chunks: a depth chunk loads them (zero
//                on the first), continues the FMA chain over its depth steps and stores them back, so
//                each accumulator sees exactly the whole-depth path's chain of fp32 operations (a
//                stored fp32 reloads exactly; bf16 pairs are never split since a chunk is whole
//                words). After the last depth chunk of a head chunk, the same
//                epilogue as the whole-depth path adds the chunk's head groups, h ascending, into the
//                span's logits[rows][span], which carry the head sum from one head chunk to the
//                next; the head groups are the whole-depth path's (chunks start at multiples of HG).
//
// Precision and determinism. e4m3 values are exact in bf16 and fp32, and a product of two has at most
// 8 significant bits, so every product is exact: the only rounding is the fp32 sum over d (in a fixed
// order), then the scale, relu and the head sum in h order. Every key lane runs that same sequence,
// so an element's value does not depend on which task, block, chunk or lane computed it: the output is
// bitwise identical for any thread count, and the chunked path gives the whole-depth path's bits.
// The variants may differ from each other in the last bits (pairwise vs sequential d sums; FMA
// contraction of relu(.) * w + sum). The scale is applied before the relu, exactly as written, so the
// CPU path does not even need the kv_scale > 0 precondition the device kernels rely on.
#include "cpu/fp8_mqa_logits_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

#include "common/work_scheduler.h"
#include "cpu/aligned_scratch.h"
#include "cpu/fp8_mqa_logits_cpu_tasks.h"
#include "cpu/simd_level.h"

namespace aiter {
namespace {

using cpu::kKeyBlock;
using cpu::kMaxRowsPerTask;
using cpu::round_up;
using scheduler::ceil_div;
using namespace cpu::prefill;

// Chunk sizes of the chunked path (the tunables, or AITER_FP8_MQA_CPU_CHUNKS's).
struct Chunks {
  bool forced;
  int64_t depth;  // words
  int64_t heads;  // multiple of 4
  int64_t keys;   // multiple of kKeyBlock
};

// AITER_FP8_MQA_CPU_CHUNKS=<depth words>,<heads>,<keys> (tests): forces the chunked path.
Chunks pick_chunks() {
  Chunks defaults{false, cpu::kDepthChunk, cpu::kChunkRowHeads, cpu::kSpanKeys};
  const char* env = std::getenv("AITER_FP8_MQA_CPU_CHUNKS");
  if (env == nullptr || *env == '\0') return defaults;
  long long values[3];
  if (!cpu::parse_counts(env, 3, values) || values[0] < 1 || values[1] < 4 || values[1] % 4 != 0 ||
      values[2] < kKeyBlock || values[2] % kKeyBlock != 0)
    throw std::runtime_error(std::string("fp8_mqa_logits (CPU): AITER_FP8_MQA_CPU_CHUNKS='") + env +
                             "' is not <depth words >= 1>,<heads: a multiple of 4>,<keys: a "
                             "multiple of 64>");
  return {true, values[0], values[1], values[2]};
}

Plan make_plan(const Fp8MqaLogitsParams& params, int64_t threads, int64_t depth,
               const Chunks& chunks) {
  Plan plan;
  plan.depth = depth;
  const int64_t row_bytes = static_cast<int64_t>(params.H) * depth * 4;
  plan.chunked = chunks.forced || row_bytes > cpu::kQScratchBytes ||
                 depth * kKeyBlock * 4 > cpu::kKtScratchBytes;
  if (plan.chunked) {
    // Rows x heads of a (row block, head chunk) <= kChunkRowHeads: as many heads as fit, then rows.
    plan.depth_chunk = std::min<int64_t>(depth, chunks.depth);
    plan.head_chunk = std::min<int64_t>(params.H, chunks.heads);
    plan.rows_per_task = std::max<int64_t>(
        1, std::min<int64_t>(kMaxRowsPerTask, cpu::kChunkRowHeads / plan.head_chunk));
  } else {
    plan.depth_chunk = plan.head_chunk = 0;
    plan.rows_per_task =
        std::max<int64_t>(1, std::min<int64_t>(kMaxRowsPerTask, cpu::kQScratchBytes / row_bytes));
  }
  plan.row_blocks = ceil_div(params.M, plan.rows_per_task);
  // Split the keys only when the row blocks alone are too few to keep every thread busy.
  const int64_t wanted_tasks = std::max<int64_t>(1, threads) * cpu::kTasksPerThread;
  const int64_t max_key_chunks = ceil_div(params.N, kKeyBlock);
  const int64_t key_chunk_count = std::min<int64_t>(
      max_key_chunks, std::max<int64_t>(1, ceil_div(wanted_tasks, plan.row_blocks)));
  plan.keys_per_chunk = round_up(ceil_div(params.N, key_chunk_count), kKeyBlock);
  plan.key_chunks = ceil_div(params.N, plan.keys_per_chunk);
  plan.tasks = plan.row_blocks * plan.key_chunks;
  if (!plan.chunked) {
    plan.span_keys = 0;
    plan.q_words = round_up(plan.rows_per_task * params.H * depth, 16);
    plan.kt_words = depth * kKeyBlock;
    plan.acc_words = 0;
    plan.logits_words = 2 * kKeyBlock;  // block scales, tile logits
  } else {
    plan.span_keys = std::min<int64_t>(plan.keys_per_chunk, chunks.keys);
    plan.q_words = round_up(plan.rows_per_task * plan.head_chunk * plan.depth_chunk, 16);
    plan.kt_words = plan.depth_chunk * plan.span_keys;
    plan.acc_words = plan.rows_per_task * plan.head_chunk * plan.span_keys;
    plan.logits_words = (plan.rows_per_task + 1) * plan.span_keys;  // span logits, span scales
  }
  plan.scratch_words = plan.q_words + plan.kt_words + plan.acc_words + plan.logits_words;
  return plan;
}

struct Variant {
  const char* name;
  TaskFn whole_depth_fn;
  TaskFn chunked_fn;
  bool bf16_pairs;
};

// Every variant, by SimdLevel; a level this build does not hold has no name.
constexpr Variant kVariants[cpu::kSimdLevels] = {
    {"generic", task_generic, task_generic_chunked, false},
#if AITER_CPU_BUILDS_AVX2
    {"avx2", task_avx2, task_avx2_chunked, false},
#else
    {nullptr, nullptr, nullptr, false},
#endif
#if AITER_CPU_BUILDS_AVX512
    {"avx512", task_avx512, task_avx512_chunked, false},
#else
    {nullptr, nullptr, nullptr, false},
#endif
#if AITER_CPU_BUILDS_AVX512BF16
    {"avx512bf16", task_avx512bf16, task_avx512bf16_chunked, true},
#else
    {nullptr, nullptr, nullptr, false},
#endif
};

// The best variant this CPU runs, capped by AITER_FP8_MQA_CPU_SIMD (cpu/simd_level.h).
const Variant& pick_variant() { return cpu::pick_variant(kVariants); }

}  // namespace

const char* fp8_mqa_logits_cpu_variant() { return pick_variant().name; }

void fp8_mqa_logits_cpu(const Fp8MqaLogitsParams& params) {
  if (params.M <= 0 || params.N <= 0) return;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const Variant& variant = pick_variant();
  const Plan plan =
      make_plan(params, threads, variant.bf16_pairs ? (params.D + 1) / 2 : params.D, pick_chunks());
  const TaskFn run = plan.chunked ? variant.chunked_fn : variant.whole_depth_fn;
  // Tasks are handed out dynamically (windows make them very unequal); which thread runs a task
  // does not change any value, see the determinism note at the top.
  std::atomic<int64_t> next_task{0};
  const int64_t workers = std::min(threads, plan.tasks);
  try {
    const std::string scratch_limit =
        "the CPU path's per-thread limit is kQScratchBytes + kKtScratchBytes = " +
        std::to_string(cpu::kQScratchBytes + cpu::kKtScratchBytes) +
        " bytes unless AITER_FP8_MQA_CPU_CHUNKS forces larger chunks";
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      cpu::AlignedScratch<uint32_t> scratch(plan.scratch_words, "fp8_mqa_logits", scratch_limit);
      for (;;) {
        const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
        if (task >= plan.tasks) break;
        run(params, plan, task, scratch.ptr);
      }
    });
  } catch (const std::bad_alloc&) {
    // Nothing here allocates more than the bounded scratch; say which limit, not a bare bad_alloc.
    throw std::runtime_error(
        "fp8_mqa_logits (CPU): out of memory (std::bad_alloc) while running with " +
        std::to_string(workers) + " threads x " + std::to_string(plan.scratch_words * 4) +
        " bytes of scratch (the CPU path's per-thread limit is kQScratchBytes + kKtScratchBytes = " +
        std::to_string(cpu::kQScratchBytes + cpu::kKtScratchBytes) + " bytes)");
  }
}

}  // namespace aiter
