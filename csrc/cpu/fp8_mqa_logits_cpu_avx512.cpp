// The avx512 variant of the prefill CPU path: fp32 operands in zmm registers (AVX-512F).
#include "cpu/simd_level.h"

#if AITER_CPU_BUILDS_AVX512
#include "cpu/fp8_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace prefill {

AITER_CPU_TARGET_AVX512
void task_avx512(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch) {
  run_task<Fp32Format<16, 4, 4>>(params, plan, task, scratch);
}
AITER_CPU_TARGET_AVX512
void task_avx512_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                         uint32_t* scratch) {
  run_task_chunked<Fp32Format<16, 4, 4>>(params, plan, task, scratch);
}

}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
#endif
