// Tunables of the Hopper (sm_90a) kernel, each with the reason for its default. Only this backend
// includes it; nothing else in the sm90 folder defines a tile size.
#pragma once

namespace aiter {

namespace sm90 {
// Math warpgroups. Each owns 128 Q-tile columns (wgmma m64n128k32: A = 64 keys, B = its columns), and
// all of them consume every K tile. 2: two accumulators each, so a warpgroup's next MMA runs under
// its own epilogue. 3: one accumulator each; the three MMAs on a shared K tile finish in turn, so
// the epilogues stagger, and each scheduler has three math warps to hide latency with.
// Measured on the H200 (tools/sm90_dev/ab_flags.sh), 4096x32768 causal: 2 -> 1237 / 2433 us, 3 -> 988 /
// 1967 us (H=32 / H=64); the CUDA-core epilogue is latency-bound with two math warps per scheduler.
// Four do not fit: 640 threads get 96 registers each at launch, so 104 per math thread at most, too
// few for the 32 weights beside the accumulator. Reading the weights from shared memory every tile
// instead (a 4-way bank-conflicted layout) measured 1.73x slower with four and 1.85x with three
// (4096x32768 causal H=32): the wgmma operands already take ~75% of the shared-memory bandwidth
// (24 KiB per warpgroup per 256-cycle MMA at 128 B/cycle), so even conflict-free it would not fit.
// AITER_SM90_MATH_WARPGROUPS overrides the default for measurements (tools/sm90_dev).
#ifndef AITER_SM90_MATH_WARPGROUPS
#define AITER_SM90_MATH_WARPGROUPS 3
#endif
constexpr int kMathWarpgroups = AITER_SM90_MATH_WARPGROUPS;
static_assert(kMathWarpgroups == 2 || kMathWarpgroups == 3, "2 or 3 math warpgroups");
constexpr int kAccumulators = kMathWarpgroups == 2 ? 2 : 1;
// Columns of the Q tile, as (row, head) pairs: 256 (8 rows at H=32, 4 at H=64) or 384 (12 / 6).
// Each K tile pulled into shared memory serves them all: 2-3x less L2 traffic per FLOP than 128.
constexpr int kQTileCols = 128 * kMathWarpgroups;
// Q rows per TMA box (a box has at most 256 rows): 128, so 2 or 3 boxes fill a Q tile.
constexpr int kQBoxRows = 128;
// Keys per K stage: the M side of one wgmma m64nNk32.
constexpr int kKeysPerTile = 64;
constexpr int kHeadDim = 128;
// K ring depth: 8 x 8 KiB hides ~4k cycles of L2/HBM latency at one tile per ~512 cycles.
constexpr int kKStages = 8;
// Q tiles in flight: the next blocks' Q and weights load while the current one computes. A third
// slot measured no gain (1024x1024 causal within 1.5 us, long rows within noise; ab_flags.sh).
// AITER_SM90_Q_SLOTS overrides the default for measurements (tools/sm90_dev).
#ifndef AITER_SM90_Q_SLOTS
#define AITER_SM90_Q_SLOTS 2
#endif
constexpr int kQSlots = AITER_SM90_Q_SLOTS;
// Cost of starting a Q block, in K tiles, in the balanced plan's units: a CTA that walks many short
// blocks (the first rows of a causal chunk) pays a Q-tile load per block. Measured, 1024x1024
// causal no-clean: 0 -> 21.7 / 30.8 us, 2 -> 20.0 / 24.4 us (H=32 / H=64); long rows unchanged.
// AITER_SM90_BLOCK_OVERHEAD_TILES overrides the default for measurements (tools/sm90_dev).
#ifndef AITER_SM90_BLOCK_OVERHEAD_TILES
#define AITER_SM90_BLOCK_OVERHEAD_TILES 2
#endif
constexpr int kBlockOverheadTiles = AITER_SM90_BLOCK_OVERHEAD_TILES;
// Rows whose window holds 1..kExactKeys keys are computed on the CUDA cores by the fill warps
// (exact fp8 products, summed four at a time in float, then in double) instead of by the tensor
// cores. Hopper's FP8 wgmma accumulates with ~14-bit precision (error up to 2.1e-4 of the sum of
// |terms|, tools/sm90_dev/precision.py); where a row has only a few logits they can all cancel to
// ~1e-4 of their terms, and the contract's per-row bound failed by up to 8.8x on 1-3-key windows.
// With more keys the row's maximum is almost surely far above that error. Measured on the H200: the
// GPU op tests went from 10 failed to 180 passed; error / sum|terms| on those rows 2.1e-4 -> 4e-8;
// cost: 1024x1024 causal +2.2 us (H=32) and +3.3 us (H=64), the largest rows within noise. Those
// rows' few thousand CUDA-core instructions share the schedulers with the math warps.
constexpr int kExactKeys = 8;
// One producer warpgroup (warp 0: TMA issue; warps 1-3: exact rows, -inf fill) and the math warpgroups.
constexpr int kThreads = 128 * (1 + kMathWarpgroups);
// setmaxnreg budgets, within the 65536 registers: 128 x 88 + 256 x 208 = 64512 (two accumulators
// of 64 floats, 32 weights, the reduction) or 128 x 80 + 384 x 144 = 65536 (one accumulator).
// ptxas allocates each role's code within its budget: at 56 the -inf fill spilled.
constexpr int kProducerRegs = kMathWarpgroups == 2 ? 88 : 80;
constexpr int kMathRegs = kMathWarpgroups == 2 ? 208 : 144;
static_assert(128 * kProducerRegs + 128 * kMathWarpgroups * kMathRegs <= 65536, "register file");
}  // namespace sm90

}  // namespace aiter
