// The -inf fill (clean_logits), written by warps 1-3 of the producer warpgroup while the math
// warpgroups compute: in the full layout the columns outside each block's compute tiles, in the
// compressed layout each row's tail (the columns past its window's keys).
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//                  -inf elsewhere (clean_logits)
//
// Tensors: ks, ke [M] int32 (read); out [M, N] f32 or bf16, or [M, max_seqlen_k] (compressed), row
// stride out_stride (written: -inf only).
//
// Why here and not in a second pass (or a torch.full first): the fill is pure store bandwidth, which
// the math warpgroups leave mostly idle, so the -inf columns are written while the tensor cores work.
// The columns inside a block's compute tiles but outside a row's window get their -inf from the
// epilogue (epilogue.cuh), which owns them.
#pragma once
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/common/store.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// The fill units of a block are its column tiles outside the compute span (scheduler: fill unit u
// stands for fill keys [64 u, 64 u + 64), and scheduler::fill_key maps fill keys to columns: left of
// the span first, then right of it). This CTA's share of them is written row by row in contiguous
// runs: a long run by all three warps (1.5 KiB per store round), a short one (up to kFillShortRun
// columns) by one warp, so three rows go at once and a run costs one warp's loop overhead.
// The row windows of kFillBatchBlocks blocks are loaded at once, one row per fill thread (one round
// of independent loads), and each block's union is folded from shared memory in the walk: near the
// end of a causal chunk a CTA's share spans hundreds of blocks of a tile or two each, and dependent
// loads per block would make the walk latency-bound. This shape of the walk also matters to the
// math warpgroups: with a per-block derivation on one thread here, ptxas schedules the H=64
// epilogue's relu FADDs below the k_empty arrive and the first-tile branch instead of right after
// the wgmma wait, which slows every H=64 row. Check that schedule in the SASS (python -m
// dev.isa.check --arch sm_90a reports it) when this function changes.
template <int H, int D, class Logits>
__device__ void fill_outside_windows(const KernelArgs& args, SharedStorage& smem, int tid) {
  using Element = typename Logits::Element;
  using Shape = BlockShape<H>;
  constexpr int kRows = Shape::kRowsPerBlock;
  constexpr int kWarps = kFillThreads / 32;
  static_assert(Shape::kFillBatchBlocks * kRows <= kFillThreads, "SharedStorage::fill_window holds a batch");
  const scheduler::CostModel model = cost_model<H, D>(args);
  const PlanShare share = smem.plan_share[kFillList];
  int64_t block = share.block;
  int64_t units_left = block < 0 ? 0 : share.units;
  int64_t unit = share.offset;
  const bool vec_ok = rows_take_vectors<Element>(args.out, args.out_stride);
  const int64_t blocks = Shape::num_blocks(args);
  while (units_left > 0 && block < blocks) {
    if (tid < Shape::kFillBatchBlocks * kRows) {
      const int64_t m = block * kRows + tid;  // rows past M have no window
      const scheduler::KeyRange window = m < args.M ? load_row_window(args, m) : scheduler::KeyRange{0, 0};
      smem.fill_window[tid] = make_int2(static_cast<int>(window.begin), static_cast<int>(window.end));
    }
    fill_warps_sync();
    for (int batch = 0; batch < Shape::kFillBatchBlocks && units_left > 0 && block < blocks; ++batch, ++block) {
      // The block's union in 32 bits (windows lie in [0, N], N < 2^31), from the batch's windows.
      auto block_union = scheduler::BlockUnion<int>::empty_within(args.N);
#pragma unroll
      for (int row = 0; row < kRows; ++row) {
        const int2 window = smem.fill_window[batch * kRows + row];
        block_union.add(scheduler::KeyRange{window.x, window.y});
      }
      const scheduler::TileSpan span = scheduler::tile_span(model, block_union.range());
      const int64_t take = min(units_left, scheduler::price_block(model, span).fill - unit);
      // Fill units [unit, unit + take) as fill keys, then as at most two column runs.
      const int64_t fill_begin = unit * kKeysPerTile;
      const int64_t fill_end = min((unit + take) * kKeysPerTile, scheduler::fill_keys(model, span));
      const int64_t left_end = min(fill_end, span.first_key);
      const int64_t right_begin = max(fill_begin, span.first_key);
      const int runs[2][2] = {
          {static_cast<int>(fill_begin), static_cast<int>(left_end)},
          {static_cast<int>(scheduler::fill_key(span, right_begin)),
           static_cast<int>(scheduler::fill_key(span, right_begin) + (fill_end - right_begin))}};
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        const int begin = runs[part][0], end = runs[part][1];
        if (begin >= end) continue;
        const bool short_run = end - begin <= kFillShortRun;
#pragma unroll 1
        for (int row = short_run ? tid / 32 : 0; row < kRows; row += short_run ? kWarps : 1) {
          const int64_t m = block * kRows + row;
          if (m < args.M)
            fill_row_run(logits_out<Logits>(args) + m * args.out_stride, begin, end, short_run ? tid % 32 : tid,
                         short_run ? 32 : kFillThreads, vec_ok);
        }
      }
      units_left -= take;
      unit = 0;
    }
    fill_warps_sync();  // before the next batch overwrites fill_window
  }
}

// The compressed layout's tails: row m's columns [keys_m, out_columns), keys_m = e_m - s_m cut at
// out_columns (an empty row is all tail). The epilogue and the exact path store columns [0, keys_m),
// so the two never meet. Each of the three fill warps takes whole rows, m = warp + 3 (CTA + k grid):
// a tail is one contiguous run, and rows in turn spread long and short tails (a causal chunk's
// tails shrink row by row) evenly over the CTAs. Not on the plan (work.cuh: cost_model): it is pure
// store bandwidth beside the compute, as the full layout's fill is.
template <class Logits>
__device__ void fill_compressed_tails(const KernelArgs& args, int tid) {
  using Element = typename Logits::Element;
  constexpr int kWarps = kFillThreads / 32;
  const bool vec_ok = rows_take_vectors<Element>(args.out, args.out_stride);
  const int lane = tid % 32;
  const int64_t step = int64_t(gridDim.x) * kWarps;
  for (int64_t m = int64_t(blockIdx.x) * kWarps + tid / 32; m < args.M; m += step) {
    const scheduler::KeyRange window = load_row_window(args, m);
    const int keys = static_cast<int>(min(window.size(), args.out_columns));
    fill_row_run(logits_out<Logits>(args) + m * args.out_stride, keys, static_cast<int>(args.out_columns), lane, 32,
                 vec_ok);
  }
}

}  // namespace sm90
}  // namespace aiter
