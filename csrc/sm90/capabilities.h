// What the Hopper backend serves (see common/capabilities.h for who reads this and its form).
#pragma once
#include "common/capabilities.h"

namespace aiter {
namespace sm90 {

constexpr int kServedHeads[] = {32, 64};
constexpr int kServedHeadDims[] = {128};
// The device: compute capability 9.0 (H100, H200); wgmma needs the sm_90a target.
constexpr int kComputeCapability[] = {9, 0};

// No fixed grid (persistent CTAs on the balanced plan only): a caller's split_n is refused.
constexpr bool kHasFixedGrid = false;

// Logits options (docs/operator.md): the compressed [M, max_seqlen_k] layout without clean_logits
// (what vLLM asks DeepGEMM for); not yet bfloat16 logits, nor the compressed layout's -inf tail
// (DeepGEMM refuses that combination too). The binding refuses what is not served before allocating.
constexpr bool kServesBf16Logits = false;
constexpr bool kServesCompressedLogits = true;
constexpr bool kServesCompressedCleanLogits = false;

constexpr bool serves(long long heads, long long head_dim) {
  return listed(kServedHeads, heads) && listed(kServedHeadDims, head_dim);
}

}  // namespace sm90
}  // namespace aiter
