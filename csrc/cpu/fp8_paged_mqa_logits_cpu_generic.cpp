// The generic variant of the paged decode CPU path: micro-tiles of 16-byte vectors (SSE2 / NEON), compiled for the
// baseline target.
#include "cpu/simd_level.h"

#if 1
#include "cpu/fp8_paged_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace paged {

void task_generic(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  run_task<MicroTile<4, 2>>(p, plan, task, scratch);
}

}  // namespace paged
}  // namespace cpu
}  // namespace aiter
#endif
