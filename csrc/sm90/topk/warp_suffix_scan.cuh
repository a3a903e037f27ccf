// The top-k kernels' warp scans: a plain inclusive sum over the lanes, and the suffix scan the
// cluster and two-pass selects run to find the bin that holds the wanted-th largest key (the 32 lanes
// split kN counts into runs of kN / 32, lane 0 the highest, and scan the runs' sums from the top, so
// that each lane learns how many keys lie in the bins above its run).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace aiter {
namespace sm90 {
namespace topk {

// The whole warp: v summed over this lane and the lanes below it.
__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int delta = 1; delta < 32; delta <<= 1) {
    const uint32_t up = __shfl_up_sync(0xFFFFFFFFu, v, delta);
    if (lane >= delta) v += up;
  }
  return v;
}

struct WarpSuffixScan {
  int top;             // this lane's highest index; it owns [top - kN / 32 + 1, top]
  uint32_t before;     // the counts above this lane's run
  uint32_t inclusive;  // before + this lane's run
  uint32_t total;      // all kN counts
};

// The whole warp; counts[0..kN) is read from shared memory.
template <int kN>
__device__ __forceinline__ WarpSuffixScan warp_suffix_scan(const uint32_t* counts) {
  static_assert(kN % 32 == 0, "each lane owns whole runs of counts");
  constexpr int kPer = kN / 32;
  const int lane = threadIdx.x & 31;
  WarpSuffixScan scan;
  scan.top = kN - lane * kPer - 1;
  uint32_t lane_sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) lane_sum += counts[scan.top - i];
  const uint32_t inclusive = warp_inclusive_sum(lane_sum);
  scan.inclusive = inclusive;
  scan.total = __shfl_sync(0xFFFFFFFFu, inclusive, 31);
  scan.before = inclusive - lane_sum;
  return scan;
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
