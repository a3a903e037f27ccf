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
// The best variant the CPU runs is picked at run time (no -march flags needed).
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
#include "cpu/simd_lanes.h"

#include "common/e4m3.h"
#include "common/work_scheduler.h"
#include "cpu/bf16_round.h"
#include "cpu/simd_level.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace aiter {
namespace {

using cpu::kKeyBlock;
using cpu::kMaxRowsPerTask;

// The same values as bf16 bit patterns: the top half of the fp32 bits, exact for 3-bit mantissas.
struct E4m3Bf16Table {
  uint16_t value[256];
  E4m3Bf16Table() {
    const float* fp32_values = e4m3_table();
    for (int b = 0; b < 256; ++b) {
      uint32_t bits;
      std::memcpy(&bits, &fp32_values[b], sizeof(bits));
      value[b] = static_cast<uint16_t>(bits >> 16);
    }
  }
};

const uint16_t* e4m3_bf16_table() {
  static const E4m3Bf16Table table;
  return table.value;
}

using cpu::Simd;

// Chunk sizes of the chunked path (the tunables, or AITER_FP8_MQA_CPU_CHUNKS's).
struct Chunks {
  bool forced;
  int64_t depth;  // words
  int64_t heads;  // multiple of 4
  int64_t keys;   // multiple of kKeyBlock
};

// How the work is cut into tasks; every kernel format uses the same cut.
struct Plan {
  int64_t rows_per_task;
  int64_t row_blocks;
  int64_t keys_per_chunk;  // multiple of kKeyBlock
  int64_t key_chunks;
  int64_t tasks;
  int64_t depth;  // rows of a transposed K block: D (fp32) or ceil(D / 2) (bf16 pairs)
  // The chunked path (see the scheme at the top) and its chunk sizes; 0 on the whole-depth path.
  bool chunked;
  int64_t depth_chunk;  // words, <= depth
  int64_t head_chunk;   // heads, <= H; a multiple of 4 unless it is H
  int64_t span_keys;    // multiple of kKeyBlock, <= keys_per_chunk
  // Per-thread scratch, in 32-bit words, each part a multiple of 16 (64-byte aligned). Whole depth:
  // decoded Q, transposed K block, block scales, tile logits. Chunked: decoded Q chunk, the span's
  // transposed K chunks, accumulators, span logits, span scales.
  int64_t q_words;
  int64_t kt_words;
  int64_t acc_words;
  int64_t logits_words;
  int64_t scratch_words;
};

using scheduler::ceil_div;
int64_t round_up(int64_t value, int64_t multiple) { return ceil_div(value, multiple) * multiple; }

// AITER_FP8_MQA_CPU_CHUNKS=<depth words>,<heads>,<keys> (tests): forces the chunked path.
Chunks pick_chunks() {
  Chunks defaults{false, cpu::kDepthChunk, cpu::kChunkRowHeads, cpu::kSpanKeys};
  const char* env = std::getenv("AITER_FP8_MQA_CPU_CHUNKS");
  if (env == nullptr || *env == '\0') return defaults;
  long long values[3];
  const char* cursor = env;
  for (int i = 0; i < 3; ++i) {
    char* end;
    values[i] = std::strtoll(cursor, &end, 10);
    if (end == cursor || *end != (i < 2 ? ',' : '\0')) values[0] = 0;  // malformed
    cursor = *end ? end + 1 : end;
  }
  if (values[0] < 1 || values[1] < 4 || values[1] % 4 != 0 || values[2] < kKeyBlock ||
      values[2] % kKeyBlock != 0)
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

using cpu::head_group_epilogue;

// Operands as fp32: depth = D, acc += q * k, one key per lane (W lanes, NV vectors per tile).
template <int W, int NV, int HG>
struct Fp32Format {
  static constexpr int kTile = W * NV;
  static constexpr int kHeadGroup = HG;
  static int64_t depth(int64_t D) { return D; }

  // dst[i * stride] for i < depth: one Q head row or K row, decoded.
  static AITER_CPU_INLINE void decode(const uint8_t* src, int64_t D, uint32_t* dst, int64_t stride) {
    const float* table = e4m3_table();
    float* out = reinterpret_cast<float*>(dst);
    for (int64_t d = 0; d < D; ++d) out[d * stride] = table[src[d]];
  }

  // acc[h][v] += q[h][d] * kt[d][v] for d < depth, d ascending: the HGH heads starting at q (row
  // stride q_stride), the tile starting at kt (leading dim kKeyBlock). The one FMA chain both paths
  // run, so a depth chunk continues exactly the whole-depth path's sequence.
  template <int HGH>
  static AITER_CPU_INLINE void accumulate(typename Simd<W>::floats (&acc)[HGH][NV], const uint32_t* q_words,
                                          int64_t q_stride, int64_t depth, const uint32_t* kt_words) {
    typedef typename Simd<W>::floats vf;
    const float* __restrict q = reinterpret_cast<const float*>(q_words);
    const float* __restrict kt = reinterpret_cast<const float*>(kt_words);
    for (int64_t d = 0; d < depth; ++d) {
      const float* krow = kt + d * kKeyBlock;
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const vf qb = q[h * q_stride + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
  }

  // The HGH heads starting at q, the tile starting at kt (leading dim kKeyBlock).
  template <int HGH>
  static AITER_CPU_INLINE void head_group(const uint32_t* q_words, int64_t depth,
                                          const uint32_t* kt_words, const float* scales,
                                          const float* w, float* logits) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    accumulate<HGH>(acc, q_words, depth, depth, kt_words);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }

  // Chunked path. Words [word_begin, word_begin + word_count) of one decoded row: the elements
  // of the same indices (one per word).
  static AITER_CPU_INLINE void decode_words(const uint8_t* row, int64_t D, int64_t word_begin,
                                            int64_t word_count, uint32_t* dst, int64_t stride) {
    (void)D;
    decode(row + word_begin, word_count, dst, stride);
  }

  // head_group's loop over `depth` steps of a depth chunk (q row stride q_stride), continuing the
  // accumulators stored at acc_buf (head h at acc_buf + h * acc_stride; zero when `first`).
  template <int HGH>
  static AITER_CPU_INLINE void head_group_chunk(const uint32_t* q_words, int64_t q_stride,
                                                int64_t depth, const uint32_t* kt_words,
                                                float* acc_buf, int64_t acc_stride, bool first) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    accumulate<HGH>(acc, q_words, q_stride, depth, kt_words);
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        *reinterpret_cast<vf*>(acc_buf + h * acc_stride + v * W) = acc[h][v];
  }

  // head_group's epilogue on the accumulators stored at acc_buf.
  template <int HGH>
  static AITER_CPU_INLINE void head_group_finish(const float* acc_buf, int64_t acc_stride,
                                                 const float* scales, const float* w,
                                                 float* logits) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }
};

#ifdef AITER_CPU_X86
// Operands as bf16 pairs (d, d+1) packed in 32 bits: depth = ceil(D / 2), and one vdpbf16ps adds two
// products per lane, twice the work of an FMA per instruction. e4m3 values are exact in bf16 and
// their products exact in fp32; products and sums stay far above the denormals it flushes.
template <int NV, int HG>
struct Bf16PairFormat {
  static constexpr int W = 16;
  static constexpr int kTile = W * NV;
  static constexpr int kHeadGroup = HG;
  static int64_t depth(int64_t D) { return (D + 1) / 2; }

