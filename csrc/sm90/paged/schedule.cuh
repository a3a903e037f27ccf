// The paged decode kernel's view of the schedule: which batches, cache blocks and 64-key tiles a CTA
// computes, from the metadata op's shares (common/work_scheduler.h has the units and shares).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors read: context_lens [B] or [B, next_n] int32; schedule_meta [num_shares + 1, 2] int32 (row p:
// the (batch, block) where share p starts; row num_shares: (B, 0)).
// Why one header: the producer (which loads), the math warpgroups (which store, through the slot's
// facts) and the -inf tails must agree on every batch's visible blocks.
#pragma once
#include <cstdint>

#include "common/fp8_paged_mqa_logits_params.h"
#include "common/work_scheduler.h"
#include "sm90/paged/shape.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

using PagedArgs = Fp8PagedMqaLogitsParams;

// The most keys a row of batch b sees before the max_context_len clamp: what the metadata's units
// count (metadata.cuh), and with the clamp what the kernel reads.
constexpr int64_t kNoKeyLimit = int64_t(1) << 40;
__device__ __forceinline__ int64_t unclamped_batch_keys(const PagedArgs& args, int64_t b) {
  return scheduler::paged_batch_keys(args.context_lens, b, args.next_n, args.lens_per_row, kNoKeyLimit);
}

// Cache blocks the kernel reads of a batch with `batch_keys` (unclamped) keys: those below
// max_context_len (the clamp commutes with the max over rows); blocks past them are neither read nor
// stored.
__device__ __forceinline__ int visible_blocks(const PagedArgs& args, int64_t batch_keys) {
  return static_cast<int>(scheduler::ceil_div(min(batch_keys, args.max_context_len), args.block_kv));
}

// Records an out-of-range block_table[b, column] = value the kernel read (and did not use): the
// first thread to claim the record (its device word 0 -> 1) writes the fields into the host-mapped
// record, fences at system scope, then sets `found`, so a host that sees `found` sees the fields.
// A caller bug, so this is the cold path of a branch.
__device__ __forceinline__ void report_bad_block(const PagedArgs& args, int64_t b, int64_t column, int32_t value) {
  if (atomicCAS(args.block_table_claim, 0, 1) != 0) return;
  volatile PagedBlockTableFault* fault = args.block_table_fault;
  fault->batch = static_cast<int32_t>(b);
  fault->column = static_cast<int32_t>(column);
  fault->value = value;
  fault->num_blocks = args.num_blocks;
  __threadfence_system();
  fault->found = 1;
}

// An int32 block id is a block of the cache when its unsigned value is below this: num_blocks,
// clamped to 2^31 (negative ids wrap to 2^31 and above), so that checking an id is one unsigned
// compare.
__device__ __forceinline__ uint32_t cache_block_limit(const PagedArgs& args) {
  return static_cast<uint32_t>(min(args.num_blocks, int64_t(1) << 31));
}

// This CTA's share as a walk over batches: batch b's blocks [first, last) of the share.
struct ShareWalk {
  int begin_batch, begin_block, end_batch, end_block;

  __device__ static ShareWalk of_cta(const PagedArgs& args) {
    const int32_t* meta = args.schedule_meta + 2 * blockIdx.x;  // rows of two int32 (4-byte aligned only)
    return ShareWalk{__ldg(meta), __ldg(meta + 1), __ldg(meta + 2), __ldg(meta + 3)};
  }
  // Whether batch b has blocks in the share (b >= begin_batch).
  __device__ bool holds(int b, int64_t batches) const {
    return b < batches && (b < end_batch || (b == end_batch && end_block > 0));
  }
  __device__ int64_t first_block(int b) const { return b == begin_batch ? begin_block : 0; }
  __device__ int64_t last_block(int b, int64_t units) const { return b == end_batch ? end_block : units; }
};

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
