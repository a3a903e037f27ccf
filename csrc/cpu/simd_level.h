// Which SIMD variant the CPU paths run: the widest this CPU has, capped by AITER_FP8_MQA_CPU_SIMD
// (generic|avx2|avx512|avx512bf16; tests cap it to check the narrower variants on a wide machine). Read
// at each call, so a test that changes the variable sees the change; a cap above what the CPU has
// changes nothing. Both CPU paths (prefill, paged decode) pick through this one function.
#pragma once
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AITER_CPU_X86 1
#endif

namespace aiter {
namespace cpu {

enum class SimdLevel : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

inline const char* simd_level_name(SimdLevel level) {
  static const char* const kNames[] = {"generic", "avx2", "avx512", "avx512bf16"};
  return kNames[static_cast<int>(level)];
}

inline SimdLevel simd_level() {
  int cap = 3;
  if (const char* env = std::getenv("AITER_FP8_MQA_CPU_SIMD")) {
    for (int i = 0; i < 4; ++i)
      if (std::strcmp(env, simd_level_name(static_cast<SimdLevel>(i))) == 0) cap = i;
  }
#ifdef AITER_CPU_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (cap >= 3 && bf16) return SimdLevel::kAvx512Bf16;
  if (cap >= 2 && avx512) return SimdLevel::kAvx512;
  if (cap >= 1 && avx2) return SimdLevel::kAvx2;
#else
  (void)cap;
#endif
  return SimdLevel::kGeneric;
}

}  // namespace cpu
}  // namespace aiter
