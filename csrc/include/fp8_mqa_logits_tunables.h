// Every tunable of the fp8_mqa_logits kernels, with the reason for its default.
// Kernels and host-side planners include this header; nothing else defines a tile size.
#pragma once

namespace aiter {

// ---------------------------------------------------------------------------------------------
// NVIDIA Hopper (sm_90a), csrc/kernels/fp8_mqa_logits_sm90.cu
// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// AMD gfx950 (MI355X), csrc/kernels/fp8_mqa_logits_gfx950.hip  (owned by the gfx950 backend)
// ---------------------------------------------------------------------------------------------
namespace gfx950 {
// Waves per workgroup: 8 x 64 = 512 threads, one workgroup per CU, two waves per SIMD. The SIMD then
// co-issues one wave's scalar-VALU epilogue under the other wave's MFMAs, and each wave may hold
// 256 VGPR+AGPR (512 per SIMD lane / 2 waves): Q (64) + w (64) + accumulators + K fragments fit.
constexpr int kWaves = 8;
// A tiles per wave: 4 x 32 (row, head) columns. H=32: 4 rows of 32 heads; H=64: 2 rows of 2 x 32.
// Either way a workgroup covers 1024 (row, head) columns per K byte, so K traffic per FLOP, the
// MFMA:VALU ratio and the register footprint are the same for both head counts.
constexpr int kTilesPerWave = 4;
constexpr int kHeadDim = 128;
// Keys per wave per stage, in 32-key sub-tiles. Two sub-tiles = 16 MFMAs between barriers, and an
// even number of row-pair tails per stage for the paired permlane asm (H=64 has one pair per
// sub-tile, so sub-tile 0's tail waits for sub-tile 1's: the deferred tail).
constexpr int kSubTiles = 2;
// Stages loaded ahead: 4 x 8 KiB in flight per workgroup covers ~4 stage times (~8k cycles at two
// waves per SIMD), far above HBM latency; the ring holds one more slot for the stage being read.
constexpr int kPrefetchStages = 4;
// Main path: all 8 waves take different rows (8 row groups) and walk the same keys, so K is read
// once per 32 rows (H=32) or 16 rows (H=64).
constexpr int kMainRowGroups = 8;
// Small-M path (M <= kSmallMaxRows): 4 row groups x 2 key groups. A 32-row block is too coarse
// when M <= 128 (4 blocks for 256 CUs): halving the rows per block halves the Q bytes each
// workgroup loads per key it processes. Two key groups keep the stage at 2 DMAs per wave.
constexpr int kSmallRowGroups = 4;
constexpr int kSmallMaxRows = 128;
// Rows the device-side balanced plan handles: its per-row (s, e) scratch (8 B a row) aliases the
// K ring in LDS, 128 KiB at 16384 rows (the largest benchmark M). Above it the kernel falls back to
// the fixed (block, SplitN) grid from the makespan model.
constexpr int kPlanMaxRows = 16384;
// -inf fill work unit: 16384 elements (64 KiB of stores), costed like one compute stage (a 32-row
// x 64-key stage takes ~2 us on MI355X by the design document's figures; 64 KiB per CU at a fair
// share of ~6 TB/s write bandwidth takes about as long).
constexpr int kFillUnitElems = 16384;
// Fixed cost of a compute segment (Q/w loads of 128 KiB, pipeline fill and drain), in compute
// stages: about two stage times by the latencies involved. The balanced plan gives every block
// with compute stages this many virtual units, so an even split of units is an even split of
// modelled time; the fixed-grid makespan model charges it per computing workgroup.
constexpr int kSegmentOverheadStages = 2;
}  // namespace gfx950

}  // namespace aiter
