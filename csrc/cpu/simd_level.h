// Which SIMD variant the CPU paths run: the widest this CPU has and this build holds, capped by
// AITER_FP8_MQA_CPU_SIMD (generic|avx2|avx512|avx512bf16; tests cap it to check the narrower
// variants on a wide machine). Read at each call, so a test that changes the variable sees the
// change; a cap above what the CPU has changes nothing. Both CPU paths (prefill, paged decode) pick
// through pick_variant below, and compile each variant as its own translation unit under the
// variant's target attribute (AITER_CPU_TARGET_*), so no -march flag is needed.
//
// Which variants a build holds: AITER_CPU_SIMD_WIDEST = the widest level compiled (the build
// compiles every narrower one too). The JIT compiles those of the machine it runs on and passes the
// level; the ahead-of-time build compiles all of them and leaves it unset.
#pragma once
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AITER_CPU_X86 1
#endif

#ifndef AITER_CPU_SIMD_WIDEST
#define AITER_CPU_SIMD_WIDEST 3
#endif

// Whether this build holds each x86 variant (generic: always).
#if defined(AITER_CPU_X86) && AITER_CPU_SIMD_WIDEST >= 1
#define AITER_CPU_BUILDS_AVX2 1
#else
#define AITER_CPU_BUILDS_AVX2 0
#endif
#if defined(AITER_CPU_X86) && AITER_CPU_SIMD_WIDEST >= 2
#define AITER_CPU_BUILDS_AVX512 1
#else
#define AITER_CPU_BUILDS_AVX512 0
#endif
#if defined(AITER_CPU_X86) && AITER_CPU_SIMD_WIDEST >= 3
#define AITER_CPU_BUILDS_AVX512BF16 1
#else
#define AITER_CPU_BUILDS_AVX512BF16 0
#endif

// The target attribute of each variant's entry points: the instructions that level may use.
#define AITER_CPU_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define AITER_CPU_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define AITER_CPU_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bf16,avx2,fma")))

namespace aiter {
namespace cpu {

enum class SimdLevel : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };
constexpr int kSimdLevels = 4;

inline const char* simd_level_name(SimdLevel level) {
  static const char* const kNames[] = {"generic", "avx2", "avx512", "avx512bf16"};
  return kNames[static_cast<int>(level)];
}

inline SimdLevel simd_level() {
  int cap = kSimdLevels - 1;
  if (const char* env = std::getenv("AITER_FP8_MQA_CPU_SIMD")) {
    for (int i = 0; i < kSimdLevels; ++i)
      if (std::strcmp(env, simd_level_name(static_cast<SimdLevel>(i))) == 0) cap = i;
  }
  if (cap > AITER_CPU_SIMD_WIDEST) cap = AITER_CPU_SIMD_WIDEST;
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

// The entry of `by_level` (indexed by SimdLevel) for simd_level(), or the nearest narrower one that
// has a name: an entry without one is a level the op has no variant of its own for (the paged path
// has no bf16-pair variant) or one this build does not hold. The generic entry must have a name.
template <class Entry>
const Entry& pick_variant(const Entry (&by_level)[kSimdLevels]) {
  int level = static_cast<int>(simd_level());
  while (level > 0 && by_level[level].name == nullptr) --level;
  return by_level[level];
}

}  // namespace cpu
}  // namespace aiter
