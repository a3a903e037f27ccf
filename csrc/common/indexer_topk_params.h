// top_k_per_row (the indexer's top-k over a row's visible logits): the torch-free argument block the
// CPU path and the GPU kernels share, and the two definitions every backend must agree on bit for
// bit (the visible window of a row and the order-preserving key of a logit), kept here once.
//
//   row r sees the columns [begin(r), end(r)) of its logits row, cut to [0, width):
//     prefill (row_starts, row_ends):    [row_starts[r], row_ends[r])
//     decode, one length per batch:      [0, seq_lens[r / next_n] - next_n + r % next_n + 1)
//     decode, one length per row:        [0, seq_lens[r])
//   indices[r, 0..k): the columns (absolute: column c of the logits row, never c - begin) of the k
//     largest visible logits in ascending column order; ties between equal values go to the lower
//     column; -inf and NaN are never chosen; fewer than k choosable columns give all of them, then -1.
//   values[r, 0..k) (optional): the chosen logits (float32), -inf where indices holds -1.
//
// Layouts, checked by the ATen binding: logits [rows, width] float32 or bfloat16, element (r, c) at
// r * stride0 + c * stride1; indices [rows, >= k] int32 with row stride indices_stride, last dim
// contiguous; values likewise, float32.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define AITER_TOPK_HD __host__ __device__ __forceinline__
#else
#define AITER_TOPK_HD inline
#endif

namespace aiter {

// The largest k any backend serves: a CTA holds its histograms and scan state for any k up to it.
constexpr int64_t kTopkMaxK = 4096;

struct TopkPerRowParams {
  const void* logits = nullptr;
  bool logits_bf16 = false;
  int64_t rows = 0;
  int64_t width = 0;    // columns of a logits row; every window is cut to [0, width)
  int64_t stride0 = 0;  // elements
  int64_t stride1 = 1;  // elements
  // Prefill windows (both set) or decode lengths (seq_lens set).
  const int32_t* row_starts = nullptr;
  const int32_t* row_ends = nullptr;
  const int32_t* seq_lens = nullptr;
  int64_t next_n = 1;
  bool lens_per_row = false;
  int32_t* indices = nullptr;
  int64_t indices_stride = 0;
  float* values = nullptr;  // optional
  int64_t values_stride = 0;
  int64_t k = 0;
};

// The visible window of row r, cut to [0, width).
AITER_TOPK_HD void topk_row_window(const TopkPerRowParams& p, int64_t r, int64_t* begin, int64_t* end) {
  int64_t b = 0, e = 0;
  if (p.seq_lens == nullptr) {
    b = p.row_starts[r];
    e = p.row_ends[r];
  } else if (p.lens_per_row) {
    e = p.seq_lens[r];
  } else {
    e = static_cast<int64_t>(p.seq_lens[r / p.next_n]) - p.next_n + r % p.next_n + 1;
  }
  b = b < 0 ? 0 : (b > p.width ? p.width : b);
  e = e < b ? b : (e > p.width ? p.width : e);
  *begin = b;
  *end = e;
}

// The order-preserving key of a float: a > b (as floats) exactly when key(a) > key(b), with -0.0 read
// as +0.0 so that the two zeros tie (and the lower column wins). 0 marks what is never chosen: NaN and
// -inf (the smallest choosable value, -FLT_MAX, has key 0x00800000).
AITER_TOPK_HD uint32_t topk_key(float v) {
  if (v != v) return 0u;
  if (v == 0.0f) v = 0.0f;
  uint32_t u;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  u = __float_as_uint(v);
#else
  std::memcpy(&u, &v, sizeof(u));
#endif
  const uint32_t key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return key == 0x007FFFFFu ? 0u : key;  // -inf
}

}  // namespace aiter
