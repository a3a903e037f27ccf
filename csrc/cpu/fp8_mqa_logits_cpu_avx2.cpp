// The avx2 variant of the prefill CPU path: fp32 operands in ymm registers (AVX2 + FMA).
#include "cpu/simd_level.h"

#if AITER_CPU_BUILDS_AVX2
#include "cpu/fp8_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace prefill {

AITER_CPU_TARGET_AVX2
void task_avx2(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<8, 2, 4>>(params, plan, task, scratch);
}
AITER_CPU_TARGET_AVX2
void task_avx2_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                       uint32_t* scratch) {
  run_task_chunked<Fp32Format<8, 2, 4>>(params, plan, task, scratch);
}

}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
#endif
