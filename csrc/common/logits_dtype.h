// What an op's logits are: their element type in every op's argument block (LogitsDtype), and for
// a kernel that writes both layouts, element and layout as one template parameter (LogitsFormat).
#pragma once
#include <cstdint>

namespace aiter {

enum class LogitsDtype : int32_t { kFloat32 = 0, kBFloat16 = 1 };

// A kernel's `class Logits` (sm90 prefill, gfx950): the element (float or a bfloat16 type, rounded
// to nearest even from the float result) and the layout (full [M, N], or compressed
// [M, max_seqlen_k]); CUTLASS-style, so each instance holds only its own stores. A kernel with one
// layout (sm90 paged) takes `typename Element` alone.
template <typename ElementT, bool kCompressedLayout>
struct LogitsFormat {
  using Element = ElementT;
  static constexpr bool kCompressed = kCompressedLayout;
};

}  // namespace aiter