  static AITER_CPU_INLINE void decode(const uint8_t* src, int64_t D, uint32_t* dst, int64_t stride) {
    const uint16_t* table = e4m3_bf16_table();
    for (int64_t i = 0; 2 * i < D; ++i) {
      const uint32_t high = 2 * i + 1 < D ? table[src[2 * i + 1]] : 0;
      dst[i * stride] = table[src[2 * i]] | (high << 16);
    }
  }

  // Its own target attribute (not inlined into generic code): the instruction needs AVX512-BF16.
  // acc[h][v] += the two products of word d of q[h] and of kt[d][v], d ascending (as Fp32Format's
  // accumulate): the one chain of both paths. Inlined into its callers, which carry the same target.
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void accumulate(
      Simd<16>::floats (&acc)[HGH][NV], const uint32_t* __restrict q, int64_t q_stride, int64_t depth,
      const uint32_t* __restrict kt) {
    typedef Simd<16>::floats vf;
    for (int64_t d = 0; d < depth; ++d) {
      const uint32_t* krow = kt + d * kKeyBlock;
      __m512i k[NV];
      for (int v = 0; v < NV; ++v) k[v] = _mm512_load_si512(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const __m512i qb = _mm512_set1_epi32(static_cast<int32_t>(q[h * q_stride + d]));
        for (int v = 0; v < NV; ++v)
          acc[h][v] = reinterpret_cast<vf>(_mm512_dpbf16_ps(reinterpret_cast<__m512>(acc[h][v]),
                                                            reinterpret_cast<__m512bh>(k[v]),
                                                            reinterpret_cast<__m512bh>(qb)));
      }
    }
  }

  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group(
      const uint32_t* __restrict q, int64_t depth, const uint32_t* __restrict kt,
      const float* scales, const float* w, float* logits) {
    typedef Simd<16>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    accumulate<HGH>(acc, q, depth, depth, kt);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }

