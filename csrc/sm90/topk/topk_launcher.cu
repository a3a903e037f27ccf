// Host side of the Hopper top-k kernel (two_pass_select.cuh): one CTA of kThreads per row on the
// caller's stream; no allocation and no synchronisation, so the launch may be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/topk/launcher.h"
#include "sm90/topk/two_pass_select.cuh"

namespace aiter {
namespace sm90 {
namespace topk {

namespace {

// Lets the kernel take kSmemBytes of dynamic shared memory (above the 48 KiB default), once per device.
const char* allow_shared_memory(int device_index) {
  constexpr int kMaxDevices = 64;
  static bool done[kMaxDevices] = {};
  if (device_index < 0 || device_index >= kMaxDevices) return "top_k_per_row (sm90): device index out of range";
  if (done[device_index]) return nullptr;
  const cudaError_t err = cudaFuncSetAttribute(top_k_per_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSmemBytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  done[device_index] = true;
  return nullptr;
}

}  // namespace

const char* launch(const TopkPerRowParams& params, int device_index, void* stream) {
  if (params.rows == 0) return nullptr;
  if (params.k < 1 || params.k > kTopkMaxK || params.rows >= (int64_t(1) << 31) || params.width >= (int64_t(1) << 31))
    return "top_k_per_row (sm90): needs 1 <= k <= 4096 and fewer than 2^31 rows and columns";
  const char* err = allow_shared_memory(device_index);  // the binding's device guard makes the device current
  if (err != nullptr) return err;
  top_k_per_row_kernel<<<static_cast<unsigned>(params.rows), kThreads, kSmemBytes,
                         static_cast<cudaStream_t>(stream)>>>(params);
  const cudaError_t launch_err = cudaGetLastError();
  return launch_err == cudaSuccess ? nullptr : cudaGetErrorString(launch_err);
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
