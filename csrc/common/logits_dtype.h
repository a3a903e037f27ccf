// The element type of the logits an op writes, shared by every op's argument block.
#pragma once
#include <cstdint>

namespace aiter {

enum class LogitsDtype : int32_t { kFloat32 = 0, kBFloat16 = 1 };

}  // namespace aiter