  // Chunked path. Words [word_begin, word_begin + word_count) of one decoded row: elements
  // [2 word_begin, min(D, 2 (word_begin + word_count))), so a chunk of whole words never splits a
  // pair, and the last word of an odd D gets its zero half.
  static AITER_CPU_INLINE void decode_words(const uint8_t* row, int64_t D, int64_t word_begin,
                                            int64_t word_count, uint32_t* dst, int64_t stride) {
    decode(row + 2 * word_begin, std::min<int64_t>(D - 2 * word_begin, 2 * word_count), dst,
           stride);
  }

  // head_group's loop over `depth` steps of a depth chunk (q row stride q_stride), continuing the
  // accumulators stored at acc_buf (head h at acc_buf + h * acc_stride; zero when `first`).
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group_chunk(
      const uint32_t* __restrict q, int64_t q_stride, int64_t depth,
      const uint32_t* __restrict kt, float* acc_buf, int64_t acc_stride, bool first) {
    typedef Simd<16>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    accumulate<HGH>(acc, q, q_stride, depth, kt);
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        *reinterpret_cast<vf*>(acc_buf + h * acc_stride + v * W) = acc[h][v];
  }

  // head_group's epilogue on the accumulators stored at acc_buf (the same target as head_group, so
  // the epilogue compiles to the same instructions).
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group_finish(
      const float* acc_buf, int64_t acc_stride, const float* scales, const float* w,
      float* logits) {
    typedef Simd<16>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }
};
#endif

// Dispatches the last, partial head group (1 .. HG heads) to its register-blocked instance.
template <class Format, int HG>
AITER_CPU_INLINE void head_group_tail(int heads, const uint32_t* q, int64_t depth,
                                      const uint32_t* kt, const float* scales, const float* w,
                                      float* logits) {
  if (heads == HG) {
    Format::template head_group<HG>(q, depth, kt, scales, w, logits);
  } else if constexpr (HG > 1) {
    head_group_tail<Format, HG - 1>(heads, q, depth, kt, scales, w, logits);
  }
}

// One tile of keys for one query row, every head: logits = the tile's logits.
template <class Format>
AITER_CPU_INLINE void tile_all_heads(const uint32_t* q_row, int64_t H, int64_t depth,
                                     const uint32_t* kt, const float* scales, const float* w,
                                     float* logits) {
  constexpr int HG = Format::kHeadGroup;
  for (int j = 0; j < Format::kTile; ++j) logits[j] = 0.0f;
  int64_t h = 0;
  for (; h + HG <= H; h += HG)
    Format::template head_group<HG>(q_row + h * depth, depth, kt, scales, w + h, logits);
  if (h < H)
    head_group_tail<Format, HG - 1>(static_cast<int>(H - h), q_row + h * depth, depth, kt, scales,
                                    w + h, logits);
}

// Columns [first, first + count) of output row r: `values` (float32), stored as logits_dtype.
AITER_CPU_INLINE void store_columns(const Fp8MqaLogitsParams& params, int64_t r, int64_t first,
                                    const float* values, int64_t count) {
  if (count <= 0) return;
  if (params.logits_dtype == LogitsDtype::kFloat32) {
    std::memcpy(static_cast<float*>(params.out) + r * params.out_stride + first, values, count * sizeof(float));
  } else {
    uint16_t* row = static_cast<uint16_t*>(params.out) + r * params.out_stride + first;
    for (int64_t i = 0; i < count; ++i) row[i] = cpu::bf16_bits(values[i]);
  }
}

// Columns [begin, end) of output row r: -inf.
void fill_columns_neg_inf(const Fp8MqaLogitsParams& params, int64_t r, int64_t begin, int64_t end) {
  if (begin >= end) return;
  if (params.logits_dtype == LogitsDtype::kFloat32) {
    float* row = static_cast<float*>(params.out) + r * params.out_stride;
    std::fill(row + begin, row + end, -std::numeric_limits<float>::infinity());
  } else {
    uint16_t* row = static_cast<uint16_t*>(params.out) + r * params.out_stride;
    std::fill(row + begin, row + end, cpu::bf16_bits(-std::numeric_limits<float>::infinity()));
  }
}

// Keys [first_key, first_key + count) of row r, whose clamped window starts at window_begin:
// `values`, at their columns (the compressed layout counts from window_begin).
AITER_CPU_INLINE void store_keys(const Fp8MqaLogitsParams& params, int64_t r, int64_t window_begin,
                                 int64_t first_key, const float* values, int64_t count) {
  store_columns(params, r, params.compressed ? first_key - window_begin : first_key, values, count);
}

// The clamped windows [window_begin, window_end) of rows [row_begin, row_end)
// (scheduler::row_window; empty or inverted: window_begin = window_end = 0), -inf outside them
// within keys [chunk_begin, chunk_end) when clean_logits, and the key range
// [union_begin, union_end) that any of the rows needs there: the union of the windows' parts inside
// the chunk (empty: union_begin = union_end = 0).
AITER_CPU_INLINE void task_windows(const Fp8MqaLogitsParams& params, int64_t row_begin,
                                   int64_t row_end, int64_t chunk_begin, int64_t chunk_end,
                                   int64_t* window_begin, int64_t* window_end, int64_t* union_begin,
                                   int64_t* union_end) {
  const scheduler::KeyRange chunk{chunk_begin, chunk_end};
  auto task_union = scheduler::BlockUnion<>::empty_within(params.N);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t i = r - row_begin;
    const scheduler::KeyRange window = scheduler::row_window(params.ks[r], params.ke[r], params.N);
    window_begin[i] = window.empty() ? 0 : window.begin;
    window_end[i] = window.empty() ? 0 : window.end;
    if (params.clean_logits && !params.compressed) {
      fill_columns_neg_inf(params, r, chunk_begin, std::min(chunk_end, window_begin[i]));
      // An empty row (window_begin = window_end = 0) is all -inf.
      fill_columns_neg_inf(params, r, std::max(chunk_begin, window_end[i]), chunk_end);
    } else if (params.clean_logits && chunk_begin == 0) {
      // Compressed: keys outside the window have no column; the row's tail does, once per row.
      fill_columns_neg_inf(params, r, window_end[i] - window_begin[i], params.out_columns);
    }
    task_union.add(scheduler::intersect(window, chunk));
  }
  *union_begin = task_union.range().begin;
  *union_end = task_union.range().end;
}

