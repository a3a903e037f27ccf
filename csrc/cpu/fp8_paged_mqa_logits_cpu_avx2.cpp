// The avx2 variant of the paged decode CPU path: micro-tiles of ymm registers (AVX2 + FMA).
#include "cpu/simd_level.h"

#if AITER_CPU_BUILDS_AVX2
#include "cpu/fp8_paged_mqa_logits_cpu_kernels.h"

namespace aiter {
namespace cpu {
namespace paged {

AITER_CPU_TARGET_AVX2
void task_avx2(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  run_task<MicroTile<8, 2>>(p, plan, task, scratch);
}

}  // namespace paged
}  // namespace cpu
}  // namespace aiter
#endif
