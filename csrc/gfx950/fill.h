// gfx950 fp8_mqa_logits: the -inf fill. With clean_logits, the columns of a block's rows that its
// compute stages do not write are set to -inf here, in fill units of fill_cols columns (full
// layout), or each row's tail past its window's keys (compressed layout: compressed_tails).
//
//   logits[m, n] = -inf   for n outside [s_m, e_m), when clean_logits
//   the stages write keys [first_key, covered_end) of every row of the block (masked stages store
//   -inf for the keys outside a row's window); the fill writes the other fill_keys columns,
//   f -> fill_key(f) (common/work_scheduler.h): left of first_key first, then right of covered_end.
//
// Layouts touched: out [M, N] rows of Element (float or bfloat16) through a per-row buffer resource
// (num_records N x element bytes, 0 for a block position past M, so the hardware drops those
// stores), or [M, out_columns] in the compressed layout; the block's segment_rows in LDS.
// Why units: a fill unit is priced like one compute stage (tunables.h, kFillUnitElems), so a
// workgroup's even share of units is an even share of time whether it fills or computes.
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "common/work_scheduler.h"
#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/plan.h"
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

// Fill units [unit_begin, unit_end) of the block (0-based among its fill units); all threads.
// A unit is fill_cols columns of each of the block's rows: row by row with all 512 threads, or,
// where a row has fewer columns (fill_cols < 512: H = 16 at D = 128, 64-row blocks), several rows
// at once, whole waves per row so that each row's resource stays wave-uniform.
template <class V, typename Element>
__device__ void fill_neg_inf(const Workgroup<V>& wg, const BlockFacts& block, int unit_begin,
                             int unit_end) {
  constexpr uint32_t kElementBytes = sizeof(Element);
  constexpr int kFillCols = V::kGeometry.fill_cols;
  constexpr int kRowThreads = kFillCols < kThreads ? kFillCols : kThreads;
  constexpr int kRowsAtOnce = kThreads / kRowThreads;
  const KernelArgs& args = wg.args;
  const int4* rows = wg.template at<int4>(LdsLayout<V>::segment_rows);
  const int row_of_wave = kRowsAtOnce == 1 ? 0 : wg.wave / (kRowThreads / kLanes);
  const int column_of_thread = kRowsAtOnce == 1 ? wg.tid : wg.tid % kRowThreads;
  for (int u = unit_begin; u < unit_end; ++u) {
    for (int slot0 = 0; slot0 < V::kGeometry.block_rows; slot0 += kRowsAtOnce) {
      const int row = uniform(rows[slot0 + row_of_wave].x);
      const v4i rsrc = make_rsrc(uint64_t(args.out) + uint64_t(row < 0 ? 0 : row) *
                                                          uint64_t(args.out_stride) * kElementBytes,
                                 row >= 0 ? uint32_t(args.N) * kElementBytes : 0u);
      for (int k = 0; k < kFillCols / kRowThreads; ++k) {
        const int f = u * kFillCols + k * kRowThreads + column_of_thread;
        const uint32_t offset = f < block.fill_keys
                                    ? uint32_t(scheduler::fill_key(block.span(), f)) * kElementBytes
                                    : kOutOfRange;
        buffer_store_logit<Element>(-__builtin_inff(), rsrc, offset);
      }
    }
  }
}

// The compressed layout's tails with clean_logits: row m's columns [keys_m, out_columns), keys_m =
// e_m - s_m cut at out_columns (an empty row is all tail). The compute stores columns [0, keys_m)
// only, so the two never meet. Not on the plan (its rows' prices have no fill units): workgroup w
// of the W in the grid takes rows w, w + W, ... whole, all 512 threads on one row's contiguous run,
// before its compute (nothing of it is live yet). The grid comes from the arguments: reading
// gridDim (implicit kernel arguments) made the compiler spill in the stage loops (ISA check).
template <class V, typename Element>
__device__ void fill_compressed_tails(const Workgroup<V>& wg) {
  constexpr uint32_t kElementBytes = sizeof(Element);
  const KernelArgs& args = wg.args;
  const int workgroups = args.grid_x * args.grid_y;
  const int workgroup = int(__builtin_amdgcn_workgroup_id_x() + __builtin_amdgcn_workgroup_id_y() * args.grid_x);
  const uint32_t columns = uint32_t(args.out_columns);
  for (int m = workgroup; m < args.M; m += workgroups) {
    const scheduler::KeyRange window = scheduler::row_window(args.ks[m], args.ke[m], args.N);
    const int keys = uniform(int(window.size() < int64_t(columns) ? window.size() : int64_t(columns)));
    const v4i rsrc = make_rsrc(uint64_t(args.out) + uint64_t(m) * uint64_t(args.out_stride) * kElementBytes,
                               columns * kElementBytes);
    for (int column = keys + wg.tid; column < int(columns); column += kThreads)
      buffer_store_logit<Element>(-__builtin_inff(), rsrc, uint32_t(column) * kElementBytes);
  }
}

}  // namespace gfx950
}  // namespace aiter
