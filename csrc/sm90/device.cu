// The device queries of the Hopper backend (device.h), shared by its kernel families.
#include <cuda_runtime.h>

#include <atomic>

#include "sm90/capabilities.h"
#include "sm90/device.h"

namespace aiter {
namespace sm90 {

int sm_count(int device_index) {
  constexpr int kMaxDevices = 64;  // devices whose count is cached; others are asked every call
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

const char* check_device(int device_index) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index) != cudaSuccess)
    return "the sm90 backend cannot query this GPU's compute capability";
  if (major != kComputeCapability[0] || minor != kComputeCapability[1])
    return "the sm90 backend (sm_90a: wgmma, TMA) runs on compute capability 9.0 (H100, H200) only";
  return nullptr;
}

}  // namespace sm90
}  // namespace aiter
