// Error texts of the sm90 launchers when a CUDA call fails: a sticky context error (an earlier
// kernel's illegal address, assert or launch failure, after which every CUDA call of the process
// fails) is named as what it is, not as whatever the failing call would otherwise suggest (a
// tensor map "alignment" problem, a shared-memory reservation).
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace aiter {
namespace sm90 {

// Whether `err` is one of the errors that leave the CUDA context unusable for the process.
inline bool is_sticky_error(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

// The text of the CUDA context's pending or sticky error on `stream`'s device, or nullptr when there
// is none. Called after a CUDA call failed, so cost does not matter; it never synchronises and
// never disturbs a stream capture (a capturing stream is not queried).
inline const char* context_error_text(cudaStream_t stream) {
  cudaError_t err = cudaPeekAtLastError();
  if (err == cudaSuccess) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    err = cudaStreamIsCapturing(stream, &status);
    if (err == cudaSuccess && status == cudaStreamCaptureStatusNone) {
      err = cudaStreamQuery(stream);  // reports a sticky error; else success or not ready
      if (err == cudaErrorNotReady) err = cudaSuccess;
    }
  }
  if (err == cudaSuccess) return nullptr;
  static thread_local std::string text;
  text = std::string(is_sticky_error(err) ? "the CUDA context has a sticky error from an earlier kernel ("
                                          : "a CUDA error is pending from an earlier call (") +
         cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")" +
         (is_sticky_error(err) ? "; every later CUDA call of this process fails: restart the process (run with "
                                 "CUDA_LAUNCH_BLOCKING=1 to find the kernel that caused it)"
                               : "");
  return text.c_str();
}

// `fallback` (a static text), unless the context holds an error that explains the failure better.
inline const char* explain_failure(cudaStream_t stream, const char* fallback) {
  const char* context = context_error_text(stream);
  return context != nullptr ? context : fallback;
}

// The text of a failed launch (cudaGetLastError's `err`), naming a sticky error as such.
inline const char* launch_error_text(cudaError_t err) {
  if (!is_sticky_error(err)) return cudaGetErrorString(err);
  static thread_local std::string text;
  text = std::string("the CUDA context has a sticky error from an earlier kernel (") + cudaGetErrorName(err) + ": " +
         cudaGetErrorString(err) + "); every later CUDA call of this process fails: restart the process";
  return text.c_str();
}

}  // namespace sm90
}  // namespace aiter
