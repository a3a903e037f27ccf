// fp8_mqa_logits for AMD gfx950 (MI355X, CDNA4): the kernel. H and D as capabilities.h lists,
// float32 or bfloat16 logits, full or compressed layout. The kernel composition (rows, MFMA stage
// loop, segments, workgroup entry) and the macro that defines one kernel instance; the instances
// live in instances/ (one file per H, compiled in parallel), the host launcher in
// fp8_mqa_logits_gfx950.hip.
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]      for n in [s_m, e_m)
//                  -inf                                                      elsewhere, if clean
//   [s_m, e_m) = clamp(ks[m], 0, N), clamp(ke[m], 0, N) (row_window, common/work_scheduler.h).
//   Precondition (every real caller): kv_scale > 0, so relu(scale * x) = scale * relu(x) and the
//   scale is applied once per (row, key) after the head sum. Not checked on the device.
//
// Tensors (row-major; the ATen binding validates them):
//   q        [M, H, D]    fp8 e4m3 bytes, contiguous, 16-byte aligned
//   kv       [N, D]       fp8 e4m3 bytes, contiguous, 16-byte aligned
//   kv_scale [N]          fp32
//   w        [M, H]       fp32, row stride weights_stride
//   ks, ke   [M]          int32 raw bounds
//   out      [M, N]       fp32 or bf16 (the kernel's Element), row stride out_stride; or the
//                         compressed [M, out_columns]: key n of row m at column n - s_m, and with
//                         clean_logits -inf in columns [e_m - s_m, out_columns)
//
// The backend, one job per file:
//   tunables.h     the tuning constants, each with its reason
//   geometry.h     a variant's derived sizes and which wave computes what
//   layout.h       MFMA fragments, the swizzled LDS ring slot, DMA / ds_read / store offsets, LDS map
//   cost_model.h   the CostModel the backend prices blocks with (common/work_scheduler.h)
//   plan.h         the device-side plan: balanced plan tables, a block's rows and facts, shares
//   launch_plan.h  host: balanced plan or fixed grid, the grid, the fixed grid's makespan model
//   primitives.h   device wrappers of the builtins (buffer resources, scans, barriers)
//   workgroup.h    KernelArgs, the workgroup context, a wave's rows
//   pipeline.h     the K / kv_scale LDS-DMA ring with its hand-placed waits, fragment reads
//   epilogue.h     accumulators -> relu * w chains -> permlane32 row pairs -> masked stores
//   fill.h         the -inf fill units
//   this file      the stage loop (MFMA software pipeline), segments, the kernel body
//   instances.h    the list of kernel instances (name, H, D, path, element, layout)
//   instances/     the instances, one file per H; fp8_mqa_logits_gfx950.hip: the host launcher
//
// Design:
// - A workgroup is 8 waves; a wave owns 4 MFMA A tiles of 32 (row, head) columns, kept with their
//   weights in VGPRs for the whole block: H=32 -> 4 rows of 32 heads, H=64 -> 2 rows x 2 head
//   halves, H=16 -> 8 rows, two per tile (interleaved: the accumulator's even elements are one
//   row, its odd ones the other). Main path at D = 128: the 8 waves take different rows and walk
//   the same keys (block = 64 / 32 / 16 rows at H = 16 / 32 / 64: 1024 (row, head) columns per K
//   byte). Small-M path: 4 row groups x 2 key groups. At D = 64 both paths have half the row
//   groups and twice the key groups, so a stage stays 8 / 16 KiB of whole DMAs.
// - Per 32-key sub-tile and tile: D / 64 v_mfma_f32_32x32x64_f8f6f4 (plain, via the scale builtin
//   with neutral scales), then the scalar epilogue (epilogue.h).
// - Stages that every row of the block covers run without compare/select; boundary stages mask.
//   With clean_logits the kernel writes -inf itself: masked stages store it, and the columns
//   outside a block's stages are -inf fill units (fill.h), written between the stages of the
//   segment that holds them (fill_between_stages, geometry.h).
// - Work = units per block (cost_model.h; its stages and fill units interleaved), split evenly
//   over the workgroups (plan.h).
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "common/fp8_mqa_logits_params.h"
#include "gfx950/epilogue.h"
#include "gfx950/fill.h"
#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/pipeline.h"
#include "gfx950/plan.h"
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

