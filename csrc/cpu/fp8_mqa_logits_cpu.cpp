// fp8_mqa_logits on the host: any H and D, the exact contract semantics, fp32 accumulation.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * dot(Q[m,h,:], K[n,:])) * w[m,h]   for s_m <= n < e_m
//                  -inf elsewhere when clean_logits, else untouched
//   s_m = clamp(ks[m], 0, N), e_m = clamp(ke[m], 0, N); s_m >= e_m is an empty row.
//
// Layouts: q [M][H][D] and kv [N][D] e4m3fn bytes (contiguous); kv_scales [N] f32; weights [M][H] f32
// with row stride weights_stride; ks, ke [M] i32; out [M][N] f32 with row stride out_stride.
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
//                span's logits lg[rows][span], which carry the head sum from one head chunk to the
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

#include "common/e4m3.h"
#include "common/work_scheduler.h"

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

#if defined(__GNUC__) || defined(__clang__)
#define AITER_CPU_INLINE inline __attribute__((always_inline))
#else
#error "the CPU path uses GCC/Clang vector extensions"
#endif

namespace aiter {
namespace {

using cpu::kKeyBlock;
using cpu::kMaxRowsPerTask;

// The same values as bf16 bit patterns: the top half of the fp32 bits, exact for 3-bit mantissas.
struct E4m3Bf16Table {
  uint16_t value[256];
  E4m3Bf16Table() {
    const float* f = e4m3_table();
    for (int b = 0; b < 256; ++b) {
      uint32_t bits;
      std::memcpy(&bits, &f[b], sizeof(bits));
      value[b] = static_cast<uint16_t>(bits >> 16);
    }
  }
};

const uint16_t* e4m3_bf16_table() {
  static const E4m3Bf16Table table;
  return table.value;
}

template <int W>
struct Simd;
template <>
struct Simd<16> {
  typedef float f __attribute__((vector_size(64)));
  typedef int32_t i __attribute__((vector_size(64)));
};
template <>
struct Simd<8> {
  typedef float f __attribute__((vector_size(32)));
  typedef int32_t i __attribute__((vector_size(32)));
};
template <>
struct Simd<4> {
  typedef float f __attribute__((vector_size(16)));
  typedef int32_t i __attribute__((vector_size(16)));
};

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
  int64_t lg_words;
  int64_t scratch_words;
};

using scheduler::ceil_div;
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// AITER_FP8_MQA_CPU_CHUNKS=<depth words>,<heads>,<keys> (tests): forces the chunked path.
Chunks pick_chunks() {
  Chunks c{false, cpu::kDepthChunk, cpu::kChunkRowHeads, cpu::kSpanKeys};
  const char* env = std::getenv("AITER_FP8_MQA_CPU_CHUNKS");
  if (env == nullptr || *env == '\0') return c;
  long long v[3];
  const char* at = env;
  for (int i = 0; i < 3; ++i) {
    char* end;
    v[i] = std::strtoll(at, &end, 10);
    if (end == at || *end != (i < 2 ? ',' : '\0')) v[0] = 0;  // malformed
    at = *end ? end + 1 : end;
  }
  if (v[0] < 1 || v[1] < 4 || v[1] % 4 != 0 || v[2] < kKeyBlock || v[2] % kKeyBlock != 0)
    throw std::runtime_error(std::string("fp8_mqa_logits (CPU): AITER_FP8_MQA_CPU_CHUNKS='") + env +
                             "' is not <depth words >= 1>,<heads: a multiple of 4>,<keys: a "
                             "multiple of 64>");
  return {true, v[0], v[1], v[2]};
}

Plan make_plan(const Fp8MqaLogitsParams& p, int64_t threads, int64_t depth, const Chunks& chunks) {
  Plan plan;
  plan.depth = depth;
  const int64_t row_bytes = static_cast<int64_t>(p.H) * depth * 4;
  plan.chunked = chunks.forced || row_bytes > cpu::kQScratchBytes ||
                 depth * kKeyBlock * 4 > cpu::kKtScratchBytes;
  if (plan.chunked) {
    // Rows x heads of a (row block, head chunk) <= kChunkRowHeads: as many heads as fit, then rows.
    plan.depth_chunk = std::min<int64_t>(depth, chunks.depth);
    plan.head_chunk = std::min<int64_t>(p.H, chunks.heads);
    plan.rows_per_task = std::max<int64_t>(
        1, std::min<int64_t>(kMaxRowsPerTask, cpu::kChunkRowHeads / plan.head_chunk));
  } else {
    plan.depth_chunk = plan.head_chunk = 0;
    plan.rows_per_task =
        std::max<int64_t>(1, std::min<int64_t>(kMaxRowsPerTask, cpu::kQScratchBytes / row_bytes));
  }
  plan.row_blocks = ceil_div(p.M, plan.rows_per_task);
  // Split the keys only when the row blocks alone are too few to keep every thread busy.
  const int64_t wanted = std::max<int64_t>(1, threads) * cpu::kTasksPerThread;
  const int64_t max_chunks = ceil_div(p.N, kKeyBlock);
  const int64_t chunks_n =
      std::min<int64_t>(max_chunks, std::max<int64_t>(1, ceil_div(wanted, plan.row_blocks)));
  plan.keys_per_chunk = round_up(ceil_div(p.N, chunks_n), kKeyBlock);
  plan.key_chunks = ceil_div(p.N, plan.keys_per_chunk);
  plan.tasks = plan.row_blocks * plan.key_chunks;
  if (!plan.chunked) {
    plan.span_keys = 0;
    plan.q_words = round_up(plan.rows_per_task * p.H * depth, 16);
    plan.kt_words = depth * kKeyBlock;
    plan.acc_words = 0;
    plan.lg_words = 2 * kKeyBlock;  // block scales, tile logits
  } else {
    plan.span_keys = std::min<int64_t>(plan.keys_per_chunk, chunks.keys);
    plan.q_words = round_up(plan.rows_per_task * plan.head_chunk * plan.depth_chunk, 16);
    plan.kt_words = plan.depth_chunk * plan.span_keys;
    plan.acc_words = plan.rows_per_task * plan.head_chunk * plan.span_keys;
    plan.lg_words = (plan.rows_per_task + 1) * plan.span_keys;  // span logits, span scales
  }
  plan.scratch_words = plan.q_words + plan.kt_words + plan.acc_words + plan.lg_words;
  return plan;
}

// lg[k] += relu(sc[k] * acc[h][k]) * w[h] over the group's heads, h ascending.
template <int W, int NV, int HG>
AITER_CPU_INLINE void head_group_epilogue(const typename Simd<W>::f (&acc)[HG][NV],
                                          const float* __restrict sc, const float* __restrict w,
                                          float* __restrict lg) {
  typedef typename Simd<W>::f vf;
  typedef typename Simd<W>::i vi;
  for (int v = 0; v < NV; ++v) {
    const vf s = *reinterpret_cast<const vf*>(sc + v * W);
    vf l = *reinterpret_cast<const vf*>(lg + v * W);
    for (int h = 0; h < HG; ++h) {
      vf a = acc[h][v] * s;
      a = reinterpret_cast<vf>(reinterpret_cast<vi>(a) & ((a > vf{}) | (a != a)));  // relu, NaN kept
      l += a * (w[h] - vf{});
    }
    *reinterpret_cast<vf*>(lg + v * W) = l;
  }
}

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

