// fp8_mqa_logits on the host: any H and D, the exact contract semantics, fp32 accumulation.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * dot(Q[m,h,:], K[n,:])) * w[m,h]   for s_m <= n < e_m
//                  -inf elsewhere when clean_logits, else untouched
//   s_m = clamp(ks[m], 0, N), e_m = clamp(ke[m], 0, N); s_m >= e_m is an empty row.
//
// Layouts: q [M][H][D] and kv [N][D] e4m3fn bytes (contiguous); kv_scales [N] f32; weights [M][H] f32
// with row stride weights_stride; ks, ke [M] i32; out [M][N] f32 with row stride out_stride.
//
// Scheme. A task is (a block of <= 16 query rows) x (a chunk of keys). It decodes its rows' Q once,
// then walks its key chunk, clipped to the union of its rows' windows, in blocks of 64 keys. Each block
// is decoded and transposed to Kt[depth][64] so that one SIMD vector holds consecutive keys; the
// micro-kernel keeps HG heads x NV vectors of accumulators in registers, broadcasts one Q element per
// head and depth step, and multiplies it into the NV key vectors. Two operand formats:
//   fp32        depth = D; acc += q * k (one FMA per product). Variants avx512, avx2, generic.
//   bf16 pairs  depth = ceil(D / 2); (d, d+1) packed in 32 bits, vdpbf16ps adds both products per
//               lane: twice the products per instruction. Variant avx512bf16 (Zen 4, Sapphire Rapids).
// The best variant the CPU runs is picked at run time (no -march flags needed).
//
// Precision and determinism. e4m3 values are exact in bf16 and fp32, and a product of two has at most
// 8 significant bits, so every product is exact: the only rounding is the fp32 sum over d (in a fixed
// order), then the scale, relu and the head sum in h order. Every key lane runs that same sequence,
// so an element's value does not depend on which task, block or lane computed it: the output is
// bitwise identical for any thread count. The variants may differ from each other in the last bits
// (pairwise vs sequential d sums; FMA contraction of relu(.) * w + sum). The scale is applied before
// the relu, exactly as written, so the CPU path does not even need the kv_scale > 0 precondition the
// device kernels rely on.
#include "cpu/fp8_mqa_logits_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

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

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int b = 0; b < 256; ++b) {
      const int exponent = (b >> 3) & 15, mantissa = b & 7;
      float magnitude;
      if (exponent == 15 && mantissa == 7)
        magnitude = std::numeric_limits<float>::quiet_NaN();
      else if (exponent == 0)
        magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
      else
        magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1+m/8) 2^(e-7)
      value[b] = (b & 0x80) ? -magnitude : magnitude;
    }
  }
};

const float* e4m3_table() {
  static const E4m3Table table;
  return table.value;
}

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

