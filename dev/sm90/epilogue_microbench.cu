// Where the head sum of the sm90 prefill epilogue can run: a microbenchmark (dev tree, not shipped).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc -o /tmp/epilogue_microbench \
//        dev/sm90/epilogue_microbench.cu && /tmp/epilogue_microbench
//
// One CTA per SM, three warpgroups, as the product kernel's math warpgroups. Each loops over a
// "K tile" of 64 keys at D = 128: the main MMA (4 x wgmma m64n128k32 e4m3, A = K and B = Q from
// shared memory, one accumulator of 64 floats per thread), then one of these epilogues of the
// accumulator (relu, x w, sum over the heads) and nothing else (no loads, no stores, no barriers):
//   cuda-core f32    (x + |x|) x w: an FADD and an FFMA per element, 8 FFMA chains (the product's)
//   packed bf16x2    cvt.rn.relu.bf16x2.f32 (one F2FP per two elements), HFMA2.BF16 chains: the
//                    sums are rounded to bfloat16 on the way, which the contract does not allow
//                    ("accumulate in fp32, round once at the store"); measured to see what it buys
//   tensor bf16      relu and pack by F2FP, then the weighted head sum as a second wgmma with A from
//                    registers: 8 x m64n8k16 bf16 (B = the weights, K = the 128 columns, N = 8)
//   tensor tf32      the same with cvt.rn.relu.tf32 per element and 16 x m64n8k8 tf32
// and the two head-sum MMAs alone (no main MMA) to see their own cost. Prints clock cycles per tile
// per warpgroup (clock64, mean over all warpgroups) and the main MMA's TFLOP/s. Shared memory holds
// e4m3 values in [1, 1.875] (timing does not depend on them); the results are summed into `sink`
// so that nothing is dead code (ptxas drops wgmma results nobody reads).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "sm90/mma/wgmma.cuh"

using namespace aiter::sm90;

namespace {

enum Epilogue { kCudaCoreF32, kPackedBf16, kTensorBf16, kTensorTf32, kTensorBf16Alone, kTensorTf32Alone };
constexpr const char* kNames[] = {"main MMA + cuda-core f32 epilogue", "main MMA + packed bf16x2 epilogue",
                                  "main MMA + tensor-core bf16 head sum", "main MMA + tensor-core tf32 head sum",
                                  "tensor-core bf16 head sum alone", "tensor-core tf32 head sum alone"};
constexpr int kThreadsPerCta = 384;
constexpr int kSharedBytes = 65536 + 1024;

// A no-swizzle shared-memory descriptor (timing only: the B tile's contents and layout do not matter).
__device__ __forceinline__ uint64_t plain_desc(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
}
__device__ __forceinline__ void head_sum_bf16(float (&d)[4], const uint32_t* a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void head_sum_tf32(float (&d)[4], const uint32_t* a, uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

template <Epilogue kEpilogue>
__global__ void __launch_bounds__(kThreadsPerCta, 1) tile_loop(int tiles, long long* cycles, float* sink) {
  extern __shared__ uint8_t raw_smem[];
  uint8_t* smem = raw_smem + ((1024 - (smem_addr(raw_smem) & 1023)) & 1023);
  for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);
  __syncthreads();
  const int warpgroup = threadIdx.x / 128;
  constexpr bool kMainMma = kEpilogue != kTensorBf16Alone && kEpilogue != kTensorTf32Alone;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.001f * (threadIdx.x + i);
  float weights[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) weights[i] = 0.01f * ((threadIdx.x + i) % 7);
  __nv_bfloat162 weight_pairs[16], packed_chain[8];
#pragma unroll
  for (int i = 0; i < 16; ++i) weight_pairs[i] = __floats2bfloat162_rn(weights[2 * i], weights[2 * i + 1]);
#pragma unroll
  for (int i = 0; i < 8; ++i) packed_chain[i] = __floats2bfloat162_rn(0.f, 0.f);
  float chain[8] = {};
  float head_sums[4][4] = {};  // four accumulators, so the small MMAs do not wait on each other
  const uint64_t desc_k = smem_desc_swizzled<128>(smem);
  const uint64_t desc_q = smem_desc_swizzled<128>(smem + 8192 + warpgroup * 16384);
  const uint64_t desc_weights = plain_desc(smem + 57344);
  const long long start = clock64();
  for (int tile = 0; tile < tiles; ++tile) {
    if (kMainMma) {
      fence_accumulators(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n128k32_e4m3(acc, desc_k + 2 * kk, desc_q + 2 * kk, kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(acc);
    }
    if (kEpilogue == kCudaCoreF32) {
#pragma unroll
      for (int j = 0; j < 64; ++j) chain[j % 8] = fmaf(acc[j] + fabsf(acc[j]), weights[j / 2], chain[j % 8]);
    }
    if (kEpilogue == kPackedBf16) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        uint32_t pair;
        asm volatile("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(acc[2 * j + 1]), "f"(acc[2 * j]));
        packed_chain[j % 8] = __hfma2(*reinterpret_cast<__nv_bfloat162*>(&pair), weight_pairs[j / 2], packed_chain[j % 8]);
      }
    }
    if (kEpilogue == kTensorBf16 || kEpilogue == kTensorBf16Alone) {
      uint32_t a[32];
#pragma unroll
      for (int j = 0; j < 32; ++j)
        asm volatile("cvt.rn.relu.bf16x2.f32 %0, %1, %2;" : "=r"(a[j]) : "f"(acc[2 * j + 1]), "f"(acc[2 * j]));
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < 8; ++step) head_sum_bf16(head_sums[step % 4], a + 4 * step, desc_weights + 16 * step);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_accumulators(head_sums[i]);
    }
    if (kEpilogue == kTensorTf32 || kEpilogue == kTensorTf32Alone) {
      // Beside the main MMA, converted in place (64 more registers made ptxas serialise the wgmmas);
      // alone, into registers of their own (in place, ptxas serialised them there).
      uint32_t own[kEpilogue == kTensorTf32 ? 1 : 64];
      uint32_t* a = kEpilogue == kTensorTf32 ? reinterpret_cast<uint32_t*>(acc) : own;
#pragma unroll
      for (int j = 0; j < 64; ++j) {
        uint32_t rounded;
        asm volatile("cvt.rn.relu.tf32.f32 %0, %1;" : "=r"(rounded) : "f"(acc[j]));
        if (kEpilogue == kTensorTf32)
          acc[j] = __uint_as_float(rounded);
        else
          own[j] = rounded;
      }
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < 16; ++step) head_sum_tf32(head_sums[step % 4], a + 4 * step, desc_weights + 16 * step);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_accumulators(head_sums[i]);
    }
  }
  const long long stop = clock64();
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 3 + warpgroup] = stop - start;
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) total += acc[i];
#pragma unroll
  for (int i = 0; i < 8; ++i) total += chain[i] + __low2float(packed_chain[i]) + __high2float(packed_chain[i]);