  // The HGH heads starting at q, the tile starting at kt (leading dim kKeyBlock).
  template <int HGH>
  static AITER_CPU_INLINE void head_group(const uint32_t* q_words, int64_t depth,
                                          const uint32_t* kt_words, const float* sc,
                                          const float* w, float* lg) {
    typedef typename Simd<W>::f vf;
    const float* __restrict q = reinterpret_cast<const float*>(q_words);
    const float* __restrict kt = reinterpret_cast<const float*>(kt_words);
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    for (int64_t d = 0; d < depth; ++d) {
      const float* krow = kt + d * kKeyBlock;
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const vf qb = q[h * depth + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    head_group_epilogue<W, NV, HGH>(acc, sc, w, lg);
  }

  // Chunked path. Words [w0, w0 + wn) of one decoded row: elements [w0, w0 + wn).
  static AITER_CPU_INLINE void decode_words(const uint8_t* row, int64_t D, int64_t w0, int64_t wn,
                                            uint32_t* dst, int64_t stride) {
    (void)D;
    decode(row + w0, wn, dst, stride);
  }

  // head_group's loop over `depth` steps of a depth chunk (q row stride q_stride), continuing the
  // accumulators stored at acc_buf (head h at acc_buf + h * acc_stride; zero when `first`).
  template <int HGH>
  static AITER_CPU_INLINE void head_group_chunk(const uint32_t* q_words, int64_t q_stride,
                                                int64_t depth, const uint32_t* kt_words,
                                                float* acc_buf, int64_t acc_stride, bool first) {
    typedef typename Simd<W>::f vf;
    const float* __restrict q = reinterpret_cast<const float*>(q_words);
    const float* __restrict kt = reinterpret_cast<const float*>(kt_words);
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    for (int64_t d = 0; d < depth; ++d) {
      const float* krow = kt + d * kKeyBlock;
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const vf qb = q[h * q_stride + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        *reinterpret_cast<vf*>(acc_buf + h * acc_stride + v * W) = acc[h][v];
  }

  // head_group's epilogue on the accumulators stored at acc_buf.
  template <int HGH>
  static AITER_CPU_INLINE void head_group_finish(const float* acc_buf, int64_t acc_stride,
                                                 const float* sc, const float* w, float* lg) {
    typedef typename Simd<W>::f vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    head_group_epilogue<W, NV, HGH>(acc, sc, w, lg);
  }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AITER_CPU_X86 1
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
      const uint32_t hi = 2 * i + 1 < D ? table[src[2 * i + 1]] : 0;
      dst[i * stride] = table[src[2 * i]] | (hi << 16);
    }
  }

  // Its own target attribute (not inlined into generic code): the instruction needs AVX512-BF16.
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group(
      const uint32_t* __restrict q, int64_t depth, const uint32_t* __restrict kt, const float* sc,
      const float* w, float* lg) {
    typedef Simd<16>::f vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    for (int64_t d = 0; d < depth; ++d) {
      const uint32_t* krow = kt + d * kKeyBlock;
      __m512i k[NV];
      for (int v = 0; v < NV; ++v) k[v] = _mm512_load_si512(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const __m512i qb = _mm512_set1_epi32(static_cast<int32_t>(q[h * depth + d]));
        for (int v = 0; v < NV; ++v)
          acc[h][v] = reinterpret_cast<vf>(_mm512_dpbf16_ps(reinterpret_cast<__m512>(acc[h][v]),
                                                            reinterpret_cast<__m512bh>(k[v]),
                                                            reinterpret_cast<__m512bh>(qb)));
      }
    }
    head_group_epilogue<W, NV, HGH>(acc, sc, w, lg);
  }

  // Chunked path. Words [w0, w0 + wn) of one decoded row: elements [2 w0, min(D, 2 (w0 + wn))), so
  // a chunk of whole words never splits a pair, and the last word of an odd D gets its zero half.
  static AITER_CPU_INLINE void decode_words(const uint8_t* row, int64_t D, int64_t w0, int64_t wn,
                                            uint32_t* dst, int64_t stride) {
    decode(row + 2 * w0, std::min<int64_t>(D - 2 * w0, 2 * wn), dst, stride);
  }

  // head_group's loop over `depth` steps of a depth chunk (q row stride q_stride), continuing the
  // accumulators stored at acc_buf (head h at acc_buf + h * acc_stride; zero when `first`).
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group_chunk(
      const uint32_t* __restrict q, int64_t q_stride, int64_t depth,
      const uint32_t* __restrict kt, float* acc_buf, int64_t acc_stride, bool first) {
    typedef Simd<16>::f vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
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
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        *reinterpret_cast<vf*>(acc_buf + h * acc_stride + v * W) = acc[h][v];
  }

  // head_group's epilogue on the accumulators stored at acc_buf (the same target as head_group, so
  // the epilogue compiles to the same instructions).
  template <int HGH>
  __attribute__((target("avx512f,avx512bf16"))) static void head_group_finish(
      const float* acc_buf, int64_t acc_stride, const float* sc, const float* w, float* lg) {
    typedef Simd<16>::f vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    head_group_epilogue<W, NV, HGH>(acc, sc, w, lg);
  }
};
#endif

// Dispatches the last, partial head group (1 .. HG heads) to its register-blocked instance.
template <class F, int HG>
AITER_CPU_INLINE void head_group_tail(int heads, const uint32_t* q, int64_t depth,
                                      const uint32_t* kt, const float* sc, const float* w,
                                      float* lg) {
  if (heads == HG) {
    F::template head_group<HG>(q, depth, kt, sc, w, lg);
  } else if constexpr (HG > 1) {
    head_group_tail<F, HG - 1>(heads, q, depth, kt, sc, w, lg);
  }
}

// One tile of keys for one query row, every head: lg = the tile's logits.
template <class F>
AITER_CPU_INLINE void tile_all_heads(const uint32_t* q_row, int64_t H, int64_t depth,
                                     const uint32_t* kt, const float* sc, const float* w,
                                     float* lg) {
  constexpr int HG = F::kHeadGroup;
  for (int j = 0; j < F::kTile; ++j) lg[j] = 0.0f;
  int64_t h = 0;
  for (; h + HG <= H; h += HG) F::template head_group<HG>(q_row + h * depth, depth, kt, sc, w + h, lg);
  if (h < H)
    head_group_tail<F, HG - 1>(static_cast<int>(H - h), q_row + h * depth, depth, kt, sc, w + h,
                               lg);
}

void fill_neg_inf(float* row, int64_t begin, int64_t end) {
  if (begin < end) std::fill(row + begin, row + end, -std::numeric_limits<float>::infinity());
}

// The clamped windows [s, e) of rows [r0, r1) (scheduler::row_window; empty or inverted: s = e = 0),
// -inf outside them within keys [c0, c1) when clean_logits, and the key range [lo, hi) that any of
// the rows needs there: the union of the windows' parts inside [c0, c1) (empty: lo = hi = 0).
AITER_CPU_INLINE void task_windows(const Fp8MqaLogitsParams& p, int64_t r0, int64_t r1, int64_t c0,
                                   int64_t c1, int64_t* s, int64_t* e, int64_t* lo, int64_t* hi) {
  const scheduler::KeyRange chunk{c0, c1};
  auto task_union = scheduler::BlockUnion<>::empty_within(p.N);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r - r0;
    const scheduler::KeyRange window = scheduler::row_window(p.ks[r], p.ke[r], p.N);
    s[i] = window.empty() ? 0 : window.begin;
    e[i] = window.empty() ? 0 : window.end;
    if (p.clean_logits) {
      float* out_row = p.out + r * p.out_stride;
      fill_neg_inf(out_row, c0, std::min(c1, s[i]));
      fill_neg_inf(out_row, std::max(c0, e[i]), c1);  // an empty row (s = e = 0) is all -inf
    }
    task_union.add(scheduler::intersect(window, chunk));
  }
  *lo = task_union.range().begin;
  *hi = task_union.range().end;
}

template <class F>
AITER_CPU_INLINE void run_task(const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task,
                               uint32_t* scratch) {
  constexpr int kTile = F::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  const int64_t N = p.N, H = p.H, D = p.D, depth = plan.depth;
  const int64_t r0 = (task / plan.key_chunks) * plan.rows_per_task;
  const int64_t r1 = std::min(p.M, r0 + plan.rows_per_task);
  const int64_t c0 = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t c1 = std::min(N, c0 + plan.keys_per_chunk);

  uint32_t* q_dec = scratch;
  uint32_t* kt = q_dec + plan.q_words;
  float* sc = reinterpret_cast<float*>(kt + plan.kt_words);
  float* lg = sc + kKeyBlock;

  int64_t s[kMaxRowsPerTask], e[kMaxRowsPerTask], lo, hi;
  task_windows(p, r0, r1, c0, c1, s, e, &lo, &hi);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r - r0;
    if (std::max(s[i], c0) < std::min(e[i], c1)) {
      for (int64_t h = 0; h < H; ++h)
        F::decode(p.q + (r * H + h) * D, D, q_dec + (i * H + h) * depth, 1);
    }
  }

