// The current stream of a GPU device, as the opaque handle the backends' launchers take. The handle
// comes from torch's own vendor header (c10::Stream::native_handle is newer than the oldest torch this
// package supports); nothing else in the bindings is vendor-specific.
#pragma once
#include <c10/core/Device.h>

#if defined(AITER_WITH_SM90)
#include <c10/cuda/CUDAStream.h>
#elif defined(AITER_WITH_GFX950)
#include <ATen/hip/HIPContext.h>
#endif

namespace aiter {

inline void* current_stream(const at::Device& device) {
#if defined(AITER_WITH_SM90)
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#elif defined(AITER_WITH_GFX950)
  return at::hip::getCurrentHIPStream(device.index()).stream();
#else
  (void)device;
  return nullptr;  // no GPU backend compiled: the bindings refuse GPU tensors before asking
#endif
}

}  // namespace aiter