template <class Format>
AITER_CPU_INLINE void run_task(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                               uint32_t* scratch) {
  constexpr int kTile = Format::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  const int64_t N = params.N, H = params.H, D = params.D, depth = plan.depth;
  const int64_t row_begin = (task / plan.key_chunks) * plan.rows_per_task;
  const int64_t row_end = std::min(params.M, row_begin + plan.rows_per_task);
  const int64_t chunk_begin = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t chunk_end = std::min(N, chunk_begin + plan.keys_per_chunk);

  uint32_t* q_decoded = scratch;                                        // [rows][H][depth]
  uint32_t* kt_block = q_decoded + plan.q_words;                        // [depth][kKeyBlock]
  float* scales = reinterpret_cast<float*>(kt_block + plan.kt_words);  // [kKeyBlock]
  float* logits = scales + kKeyBlock;                                   // tile: [kTile]

  int64_t window_begin[kMaxRowsPerTask], window_end[kMaxRowsPerTask], union_begin, union_end;
  task_windows(params, row_begin, row_end, chunk_begin, chunk_end, window_begin, window_end,
               &union_begin, &union_end);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t i = r - row_begin;
    if (std::max(window_begin[i], chunk_begin) < std::min(window_end[i], chunk_end)) {
      for (int64_t h = 0; h < H; ++h)
        Format::decode(params.q + (r * H + h) * D, D, q_decoded + (i * H + h) * depth, 1);
    }
  }

  for (int64_t block_begin = union_begin; block_begin < union_end; block_begin += kKeyBlock) {
    const int64_t block_keys = std::min<int64_t>(kKeyBlock, union_end - block_begin);
    bool needed = false;
    for (int64_t i = 0; i < row_end - row_begin; ++i)
      needed |= std::max(window_begin[i], block_begin) <
                std::min(window_end[i], block_begin + block_keys);
    if (!needed) continue;  // a gap between the windows (e.g. between requests)

    for (int64_t j = 0; j < block_keys; ++j) {
      Format::decode(params.kv + (block_begin + j) * D, D, kt_block + j, kKeyBlock);
      scales[j] = params.kv_scales[block_begin + j];
    }
    if (block_keys < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
      for (int64_t d = 0; d < depth; ++d)
        std::memset(kt_block + d * kKeyBlock + block_keys, 0,
                    (kKeyBlock - block_keys) * sizeof(uint32_t));
      std::memset(scales + block_keys, 0, (kKeyBlock - block_keys) * sizeof(float));
    }

    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t i = r - row_begin;
      // The row's keys inside this block.
      const int64_t overlap_begin = std::max(window_begin[i], block_begin);
      const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
      if (overlap_begin >= overlap_end) continue;
      const uint32_t* q_row = q_decoded + i * H * depth;
      const float* w_row = params.weights + r * params.weights_stride;
      for (int64_t t = (overlap_begin - block_begin) / kTile * kTile; block_begin + t < overlap_end;
           t += kTile) {
        tile_all_heads<Format>(q_row, H, depth, kt_block + t, scales + t, w_row, logits);
        const int64_t from = std::max(overlap_begin, block_begin + t);
        const int64_t to = std::min(overlap_end, block_begin + t + kTile);
        store_keys(params, r, window_begin[i], from, logits + (from - block_begin - t), to - from);
      }
    }
  }
}