#pragma unroll
  for (int i = 0; i < 4; ++i) total += head_sums[i][0] + head_sums[i][1] + head_sums[i][2] + head_sums[i][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = total;
}

template <Epilogue kEpilogue>
void run(int sms) {
  constexpr int kTiles = 4000;
  long long* cycles = nullptr;
  float* sink = nullptr;
  cudaMalloc(&cycles, sms * 3 * sizeof(long long));
  cudaMalloc(&sink, sms * kThreadsPerCta * sizeof(float));
  cudaFuncSetAttribute(tile_loop<kEpilogue>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  tile_loop<kEpilogue><<<sms, kThreadsPerCta, kSharedBytes>>>(10, cycles, sink);  // warm-up
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  cudaEventRecord(begin);
  tile_loop<kEpilogue><<<sms, kThreadsPerCta, kSharedBytes>>>(kTiles, cycles, sink);
  cudaEventRecord(end);
  const cudaError_t err = cudaDeviceSynchronize();
  float ms = 0.f;
  cudaEventElapsedTime(&ms, begin, end);
  long long* host = new long long[sms * 3];
  cudaMemcpy(host, cycles, sms * 3 * sizeof(long long), cudaMemcpyDeviceToHost);
  double mean_cycles = 0;
  for (int i = 0; i < sms * 3; ++i) mean_cycles += host[i];
  mean_cycles /= sms * 3;
  const bool main_mma = kEpilogue != kTensorBf16Alone && kEpilogue != kTensorTf32Alone;
  const double flops = 3.0 * 64 * 128 * 128 * 2 * kTiles * sms;
  printf("%-40s %s  cycles per tile per warpgroup %7.1f  clock %4.0f MHz  main MMA %6.1f TFLOP/s\n", kNames[kEpilogue],
         cudaGetErrorString(err), mean_cycles / kTiles, mean_cycles / (ms * 1e3),
         main_mma ? flops / (ms * 1e-3) / 1e12 : 0.0);
  delete[] host;
  cudaFree(cycles);
  cudaFree(sink);
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int round = 0; round < 2; ++round) {
    run<kCudaCoreF32>(sms);
    run<kPackedBf16>(sms);
    run<kTensorBf16>(sms);
    run<kTensorTf32>(sms);
    run<kTensorBf16Alone>(sms);
    run<kTensorTf32Alone>(sms);
  }
  return 0;
}
