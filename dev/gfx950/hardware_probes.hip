// gfx950 hardware probes: the kernel's assumptions that only an MI355X can settle, one small kernel
// each, through the kernel's own primitives (csrc/gfx950/primitives.h) and instruction forms.
// Compiled by op_tests/test_gfx950_hardware.py (with clang++-22 everywhere, so CI compiles them);
// launched there through the HIP runtime only on a gfx950 device.
//
//   probe_lds_dma      the 16-byte LDS DMA (buffer_load_dwordx4 ... lds) at a given M0: the small-M
//                      kernels' M0 reaches past 64 KiB, so M0 must carry 17 bits or more;
//   probe_store        buffer_store_dword through a resource with a given num_records (the H = 16
//                      pair store's 0x80000000): the range check must compare unsigned;
//   probe_mfma_scale0  v_mfma_f32_32x32x64_f8f6f4 through the scale builtin with every scale and
//                      opsel 0 (the kernel's call): the compiler must fold it to the plain MFMA.
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "gfx950/primitives.h"

using namespace aiter::gfx950;

constexpr int kProbeLdsWords = 160 * 1024 / 4;  // all of a CU's LDS
constexpr int kProbeSentinel = 0x5EED5EED;

// One wave. The whole LDS is set to the sentinel, one DMA writes 64 lanes x 16 bytes of `src` at
// M0 (+ lane * 16), and the wave copies the 1024 bytes at M0 and at M0 & 0xFFFF (where a 16-bit M0
// would have put them) to out[0, 256) and out[256, 512).
extern "C" __global__ void __launch_bounds__(64) probe_lds_dma(const uint32_t* src, uint32_t* out, uint32_t m0) {
  __shared__ uint32_t lds[kProbeLdsWords];
  const int lane = lane_id();
  for (int i = lane; i < kProbeLdsWords; i += kLanes) lds[i] = kProbeSentinel;
  sync_threads();
  const v4i rsrc = make_rsrc(reinterpret_cast<uint64_t>(src), 64 * 16);
  const uint32_t voffset = uint32_t(lane) * 16u;
  // M0 is an LDS byte address: the array's address in the LDS address space (0 here, its only
  // array), as Workgroup::lds_address takes it.
  const uint32_t lds_base = uint32_t(uintptr_t((__attribute__((address_space(3))) uint32_t*)(lds)));
  const uint32_t m0_value = uint32_t(uniform(int(m0 + lds_base)));
  // The s_nop is the wait state an SALU M0 write needs before the DMA reads it (the ISA check's
  // m0-lds-dma rule); the kernel's DMAs get it the same way.
  asm volatile("s_nop 0\n\tbuffer_load_dwordx4 %0, %1, 0 offen lds\n\ts_waitcnt vmcnt(0)"
               ::"v"(voffset), "s"(rsrc), "{m0}"(m0_value) : "memory");
  sync_threads();
  const uint32_t at = m0 / 4, alias = (m0 & 0xFFFFu) / 4;
  for (int i = lane; i < 256; i += kLanes) {
    out[i] = lds[at + i];
    out[256 + i] = lds[alias + i];
  }
}

// One wave: lane i < count stores the float i + 1 at byte offset offsets[i] of a resource based at
// `base` with `num_records` bytes (the kernel's buffer_store_f32, one buffer_store_dword).
extern "C" __global__ void __launch_bounds__(64) probe_store(float* base, uint32_t num_records,
                                                             const uint32_t* offsets, int count) {
  const int lane = lane_id();
  const v4i rsrc = make_rsrc(reinterpret_cast<uint64_t>(base), num_records);
  if (lane < count) buffer_store_f32(float(lane + 1), rsrc, offsets[lane], 0, 0);
}

// One wave: D = A B for one 32 x 64 (A) by 64 x 32 (B) block of E4M3 bytes, through the builtin as
// the kernel calls it. a and b hold each lane's 32 operand bytes (8 dwords, lane-major), out each
// lane's 16 accumulator elements (lane-major).
extern "C" __global__ void __launch_bounds__(64) probe_mfma_scale0(const v8i* a, const v8i* b, float* out) {
  const int lane = lane_id();
  v16f c = {};
  c = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[lane], b[lane], c, 0, 0, 0, 0, 0, 0);
#pragma unroll
  for (int v = 0; v < 16; ++v) out[lane * 16 + v] = c[v];
}