// V: the Variant (geometry.h); Logits: a LogitsFormat (common/logits_dtype.h) of float or __bf16,
// full or compressed.
template <class V, class Logits>
struct Fp8MqaLogitsGfx950 {
  using Element = typename Logits::Element;
  static constexpr bool kCompressed = Logits::kCompressed;
  using Lds = LdsLayout<V>;
  static constexpr int kStageKeys = V::kStageKeys;
  static constexpr int kRowsPerWave = V::kRowsPerWave;
  static constexpr int kChainSets = V::kChainSets;
  static constexpr int kPairsPerWave = V::kPairsPerWave;
  static constexpr int kSteps = V::kSteps;
  static constexpr int kTails = V::kTails;
  static constexpr int kPrefetchDepth = V::kGeometry.prefetch_stages;
  using Rows = WaveRows<V>;
  using StageCarry = Carry<V>;
  using RingLanes = typename KeyPipeline<V>::Lanes;

  const Workgroup<V> wg;
  const KeyPipeline<V> pipeline;
  const Epilogue<V, Logits> epilogue;

  __device__ Fp8MqaLogitsGfx950(const KernelArgs& args, uint8_t* lds_base)
      : wg(args, lds_base), pipeline(wg), epilogue(wg) {}

  // ---------------------------------------------------------------------------------------------
  // The wave's rows of a segment: Q A-fragments and weights into VGPRs, output row addresses.
  // ---------------------------------------------------------------------------------------------
  __device__ void load_rows(Rows& rows) const {
    const KernelArgs& args = wg.args;
    const int4* segment_rows = wg.template at<int4>(Lds::segment_rows);
    int4 info[kRowsPerWave];
#pragma unroll
    for (int r = 0; r < kRowsPerWave; ++r) {
      const int4 v = segment_rows[wave_row_slot(V::geometry(), wg.wave, r)];
      info[r] = make_int4(uniform(v.x), uniform(v.y), uniform(v.z), 0);
      rows.valid[r] = info[r].x >= 0;
      const int row = rows.valid[r] ? info[r].x : 0;
      // The compressed layout counts columns from the window's first key s_m (info.y): the row's
      // key 0 sits s_m columns before the row (never stored: only keys >= s_m are).
      const int column_shift = kCompressed ? info[r].y : 0;
      rows.out_row[r] = uint64_t(args.out) +
                        (uint64_t(row) * uint64_t(args.out_stride) - uint64_t(column_shift)) * sizeof(Element);
      rows.key_limit[r] = kCompressed ? info[r].y + args.out_columns : args.N;
    }
#pragma unroll
    for (int p = 0; p < kPairsPerWave; ++p) {
      rows.window_addr[p] = uint32_t(
          Lds::segment_rows + 16 * wave_row_slot(V::geometry(), wg.wave, 2 * p + (wg.lane < 32 ? 0 : 1)));
      if constexpr (V::kPackedRows) {
        // One resource for the pair's two rows (Epilogue::store_pair_at_once), at the lower present
        // row's key 0; a missing row's lanes are out of range (both missing: all of them). The
        // launcher keeps the offsets within the resource's kPairRecords (launch_plan.h,
        // pair_stores_reach).
        const uint64_t a = rows.out_row[2 * p], b = rows.out_row[2 * p + 1];
        const bool valid_a = rows.valid[2 * p], valid_b = rows.valid[2 * p + 1];
        rows.pair_base[p] = !valid_b || (valid_a && a < b) ? a : b;
        const bool row_b = wg.lane >= 32;
        const uint64_t mine = row_b ? b : a;
        const int key = kTileCols * wave_subtile(V::geometry(), wg.wave, 0) + wg.lane % 32;  // of the stage
        rows.pair_offset[p] = (row_b ? valid_b : valid_a)
                                  ? uint32_t(mine - rows.pair_base[p]) + uint32_t(key) * sizeof(Element)
                                  : kOutOfRange;
      }
    }
#pragma unroll
    for (int t = 0; t < kTilesPerWave; ++t) {
      // The lane's A row m is row tile_row(t, m) of the wave: the tile's one row (H >= 32) or, at
      // H = 16, its first or second row by m's parity (selected, not indexed: rows are registers).
      const int m = wg.lane % 32;
      const int r_even = tile_row(V::geometry(), t, 0), r_odd = tile_row(V::geometry(), t, 1);
      const int row_even = rows.valid[r_even] ? info[r_even].x : 0;  // a missing row computes on row 0, never stored
      const int row_odd = rows.valid[r_odd] ? info[r_odd].x : 0;
      const int row = (m & 1) ? row_odd : row_even;
      const int head = tile_head(V::geometry(), t, m);
      const uint8_t* q_row = args.q + (int64_t(row) * V::kHeads + head) * V::kHeadDim;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const v4i lo = *reinterpret_cast<const v4i*>(q_row + frag_chunk(wg.lane, s, 0) * kChunkBytes);
        const v4i hi = *reinterpret_cast<const v4i*>(q_row + frag_chunk(wg.lane, s, 1) * kChunkBytes);
        rows.q_frag[t][s] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
      }
      // Element v's A row c_row(lane, v) has v's parity, so its row is known per v.
#pragma unroll
      for (int v = 0; v < 16; ++v) {
        const int r = tile_row(V::geometry(), t, v % 2);
        const int row_v = rows.valid[r] ? info[r].x : 0;
        const float* w_row = args.weights + int64_t(row_v) * args.weights_stride + tile_head(V::geometry(), t, 0);
        rows.weights[t][v / 4][v % 4] = w_row[c_row(wg.lane, v) / V::kGeometry.rows_per_tile];
      }
    }
    // Q and w must be in registers before the loop: the compiler's own wait for them lands here,
    // and the explicit vmcnt(0) also retires the prologue DMAs, whose count the loop's hand-placed
    // waits do not model.
#pragma unroll
    for (int t = 0; t < kTilesPerWave; ++t) {
      if constexpr (kSteps == 2)
        asm volatile("" : "+v"(rows.q_frag[t][0]), "+v"(rows.q_frag[t][1]), "+v"(rows.weights[t][0]),
                     "+v"(rows.weights[t][1]), "+v"(rows.weights[t][2]), "+v"(rows.weights[t][3]));
      else
        asm volatile("" : "+v"(rows.q_frag[t][0]), "+v"(rows.weights[t][0]), "+v"(rows.weights[t][1]),
                     "+v"(rows.weights[t][2]), "+v"(rows.weights[t][3]));
    }
    asm volatile("s_waitcnt vmcnt(0)" ::: "memory");
  }

  // ---------------------------------------------------------------------------------------------
  // One stage of one wave, software-pipelined over its tile-steps n = (sub-tile j, tile t):
  //   step n: MFMAs of tile-step n, then the epilogue of tile-step n - 1
  // and step 0 takes the previous stage's last epilogue (carried in `carry`). Every epilogue thus
  // starts >= 21 instructions after the MFMA that wrote its accumulator (>= 20 VALU of the
  // preceding epilogue + 1 MFMA; a 16-pass MFMA result needs 19-20 wait states), so the loop needs
  // no s_nop, and two accumulators alternate. The row-pair tails a sub-tile's last epilogue
  // completes run one step later: their permlane asm alone in a scheduling region at the head of
  // the step (so the next instruction is an MFMA or scalar/memory op, never a VALU touching the
  // asm's registers, which the compiler would pad), their scale/mask/stores inside the step
  // (tail_group_step, geometry.h). H=32 thus stores sub-tile 0 in step 5 and sub-tile 1 in the
  // next stage's step 1; H=64 (one pair per sub-tile) stores both in the next stage's step 1: the
  // deferred tail; H=16 (two groups per sub-tile) stores sub-tile 0's four pairs in step 5 and
  // sub-tile 1's in the next stage's step 1.
  // sched_group_barrier pins MFMA, 12 VALU, MFMA, the rest of the VALU (D = 64: MFMA, the VALU);
  // sched_barrier separates.
  // ---------------------------------------------------------------------------------------------
  template <bool MASKED>
  __device__ __forceinline__ void stage_body(int stage_key, int slot, const Rows& rows,
                                             const RingLanes& ring_lanes,
                                             const StoreLanes& store_lanes,
                                             StageCarry& carry) const {
    constexpr int kTiles = kTilesPerWave;
    constexpr int kTileSteps = kSubTiles * kTiles;
    const int slot_offset = pipeline.slot_offset(slot);
    // The stage's kv_scales are read in step 2, once step 1's deferred tails have used the carried
    // ones (so the two share registers: read at the top, the carried copy took a v_mov per stage)
    // and before step 5's tails use them.
    constexpr int kScaleReadStep = 2;
    static_assert(scale_read_fits(V::geometry(), kScaleReadStep), "a tail uses the scales before they are read");
    float scale[kSubTiles];
    v8i b[kSubTiles][kSteps];
    pipeline.read_b(b[0], slot_offset, 0, ring_lanes);
    float part[kSubTiles][kChainSets][2];
    v16f acc[2];
#pragma unroll
    for (int n = 0; n < kTileSteps; ++n) {
      const int j = n / kTiles, t = n % kTiles;
      // Tails completed by the previous step's epilogue: the asm first, alone in its region.
      bool pending[kTails / 2] = {};
#pragma unroll
      for (int k = 0; k < kTails / 2; ++k) {
        if (n != tail_group_step(V::geometry(), k)) continue;
        if (epilogue.tail_deferred(k))
          epilogue.reduce_group(k, carry.part, carry.scale);
        else
          epilogue.reduce_group(k, part, scale);
        pending[k] = true;
      }
      __builtin_amdgcn_sched_barrier(0);
      if (n == kScaleReadStep)
#pragma unroll
        for (int j = 0; j < kSubTiles; ++j) scale[j] = pipeline.read_scale(slot_offset, j, ring_lanes);
      v16f x = {};
#pragma unroll
      for (int s = 0; s < kSteps; ++s)
        x = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(rows.q_frag[t][s], b[j][s], x, 0, 0, 0,
                                                            0, 0, 0);
      acc[n & 1] = x;
      // Next sub-tile's B into the same registers once this sub-tile's last MFMAs have issued;
      // its LDS latency hides under this step's epilogue.
      if (t == kTiles - 1 && j + 1 < kSubTiles) pipeline.read_b(b[j + 1], slot_offset, j + 1, ring_lanes);
      if (n == 0) {
        epilogue.accumulate(carry.acc, kTiles - 1, rows, carry.part[kSubTiles - 1]);
      } else {
        const int m = n - 1;
        epilogue.accumulate(acc[m & 1], m % kTiles, rows, part[m / kTiles]);
      }
#pragma unroll
      for (int k = 0; k < kTails / 2; ++k) {
        if (!pending[k]) continue;
        if (epilogue.tail_deferred(k))
          epilogue.template store_group<MASKED>(k, carry.part, carry.scale, carry.stage_key,
                                                carry.live, rows, store_lanes);
        else
          epilogue.template store_group<MASKED>(k, part, scale, stage_key, true, rows, store_lanes);
      }
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        __builtin_amdgcn_sched_group_barrier(0x008, 1, 0);                     // MFMA, step s
        if (s + 1 < kSteps) __builtin_amdgcn_sched_group_barrier(0x002, 12, 0);  // VALU
      }
      if (t == kTiles - 1 && j + 1 < kSubTiles)
        __builtin_amdgcn_sched_group_barrier(0x100, 2 * kSteps, 0);  // next B, after its last use
      __builtin_amdgcn_sched_group_barrier(0x002, 64, 0);  // all remaining VALU
      __builtin_amdgcn_sched_barrier(0);
    }
    carry.acc = acc[(kTileSteps - 1) & 1];
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      carry.scale[j] = scale[j];
#pragma unroll
      for (int r = 0; r < kChainSets; ++r) {
        carry.part[j][r][0] = part[j][r][0];
        carry.part[j][r][1] = part[j][r][1];
      }
    }
    carry.stage_key = stage_key;
    carry.live = true;
  }

  // The last stage's deferred work, after the loop (masked form: correct for any stage).
  __device__ __forceinline__ void finish_last_stage(const Rows& rows, const StoreLanes& store_lanes,
                                                    StageCarry& carry) const {
    epilogue.accumulate(carry.acc, kTilesPerWave - 1, rows, carry.part[kSubTiles - 1]);
#pragma unroll
    for (int k = 0; k < kTails / 2; ++k)
      if (epilogue.tail_deferred(k)) {
        epilogue.reduce_group(k, carry.part, carry.scale);
        epilogue.template store_group<true>(k, carry.part, carry.scale, carry.stage_key, carry.live,
                                            rows, store_lanes);
      }
  }

  // Stages [begin, end) with one body. Every iteration: hand-placed wait, barrier, loads of stage
  // i + D into the slot read last iteration, then the body.
  template <bool MASKED>
  __device__ __forceinline__ void stage_loop(const BlockFacts& block, int begin, int end,
                                             int stage_end, int& read_slot, const Rows& rows,
                                             const RingLanes& ring_lanes,
                                             const StoreLanes& store_lanes,
                                             StageCarry& carry) const {
    for (int i = begin; i < end; ++i) {
      const int write_slot = pipeline.previous_slot(read_slot);
      pipeline.issue_in_loop(
          pipeline.stage_load(block.first_key, i + kPrefetchDepth, stage_end, write_slot), ring_lanes);
      stage_body<MASKED>(block.first_key + i * kStageKeys, read_slot, rows, ring_lanes, store_lanes,
                         carry);
      read_slot = pipeline.next_slot(read_slot);
    }
  }

  // Compute stages [stage_begin, stage_end) of a block, and, where the variant does
  // (fill_between_stages), its fill units [fill_begin, fill_end) between them (FillSchedule,
  // plan.h): the stages run in pieces, each a masked head, clean run and masked tail cut to the
  // piece, and the fill units due come before each piece, so their stores drain while the next
  // stages compute. Across a piece's end only the rows, the carry and the ring slot are live, so
  // the fill's registers come from the loop's temporaries. Its stores count in vmcnt as the loop's
  // do (gfx9 has one counter): the hand-placed waits of the next prefetch_stages iterations wait
  // for that many more ops, later, never early (test_gfx950_layout); for those iterations the ring
  // is in effect shallower by less than a stage per unit (a float unit is 4 stores per wave, a
  // stage 6-11 VMEM ops). The compressed layout has no fill units, so its runs are not cut.
  __device__ void compute_stages(const BlockFacts& block, int stage_begin, int stage_end, int fill_begin,
                                 int fill_end, const RingLanes& ring_lanes, const StoreLanes& store_lanes) const {
#pragma unroll
    for (int d = 0; d < kPrefetchDepth; ++d)
      pipeline.issue_prologue(pipeline.stage_load(block.first_key, stage_begin + d, stage_end, d),
                              ring_lanes);
    Rows rows;
    load_rows(rows);
    StageCarry carry;
    carry.acc = v16f{};
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      carry.scale[j] = 0.f;
#pragma unroll
      for (int r = 0; r < kChainSets; ++r) carry.part[j][r][0] = carry.part[j][r][1] = 0.f;
    }
    carry.stage_key = 0;
    carry.live = false;
    const StageRange clean = clean_stages(block, kStageKeys, stage_begin, stage_end);
    int read_slot = 0;  // slot of stage i; stage i + D goes to the slot read last iteration
    if constexpr (kCompressed || !V::kGeometry.fill_between_stages) {
      stage_loop<true>(block, stage_begin, clean.begin, stage_end, read_slot, rows, ring_lanes,
                       store_lanes, carry);
      stage_loop<false>(block, clean.begin, clean.end, stage_end, read_slot, rows, ring_lanes,
                        store_lanes, carry);
      stage_loop<true>(block, clean.end, stage_end, stage_end, read_slot, rows, ring_lanes,
                       store_lanes, carry);
    } else {
      const FillSchedule fill{stage_begin, stage_end, fill_begin, fill_end};
      int filled = fill_begin;
      for (int i = stage_begin; i < stage_end;) {
        const int due = fill.due_before(i);
        if (filled < due) fill_neg_inf<V, Element>(wg, block.fill(), filled, due);
        filled = due;
        const int next = fill.next_break(i);
        stage_loop<true>(block, i, min(next, clean.begin), stage_end, read_slot, rows, ring_lanes,
                         store_lanes, carry);
        stage_loop<false>(block, max(i, clean.begin), min(next, clean.end), stage_end, read_slot, rows,
                          ring_lanes, store_lanes, carry);
        stage_loop<true>(block, max(i, clean.end), next, stage_end, read_slot, rows, ring_lanes,
                         store_lanes, carry);
        i = next;
      }
    }
    finish_last_stage(rows, store_lanes, carry);
    pipeline.drain();
  }

  // Units [unit_begin, unit_end) of block b: its compute stages, with the fill units between them
  // where the variant does (COMPUTE), or the fill units that pass leaves (fill_between_stages:
  // those of a segment without stages; else all).
  template <bool COMPUTE>
  __device__ void segment(int b, int unit_begin, int unit_end, bool balanced,
                          const RingLanes& ring_lanes, const StoreLanes& store_lanes) const {
    const BlockFacts block = setup_block(wg, b, balanced);
    const scheduler::SegmentParts parts = segment_parts(block, unit_begin, unit_end);
    const bool computes = parts.tile_begin < parts.tile_end;
    if constexpr (COMPUTE) {
      if (computes)
        compute_stages(block, int(parts.tile_begin), int(parts.tile_end), int(parts.fill_begin),
                       int(parts.fill_end), ring_lanes, store_lanes);
      else
        sync_threads();
    } else {
      if (parts.fill_begin < parts.fill_end && !(computes && V::kGeometry.fill_between_stages))
        fill_neg_inf<V, Element>(wg, block.fill(), int(parts.fill_begin), int(parts.fill_end));
      sync_threads();
    }
  }

  // The segments of this workgroup's units, one pass for the compute, one for the fill left, so
  // that each pass's code (the stage loops above all) exists once per kernel and the fill-only
  // segments stay out of the stage loops' live ranges.
  template <bool COMPUTE>
  __device__ void pass(bool balanced, int blocks, int fixed_block, UnitRange units,
                       const RingLanes& ring_lanes, const StoreLanes& store_lanes) const {
    const int* block_units_prefix = wg.template at<int>(Lds::block_units_prefix);
    for_each_segment(
        balanced, blocks, fixed_block, units,
        [&](int b) { return uniform(block_units_prefix[b]); },
        [&](int b, int unit_begin, int unit_end) {
          segment<COMPUTE>(b, unit_begin, unit_end, balanced, ring_lanes, store_lanes);
        });
  }

  __device__ void run() const {
    const KernelArgs& args = wg.args;
    // First, before anything of the compute is live: the tails are plain stores (fill.h).
    if (kCompressed && args.compressed_tails) fill_compressed_tails<V, Element>(wg);
    const RingLanes ring_lanes = pipeline.lanes();
    const StoreLanes store_lanes = epilogue.lanes();
    const int blocks = (args.M + V::kGeometry.block_rows - 1) / V::kGeometry.block_rows;
    const bool balanced = args.fixed_grid_splits == 0;
    int fixed_block = 0;
    UnitRange units;
    if (balanced) {
      build_balanced_plan(wg, blocks);
      const int total = uniform(wg.template at<int>(Lds::block_units_prefix)[blocks]);
      units = unit_share(total, args.num_workgroups, __builtin_amdgcn_workgroup_id_x());
    } else {
      fixed_block = fixed_grid_block(blocks, __builtin_amdgcn_workgroup_id_x(), args.reverse_blocks);
      const int block_units = setup_block(wg, fixed_block, false).units();
      sync_threads();  // setup_block's row table is rebuilt by the first segment
      units = unit_share(block_units, args.fixed_grid_splits, __builtin_amdgcn_workgroup_id_y());
    }
    if (units.begin >= units.end) return;
    pass<true>(balanced, blocks, fixed_block, units, ring_lanes, store_lanes);
    pass<false>(balanced, blocks, fixed_block, units, ring_lanes, store_lanes);
  }
};

