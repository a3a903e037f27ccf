// fp8_mqa_logits: the torch-free argument block shared by every backend.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [s_m, e_m)
//                  -inf elsewhere when clean_logits (else untouched)
//   s_m = clamp(ks[m], 0, N), e_m = clamp(ke[m], 0, N); s_m >= e_m is an empty row.
//
// Layouts (all row-major, checked by the ATen binding before any backend sees them):
//   q          [M, H, D]  float8_e4m3fn bytes, contiguous
//   kv         [N, D]     float8_e4m3fn bytes, contiguous
//   kv_scales  [N]        float32, contiguous, > 0 (precondition, not checked on device)
//   weights    [M, H]     float32, row stride weights_stride (elements), last dim contiguous
//   ks, ke     [M]        int32, raw bounds (may be negative or past N)
//   out        [M, W]     float32 or bfloat16 (logits_dtype), row stride out_stride (elements) >= W,
//                         last dim contiguous. W = out_columns: N (full layout: key n at column n),
//                         or max_seqlen_k (compressed: key n of row m at column n - s_m, and with
//                         clean_logits the columns past e_m - s_m are -inf)
#pragma once
#include <cstdint>

#include "common/logits_dtype.h"

namespace aiter {

struct Fp8MqaLogitsParams {
  const uint8_t* q;
  const uint8_t* kv;
  const float* kv_scales;
  const float* weights;
  const int32_t* ks;
  const int32_t* ke;
  void* out;
  int64_t M;
  int64_t N;
  int32_t H;
  int32_t D;
  int64_t weights_stride;
  int64_t out_stride;
  int64_t out_columns;
  LogitsDtype logits_dtype;
  bool compressed;
  bool clean_logits;
};

}  // namespace aiter
