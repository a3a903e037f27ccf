// The quad reduce-scatter of a logits epilogue: the four lanes of a quad hold partial sums of the
// same outputs (the wgmma fragment spreads a row's heads over the quad), and each output's sum ends
// in one lane.
//
// A halving step pairs the outputs two by two; a lane keeps one output of each pair, the second
// where its lane bit of the step is set, adds its partner's copy of it and sends the other one
// (2 SEL, 1 SHFL, 1 FADD per pair): two steps instead of a full butterfly per output. Which outputs
// pair is the caller's layout: neighbours (part[2k], part[2k + 1]) or halves (part[k], part[k + n/2]).
#pragma once

namespace aiter {
namespace sm90 {

enum class QuadPairs { kNeighbours, kHalves };

// One halving step across lane bit kLaneBit over the first kLive entries, in place: part[k] becomes
// the quad half's sum of pair k's output that this lane's bit selects (k < kLive / 2; pair k reads
// only entries >= k, so no pair reads an entry an earlier pair wrote).
template <QuadPairs kPairs, int kLaneBit, int kLive, int kCount>
__device__ __forceinline__ void quad_halving_step(float (&part)[kCount], int quad_lane) {
  static_assert(kLive % 2 == 0 && kLive <= kCount, "a halving step pairs live outputs");
  constexpr int kStride = kPairs == QuadPairs::kNeighbours ? 2 : 1;
  constexpr int kPartner = kPairs == QuadPairs::kNeighbours ? 1 : kLive / 2;
  const bool second = quad_lane & kLaneBit;
#pragma unroll
  for (int k = 0; k < kLive / 2; ++k) {
    const float send = second ? part[kStride * k] : part[kStride * k + kPartner];
    const float keep = second ? part[kStride * k + kPartner] : part[kStride * k];
    part[k] = keep + __shfl_xor_sync(0xffffffffu, send, kLaneBit);
  }
}

// Neighbours, lane bit 0 then bit 1: output o ends in quad lane o % 4 as part[o / 4]. Two outputs
// (kCount = 2) end in lanes 0 and 1, summed over the whole quad, with copies in lanes 2 and 3.
template <int kCount>
__device__ __forceinline__ void quad_reduce_scatter(float (&part)[kCount], int quad_lane) {
  quad_halving_step<QuadPairs::kNeighbours, 1, kCount>(part, quad_lane);
  if constexpr (kCount >= 4) {
    quad_halving_step<QuadPairs::kNeighbours, 2, kCount / 2>(part, quad_lane);
  } else {
    part[0] += __shfl_xor_sync(0xffffffffu, part[0], 2);
  }
}

// Halves, lane bit 1 then bit 0: output o = (kCount / 2) b1 + (kCount / 4) b0 + k, b1 and b0 the
// quad lane's bits, ends as part[k] for k < kCount / 4.
template <int kCount>
__device__ __forceinline__ void quad_reduce_scatter_halves(float (&part)[kCount], int quad_lane) {
  static_assert(kCount % 4 == 0, "the halves scatter leaves whole quarters in each lane");
  quad_halving_step<QuadPairs::kHalves, 2, kCount>(part, quad_lane);
  quad_halving_step<QuadPairs::kHalves, 1, kCount / 2>(part, quad_lane);
}

}  // namespace sm90
}  // namespace aiter
