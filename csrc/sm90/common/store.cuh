// Plain logit stores and the -inf row fill, shared by the prefill and the paged kernel's exact paths
// and -inf fills (the math warpgroups store with ptx/ld_st.cuh's predicated streaming form).
#pragma once
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>

namespace aiter {
namespace sm90 {

// A plain store of one logit as the output's element (the exact path; the epilogue has its own
// predicated streaming form), and the element's -inf twice over in 32 bits (the fill's vectors).
__device__ __forceinline__ void store_logit(float* at, float value) { *at = value; }
__device__ __forceinline__ void store_logit(__nv_bfloat16* at, float value) { *at = __float2bfloat16_rn(value); }
template <typename Element>
__host__ __device__ constexpr uint32_t neg_inf_word() {
  return sizeof(Element) == 4 ? 0xff800000u : 0xff80ff80u;
}

// -inf over columns [begin, end) of one row by `threads` threads (this one is `thread`), 16-byte
// stores where the row allows. The 16-byte body goes with streaming stores (st.global.cs, like the
// epilogue's), so the output passes through L2 without evicting K and Q. Column indices are 32-bit:
// the launcher keeps N and max_seqlen_k below 2^31 - 64.
template <typename Element>
__device__ __forceinline__ void fill_row_run(Element* row, int begin, int end, int thread, int threads, bool vec_ok) {
  constexpr int kPerVector = 16 / sizeof(Element);
  Element neg_inf;
  const uint32_t neg_inf_bits = neg_inf_word<Element>();
  memcpy(&neg_inf, &neg_inf_bits, sizeof(Element));
  if (vec_ok) {
    // Scalar head up to 16-byte alignment, vector body, scalar tail.
    const int body_begin = min(end, (begin + kPerVector - 1) & ~(kPerVector - 1));
    const int body_end = max(body_begin, end & ~(kPerVector - 1));
    for (int n = begin + thread; n < body_begin; n += threads) row[n] = neg_inf;
    uint4* body = reinterpret_cast<uint4*>(row + body_begin);
    const uint4 neg_inf_vector = make_uint4(neg_inf_bits, neg_inf_bits, neg_inf_bits, neg_inf_bits);
    for (int v = thread; v < (body_end - body_begin) / kPerVector; v += threads) __stcs(body + v, neg_inf_vector);
    for (int n = body_end + thread; n < end; n += threads) row[n] = neg_inf;
  } else {
    for (int n = begin + thread; n < end; n += threads) row[n] = neg_inf;
  }
}

// Whether an output's rows take the 16-byte body: the base 16-byte aligned and the row stride a
// whole number of vectors.
template <typename Element>
__device__ __forceinline__ bool rows_take_vectors(const void* out, int64_t out_stride) {
  return reinterpret_cast<uintptr_t>(out) % 16 == 0 && out_stride % (16 / sizeof(Element)) == 0;
}

}  // namespace sm90
}  // namespace aiter
