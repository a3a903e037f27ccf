// Tunables of the Hopper (sm_90a) fp8_mqa_logits kernel, each with the reason for its default.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Only this backend includes it; nothing else in the sm90 folder defines a tile size. The H200
// measurements behind the defaults are in docs/performance-archive.md ("The sm90 tunables").
#pragma once

namespace aiter {
namespace sm90 {

// Math warpgroups. Each owns 128 Q-tile columns (wgmma m64n128k32: A = 64 keys, B = its columns) and
// one accumulator; all of them consume every K tile, and the three MMAs on a shared K tile finish in
// turn, so one warpgroup's epilogue runs under the others' MMAs and each scheduler has three math
// warps to hide the epilogue's latency with. Two warpgroups with two accumulators each (a warpgroup's
// next MMA under its own epilogue) are slower: the CUDA-core epilogue is latency-bound with two math
// warps per scheduler. Four do not fit: 640 threads get 96 registers each at launch, so 104 per math
// thread at most, too few for the 32 weights beside the accumulator, and reading the weights from
// shared memory every tile instead does not fit either: the wgmma operands already take about three
// quarters of the shared-memory bandwidth (24 KiB per warpgroup per 256-cycle MMA at 128 B/cycle).
constexpr int kMathWarpgroups = 3;
// Columns of the Q tile, as (row, head) pairs: 384, i.e. 12 rows at H=32, 6 at H=64. Each K tile
// pulled into shared memory serves them all: 3x less L2 traffic per FLOP than a 128-column tile.
constexpr int kQTileCols = 128 * kMathWarpgroups;
// Q rows per TMA box (a box has at most 256 rows): 128, so three boxes fill a Q tile.
constexpr int kQBoxRows = 128;
// Keys per K stage: the M side of one wgmma m64nNk32.
constexpr int kKeysPerTile = 64;
// Shared memory is sized for the largest head dim served (capabilities.h); D = 32 and 64 leave part
// of each stage unused. Not a tunable but a fact, kept beside the tile sizes it multiplies.
constexpr int kMaxHeadDim = 128;
// K ring depth: 8 x 8 KiB hides ~4k cycles of L2/HBM latency at one tile per ~512 cycles.
constexpr int kKStages = 8;
// Q tiles in flight: the next block's Q and weights load while the current one computes; a third
// slot gains nothing.
constexpr int kQSlots = 2;
// Whether an (H, D) instance sums its heads as (sum |x| w + K . q') / 2 (linear_term.cuh): one FFMA
// per accumulator element instead of two, for four more wgmma columns per query row and a build of
// the pieces per Q block. On at H = 64 with D <= 64, where the epilogue's instructions bound the
// kernel most (D / 32 MMA steps per tile against the same epilogue). At D = 128 the per-block build
// costs about what the cheaper epilogue saves on medium rows and short calls; at H <= 16 a
// warpgroup's 8 or 16 rows would take 32 or 64 more columns (docs/performance.md, "The split head sum").
__host__ __device__ constexpr bool linear_term_split(int heads, int head_dim) {
  return heads == 64 && head_dim <= 64;
}
// Where a math warpgroup loads a Q block's weights and windows (epilogue.cuh: BlockRows): at the end of
// the previous block's last epilogue (true), or before the block's first epilogue, a branch between
// the MMA's wait and the epilogue's arithmetic (false). At the end is faster up to H = 32 (most at
// H = 16, D = 64); at H = 64 without the split it moves ptxas's relu FADDs after the stage release,
// which is slower. The split instances have no relu FADDs, and build their pieces at the block's end,
// where the old rows must be dead (else ptxas spills at H = 64, D = 128).
template <int H, int D>
constexpr bool kRowsAtBlockEnd = H <= 32 || linear_term_split(H, D);
// Cost of starting a Q block, in K tiles, in the balanced plan's units: a CTA that walks many short
// blocks (the first rows of a causal chunk) pays a Q-tile load per block, which a price of zero
// leaves out; long rows do not notice it.
constexpr int kBlockOverheadTiles = 2;
// Where the instance splits the head sum, starting a block also builds its pieces: each math warpgroup
// stops for a few loop tiles' time (ptxas's 200-odd instructions a thread, latency-bound). Priced as
// kPieceBuildTiles more, so that the CTA walking a causal chunk's first blocks (1 to 10 tiles each)
// takes fewer of them; priced as nothing, that CTA ends the call late.
constexpr int kPieceBuildTiles = 2;
__host__ __device__ constexpr int block_start_tiles(int heads, int head_dim) {
  return kBlockOverheadTiles + (linear_term_split(heads, head_dim) ? kPieceBuildTiles : 0);
}
// Threads per CTA of the pricing kernel (plan.cuh), one Q block each: small CTAs spread even a short
// chunk's blocks over several SMs. Not tuned: the pricing costs about one launch and one round of
// loads at every benchmark shape, and the main kernel's CTAs start under it.
constexpr int kPriceThreads = 256;
// Rows whose window holds 1..kExactKeys keys are computed on the CUDA cores by the fill warps
// (exact fp8 products, summed four at a time in float, then in double) instead of by the tensor
// cores. Hopper's FP8 wgmma accumulates with ~14-bit precision (an error of about 2e-4 of the sum of
// |terms|); where a row has only a few logits they can all cancel to about 1e-4 of their terms,
// below that error and outside the contract's per-row bound. With more keys the row's maximum is
// almost surely far above the error. Those rows' few thousand CUDA-core instructions share the
// schedulers with the math warps, a cost short calls notice and long rows do not.
constexpr int kExactKeys = 8;
// Whether the exact path spreads a row's keys over CTAs (exact_rows.cuh: up to kExactKeys items of a
// row, as many as keep a call within one round of candidates per fill thread) instead of computing
// each row in one CTA. A row per CTA puts a causal chunk's first rows (1..8 keys, up to 8 x H dot
// products and a serial head sum apiece) on CTAs 0-7 alone, on the critical path of a short call;
// spreading them takes that off it. Only H = 32 spreads: at every other H the spread code changes
// ptxas's schedule of the whole kernel for the worse (at H = 64, the production head shape, its math
// loop's relu FADDs move after the stage release and the long rows slow down), so those keep a row
// per CTA and the schedule that goes with it.
template <int H>
constexpr bool kSpreadExactRows = H == 32;
// -inf fill runs up to this many columns (2 KiB) go a warp per row, longer ones all three fill warps
// per row. A warp per row suits short runs (96 threads on 64 columns pay the loop overhead for
// little), three warps long ones (one row's contiguous 1.5 KiB per store round instead of three
// rows' scattered 512 bytes); the split keeps both.
constexpr int kFillShortRun = 512;
// One producer warpgroup (warp 0: TMA issue; warps 1-3: exact rows, -inf fill) and the math warpgroups.
constexpr int kThreads = 128 * (1 + kMathWarpgroups);
// setmaxnreg budgets, within the 65536 registers: 128 x 80 + 384 x 144 = 65536 (one accumulator of 64
// floats, 68 with the split's piece columns, 32 weights, the reduction). ptxas allocates each role's
// code within its budget: at 56 the producer warpgroup's -inf fill spilled.
constexpr int kProducerRegs = 80;
constexpr int kMathRegs = 144;
static_assert(128 * kProducerRegs + 128 * kMathWarpgroups * kMathRegs <= 65536, "register file");

// ---- The paged decode kernel (paged/kernel.cuh) ----------------------------------------------------
// Math warpgroups: three, taking the 64-key tiles in turn, so that each one's MMA wait and epilogue
// run under the others'. Decode is bound by the K bytes (64 keys x (D + 4) bytes per tile, ~8.4 KiB
// at D = 128, of which an H200 SM moves ~18 bytes a cycle: ~470 cycles a tile). When a batch's
// next_n x H columns exceed one wgmma's 128 (next_n = 4 at H = 64), the first two take every tile
// together, each two query rows.
constexpr int kPagedMathWarpgroups = 3;
constexpr int kPagedSharingWarpgroups = 2;
// K rings: one per math warpgroup's turn (tile seq goes to ring seq % 3), each filled by a producer
// warp of its own. One producer warp issuing every tile is slower than the K bytes (the math warps
// wait on full stages, the producer never on an empty one).
constexpr int kPagedRings = kPagedMathWarpgroups;
// Stages per ring: 3 x 5 x 8 KiB keep ~120 KiB in flight per SM, above the ~64 KiB that the
// bandwidth-latency product of one SM needs (32 GB/s per SM x ~2 us under load).
constexpr int kPagedStagesPerRing = 5;
constexpr int kPagedStages = kPagedRings * kPagedStagesPerRing;
// Q slots: the next batch's Q loads while the current one computes.
constexpr int kPagedQSlots = 2;
// One producer warpgroup (warps 0-2: a ring each, warp 0 also the Q slots; warp 3: the exact rows
// and the -inf tails) and the math ones.
constexpr int kPagedThreads = 128 * (1 + kPagedMathWarpgroups);
// setmaxnreg budgets, as the prefill kernel's: 128 x 80 + 384 x 144 = 65536; a math thread holds a
// 64-float accumulator, up to 32 weights and a tile's partial sums.
constexpr int kPagedProducerRegs = 80;
constexpr int kPagedMathRegs = 144;
static_assert(128 * kPagedProducerRegs + 128 * kPagedMathWarpgroups * kPagedMathRegs <= 65536, "register file");
static_assert(kPagedRings < 4, "warp 3 of the producer warpgroup takes the exact rows and the tails");

}  // namespace sm90
}  // namespace aiter
