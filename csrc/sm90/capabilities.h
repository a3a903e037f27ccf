// What the Hopper backend serves: its support table (see common/capabilities.h for who reads this
// and its form). A value added here is dispatched, instantiated and listed by build_config with
// nothing else to edit; the kernel's own static_asserts (work.cuh's BlockShape, paged/shape.cuh's
// PagedShape, the swizzles of HeadDimShape) refuse at build time a value it cannot tile.
#pragma once
#include "common/capabilities.h"

namespace aiter {
namespace sm90 {

// The prefill kernel (kernel.cuh). H: a Q tile has 384 (row, head) columns, so H = 8 and 16 pack 48
// and 24 query rows per tile. Each H is one instance file, instances/heads_slot_<i>.cu for
// kServedHeads[i] (a longer list needs more of those files: op_tests/test_support_table.py says).
constexpr int kServedHeads[] = {8, 16, 32, 64};
constexpr int kServedHeadDims[] = {32, 64, 128};
// The device: compute capability 9.0 (H100, H200); wgmma needs the sm_90a target.
constexpr int kComputeCapability[] = {9, 0};

// No fixed grid (persistent CTAs on the balanced plan only): a caller's split_n is refused.
constexpr bool kHasFixedGrid = false;

constexpr bool serves(long long heads, long long head_dim) {
  return listed(kServedHeads, heads) && listed(kServedHeadDims, head_dim);
}

// The paged decode kernel (paged/kernel.cuh): every listed H, D, block_kv and next_n whose batch
// tile, next_n x H (row, head) columns, is at most kServedPagedColumns (two full wgmma widths; the
// kernel's PagedShape says which widths it tiles). A 64-key tile is 64 / block_kv whole cache blocks
// (block_kv a multiple of 8: each block lands on a swizzle atom; its scales are a bulk copy of a
// multiple of 16 bytes). Each H is one instance file, paged/instances/paged_heads_slot_<i>.cu for
// kServedPagedHeads[i].
constexpr int kServedPagedHeads[] = {8, 16, 32, 64};
constexpr int kServedPagedHeadDims[] = {64, 128};
constexpr int kServedPagedBlockKv[] = {16, 32, 64};
constexpr int kServedPagedNextN[] = {1, 2, 4};
constexpr int kServedPagedColumns = 256;

constexpr bool serves_paged(long long heads, long long head_dim, long long block_kv, long long next_n) {
  return listed(kServedPagedHeads, heads) && listed(kServedPagedHeadDims, head_dim) &&
         listed(kServedPagedBlockKv, block_kv) && listed(kServedPagedNextN, next_n) &&
         next_n * heads <= kServedPagedColumns;
}

}  // namespace sm90
}  // namespace aiter
