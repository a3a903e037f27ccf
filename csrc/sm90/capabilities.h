// What the Hopper backend serves (see common/capabilities.h for who reads this and its form).
#pragma once
#include "common/capabilities.h"

namespace aiter {
namespace sm90 {

// H: a Q tile has 384 (row, head) columns, so H = 8 and 16 pack 48 and 24 query rows per tile.
constexpr int kServedHeads[] = {8, 16, 32, 64};
constexpr int kServedHeadDims[] = {32, 64, 128};
// The device: compute capability 9.0 (H100, H200); wgmma needs the sm_90a target.
constexpr int kComputeCapability[] = {9, 0};

// No fixed grid (persistent CTAs on the balanced plan only): a caller's split_n is refused.
constexpr bool kHasFixedGrid = false;

// Logits options (docs/operator.md): float32 or bfloat16 logits, the full or the compressed
// [M, max_seqlen_k] layout, with or without clean_logits (the compressed layout's -inf tail too).
constexpr bool kServesBf16Logits = true;
constexpr bool kServesCompressedLogits = true;
constexpr bool kServesCompressedCleanLogits = true;

constexpr bool serves(long long heads, long long head_dim) {
  return listed(kServedHeads, heads) && listed(kServedHeadDims, head_dim);
}

// The paged decode kernel (paged/kernel.cuh): next_n x H (row, head) columns per batch in [8, 256];
// a 64-key tile is 64 / block_kv whole cache blocks (block_kv a multiple of 8: each block lands on
// a swizzle atom; its scales are a bulk copy of a multiple of 16 bytes). Logits float32 or bfloat16.
constexpr int kServedPagedHeads[] = {8, 16, 32, 64};
constexpr int kServedPagedHeadDims[] = {64, 128};
constexpr int kServedPagedBlockKv[] = {16, 32, 64};
constexpr int kServedPagedNextN[] = {1, 2, 4};

}  // namespace sm90
}  // namespace aiter