// Dispatches the last, partial head group (1 .. HG heads) of a depth chunk / of the epilogue.
template <class Format, int HG>
AITER_CPU_INLINE void head_group_chunk_tail(int heads, const uint32_t* q, int64_t q_stride,
                                            int64_t depth, const uint32_t* kt, float* acc,
                                            int64_t acc_stride, bool first) {
  if (heads == HG) {
    Format::template head_group_chunk<HG>(q, q_stride, depth, kt, acc, acc_stride, first);
  } else if constexpr (HG > 1) {
    head_group_chunk_tail<Format, HG - 1>(heads, q, q_stride, depth, kt, acc, acc_stride, first);
  }
}
template <class Format, int HG>
AITER_CPU_INLINE void head_group_finish_tail(int heads, const float* acc, int64_t acc_stride,
                                             const float* scales, const float* w, float* logits) {
  if (heads == HG) {
    Format::template head_group_finish<HG>(acc, acc_stride, scales, w, logits);
  } else if constexpr (HG > 1) {
    head_group_finish_tail<Format, HG - 1>(heads, acc, acc_stride, scales, w, logits);
  }
}

// One depth chunk of one tile for one query row, heads [0, heads) of a head chunk: q holds
// [heads][depth] words, acc [heads][acc_stride] floats (the tile's lanes at offset 0).
template <class Format>
AITER_CPU_INLINE void tile_chunk(const uint32_t* q, int64_t heads, int64_t depth,
                                 const uint32_t* kt, float* acc, int64_t acc_stride, bool first) {
  constexpr int HG = Format::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    Format::template head_group_chunk<HG>(q + h * depth, depth, depth, kt, acc + h * acc_stride,
                                          acc_stride, first);
  if (h < heads)
    head_group_chunk_tail<Format, HG - 1>(static_cast<int>(heads - h), q + h * depth, depth, depth,
                                          kt, acc + h * acc_stride, acc_stride, first);
}

