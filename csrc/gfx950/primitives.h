// gfx950 fp8_mqa_logits: the device primitives every role of the kernel uses. Device code only
// (HIP); the host emulation models each of them in dev/gfx950/emulator.cpp.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]
//
// Layouts touched: gfx9 buffer resources (48-bit base, stride 0, num_records in bytes, raw 32-bit
// format): every global access of the kernel goes through one so that the hardware drops what is
// out of range instead of the kernel branching; the 64 lanes of a wave for scans.
// Why here: one definition of the builtins' wrappers, so the plan, pipeline, epilogue and fill
// spell them the same way.
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "gfx950/geometry.h"

namespace aiter {
namespace gfx950 {

typedef int v4i __attribute__((ext_vector_type(4)));
typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef float v16f __attribute__((ext_vector_type(16)));

// The raw buffer store with a <4 x i32> resource: one buffer_store_dword, range-checked by the
// hardware (out-of-range lanes are dropped). Declared by LLVM name so every clang with gfx950 has
// it; declared in the host pass too, which parses (but never emits) the device code.
__device__ void buffer_store_f32(float v, v4i rsrc, uint32_t voffset, int soffset,
                                 int aux) __asm("llvm.amdgcn.raw.buffer.store.f32");
// The same for 16 bits (buffer_store_short): bfloat16 logits.
__device__ void buffer_store_b16(short v, v4i rsrc, uint32_t voffset, int soffset,
                                 int aux) __asm("llvm.amdgcn.raw.buffer.store.i16");

// The same for 16 bytes (buffer_store_dwordx4): a whole 16-byte chunk of -inf fill (fill.h).
__device__ void buffer_store_b128(v4i v, v4i rsrc, uint32_t voffset, int soffset,
                                  int aux) __asm("llvm.amdgcn.raw.buffer.store.v4i32");

// One logit as the output's element: float as is, bfloat16 rounded to nearest even (one
// v_cvt_pk_bf16_f32 on gfx950; -inf stays -inf).
template <typename Element>
__device__ __forceinline__ void buffer_store_logit(float v, v4i rsrc, uint32_t voffset) {
  if constexpr (sizeof(Element) == 4)
    buffer_store_f32(v, rsrc, voffset, 0, 0);
  else
    buffer_store_b16(__builtin_bit_cast(short, static_cast<__bf16>(v)), rsrc, voffset, 0, 0);
}

__device__ __forceinline__ int lane_id() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}
// The value of the first active lane: tells the compiler a value is wave-uniform (an SGPR).
__device__ __forceinline__ int uniform(int x) { return __builtin_amdgcn_readfirstlane(x); }
__device__ __forceinline__ void sync_threads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Buffer resource (gfx9): 48-bit base, stride 0, num_records in bytes, raw 32-bit data format.
__device__ __forceinline__ v4i make_rsrc(uint64_t base, uint32_t num_records) {
  v4i r;
  r.x = uniform(int(uint32_t(base)));
  r.y = uniform(int(uint32_t(base >> 32) & 0xffffu));
  r.z = uniform(int(num_records));
  r.w = 0x00020000;
  return r;
}

// Exclusive prefix sum over the 64 lanes of a wave.
__device__ __forceinline__ int wave_exclusive_scan(int x, int lane) {
  int inclusive = x;
  for (int d = 1; d < kLanes; d <<= 1) {
    const int y = __builtin_amdgcn_ds_bpermute(((lane - d) & (kLanes - 1)) << 2, inclusive);
    if (lane >= d) inclusive += y;
  }
  return inclusive - x;
}

// In-place exclusive scan of values[0, n) by one wave; values[n] receives the total.
__device__ inline void wave_scan_array(int* values, int n, int lane) {
  const int per_lane = (n + kLanes - 1) / kLanes;
  const int begin = lane * per_lane;
  int sum = 0;
  for (int i = 0; i < per_lane; ++i)
    if (begin + i < n) sum += values[begin + i];
  int run = wave_exclusive_scan(sum, lane);
  for (int i = 0; i < per_lane; ++i)
    if (begin + i < n) {
      const int v = values[begin + i];
      values[begin + i] = run;
      run += v;
    }
  if (lane == kLanes - 1) values[n] = run;
}

}  // namespace gfx950
}  // namespace aiter
