// gfx950 fp8_mqa_logits: the -inf fill. With clean_logits, the columns of a block's rows that its
// compute stages do not write are set to -inf here, in fill units of fill_cols columns.
//
//   logits[m, n] = -inf   for n outside [s_m, e_m), when clean_logits
//   the stages write keys [first_key, covered_end) of every row of the block (masked stages store
//   -inf for the keys outside a row's window); the fill writes the other fill_keys columns,
//   f -> fill_key(f) (common/work_scheduler.h): left of first_key first, then right of covered_end.
//
// Layouts touched: out [M, N] fp32 rows through a per-row buffer resource (num_records N * 4, 0 for
// a block position past M, so the hardware drops those stores); the block's segment_rows in LDS.
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
template <int H, bool SMALL>
__device__ void fill_neg_inf(const Workgroup<H, SMALL>& wg, const BlockFacts& block,
                             int unit_begin, int unit_end) {
  using V = Variant<H, SMALL>;
  const KernelArgs& args = wg.args;
  const int4* rows = wg.template at<int4>(LdsLayout<H, SMALL>::segment_rows);
  for (int u = unit_begin; u < unit_end; ++u) {
    for (int slot = 0; slot < V::kGeometry.block_rows; ++slot) {
      const int row = uniform(rows[slot].x);
      const v4i rsrc = make_rsrc(uint64_t(args.out) + uint64_t(row < 0 ? 0 : row) *
                                                          uint64_t(args.out_stride) * 4u,
                                 row >= 0 ? uint32_t(args.N) * 4u : 0u);
      for (int k = 0; k < V::kGeometry.fill_cols / kThreads; ++k) {
        const int f = u * V::kGeometry.fill_cols + k * kThreads + wg.tid;
        const uint32_t offset = f < block.fill_keys
                                    ? uint32_t(scheduler::fill_key(block.span(), f)) * 4u
                                    : kOutOfRange;
        buffer_store_f32(-__builtin_inff(), rsrc, offset, 0, 0);
      }
    }
  }
}

}  // namespace gfx950
}  // namespace aiter