template <class V, class Logits>
__device__ __forceinline__ void fp8_mqa_logits_gfx950_body(const KernelArgs& args) {
  __shared__ __attribute__((aligned(1024))) uint8_t lds[LdsLayout<V>::bytes];
  Fp8MqaLogitsGfx950<V, Logits>(args, lds).run();
}

}  // namespace gfx950
}  // namespace aiter


// One instance (instances.h lists them): the kernel, under a plain name that the ISA checker and
// profilers find, and its host launch on the grid the launcher planned. The layout is a template
// parameter so that the full layout's stage loop keeps one shared range limit per row pair (the
// compressed one needs a limit per row).
#define GFX950_DEFINE_INSTANCE(NAME, H, D, SMALL, ELEMENT, COMPRESSED)                              \
  extern "C" __global__ __launch_bounds__(aiter::gfx950::kThreads) void NAME(                      \
      aiter::gfx950::KernelArgs args) {                                                             \
    aiter::gfx950::fp8_mqa_logits_gfx950_body<aiter::gfx950::Variant<H, D, SMALL>,                  \
                                              aiter::LogitsFormat<ELEMENT, COMPRESSED>>(args);       \
  }                                                                                                 \
  const char* aiter::gfx950::launch_##NAME(const KernelArgs& args, void* stream) {                  \
    hipLaunchKernelGGL(NAME, dim3(args.grid_x, args.grid_y), dim3(kThreads), 0,                     \
                       static_cast<hipStream_t>(stream), args);                                     \
    const hipError_t err = hipGetLastError();                                                       \
    return err == hipSuccess ? nullptr : hipGetErrorString(err);                                    \
  }
