// The generic variant of the prefill CPU path: fp32 operands in 16-byte vectors (SSE2 / NEON), compiled for the
// baseline target.
#include "cpu/simd_level.h"

#if 1
#include "cpu/fp8_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace prefill {

void task_generic(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<4, 2, 4>>(params, plan, task, scratch);
}
void task_generic_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                          uint32_t* scratch) {
  run_task_chunked<Fp32Format<4, 2, 4>>(params, plan, task, scratch);
}

}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
#endif
