// Every tunable of the fp8_mqa_logits kernels, with the reason for its default.
// Kernels and host-side planners include this header; nothing else defines a tile size.
#pragma once

namespace aiter {

// ---------------------------------------------------------------------------------------------
// NVIDIA Hopper (sm_90a), csrc/kernels/fp8_mqa_logits_sm90.cu
// ---------------------------------------------------------------------------------------------
namespace sm90 {
// Columns of the Q tile, as (row, head) pairs: 256 = 8 rows at H=32, 4 rows at H=64. Each K tile
// pulled into shared memory then serves 256 columns, half the L2 traffic per FLOP of a 128 tile.
constexpr int kQTileCols = 256;
// Keys per K stage: the M side of one wgmma m64nNk32.
constexpr int kKeysPerTile = 64;
constexpr int kHeadDim = 128;
// K ring depth: 8 x 8 KiB hides ~4k cycles of L2/HBM latency at one tile per ~512 cycles.
constexpr int kKStages = 8;
// Q tiles in flight: the next block's Q and weights load while the current one computes.
constexpr int kQSlots = 2;
// One producer warpgroup (TMA issue + -inf fill) and two math warpgroups, each owning 128 of the
// 256 Q-tile columns, so both consume every K tile and the tensor core alternates between them.
constexpr int kMathWarpgroups = 2;
constexpr int kThreads = 128 * (1 + kMathWarpgroups);
// setmaxnreg budgets: 56 + 2 x 224 per thread-slot stays within the 64K-register file at 384 threads;
// the math warpgroups hold two 64-float accumulators, 32 weights and the reduction.
constexpr int kProducerRegs = 56;
constexpr int kMathRegs = 224;
}  // namespace sm90

// ---------------------------------------------------------------------------------------------
// AMD gfx950 (MI355X), csrc/kernels/fp8_mqa_logits_gfx950.hip  (owned by the gfx950 backend)
// ---------------------------------------------------------------------------------------------
namespace gfx950 {
// Filled in by the gfx950 backend: waves per workgroup, rows per wave, LDS stages, prefetch depth.
}  // namespace gfx950

}  // namespace aiter
