// The sm90 paged decode kernel instances of H = 8: every served D, next_n and logits element
// (paged/launch_instance.cuh). One file per H so that the JIT builds them in parallel.
#define AITER_SM90_INSTANCE_FILE
#define AITER_SM90_PAGED_INSTANCE_FILE
#include "sm90/paged/launch_instance.cuh"

namespace aiter {
namespace sm90 {
namespace paged {
AITER_SM90_PAGED_INSTANTIATE_HEADS(8)
}  // namespace paged
}  // namespace sm90
}  // namespace aiter
