// What the gfx950 backend serves (see common/capabilities.h for who reads this and its form).
#pragma once
#include "common/capabilities.h"

namespace aiter {
namespace gfx950 {

// Every (H, D) pair has a kernel instance of each path and logits format (instances.h; H = 16
// packs two rows per MFMA tile, D = 64 doubles a stage's key groups).
constexpr int kServedHeads[] = {16, 32, 64};
constexpr int kServedHeadDims[] = {64, 128};
// The device: a gcnArchName starting with "gfx950" (MI350X, MI355X).
constexpr const char kArchPrefix[] = "gfx950";

// A fixed grid (blocks, split_n) beside the balanced plan: a caller's split_n (aiter's SplitN) picks it.
constexpr bool kHasFixedGrid = true;

// Logits options (docs/operator.md): float32 or bfloat16 logits, the full or the compressed
// [M, max_seqlen_k] layout, with or without clean_logits.
constexpr bool kServesBf16Logits = true;
constexpr bool kServesCompressedLogits = true;
constexpr bool kServesCompressedCleanLogits = true;

constexpr bool serves(long long heads, long long head_dim) {
  return listed(kServedHeads, heads) && listed(kServedHeadDims, head_dim);
}

}  // namespace gfx950
}  // namespace aiter
