// The paged decode kernel's -inf tails (clean_logits): each row's columns past its batch's visible
// blocks, up to max_context_len, by warp 3 of the producer warpgroup while the math computes.
//
//   logits[b * next_n + j, p] = -inf   for visible_blocks x block_kv <= p < max_context_len (schedule.cuh)
//
// Tensors: context_lens (read, schedule.cuh); out [B * next_n, max_context_len] f32 or bf16, row stride
// out_stride (written: -inf only). The keys below that are the math warpgroups' (a -inf where a row
// sees fewer keys than its batch), so the two never meet.
// Not on the schedule: pure store bandwidth beside the loads. The warp takes whole rows, m = CTA,
// then + grid: a tail is one contiguous run.
#pragma once
#include <cstdint>

#include "sm90/common/store.cuh"
#include "sm90/paged/schedule.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

template <typename Element>
__device__ void fill_tails(const PagedArgs& args, int lane) {
  const bool vec_ok = rows_take_vectors<Element>(args.out, args.out_stride);
  const int64_t rows = args.batches * args.next_n;
  const int columns = static_cast<int>(args.max_context_len);
  for (int64_t m = blockIdx.x; m < rows; m += gridDim.x) {
    const int64_t covered = int64_t(visible_blocks(args, unclamped_batch_keys(args, m / args.next_n))) * args.block_kv;
    const int begin = static_cast<int>(min(covered, args.max_context_len));
    fill_row_run(static_cast<Element*>(args.out) + m * args.out_stride, begin, columns, lane, 32, vec_ok);
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