// The epilogue of one tile for one query row, heads [0, heads) of a head chunk: logits += their
// terms.
template <class Format>
AITER_CPU_INLINE void tile_finish(const float* acc, int64_t heads, int64_t acc_stride,
                                  const float* scales, const float* w, float* logits) {
  constexpr int HG = Format::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    Format::template head_group_finish<HG>(acc + h * acc_stride, acc_stride, scales, w + h, logits);
  if (h < heads)
    head_group_finish_tail<Format, HG - 1>(static_cast<int>(heads - h), acc + h * acc_stride,
                                           acc_stride, scales, w + h, logits);
}

// The chunked path of one task (scheme at the top): spans of keys, head chunks, depth chunks.
template <class Format>
AITER_CPU_INLINE void run_task_chunked(const Fp8MqaLogitsParams& params, const Plan& plan,
                                       int64_t task, uint32_t* scratch) {
  constexpr int kTile = Format::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  static_assert(cpu::kChunkRowHeads % Format::kHeadGroup == 0,
                "head chunks hold whole head groups");
  static_assert(cpu::kSpanKeys % kKeyBlock == 0, "a span holds whole K blocks");
  const int64_t H = params.H, D = params.D, depth = plan.depth;
  const int64_t rows_per_task = plan.rows_per_task, depth_chunk = plan.depth_chunk,
                head_chunk = plan.head_chunk;
  const int64_t span_keys = plan.span_keys;
  const int64_t row_begin = (task / plan.key_chunks) * rows_per_task;
  const int64_t row_end = std::min(params.M, row_begin + rows_per_task);
  const int64_t chunk_begin = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t chunk_end = std::min(params.N, chunk_begin + plan.keys_per_chunk);

  // [rows_per_task][head_chunk][chunk_depth]
  uint32_t* q_decoded = scratch;
  // [span_keys / kKeyBlock][chunk_depth][kKeyBlock]
  uint32_t* kt_span = q_decoded + plan.q_words;
  // [rows_per_task][head_chunk][span_keys]
  float* acc = reinterpret_cast<float*>(kt_span + plan.kt_words);
  // [rows_per_task][span_keys]
  float* logits = acc + plan.acc_words;
  // [span_keys]
  float* scales = logits + rows_per_task * span_keys;

  int64_t window_begin[kMaxRowsPerTask], window_end[kMaxRowsPerTask], union_begin, union_end;
  task_windows(params, row_begin, row_end, chunk_begin, chunk_end, window_begin, window_end,
               &union_begin, &union_end);

  for (int64_t span_begin = union_begin; span_begin < union_end; span_begin += span_keys) {
    const int64_t span_end = std::min(union_end, span_begin + span_keys);
    bool active[kMaxRowsPerTask];
    bool any = false;
    for (int64_t i = 0; i < row_end - row_begin; ++i) {
      active[i] = std::max(window_begin[i], span_begin) < std::min(window_end[i], span_end);
      any |= active[i];
    }
    if (!any) continue;  // a gap between the windows (e.g. between requests)

    const int64_t lanes = round_up(span_end - span_begin, kKeyBlock);
    for (int64_t j = 0; j < span_end - span_begin; ++j)
      scales[j] = params.kv_scales[span_begin + j];
    // Lanes past the span's last key: finite, and never stored.
    std::memset(scales + (span_end - span_begin), 0,
                (lanes - (span_end - span_begin)) * sizeof(float));
    for (int64_t i = 0; i < row_end - row_begin; ++i)
      if (active[i]) std::memset(logits + i * span_keys, 0, lanes * sizeof(float));

    for (int64_t h0 = 0; h0 < H; h0 += head_chunk) {
      const int64_t chunk_heads = std::min(head_chunk, H - h0);
      for (int64_t d0 = 0; d0 < depth; d0 += depth_chunk) {
        const int64_t chunk_depth = std::min(depth_chunk, depth - d0);
        const bool first = d0 == 0;
        for (int64_t i = 0; i < row_end - row_begin; ++i) {
          if (!active[i]) continue;
          for (int64_t h = 0; h < chunk_heads; ++h)
            Format::decode_words(params.q + ((row_begin + i) * H + h0 + h) * D, D, d0, chunk_depth,
                                 q_decoded + (i * head_chunk + h) * chunk_depth, 1);
        }
        // The K chunk of every needed block of the span; with a single depth chunk it serves every
        // head chunk, so it is decoded once per span.
        const bool decode_kt = h0 == 0 || depth > depth_chunk;
        for (int64_t block_begin = span_begin; block_begin < span_end; block_begin += kKeyBlock) {
          const int64_t block_keys = std::min<int64_t>(kKeyBlock, span_end - block_begin);
          bool needed = false;
          for (int64_t i = 0; i < row_end - row_begin; ++i)
            needed |= std::max(window_begin[i], block_begin) <
                      std::min(window_end[i], block_begin + block_keys);
          if (!needed) continue;

          // Block (block_begin - span_begin) / kKeyBlock of the span: [chunk_depth][kKeyBlock].
          uint32_t* kt_block = kt_span + (block_begin - span_begin) * chunk_depth;
          if (decode_kt) {
            for (int64_t j = 0; j < block_keys; ++j)
              Format::decode_words(params.kv + (block_begin + j) * D, D, d0, chunk_depth,
                                   kt_block + j, kKeyBlock);
            if (block_keys < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
              for (int64_t d = 0; d < chunk_depth; ++d)
                std::memset(kt_block + d * kKeyBlock + block_keys, 0,
                            (kKeyBlock - block_keys) * sizeof(uint32_t));
            }
          }
          for (int64_t i = 0; i < row_end - row_begin; ++i) {
            // The row's keys inside this block.
            const int64_t overlap_begin = std::max(window_begin[i], block_begin);
            const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
            if (overlap_begin >= overlap_end) continue;
            for (int64_t t = (overlap_begin - block_begin) / kTile * kTile;
                 block_begin + t < overlap_end; t += kTile)
              tile_chunk<Format>(q_decoded + i * head_chunk * chunk_depth, chunk_heads, chunk_depth,
                                 kt_block + t,
                                 acc + i * head_chunk * span_keys + (block_begin - span_begin) + t,
                                 span_keys, first);
          }
        }
      }
      // The head chunk's epilogue, h ascending, into the span's logits.
      for (int64_t i = 0; i < row_end - row_begin; ++i) {
        if (!active[i]) continue;
        const float* w_row = params.weights + (row_begin + i) * params.weights_stride + h0;
        for (int64_t block_begin = span_begin; block_begin < span_end; block_begin += kKeyBlock) {
          const int64_t block_keys = std::min<int64_t>(kKeyBlock, span_end - block_begin);
          const int64_t overlap_begin = std::max(window_begin[i], block_begin);
          const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
          if (overlap_begin >= overlap_end) continue;
          for (int64_t t = (overlap_begin - block_begin) / kTile * kTile;
               block_begin + t < overlap_end; t += kTile) {
            const int64_t span_offset = (block_begin - span_begin) + t;
            tile_finish<Format>(acc + i * head_chunk * span_keys + span_offset, chunk_heads,
                                span_keys, scales + span_offset, w_row,
                                logits + i * span_keys + span_offset);
          }
        }
      }
    }
    for (int64_t i = 0; i < row_end - row_begin; ++i) {
      if (!active[i]) continue;
      const int64_t overlap_begin = std::max(window_begin[i], span_begin);
      const int64_t overlap_end = std::min(window_end[i], span_end);
      store_keys(params, row_begin + i, window_begin[i], overlap_begin,
                 logits + i * span_keys + (overlap_begin - span_begin), overlap_end - overlap_begin);
    }
  }
}