  for (int64_t b = lo; b < hi; b += kKeyBlock) {
    const int64_t nb = std::min<int64_t>(kKeyBlock, hi - b);
    bool needed = false;
    for (int64_t i = 0; i < r1 - r0; ++i) needed |= std::max(s[i], b) < std::min(e[i], b + nb);
    if (!needed) continue;  // a gap between the windows (e.g. between requests)

    for (int64_t j = 0; j < nb; ++j) {
      F::decode(p.kv + (b + j) * D, D, kt + j, kKeyBlock);
      sc[j] = p.kv_scales[b + j];
    }
    if (nb < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
      for (int64_t d = 0; d < depth; ++d)
        std::memset(kt + d * kKeyBlock + nb, 0, (kKeyBlock - nb) * sizeof(uint32_t));
      std::memset(sc + nb, 0, (kKeyBlock - nb) * sizeof(float));
    }

    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r - r0;
      const int64_t a = std::max(s[i], b), z = std::min(e[i], b + nb);
      if (a >= z) continue;
      const uint32_t* q_row = q_dec + i * H * depth;
      const float* w_row = p.weights + r * p.weights_stride;
      float* out_row = p.out + r * p.out_stride;
      for (int64_t t = (a - b) / kTile * kTile; b + t < z; t += kTile) {
        tile_all_heads<F>(q_row, H, depth, kt + t, sc + t, w_row, lg);
        const int64_t from = std::max(a, b + t), to = std::min(z, b + t + kTile);
        std::memcpy(out_row + from, lg + (from - b - t), (to - from) * sizeof(float));
      }
    }
  }
}

