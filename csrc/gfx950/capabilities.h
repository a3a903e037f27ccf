// What the gfx950 backend serves: its support table (see common/capabilities.h for who reads this
// and its form). An H added here needs its instance file (instances/gfx950_heads_<H>.hip, which
// build_config lists from this table) and its row in instances.h's GFX950_INSTANCES: the kernels are
// named after their H. The launcher's static_asserts check the two lists against each other and
// geometry.h's every served shape against the kernel's layout rules.
#pragma once
#include "common/capabilities.h"

namespace aiter {
namespace gfx950 {

// Every (H, D) pair has a kernel instance of each path and logits format (H = 16 packs two rows
// per MFMA tile, D = 64 doubles a stage's key groups).
constexpr int kServedHeads[] = {16, 32, 64};
constexpr int kServedHeadDims[] = {64, 128};
// The device: a gcnArchName starting with "gfx950" (MI350X, MI355X).
constexpr const char kArchPrefix[] = "gfx950";

// A fixed grid (blocks, split_n) beside the balanced plan: a caller's split_n (aiter's SplitN) picks it.
constexpr bool kHasFixedGrid = true;

constexpr bool serves(long long heads, long long head_dim) {
  return listed(kServedHeads, heads) && listed(kServedHeadDims, head_dim);
}

}  // namespace gfx950
}  // namespace aiter
