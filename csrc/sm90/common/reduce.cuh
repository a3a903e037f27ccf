// The quad reduce-scatter of the logits epilogues (prefill and paged): the four lanes of a quad hold
// partial sums of the same outputs (the wgmma fragment spreads a row's heads over the quad), and
// each output's sum ends in one lane.
#pragma once

namespace aiter {
namespace sm90 {

// How a halving step pairs a lane's partials: adjacent, (part[2k], part[2k + 1]), or halves,
// (part[k], part[k + n / 2]) of the n still held. The pairing only decides which lane and slot each
// output ends in; the sums are the same.
enum class QuadPairs { kAdjacent, kHalves };

// Sums each of kCount outputs over the quad and leaves it in one lane, in place. Per halving step a
// lane keeps one output of each pair, the second where its lane bit of the step is set, adds its
// partner's copy of it and sends the other one (2 SEL, 1 SHFL, 1 FADD per pair): log2 steps instead
// of a full butterfly per output. The first step exchanges across lane bit kFirstBit (1 or 2), the
// second across the other one (`lane`: the lane in the warp or in its quad, only bits 0 and 1
// count). Two outputs (kCount = 2) end summed over the whole quad in part[0].
template <int kFirstBit, QuadPairs kPairs, int kCount>
__device__ __forceinline__ void quad_reduce_scatter(float (&part)[kCount], int lane) {
  static_assert(kFirstBit == 1 || kFirstBit == 2, "a quad's lane bits");
  constexpr int kSecondBit = 3 ^ kFirstBit;
  constexpr bool kAdjacent = kPairs == QuadPairs::kAdjacent;
  if constexpr (kCount >= 2) {
    const bool second = lane & kFirstBit;
#pragma unroll
    for (int k = 0; k < kCount / 2; ++k) {
      const int lo = kAdjacent ? 2 * k : k, hi = kAdjacent ? 2 * k + 1 : k + kCount / 2;
      const float send = second ? part[lo] : part[hi];
      const float keep = second ? part[hi] : part[lo];
      part[k] = keep + __shfl_xor_sync(0xffffffffu, send, kFirstBit);
    }
  }
  if constexpr (kCount >= 4) {
    const bool second = lane & kSecondBit;
#pragma unroll
    for (int k = 0; k < kCount / 4; ++k) {
      const int lo = kAdjacent ? 2 * k : k, hi = kAdjacent ? 2 * k + 1 : k + kCount / 4;
      const float send = second ? part[lo] : part[hi];
      const float keep = second ? part[hi] : part[lo];
      part[k] = keep + __shfl_xor_sync(0xffffffffu, send, kSecondBit);
    }
  } else {
    part[0] += __shfl_xor_sync(0xffffffffu, part[0], kSecondBit);
  }
}

}  // namespace sm90
}  // namespace aiter