using TaskFn = void (*)(const Fp8MqaLogitsParams&, const Plan&, int64_t, uint32_t*);

// SIMD variants. Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512, avx512bf16: 64 keys per tile), 11 of the 16 ymm
// (avx2: 16 keys), and the same shape in 16-byte vectors for SSE2 / NEON (generic). Each variant has
// a whole-depth and a chunked entry, compiled for the same target (the same FMA contraction).
void task_generic(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                  uint32_t* scratch) {
  run_task<Fp32Format<4, 2, 4>>(params, plan, task, scratch);
}
void task_generic_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                          uint32_t* scratch) {
  run_task_chunked<Fp32Format<4, 2, 4>>(params, plan, task, scratch);
}

#ifdef AITER_CPU_X86
__attribute__((target("avx2,fma"))) void task_avx2(const Fp8MqaLogitsParams& params,
                                                   const Plan& plan, int64_t task,
                                                   uint32_t* scratch) {
  run_task<Fp32Format<8, 2, 4>>(params, plan, task, scratch);
}
__attribute__((target("avx2,fma"))) void task_avx2_chunked(const Fp8MqaLogitsParams& params,
                                                           const Plan& plan, int64_t task,
                                                           uint32_t* scratch) {
  run_task_chunked<Fp32Format<8, 2, 4>>(params, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512(const Fp8MqaLogitsParams& params,
                                                             const Plan& plan, int64_t task,
                                                             uint32_t* scratch) {
  run_task<Fp32Format<16, 4, 4>>(params, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512_chunked(
    const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task_chunked<Fp32Format<16, 4, 4>>(params, plan, task, scratch);
}
__attribute__((target("avx512f,avx512bf16,avx2,fma"))) void task_avx512bf16(
    const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Bf16PairFormat<4, 4>>(params, plan, task, scratch);
}
__attribute__((target("avx512f,avx512bf16,avx2,fma"))) void task_avx512bf16_chunked(
    const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task_chunked<Bf16PairFormat<4, 4>>(params, plan, task, scratch);
}
#endif

struct Variant {
  const char* name;
  TaskFn whole_depth_fn;
  TaskFn chunked_fn;
  bool bf16_pairs;
};

// The best variant this CPU runs, capped by AITER_FP8_MQA_CPU_SIMD (cpu/simd_level.h).
Variant pick_variant() {
  switch (cpu::simd_level()) {
#ifdef AITER_CPU_X86
    case cpu::SimdLevel::kAvx512Bf16:
      return {"avx512bf16", task_avx512bf16, task_avx512bf16_chunked, true};
    case cpu::SimdLevel::kAvx512:
      return {"avx512", task_avx512, task_avx512_chunked, false};
    case cpu::SimdLevel::kAvx2:
      return {"avx2", task_avx2, task_avx2_chunked, false};
#endif
    default:
      return {"generic", task_generic, task_generic_chunked, false};
  }
}

struct AlignedScratch {
  uint32_t* ptr;
  explicit AlignedScratch(int64_t words) {
    const size_t bytes = static_cast<size_t>(round_up(words * 4, 64));
    ptr = static_cast<uint32_t*>(std::aligned_alloc(64, bytes));
    if (ptr == nullptr)
      throw std::runtime_error(
          "fp8_mqa_logits (CPU): out of memory allocating a thread's " + std::to_string(bytes) +
          "-byte scratch (the CPU path's per-thread limit is kQScratchBytes + kKtScratchBytes = " +
          std::to_string(cpu::kQScratchBytes + cpu::kKtScratchBytes) +
          " bytes unless AITER_FP8_MQA_CPU_CHUNKS forces larger chunks)");
  }
  ~AlignedScratch() { std::free(ptr); }
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
};

}  // namespace

const char* fp8_mqa_logits_cpu_variant() { return pick_variant().name; }

void fp8_mqa_logits_cpu(const Fp8MqaLogitsParams& params) {
  if (params.M <= 0 || params.N <= 0) return;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const Variant variant = pick_variant();
  const Plan plan =
      make_plan(params, threads, variant.bf16_pairs ? (params.D + 1) / 2 : params.D, pick_chunks());
  const TaskFn run = plan.chunked ? variant.chunked_fn : variant.whole_depth_fn;
  // Tasks are handed out dynamically (windows make them very unequal); which thread runs a task
  // does not change any value, see the determinism note at the top.
  std::atomic<int64_t> next_task{0};
  const int64_t workers = std::min(threads, plan.tasks);
  try {
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
      AlignedScratch scratch(plan.scratch_words);
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
