// The current stream of a GPU device, as the opaque handle the backends' launchers take. The handle
// comes from torch's own vendor header (c10::Stream::native_handle is newer than the oldest torch this
// package supports). Only the GPU family modules include it (binding/gpu_family_module.cpp, built for
// one target); the CPU module's bindings take the stream from the entry they launch through.
#pragma once
#include <c10/core/Device.h>

#if defined(AITER_WITH_SM90)
#include <c10/cuda/CUDAStream.h>
#elif defined(AITER_WITH_GFX950)
#include <ATen/hip/HIPContext.h>
#endif

namespace aiter {

// By device index, as the entries' CurrentStreamFn (binding/gpu_backends.h) takes it, so that an entry
// points at this function itself.
inline void* current_stream(int device_index) {
  const auto index = static_cast<c10::DeviceIndex>(device_index);
#if defined(AITER_WITH_SM90)
  return c10::cuda::getCurrentCUDAStream(index).stream();
#elif defined(AITER_WITH_GFX950)
  return at::hip::getCurrentHIPStream(index).stream();
#else
  (void)index;
  return nullptr;  // no GPU target: nothing launches
#endif
}

}  // namespace aiter
