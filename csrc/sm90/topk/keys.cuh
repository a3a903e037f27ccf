// The sm90 top-k kernels' reading of a logit: its order-preserving key (common/indexer_topk_params.h:
// topk_key, in fewer instructions) and its float32 value, for float32 logits and for the bits of
// bfloat16 ones.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace aiter {
namespace sm90 {
namespace topk {

// topk_key in fewer instructions: adding +0.0 turns -0.0 into +0.0 (and leaves NaN a NaN), the sign
// flip orders the bits, and one unsigned range test drops -inf (key 0x007FFFFF), the NaNs of either
// sign (keys below it or above +inf's 0xFF800000) and nothing else.
__device__ __forceinline__ uint32_t fast_key(float v) {
  const uint32_t u = __float_as_uint(__fadd_rn(v, 0.0f));
  const uint32_t key = u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
  return key - 0x00800000u <= 0xFF800000u - 0x00800000u ? key : 0u;
}

__device__ __forceinline__ float value_of(float v) { return v; }
__device__ __forceinline__ float value_of(uint16_t bits) { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }

template <typename Elem>
__device__ __forceinline__ uint32_t key_of(Elem v) {
  return fast_key(value_of(v));
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
