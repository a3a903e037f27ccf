// Host side of the Hopper fp8_mqa_logits backend: tensor maps, launch configuration, launch.
// The kernel and its layouts are described in fp8_mqa_logits_sm90.cuh.
#include <cuda.h>
#include <cuda_runtime.h>

#include "sm90/launcher.h"
#include "sm90/fp8_mqa_logits_sm90.cuh"

namespace aiter {
namespace {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, fetched through the runtime so the module needs no -lcuda.
EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
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
const char* launch(const Fp8MqaLogitsParams& p, int num_sms, cudaStream_t stream) {
  CUtensorMap q_map, k_map;
  if (!make_row_map(&q_map, p.q, static_cast<uint64_t>(p.M) * H, sm90::kQBoxRows) ||
      !make_row_map(&k_map, p.kv, static_cast<uint64_t>(p.N), sm90::kKeysPerTile))
    return "fp8_mqa_logits (sm90): cuTensorMapEncodeTiled failed (q and kv must be 16-byte aligned)";
  const size_t smem = sizeof(sm90::SharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  auto kernel = sm90::fp8_mqa_logits_sm90_kernel<H>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
      cudaSuccess)
    return "fp8_mqa_logits (sm90): cannot reserve the kernel's shared memory";
  kernel<<<num_sms, sm90::kThreads, smem, stream>>>(q_map, k_map, p);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

bool fp8_mqa_logits_sm90_supports(int heads, int head_dim) {
  return (heads == 32 || heads == 64) && head_dim == sm90::kHeadDim;
}

const char* fp8_mqa_logits_sm90_launch(const Fp8MqaLogitsParams& p, int num_sms, void* stream) {
  if (!fp8_mqa_logits_sm90_supports(p.H, p.D)) return "fp8_mqa_logits (sm90): needs H in {32, 64} and D == 128";
  if (num_sms <= 0) return "fp8_mqa_logits (sm90): num_sms must be positive";
  // Keys and Q-tile rows are 32-bit TMA coordinates and key indices; output offsets are 64-bit.
  if (p.N >= (int64_t(1) << 31) - sm90::kKeysPerTile || p.M * p.H >= (int64_t(1) << 31) - sm90::kQTileCols)
    return "fp8_mqa_logits (sm90): N and M*H must stay below 2^31 minus one tile (64 keys, one Q tile)";
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return p.H == 32 ? launch<32>(p, num_sms, s) : launch<64>(p, num_sms, s);
}

}  // namespace aiter