// Dispatches the last, partial head group (1 .. HG heads) of a depth chunk / of the epilogue.
template <class F, int HG>
AITER_CPU_INLINE void head_group_chunk_tail(int heads, const uint32_t* q, int64_t q_stride,
                                            int64_t depth, const uint32_t* kt, float* acc,
                                            int64_t acc_stride, bool first) {
  if (heads == HG) {
    F::template head_group_chunk<HG>(q, q_stride, depth, kt, acc, acc_stride, first);
  } else if constexpr (HG > 1) {
    head_group_chunk_tail<F, HG - 1>(heads, q, q_stride, depth, kt, acc, acc_stride, first);
  }
}
template <class F, int HG>
AITER_CPU_INLINE void head_group_finish_tail(int heads, const float* acc, int64_t acc_stride,
                                             const float* sc, const float* w, float* lg) {
  if (heads == HG) {
    F::template head_group_finish<HG>(acc, acc_stride, sc, w, lg);
  } else if constexpr (HG > 1) {
    head_group_finish_tail<F, HG - 1>(heads, acc, acc_stride, sc, w, lg);
  }
}

// One depth chunk of one tile for one query row, heads [0, heads) of a head chunk: q holds
// [heads][depth] words, acc [heads][acc_stride] floats (the tile's lanes at offset 0).
template <class F>
AITER_CPU_INLINE void tile_chunk(const uint32_t* q, int64_t heads, int64_t depth, const uint32_t* kt,
                                 float* acc, int64_t acc_stride, bool first) {
  constexpr int HG = F::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    F::template head_group_chunk<HG>(q + h * depth, depth, depth, kt, acc + h * acc_stride,
                                     acc_stride, first);
  if (h < heads)
    head_group_chunk_tail<F, HG - 1>(static_cast<int>(heads - h), q + h * depth, depth, depth, kt,
                                     acc + h * acc_stride, acc_stride, first);
}

