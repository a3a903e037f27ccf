// float32 -> bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN), as torch's .to(bfloat16):
// the CPU paths round each logit once, at the store.
#pragma once
#include <cstdint>
#include <cstring>

namespace aiter {
namespace cpu {

// Always inlined: the callers are compiled per SIMD target (function attributes).
inline __attribute__((always_inline)) uint16_t bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace cpu
}  // namespace aiter
