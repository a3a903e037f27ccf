// The avx512bf16 variant of the prefill CPU path: bf16 operand pairs through vdpbf16ps (AVX512-BF16: Zen 4,
// Sapphire Rapids).
#include "cpu/simd_level.h"

#if AITER_CPU_BUILDS_AVX512BF16
#include <immintrin.h>

#include "cpu/fp8_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace prefill {
namespace {

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

}  // namespace

AITER_CPU_TARGET_AVX512BF16
void task_avx512bf16(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Bf16PairFormat<4, 4>>(params, plan, task, scratch);
}
AITER_CPU_TARGET_AVX512BF16
void task_avx512bf16_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                             uint32_t* scratch) {
  run_task_chunked<Bf16PairFormat<4, 4>>(params, plan, task, scratch);
}

}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
#endif
