// gfx950 fp8_mqa_logits: the launch plan, host only. Balanced plan or fixed grid, the grid, and for
// the fixed grid its number of splits per block from a makespan model.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// Balanced (default, M <= plan_rows): one workgroup per CU; the device builds the plan from the
// real windows (plan.h). Fixed grid (the caller's fixed_grid_splits > 0, or M beyond the plan's
// capacity): grid (blocks, splits), block x processed in reverse order, each block's units cut into
// `splits` contiguous shares; without a caller's value, the split minimising the modelled makespan
// of a single causal request. Layouts touched: none (counts only).
// Why a model: above kPlanMaxRows the windows are not read on the host (no device sync), so the
// split is chosen for the layout the model assumes (one causal request), priced with the same
// CostModel (cost_model.h) and share arithmetic (common/work_scheduler.h) as the kernel.
// H = 16 stores a row pair through one buffer resource (epilogue.h, store_pair_at_once), whose
// offsets must stay within its num_records, kPairRecords = 2^31 - 4: the balanced plan may pair
// any two rows, so it takes an output within that span; the fixed grid pairs adjacent rows.
#pragma once
#include <stdint.h>

#include "common/work_scheduler.h"
#include "gfx950/cost_model.h"
#include "gfx950/geometry.h"
#include "gfx950/layout.h"

#if defined(__HIP_DEVICE_COMPILE__)
#error "gfx950/launch_plan.h is host code"
#endif

namespace aiter {
namespace gfx950 {

struct LaunchPlan {
  bool small;              // the M <= kSmallMaxRows variant
  bool balanced;           // the device-built balanced plan; else the fixed grid
  int blocks;              // natural blocks of block_rows rows
  int grid_x;
  int grid_y;
  int fixed_grid_splits;   // shares per block of the fixed grid (grid_y); 0 when balanced
  bool reverse_blocks;     // fixed grid: workgroup x takes block blocks - 1 - x (longest first)
};

// Modelled makespan, in units, of the fixed grid for a single causal request (ke = N - M + row + 1,
// the layout the model assumes): workgroups in dispatch order (x = blocks,
// longest first, fastest; then y), each to the CU that frees first (one per CU: list scheduling);
// a workgroup costs its stages and fill units, plus the start overhead when it computes.
inline double fixed_grid_makespan(Geometry geometry, int64_t M, int64_t N, int splits, int num_cus,
                                  bool clean) {
  constexpr int kMaxCus = 1024;
  double cu_free_at[kMaxCus];  // min-heap of CU free times
  const int cus = num_cus < 1 ? 1 : (num_cus > kMaxCus ? kMaxCus : num_cus);
  for (int i = 0; i < cus; ++i) cu_free_at[i] = 0;
  const scheduler::CostModel model = cost_model(geometry, N, clean);
  const int64_t blocks = (M + geometry.block_rows - 1) / geometry.block_rows;
  double makespan = 0;
  for (int y = 0; y < splits; ++y)
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t last_row = (b + 1) * geometry.block_rows < M ? (b + 1) * geometry.block_rows : M;
      auto keys = scheduler::BlockUnion<>::empty_within(N);  // causal rows: windows [0, N - M + row + 1), the last the widest
      keys.add(scheduler::row_window(0, N - M + last_row, N));
      const scheduler::BlockPrice price = scheduler::price_block(model, keys.range());
      const scheduler::SegmentParts parts =
          block_parts(price, scheduler::share_begin(price.total(), splits, y),
                      scheduler::share_begin(price.total(), splits, y + 1));
      const int64_t tiles = parts.tile_end - parts.tile_begin;
      const double cost = double(tiles + (parts.fill_end - parts.fill_begin) +
                                 (tiles ? price.overhead : 0));
      const double t = cu_free_at[0] + cost;  // replace the root, sift down
      makespan = t > makespan ? t : makespan;
      int i = 0;
      for (;;) {
        int c = 2 * i + 1;
        if (c >= cus) break;
        if (c + 1 < cus && cu_free_at[c + 1] < cu_free_at[c]) ++c;
        if (cu_free_at[c] >= t) break;
        cu_free_at[i] = cu_free_at[c];
        i = c;
      }
      cu_free_at[i] = t;
    }
  return makespan;
}

inline int choose_fixed_grid_splits(Geometry geometry, int64_t M, int64_t N, int num_cus, bool clean) {
  constexpr int kCandidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
  int best = 1;
  double best_makespan = 0;
  for (int splits : kCandidates) {
    const double t = fixed_grid_makespan(geometry, M, N, splits, num_cus, clean);
    if (splits == 1 || t < best_makespan * 0.999) {  // better by 0.1%: prefer fewer workgroups
      best = splits;
      best_makespan = t;
    }
  }
  return best;
}

// Whether a variant's row pairs `rows_apart` rows apart are reachable by its stores: always, but
// at H = 16 (one resource per pair) only while the two rows' distance (compressed: minus their
// window starts, below N) plus a stage's columns stays within the pair resource's kPairRecords =
// 2^31 - 4 bytes.
inline bool pair_stores_reach(Geometry geometry, int64_t rows_apart, int64_t out_stride, int64_t N,
                              int element_bytes) {
  return geometry.rows_per_tile == 1 ||
         (rows_apart * out_stride + N + kSubTiles * kTileCols) * element_bytes <= int64_t(kPairRecords);
}

// fixed_grid_splits <= 0: the balanced plan when M fits it (and, at H = 16, the output's span
// its pair stores), else the model's split. out_stride: the output's row stride in elements.
inline LaunchPlan plan_launch(int64_t M, int64_t N, int heads, int head_dim, int64_t out_stride,
                              int element_bytes, int fixed_grid_splits, int num_cus, bool clean) {
  LaunchPlan plan{};
  plan.small = M <= kSmallMaxRows;
  const Geometry geometry = geometry_of(heads, plan.small, head_dim);
  plan.blocks = int((M + geometry.block_rows - 1) / geometry.block_rows);
  plan.balanced = fixed_grid_splits <= 0 && M <= geometry.plan_rows &&
                  pair_stores_reach(geometry, M - 1, out_stride, N, element_bytes);
  plan.reverse_blocks = true;
  const int cus = num_cus > 0 ? num_cus : 1;
  if (plan.balanced) {
    plan.fixed_grid_splits = 0;
    plan.grid_x = cus;
    plan.grid_y = 1;
  } else {
    plan.fixed_grid_splits = fixed_grid_splits > 0
                                 ? fixed_grid_splits
                                 : choose_fixed_grid_splits(geometry, M, N, cus, clean);
    plan.grid_x = plan.blocks;
    plan.grid_y = plan.fixed_grid_splits;
  }
  return plan;
}

}  // namespace gfx950
}  // namespace aiter
