// Tunables of the gfx950 (MI355X) kernel, each with the reason for its default.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// Layouts: none directly; geometry.h derives every size of the kernel from these.
// Why one file: only this backend includes it, and nothing else in the gfx950 folder defines a
// tile size, a depth or a cost.
#pragma once

namespace aiter {

namespace gfx950 {
// Waves per workgroup: 8 x 64 = 512 threads, one workgroup per CU, two waves per SIMD. The SIMD then
// co-issues one wave's scalar-VALU epilogue under the other wave's MFMAs, and each wave may hold
// 256 VGPR+AGPR (512 per SIMD lane / 2 waves): Q (64) + w (64) + accumulators + K fragments fit.
constexpr int kWaves = 8;
// A tiles per wave: 4 x 32 (row, head) columns. H=32: 4 rows of 32 heads; H=64: 2 rows of 2 x 32;
// H=16: 8 rows, two per tile (the MFMA's 32 A rows hold 16 heads of two rows rather than leaving
// half of it empty). Every head count thus covers 1024 (row, head) columns per workgroup and K
// byte, so K traffic per FLOP, the MFMA:VALU ratio and the register footprint are the same.
constexpr int kTilesPerWave = 4;
// Keys per wave per stage, in 32-key sub-tiles. Two sub-tiles = 16 MFMAs between barriers at
// D = 128 (8 at D = 64), and an even number of row-pair tails per stage for the paired permlane
// asm (H=64 has one pair per sub-tile, so sub-tile 0's tail waits for sub-tile 1's: the deferred
// tail).
constexpr int kSubTiles = 2;
// Stages loaded ahead: 4 x 8 KiB in flight per workgroup covers ~4 stage times (~8k cycles at two
// waves per SIMD), far above HBM latency; the ring holds one more slot for the stage being read.
constexpr int kPrefetchStages = 4;
// Main path at D = 128: all 8 waves take different rows (8 row groups) and walk the same keys, so
// K is read once per 32 rows (H=32), 16 rows (H=64) or 64 rows (H=16).
constexpr int kMainRowGroups = 8;
// Small-M path (M <= kSmallMaxRows) at D = 128: 4 row groups x 2 key groups. A 32-row block is too
// coarse when M <= 128 (4 blocks for 256 CUs): halving the rows per block halves the Q bytes each
// workgroup loads per key it processes. Two key groups keep the stage at 2 DMAs per wave.
constexpr int kSmallRowGroups = 4;
constexpr int kSmallMaxRows = 128;
// The head dim those row groups are for. At D = 64 (one MFMA K step instead of two) both paths
// take half the row groups and twice the key groups (main 4 x 2, small-M 2 x 4): a stage holds
// twice the keys at half the bytes, so it stays 8 KiB (main) / 16 KiB (small-M) and every wave
// issues the same whole 1 KiB DMAs as at D = 128 (a 64-key stage of 64-byte keys would be half a
// DMA per wave). The K bytes per (row, key) pair stay those of D = 128 (half the key bytes, half
// the rows per block), and so do the loads and stores per wave and stage, hence the vmcnt waits.
constexpr int kRowGroupsHeadDim = 128;
// Rows the device-side balanced plan handles: its per-row window table (8 B a row) aliases the
// K ring in LDS, 128 KiB at 16384 rows (the largest benchmark M). Above it the kernel falls back to
// the fixed grid (blocks, fixed_grid_splits) with the splits from the makespan model.
constexpr int kPlanMaxRows = 16384;
// -inf fill work unit: 8192 elements (32 KiB of float32 stores), priced like one compute stage.
// By the performance model (dev/isa/gfx950_model.py, a prediction) a clean H = 32 stage is 2312
// VALU-bound cycles and a CU's share of 8 TB/s of HBM is 13 bytes a clock, so 32 KiB take 2517
// cycles, about a stage. 64 KiB (a ~2 us stage at ~6 TB/s) wrote for 2.2 stage times per unit in the model, so a share rich in fill
// units was the slowest: causal 8192x8192 h32 at 2.0x its compute bound (1.24x at 32 KiB), multi-
// request 4096x32768 at 1.21x (1.17x). 16 KiB over-prices the fill (causal 8192x8192 1.48x). An
// MI355X run decides between the model's stage and the measured one.
constexpr int kFillUnitElems = 8192;
// Fixed cost of a compute segment (Q/w loads of 128 KiB, pipeline fill and drain), in compute
// stages: about two stage times by the latencies involved. It is the CostModel's start_overhead
// (cost_model.h): every block with compute stages gets this many virtual units, so an even split
// of units is an even split of modelled time; the fixed-grid makespan model charges it per
// computing workgroup.
constexpr int kSegmentOverheadStages = 2;
}  // namespace gfx950

}  // namespace aiter
