// fp8_mqa_logits: the torch-free argument block shared by every backend.
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//                  -inf elsewhere when clean_logits (else untouched)
//   s_m = clamp(ks[m], 0, N), e_m = clamp(ke[m], 0, N); s_m >= e_m is an empty row.
//
// Layouts (all row-major, checked by the ATen binding before any backend sees them):
//   q          [M, H, D]  float8_e4m3fn bytes, contiguous
//   kv         [N, D]     float8_e4m3fn bytes, contiguous
//   kv_scales  [N]        float32, contiguous, > 0 (precondition, not checked on device)
//   weights    [M, H]     float32, row stride weights_stride (elements), last dim contiguous
//   ks, ke     [M]        int32, raw bounds (may be negative or past N)
//   out        [M, N]     float32, row stride out_stride (elements) >= N, last dim contiguous
#pragma once
#include <cstdint>

namespace aiter {

struct Fp8MqaLogitsParams {
  const uint8_t* q;
  const uint8_t* kv;
  const float* kv_scales;
  const float* weights;
  const int32_t* ks;
  const int32_t* ke;
  float* out;
  int64_t M;
  int64_t N;
  int32_t H;
  int32_t D;
  int64_t weights_stride;
  int64_t out_stride;
  bool clean_logits;
};

}  // namespace aiter