// The epilogue of one tile for one query row, heads [0, heads) of a head chunk: lg += their terms.
template <class F>
AITER_CPU_INLINE void tile_finish(const float* acc, int64_t heads, int64_t acc_stride,
                                  const float* sc, const float* w, float* lg) {
  constexpr int HG = F::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    F::template head_group_finish<HG>(acc + h * acc_stride, acc_stride, sc, w + h, lg);
  if (h < heads)
    head_group_finish_tail<F, HG - 1>(static_cast<int>(heads - h), acc + h * acc_stride,
                                      acc_stride, sc, w + h, lg);
}

// The chunked path of one task (scheme at the top): spans of keys, head chunks, depth chunks.
template <class F>
AITER_CPU_INLINE void run_task_chunked(const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task,
                                       uint32_t* scratch) {
  constexpr int kTile = F::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  static_assert(cpu::kChunkRowHeads % F::kHeadGroup == 0, "head chunks hold whole head groups");
  static_assert(cpu::kSpanKeys % kKeyBlock == 0, "a span holds whole K blocks");
  const int64_t H = p.H, D = p.D, depth = plan.depth;
  const int64_t R = plan.rows_per_task, DC = plan.depth_chunk, HC = plan.head_chunk;
  const int64_t S = plan.span_keys;
  const int64_t r0 = (task / plan.key_chunks) * R;
  const int64_t r1 = std::min(p.M, r0 + R);
  const int64_t c0 = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t c1 = std::min(p.N, c0 + plan.keys_per_chunk);

  uint32_t* q_dec = scratch;                                   // [R][HC][dn]
  uint32_t* kt = q_dec + plan.q_words;                         // [S / 64][dn][64]
  float* acc = reinterpret_cast<float*>(kt + plan.kt_words);  // [R][HC][S]
  float* lg = acc + plan.acc_words;                            // [R][S]
  float* sc = lg + R * S;                                      // [S]

  int64_t s[kMaxRowsPerTask], e[kMaxRowsPerTask], lo, hi;
  task_windows(p, r0, r1, c0, c1, s, e, &lo, &hi);

  for (int64_t b0 = lo; b0 < hi; b0 += S) {
    const int64_t b1 = std::min(hi, b0 + S);
    bool active[kMaxRowsPerTask];
    bool any = false;
    for (int64_t i = 0; i < r1 - r0; ++i) {
      active[i] = std::max(s[i], b0) < std::min(e[i], b1);
      any |= active[i];
    }
    if (!any) continue;  // a gap between the windows (e.g. between requests)

    const int64_t lanes = round_up(b1 - b0, kKeyBlock);
    for (int64_t j = 0; j < b1 - b0; ++j) sc[j] = p.kv_scales[b0 + j];
    std::memset(sc + (b1 - b0), 0, (lanes - (b1 - b0)) * sizeof(float));  // finite, never stored
    for (int64_t i = 0; i < r1 - r0; ++i)
      if (active[i]) std::memset(lg + i * S, 0, lanes * sizeof(float));

    for (int64_t h0 = 0; h0 < H; h0 += HC) {
      const int64_t hn = std::min(HC, H - h0);
      for (int64_t d0 = 0; d0 < depth; d0 += DC) {
        const int64_t dn = std::min(DC, depth - d0);
        const bool first = d0 == 0;
        for (int64_t i = 0; i < r1 - r0; ++i) {
          if (!active[i]) continue;
          for (int64_t h = 0; h < hn; ++h)
            F::decode_words(p.q + ((r0 + i) * H + h0 + h) * D, D, d0, dn, q_dec + (i * HC + h) * dn,
                            1);
        }
        // The K chunk of every needed block of the span; with a single depth chunk it serves every
        // head chunk, so it is decoded once per span.
        const bool decode_kt = h0 == 0 || depth > DC;
        for (int64_t b = b0; b < b1; b += kKeyBlock) {
          const int64_t nb = std::min<int64_t>(kKeyBlock, b1 - b);
          bool needed = false;
          for (int64_t i = 0; i < r1 - r0; ++i) needed |= std::max(s[i], b) < std::min(e[i], b + nb);
          if (!needed) continue;

          uint32_t* kt_b = kt + (b - b0) * dn;  // block (b - b0) / kKeyBlock: [dn][kKeyBlock]
          if (decode_kt) {
            for (int64_t j = 0; j < nb; ++j)
              F::decode_words(p.kv + (b + j) * D, D, d0, dn, kt_b + j, kKeyBlock);
            if (nb < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
              for (int64_t d = 0; d < dn; ++d)
                std::memset(kt_b + d * kKeyBlock + nb, 0, (kKeyBlock - nb) * sizeof(uint32_t));
            }
          }
          for (int64_t i = 0; i < r1 - r0; ++i) {
            const int64_t a = std::max(s[i], b), z = std::min(e[i], b + nb);
            if (a >= z) continue;
            for (int64_t t = (a - b) / kTile * kTile; b + t < z; t += kTile)
              tile_chunk<F>(q_dec + i * HC * dn, hn, dn, kt_b + t, acc + i * HC * S + (b - b0) + t,
                            S, first);
          }
        }
      }
      // The head chunk's epilogue, h ascending, into the span's logits.
      for (int64_t i = 0; i < r1 - r0; ++i) {
        if (!active[i]) continue;
        const float* w_row = p.weights + (r0 + i) * p.weights_stride + h0;
        for (int64_t b = b0; b < b1; b += kKeyBlock) {
          const int64_t nb = std::min<int64_t>(kKeyBlock, b1 - b);
          const int64_t a = std::max(s[i], b), z = std::min(e[i], b + nb);
          if (a >= z) continue;
          for (int64_t t = (a - b) / kTile * kTile; b + t < z; t += kTile) {
            const int64_t o = (b - b0) + t;
            tile_finish<F>(acc + i * HC * S + o, hn, S, sc + o, w_row, lg + i * S + o);
          }
        }
      }
    }
    for (int64_t i = 0; i < r1 - r0; ++i) {
      if (!active[i]) continue;
      const int64_t a = std::max(s[i], b0), z = std::min(e[i], b1);
      std::memcpy(p.out + (r0 + i) * p.out_stride + a, lg + i * S + (a - b0),
                  (z - a) * sizeof(float));
    }
  }
}

