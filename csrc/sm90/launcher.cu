// Host side of the Hopper fp8_mqa_logits backend: tensor maps, launch configuration, launch.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, 128] e4m3 and K [N, 128] e4m3 get 2-D tensor maps (rows of 128 bytes, 128-byte
// swizzle: the layout wgmma reads from shared memory); everything else goes to the kernel as
// pointers in Fp8MqaLogitsParams. One persistent CTA per SM (kernel.cuh describes the kernel).
// Why a .cu of its own: the ATen binding stays a host-compiler file that only sees launcher.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include "sm90/capabilities.h"
#include "sm90/launcher.h"
#include "sm90/kernel.cuh"

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

template <int H>
const char* launch_heads(const Fp8MqaLogitsParams& params, int num_sms, cudaStream_t stream) {
  CUtensorMap q_map, k_map;
  if (!make_row_map(&q_map, params.q, static_cast<uint64_t>(params.M) * H, sm90::kQBoxRows) ||
      !make_row_map(&k_map, params.kv, static_cast<uint64_t>(params.N), sm90::kKeysPerTile))
    return "fp8_mqa_logits (sm90): cuTensorMapEncodeTiled failed (q and kv must be 16-byte aligned)";
  const size_t smem = sizeof(sm90::SharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  auto kernel = sm90::fp8_mqa_logits_sm90_kernel<H>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
      cudaSuccess)
    return "fp8_mqa_logits (sm90): cannot reserve the kernel's shared memory";
  kernel<<<num_sms, sm90::kThreads, smem, stream>>>(q_map, k_map, params);
  const cudaError_t err = cudaGetLastError();
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

const char* launch(const Fp8MqaLogitsParams& params, int device_index, void* stream) {
  if (!serves(params.H, params.D)) return "fp8_mqa_logits (sm90): this H and D are not served (capabilities.h)";
  int num_sms = 0;
  if (cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device_index) != cudaSuccess || num_sms <= 0)
    return "fp8_mqa_logits (sm90): cannot query the number of SMs";
  // Keys and Q-tile rows are 32-bit TMA coordinates and key indices; output offsets are 64-bit.
  if (params.N >= (int64_t(1) << 31) - kKeysPerTile || params.M * params.H >= (int64_t(1) << 31) - kQTileCols)
    return "fp8_mqa_logits (sm90): N and M*H must stay below 2^31 minus one tile (64 keys, one Q tile)";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  static_assert(sizeof(kServedHeads) / sizeof(kServedHeads[0]) == 2, "the dispatch below covers every served H");
  return params.H == 32 ? launch_heads<32>(params, num_sms, cuda_stream)
                        : launch_heads<64>(params, num_sms, cuda_stream);
}

}  // namespace sm90

}  // namespace aiter
