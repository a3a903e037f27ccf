// Host side of the Hopper fp8_mqa_logits backend: tensor maps, launch configuration, launch.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, 128] e4m3 and K [N, 128] e4m3 get 2-D tensor maps (rows of 128 bytes, 128-byte
// swizzle: the layout wgmma reads from shared memory); everything else goes to the kernel as
// pointers in Fp8MqaLogitsParams. A pricing kernel (plan.cuh) writes every Q block's price into the
// call's workspace; then one persistent CTA per SM (kernel.cuh describes the kernel) cuts its share.
// Why a .cu of its own: the ATen binding stays a host-compiler file that only sees launcher.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "sm90/capabilities.h"
#include "sm90/launcher.h"
#include "sm90/kernel.cuh"
#include "sm90/plan.cuh"

namespace aiter {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, fetched through the runtime so the module needs no -lcuda.
EncodeTiledFn encode_tiled() {
  static EncodeTiledFn encoder = []() -> EncodeTiledFn {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiledFn>(entry);
  }();
  return encoder;
}

// A [rows, 128-byte] fp8 matrix read in boxes of `box_rows` rows, 128-byte swizzled for wgmma.
bool make_row_map(CUtensorMap* map, const void* base, uint64_t rows, uint32_t box_rows) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(sm90::kHeadDim), rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(sm90::kHeadDim)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(sm90::kHeadDim), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One flag per device and H: the kernel's dynamic shared-memory limit is raised once per device.
constexpr int kMaxDevices = 64;

template <int H, bool kCompressed>
const char* reserve_shared_memory(int device_index, size_t smem) {
  static std::atomic<bool> reserved[kMaxDevices] = {};
  if (device_index < kMaxDevices && reserved[device_index].load(std::memory_order_acquire)) return nullptr;
  if (cudaFuncSetAttribute(sm90::fp8_mqa_logits_sm90_kernel<H, kCompressed>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
    return "fp8_mqa_logits (sm90): cannot reserve the kernel's shared memory";
  if (device_index < kMaxDevices) reserved[device_index].store(true, std::memory_order_release);
  return nullptr;
}

// The device's SM count, queried once per device (the grid has one CTA per SM); 0 when the query fails.
int sm_count(int device_index) {
  static std::atomic<int> cached[kMaxDevices] = {};
  if (device_index >= 0 && device_index < kMaxDevices) {
    const int known = cached[device_index].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int num_sms = 0;
  if (cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device_index) != cudaSuccess || num_sms <= 0)
    return 0;
  if (device_index >= 0 && device_index < kMaxDevices) cached[device_index].store(num_sms, std::memory_order_relaxed);
  return num_sms;
}

int64_t num_blocks(const Fp8MqaLogitsParams& params) {
  const int64_t rows_per_block = sm90::kQTileCols / params.H;
  return (params.M + rows_per_block - 1) / rows_per_block;
}

// The pricing kernel, then the main kernel as its programmatic dependent (plan.cuh says why).
template <int H, bool kCompressed>
const char* launch_heads(const Fp8MqaLogitsParams& params, void* workspace, int device_index, int num_sms,
                         cudaStream_t stream) {
  CUtensorMap q_map, k_map;
  if (!make_row_map(&q_map, params.q, static_cast<uint64_t>(params.M) * H, sm90::kQBoxRows) ||
      !make_row_map(&k_map, params.kv, static_cast<uint64_t>(params.N), sm90::kKeysPerTile))
    return "fp8_mqa_logits (sm90): cuTensorMapEncodeTiled failed (q and kv must be 16-byte aligned)";
  const size_t smem = sizeof(sm90::SharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  if (const char* err = reserve_shared_memory<H, kCompressed>(device_index, smem)) return err;

  int2* block_units = static_cast<int2*>(workspace);
  const int64_t blocks = num_blocks(params);
  const unsigned price_ctas = static_cast<unsigned>((blocks + sm90::kPriceThreads - 1) / sm90::kPriceThreads);
  sm90::price_blocks_kernel<H><<<price_ctas, sm90::kPriceThreads, 0, stream>>>(params, block_units);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cudaGetErrorString(err);

  cudaLaunchAttribute dependent_launch[1];
  dependent_launch[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent_launch[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(num_sms);
  config.blockDim = dim3(sm90::kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = dependent_launch;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, sm90::fp8_mqa_logits_sm90_kernel<H, kCompressed>, q_map, k_map, params,
                           static_cast<const int2*>(block_units));
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

namespace sm90 {

const char* check_device(int device_index) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index) != cudaSuccess)
    return "the sm90 backend cannot query this GPU's compute capability";
  if (major != kComputeCapability[0] || minor != kComputeCapability[1])
    return "the sm90 backend (sm_90a: wgmma, TMA) runs on compute capability 9.0 (H100, H200) only";
  return nullptr;
}

size_t workspace_bytes(const Fp8MqaLogitsParams& params, int device_index) {
  (void)device_index;  // the prices are per Q block, whatever the GPU
  return serves(params.H, params.D) ? plan_workspace_bytes(num_blocks(params)) : 0;
}

const char* launch(const Fp8MqaLogitsParams& params, void* workspace, int device_index, void* stream) {
  if (!serves(params.H, params.D)) return "fp8_mqa_logits (sm90): this H and D are not served (capabilities.h)";
  if (params.logits_dtype != LogitsDtype::kFloat32 || (params.compressed && params.clean_logits))
    return "fp8_mqa_logits (sm90): only float32 logits, and the compressed layout without clean_logits, are "
           "served (capabilities.h)";
  const int num_sms = sm_count(device_index);
  if (num_sms <= 0) return "fp8_mqa_logits (sm90): cannot query the number of SMs";
  if (workspace == nullptr) return "fp8_mqa_logits (sm90): no workspace for the plan (workspace_bytes)";
  // Keys and Q-tile rows are 32-bit TMA coordinates and key indices; output offsets are 64-bit.
  if (params.N >= (int64_t(1) << 31) - kKeysPerTile || params.M * params.H >= (int64_t(1) << 31) - kQTileCols)
    return "fp8_mqa_logits (sm90): N and M*H must stay below 2^31 minus one tile (64 keys, one Q tile)";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  static_assert(sizeof(kServedHeads) / sizeof(kServedHeads[0]) == 2, "the dispatch below covers every served H");
  if (params.compressed)
    return params.H == 32 ? launch_heads<32, true>(params, workspace, device_index, num_sms, cuda_stream)
                          : launch_heads<64, true>(params, workspace, device_index, num_sms, cuda_stream);
  return params.H == 32 ? launch_heads<32, false>(params, workspace, device_index, num_sms, cuda_stream)
                        : launch_heads<64, false>(params, workspace, device_index, num_sms, cuda_stream);
}

}  // namespace sm90

}  // namespace aiter
