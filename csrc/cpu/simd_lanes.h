// The CPU paths' vectors: W float / int32 lanes as GCC/Clang vector extensions (the compiler maps
// them to SSE, AVX2 or AVX-512 registers per the variant built; cpu/simd_level.h picks one).
// Shared by the prefill and decode CPU paths, whose micro-kernels are written over W lanes, with
// the epilogue they share.
#pragma once
#include <cstdint>

#if defined(__GNUC__) || defined(__clang__)
#define AITER_CPU_INLINE inline __attribute__((always_inline))
#else
#error "the CPU paths use GCC/Clang vector extensions"
#endif

namespace aiter {
namespace cpu {

template <int W>
struct Simd;
template <>
struct Simd<16> {
  typedef float floats __attribute__((vector_size(64)));
  typedef int32_t ints __attribute__((vector_size(64)));
};
template <>
struct Simd<8> {
  typedef float floats __attribute__((vector_size(32)));
  typedef int32_t ints __attribute__((vector_size(32)));
};
template <>
struct Simd<4> {
  typedef float floats __attribute__((vector_size(16)));
  typedef int32_t ints __attribute__((vector_size(16)));
};

// The epilogue both CPU micro-kernels end with: logits[k] += relu(scales[k] * acc[h][k]) * w[h] over
// a group of HG heads, h ascending (a fixed order: the result does not depend on the tiling), for
// NV vectors of W keys. The relu keeps a NaN, as torch.relu does.
template <int W, int NV, int HG>
AITER_CPU_INLINE void head_group_epilogue(const typename Simd<W>::floats (&acc)[HG][NV],
                                          const float* __restrict scales, const float* __restrict w,
                                          float* __restrict logits) {
  typedef typename Simd<W>::floats vf;
  typedef typename Simd<W>::ints vi;
  for (int v = 0; v < NV; ++v) {
    const vf scale = *reinterpret_cast<const vf*>(scales + v * W);
    vf sum = *reinterpret_cast<const vf*>(logits + v * W);
    for (int h = 0; h < HG; ++h) {
      vf term = acc[h][v] * scale;
      term = reinterpret_cast<vf>(reinterpret_cast<vi>(term) & ((term > vf{}) | (term != term)));
      sum += term * (w[h] - vf{});
    }
    *reinterpret_cast<vf*>(logits + v * W) = sum;
  }
}

}  // namespace cpu
}  // namespace aiter
