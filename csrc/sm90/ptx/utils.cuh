// Hopper (sm_90a) PTX wrappers every sm90 kernel uses: shared-memory addresses, the exact e4m3 to
// float conversion, the setmaxnreg register budgets and the programmatic dependent-launch controls.
// Device-only, torch-free. Why wrappers: the role files read as the algorithm, and every inline-asm
// constraint lives in one place (ptx/ and mma/).
#pragma once
#include <cstdint>

namespace aiter {
namespace sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- fp8 conversion ------------------------------------------------------------------------------
// Four e4m3 values (one 32-bit word, lowest byte first) to float, exactly (e4m3 -> f16 -> f32).
__device__ __forceinline__ void e4m3x4_to_float(uint32_t packed, float (&out)[4]) {
  asm("{\n"
      ".reg .b16 lo, hi, h0, h1, h2, h3;\n"
      ".reg .b32 p0, p1;\n"
      "mov.b32 {lo, hi}, %4;\n"
      "cvt.rn.f16x2.e4m3x2 p0, lo;\n"
      "cvt.rn.f16x2.e4m3x2 p1, hi;\n"
      "mov.b32 {h0, h1}, p0;\n"
      "mov.b32 {h2, h3}, p1;\n"
      "cvt.f32.f16 %0, h0;\n"
      "cvt.f32.f16 %1, h1;\n"
      "cvt.f32.f16 %2, h2;\n"
      "cvt.f32.f16 %3, h3;\n"
      "}\n"
      : "=f"(out[0]), "=f"(out[1]), "=f"(out[2]), "=f"(out[3])
      : "r"(packed));
}

// ---- register budget ---------------------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---- programmatic dependent launch ----------------------------------------------------------------
// Lets the grid launched next on the stream (with the programmatic-serialization attribute) start
// its CTAs now; they wait for this grid's results with grid_dependency_wait.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Orders this thread's generic-proxy shared-memory stores before later async-proxy reads (wgmma, TMA).
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Blocks the calling thread until the grid this one depends on has finished and its writes are
// visible; returns at once when the launch had no programmatic dependency.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace sm90
}  // namespace aiter
