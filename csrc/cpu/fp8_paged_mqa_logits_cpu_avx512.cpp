// The avx512 variant of the paged decode CPU path: micro-tiles of zmm registers (AVX-512F).
#include "cpu/simd_level.h"

#if AITER_CPU_BUILDS_AVX512
#include "cpu/fp8_paged_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace paged {

AITER_CPU_TARGET_AVX512
void task_avx512(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  run_task<MicroTile<16, 4>>(p, plan, task, scratch);
}

}  // namespace paged
}  // namespace cpu
}  // namespace aiter
#endif