// How the work is cut into tasks; every kernel format uses the same cut.
struct Plan {
  int64_t rows_per_task;
  int64_t row_blocks;
  int64_t keys_per_chunk;  // multiple of kKeyBlock
  int64_t key_chunks;
  int64_t tasks;
  int64_t depth;  // rows of a transposed K block: D (fp32) or ceil(D / 2) (bf16 pairs)
  // Per-thread scratch, in 32-bit words: decoded Q, transposed K block, block scales, tile logits.
  int64_t q_words;
  int64_t kt_words;
  int64_t scratch_words;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

Plan make_plan(const Fp8MqaLogitsParams& p, int64_t threads, int64_t depth) {
  Plan plan;
  plan.depth = depth;
  const int64_t row_bytes = static_cast<int64_t>(p.H) * depth * 4;
  plan.rows_per_task =
      std::max<int64_t>(1, std::min<int64_t>(kMaxRowsPerTask, cpu::kQScratchBytes / row_bytes));
  plan.row_blocks = ceil_div(p.M, plan.rows_per_task);
  // Split the keys only when the row blocks alone are too few to keep every thread busy.
  const int64_t wanted = std::max<int64_t>(1, threads) * cpu::kTasksPerThread;
  const int64_t max_chunks = ceil_div(p.N, kKeyBlock);
  const int64_t chunks =
      std::min<int64_t>(max_chunks, std::max<int64_t>(1, ceil_div(wanted, plan.row_blocks)));
  plan.keys_per_chunk = round_up(ceil_div(p.N, chunks), kKeyBlock);
  plan.key_chunks = ceil_div(p.N, plan.keys_per_chunk);
  plan.tasks = plan.row_blocks * plan.key_chunks;
  plan.q_words = round_up(plan.rows_per_task * p.H * depth, 16);
  plan.kt_words = depth * kKeyBlock;
  plan.scratch_words = plan.q_words + plan.kt_words + 2 * kKeyBlock;
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

  // Windows, -inf outside them, and the key range [lo, hi) that any row of the task needs.
  int64_t s[kMaxRowsPerTask], e[kMaxRowsPerTask];
  int64_t lo = c1, hi = c0;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t i = r - r0;
    s[i] = std::min<int64_t>(std::max<int64_t>(p.ks[r], 0), N);
    e[i] = std::min<int64_t>(std::max<int64_t>(p.ke[r], 0), N);
    if (s[i] >= e[i]) s[i] = e[i] = 0;  // empty or inverted: no key at all
    if (p.clean_logits) {
      float* out_row = p.out + r * p.out_stride;
      fill_neg_inf(out_row, c0, std::min(c1, s[i]));
      fill_neg_inf(out_row, std::max(c0, e[i]), c1);  // an empty row (s = e = 0) is all -inf
    }
    const int64_t a = std::max(s[i], c0), z = std::min(e[i], c1);
    if (a < z) {
      lo = std::min(lo, a);
      hi = std::max(hi, z);
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

using TaskFn = void (*)(const Fp8MqaLogitsParams&, const Plan&, int64_t, uint32_t*);

// SIMD variants. Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512, avx512bf16: 64 keys per tile), 11 of the 16 ymm
// (avx2: 16 keys), and the same shape in 16-byte vectors for SSE2 / NEON (generic).
void task_generic(const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<4, 2, 4>>(p, plan, task, scratch);
}

#ifdef AITER_CPU_X86
__attribute__((target("avx2,fma"))) void task_avx2(const Fp8MqaLogitsParams& p, const Plan& plan,
                                                   int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<8, 2, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"))) void task_avx512(const Fp8MqaLogitsParams& p,
                                                             const Plan& plan, int64_t task,
                                                             uint32_t* scratch) {
  run_task<Fp32Format<16, 4, 4>>(p, plan, task, scratch);
}
__attribute__((target("avx512f,avx512bf16,avx2,fma"))) void task_avx512bf16(
    const Fp8MqaLogitsParams& p, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Bf16PairFormat<4, 4>>(p, plan, task, scratch);
}
#endif

struct Variant {
  const char* name;
  TaskFn fn;
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
  if (cap >= 3 && bf16) return {"avx512bf16", task_avx512bf16, true};
  if (cap >= 2 && avx512) return {"avx512", task_avx512, false};
  if (cap >= 1 && avx2) return {"avx2", task_avx2, false};
#else
  (void)cap;
#endif
  return {"generic", task_generic, false};
}

struct AlignedScratch {
  uint32_t* ptr;
  explicit AlignedScratch(int64_t words) {
    const size_t bytes = static_cast<size_t>(round_up(words * 4, 64));
    ptr = static_cast<uint32_t*>(std::aligned_alloc(64, bytes));
    if (ptr == nullptr) throw std::bad_alloc();
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
  const Plan plan = make_plan(p, threads, variant.bf16_pairs ? (p.D + 1) / 2 : p.D);
  const TaskFn run = variant.fn;
  // Tasks are handed out dynamically (windows make them very unequal); which thread runs a task
  // does not change any value, see the determinism note at the top.
  std::atomic<int64_t> next_task{0};
  const int64_t workers = std::min(threads, plan.tasks);
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    AlignedScratch scratch(plan.scratch_words);
    for (;;) {
      const int64_t task = next_task.fetch_add(1, std::memory_order_relaxed);
      if (task >= plan.tasks) break;
      run(p, plan, task, scratch.ptr);
    }
  });
}

}  // namespace aiter
