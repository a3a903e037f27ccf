// The sm90 kernel instances of H = 16: every served D and logits format (launch_instance.cuh).
// One file per H so that the JIT builds them in parallel.
#define AITER_SM90_INSTANCE_FILE
#include "sm90/launch_instance.cuh"

namespace aiter {
namespace sm90 {
AITER_SM90_INSTANTIATE_HEADS(16)
}  // namespace sm90
}  // namespace aiter
