// The host side every sm90 kernel instance shares: the driver's tensor-map encoder (fetched through
// the runtime, so the module needs no -lcuda), the row tensor map of an fp8 matrix, and the one-time
// raise of a kernel's dynamic shared-memory limit per device.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace aiter {
namespace sm90 {

namespace launch_detail {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, fetched through the runtime so the module needs no -lcuda.
inline EncodeTiledFn encode_tiled() {
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

// A [rows, D-byte] fp8 matrix read in boxes of `box_rows` rows, with the D-byte swizzle for wgmma.
template <int D>
bool make_row_map(CUtensorMap* map, const void* base, uint64_t rows, uint32_t box_rows) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return false;
  constexpr CUtensorMapSwizzle kSwizzle =
      D == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : D == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(D), rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(D)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(D), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, kSwizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One flag per device and kernel: the kernel's dynamic shared-memory limit is raised once per device.
constexpr int kMaxDevices = 64;

template <auto kKernel>
const char* reserve_shared_memory(int device_index, size_t smem) {
  static std::atomic<bool> reserved[kMaxDevices] = {};
  if (device_index < kMaxDevices && reserved[device_index].load(std::memory_order_acquire)) return nullptr;
  if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
      cudaSuccess)
    return "sm90: cannot reserve the kernel's shared memory";
  if (device_index < kMaxDevices) reserved[device_index].store(true, std::memory_order_release);
  return nullptr;
}

}  // namespace launch_detail

}  // namespace sm90
}  // namespace aiter
