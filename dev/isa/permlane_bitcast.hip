// Why the gfx950 kernel's comment blames clang's front end, not __builtin_amdgcn_permlane32_swap:
// the builtin returns its two results as a 2-element vector; bit-casting element 1 straight to
// float reads element 0, copying element 1 to a scalar first reads element 1. Compile and read the
// global_store_dword of each kernel against the v_permlane32_swap_b32's two registers:
//   clang++-22 -x hip --offload-arch=gfx950 -nogpulib -nogpuinc --cuda-device-only \
//     --no-gpu-bundle-output -O3 -S -o - dev/isa/permlane_bitcast.hip
// (-emit-llvm shows the front end's extractvalue index: 0 in the first kernel, 1 in the second.)
#define __global__ __attribute__((global))

extern "C" __global__ void bit_cast_direct(float* out) {
  const unsigned lane = __builtin_amdgcn_workitem_id_x();
  auto r = __builtin_amdgcn_permlane32_swap(__builtin_bit_cast(unsigned, out[lane]),
                                            __builtin_bit_cast(unsigned, out[lane + 64]), false, false);
  out[lane] = __builtin_bit_cast(float, r[1]);  // stores the swap's first result
}

extern "C" __global__ void through_scalar(float* out) {
  const unsigned lane = __builtin_amdgcn_workitem_id_x();
  auto r = __builtin_amdgcn_permlane32_swap(__builtin_bit_cast(unsigned, out[lane]),
                                            __builtin_bit_cast(unsigned, out[lane + 64]), false, false);
  const unsigned second = r[1];
  out[lane] = __builtin_bit_cast(float, second);  // stores the second result
}
