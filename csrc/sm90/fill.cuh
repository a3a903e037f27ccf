// The -inf fill (clean_logits): the columns outside each block's compute tiles, written by warps 1-3
// of the producer warpgroup while the math warpgroups compute.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//                  -inf elsewhere (clean_logits)
//
// Tensors: ks, ke [M] int32 (read); out [M, N] f32, row stride out_stride (written: -inf only).
//
// Why here and not in a second pass (or a torch.full first): the fill is pure store bandwidth, which
// the math warpgroups leave mostly idle, so the -inf columns are written while the tensor cores work.
// The columns inside a block's compute tiles but outside a row's window get their -inf from the
// epilogue (epilogue.cuh), which owns them.
#pragma once
#include <cstdint>

#include "common/work_scheduler.h"
#include "sm90/shared_storage.cuh"
#include "sm90/work.cuh"

namespace aiter {
namespace sm90 {

// -inf over columns [begin, end) of one row by `threads` threads (this one is `thread`), 16-byte
// stores where the row allows. The 16-byte body goes with streaming stores (st.global.cs, like the
// epilogue's), so the output passes through L2 without evicting K and Q. Column indices are 32-bit: the launcher keeps N below
// 2^31 - 64.
__device__ __forceinline__ void fill_row_run(float* row, int begin, int end, int thread, int threads, bool vec_ok) {
  const float neg_inf = __int_as_float(0xff800000);
  if (vec_ok) {
    // Scalar head up to 16-byte alignment, vector body, scalar tail.
    const int body_begin = min(end, (begin + 3) & ~3), body_end = max(body_begin, end & ~3);
    for (int n = begin + thread; n < body_begin; n += threads) row[n] = neg_inf;
    float4* body = reinterpret_cast<float4*>(row + body_begin);
    const float4 neg_inf4 = make_float4(neg_inf, neg_inf, neg_inf, neg_inf);
    for (int v = thread; v < (body_end - body_begin) / 4; v += threads) __stcs(body + v, neg_inf4);
    for (int n = body_end + thread; n < end; n += threads) row[n] = neg_inf;
  } else {
    for (int n = begin + thread; n < end; n += threads) row[n] = neg_inf;
  }
}

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
// the wgmma wait, which slows every H=64 row (docs/performance.md, issue 9's A/B). Check that
// schedule in the SASS when this function changes.
template <int H>
__device__ void fill_outside_windows(const KernelArgs& args, SharedStorage& smem, int tid) {
  using Shape = BlockShape<H>;
  constexpr int kRows = Shape::kRowsPerBlock;
  constexpr int kWarps = kFillThreads / 32;
  static_assert(Shape::kFillBatchBlocks * kRows <= kFillThreads, "SharedStorage::fill_window holds a batch");
  const scheduler::CostModel model = cost_model(args);
  const PlanShare share = smem.plan_share[kFillList];
  int64_t block = share.block;
  int64_t units_left = block < 0 ? 0 : share.units;
  int64_t unit = share.offset;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(logits_f32(args)) % 16 == 0) && (args.out_stride % 4 == 0);
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
            fill_row_run(logits_f32(args) + m * args.out_stride, begin, end, short_run ? tid % 32 : tid,
                         short_run ? 32 : kFillThreads, vec_ok);
        }
      }
      units_left -= take;
      unit = 0;
    }
    fill_warps_sync();  // before the next batch overwrites fill_window
  }
}

}  // namespace sm90
}  // namespace aiter