using TaskFn = void (*)(const Fp8MqaLogitsParams&, const Plan&, int64_t, uint32_t*);

// SIMD variants. Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512, avx512bf16: 64 keys per tile), 11 of the 16 ymm
// (avx2: 16 keys), and the same shape in 16-byte vectors for SSE2 / NEON (generic). Each variant has
// a whole-depth and a chunked entry, compiled for the same target (the same FMA contraction).
void task_generic(const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<4, 2, 4>>(p, plan, task, scratch);
}
void task_generic_chunked(const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task,
                          uint32_t* scratch) {
  run_task_chunked<Fp32Format<4, 2, 4>>(p, plan, task, scratch);
}

#ifdef AITER_CPU_X86
__attribute__((target("avx2,fma"))) void task_avx2(const Fp8MqaLogitsParams& p, const Plan& plan,
                                                   int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<8, 2, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx2,fma"))) void task_avx2_chunked(const Fp8MqaLogitsParams& p,
                                                           const Plan& plan, int64_t task,
                                                           uint32_t* scratch) {
  run_task_chunked<Fp32Format<8, 2, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512(const Fp8MqaLogitsParams& p,
                                                             const Plan& plan, int64_t task,
                                                             uint32_t* scratch) {
  run_task<Fp32Format<16, 4, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512_chunked(const Fp8MqaLogitsParams& p,
                                                                     const Plan& plan, int64_t task,
                                                                     uint32_t* scratch) {
  run_task_chunked<Fp32Format<16, 4, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx512bf16,avx2,fma"))) void task_avx512bf16(
    const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Bf16PairFormat<4, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx512bf16,avx2,fma"))) void task_avx512bf16_chunked(
    const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task_chunked<Bf16PairFormat<4, 4>>(p, plan, task, scratch);
}
#endif

struct Variant {
  const char* name;
  TaskFn fn;
  TaskFn chunked_fn;
  bool bf16_pairs;
};

// The best variant this CPU runs. AITER_FP8_MQA_CPU_SIMD=avx512|avx2|generic caps it (to test the
// narrower variants on a wider machine); a cap above what the CPU has changes nothing.
Variant pick_variant() {
  static const char* const kOrder[] = {"generic", "avx2", "avx512", "avx512bf16"};
  int cap = 3;
  if (const char* env = std::getenv("AITER_FP8_MQA_CPU_SIMD")) {
    for (int i = 0; i < 4; ++i)
      if (std::strcmp(env, kOrder[i]) == 0) cap = i;
  }
#ifdef AITER_CPU_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (cap >= 3 && bf16) return {"avx512bf16", task_avx512bf16, task_avx512bf16_chunked, true};
  if (cap >= 2 && avx512) return {"avx512", task_avx512, task_avx512_chunked, false};
  if (cap >= 1 && avx2) return {"avx2", task_avx2, task_avx2_chunked, false};
#else
  (void)cap;
#endif
  return {"generic", task_generic, task_generic_chunked, false};
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

void fp8_mqa_logits_cpu(const Fp8MqaLogitsParams& p) {
  if (p.M <= 0 || p.N <= 0) return;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const Variant variant = pick_variant();
  const Plan plan =
      make_plan(p, threads, variant.bf16_pairs ? (p.D + 1) / 2 : p.D, pick_chunks());
  const TaskFn run = plan.chunked ? variant.chunked_fn : variant.fn;
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
        run(p, plan, task, scratch.ptr);
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
