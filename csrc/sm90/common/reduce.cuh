// The quad reduce-scatter of a logits epilogue: the four lanes of a quad hold partial sums of the
// same outputs (the wgmma fragment spreads a row's heads over the quad), and each output's sum ends
// in one lane.
#pragma once

namespace aiter {
namespace sm90 {

// Sums each of kCount outputs over the quad and leaves it in one lane, in place: per halving step a
// lane keeps one output of each pair (part[2k], part[2k + 1]), the second where its lane bit of the
// step is set, adds its partner's copy of it and sends the other one (2 SEL, 1 SHFL, 1 FADD per
// pair), log2 steps instead of a full butterfly per output. Step 1 exchanges across lane bit 0,
// step 2 across bit 1: output o ends in quad lane o % 4 as part[o / 4]. Two outputs (kCount = 2)
// end in lanes 0 and 1, summed over the whole quad, with copies in lanes 2 and 3.
template <int kCount>
__device__ __forceinline__ void quad_reduce_scatter(float (&part)[kCount], int quad_lane) {
  if constexpr (kCount >= 2) {  // step 1: outputs with (o & 1) == (lane & 1) stay
    const bool odd = quad_lane & 1;
#pragma unroll
    for (int k = 0; k < kCount / 2; ++k) {
      const float send = odd ? part[2 * k] : part[2 * k + 1];
      const float keep = odd ? part[2 * k + 1] : part[2 * k];
      part[k] = keep + __shfl_xor_sync(0xffffffffu, send, 1);  // now output 2k + (lane & 1)
    }
  }
  if constexpr (kCount >= 4) {  // step 2: of those, (o & 2) == (lane & 2) stay
    const bool high = quad_lane & 2;
#pragma unroll
    for (int k = 0; k < kCount / 4; ++k) {
      const float send = high ? part[2 * k] : part[2 * k + 1];
      const float keep = high ? part[2 * k + 1] : part[2 * k];
      part[k] = keep + __shfl_xor_sync(0xffffffffu, send, 2);  // now output 4k + lane
    }
  } else {
    part[0] += __shfl_xor_sync(0xffffffffu, part[0], 2);
  }
}

}  // namespace sm90
}  // namespace aiter
