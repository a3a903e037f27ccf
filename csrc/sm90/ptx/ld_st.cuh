// Load and store wrappers (sm_90a): cp.async copies into shared memory, L2 prefetch, and the
// predicated streaming stores of the logits.
#pragma once
#include <cuda_bf16.h>
#include <cstdint>

#include "sm90/ptx/utils.cuh"

namespace aiter {
namespace sm90 {

// ---- cp.async (4-byte element copies into shared memory) ----------------------------------------
// Copies 4 bytes, or writes 4 zero bytes when `valid` is false (nothing is read then).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
// 16 bytes global -> shared, bypassing the registers (and L1); complete after cp_async_wait_all.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
// Waits for all of this thread's cp.async copies; a barrier then publishes them to the others.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// One arrival on `bar` once this thread's earlier cp.async copies have landed; it counts as one of
// the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// A predicated streaming store: no branch around it in an epilogue (branch resolution stalls the
// math warps). Streaming (.cs, evict-first): nothing reads the output back, and K and Q stay in L2.
__device__ __forceinline__ void store_if(float* address, float value, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "@p st.global.cs.f32 [%0], %1;\n"
      "}\n" ::"l"(address),
      "f"(value), "r"(int(pred))
      : "memory");
}
// The bfloat16 form: the float result rounded to nearest even (-inf stays -inf).
__device__ __forceinline__ void store_if(__nv_bfloat16* address, float value, bool pred) {
  const uint16_t bits = __bfloat16_as_ushort(__float2bfloat16_rn(value));
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "@p st.global.cs.b16 [%0], %1;\n"
      "}\n" ::"l"(address),
      "h"(bits), "r"(int(pred))
      : "memory");
}

}  // namespace sm90
}  // namespace aiter
