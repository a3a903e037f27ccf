// The CPU paths' vectors: W float / int32 lanes as GCC/Clang vector extensions (the compiler maps
// them to SSE, AVX2 or AVX-512 registers per the variant built; cpu/simd_level.h picks one).
// Shared by the prefill and decode CPU paths, whose micro-kernels are written over W lanes.
#pragma once
#include <cstdint>

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

}  // namespace cpu
}  // namespace aiter
