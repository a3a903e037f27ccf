// Developer shim: exposes the sm90 launcher through a C ABI so tools/sm90_dev/run_dev.py can drive the
// kernel from Python (ctypes) without building the torch extension. Not part of the package.
#include "fp8_mqa_logits_launch.h"

extern "C" const char* aiter_sm90_dev_launch(const void* q, const void* kv, const float* kv_scales,
                                             const float* weights, const int* ks, const int* ke, float* out,
                                             long long M, long long N, int H, int D, long long weights_stride,
                                             long long out_stride, int clean, int num_sms, void* stream) {
  aiter::Fp8MqaLogitsParams p{static_cast<const uint8_t*>(q), static_cast<const uint8_t*>(kv), kv_scales, weights,
                              ks, ke, out, M, N, H, D, weights_stride, out_stride, clean != 0};
  return aiter::fp8_mqa_logits_sm90_launch(p, num_sms, stream);
}
