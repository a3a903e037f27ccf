// Host side of the Hopper paged decode backend: what it serves, the schedule's shares, the metadata
// kernel's launch, and the dispatch of a call to its kernel instance.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors: as in common/fp8_paged_mqa_logits_params.h. Each (H, D, next_n, logits element) is an
// instance of its own (launch_instance.cuh), built in instances/; this file holds none of them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90/capabilities.h"
#include "sm90/launcher.h"
#include "sm90/paged/launch_instance.cuh"
#include "sm90/paged/launcher.h"
#include "sm90/paged/metadata.cuh"
#include "sm90/paged/shape.cuh"

namespace aiter {
namespace sm90 {
namespace paged {
namespace {

template <int H, int D, int NEXT_N>
const char* launch_element(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  return params.logits_dtype == LogitsDtype::kBFloat16
             ? launch_instance<H, D, NEXT_N, __nv_bfloat16>(params, device_index, stream)
             : launch_instance<H, D, NEXT_N, float>(params, device_index, stream);
}

template <int H, int D>
const char* launch_next_n(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  switch (params.next_n) {
    case 1: return launch_element<H, D, 1>(params, device_index, stream);
    case 2: return launch_element<H, D, 2>(params, device_index, stream);
    case 4: return launch_element<H, D, 4>(params, device_index, stream);
  }
  return "fp8_paged_mqa_logits (sm90): this next_n is not served (capabilities.h)";
}

template <int H>
const char* launch_head_dim(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  switch (params.D) {
    case 64: return launch_next_n<H, 64>(params, device_index, stream);
    case 128: return launch_next_n<H, 128>(params, device_index, stream);
  }
  return "fp8_paged_mqa_logits (sm90): this D is not served (capabilities.h)";
}

}  // namespace

bool serves(long long heads, long long head_dim, long long block_kv, long long next_n) {
  return listed(kServedPagedHeads, heads) && listed(kServedPagedHeadDims, head_dim) &&
         listed(kServedPagedBlockKv, block_kv) && listed(kServedPagedNextN, next_n);
}

int64_t num_shares(int device_index) { return sm_count(device_index); }

const char* metadata(const int32_t* context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                     int64_t block_kv, int64_t shares, int32_t* schedule_meta, int device_index, void* stream) {
  (void)device_index;
  if (batches < 0 || block_kv <= 0 || shares <= 0)
    return "fp8_paged_mqa_logits metadata (sm90): needs batches >= 0, block_kv > 0 and at least one share";
  paged_metadata_kernel<<<1, kMetadataThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      context_lens, batches, next_n, lens_per_row, block_kv, shares, schedule_meta);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

const char* launch(const Fp8PagedMqaLogitsParams& params, int device_index, void* stream) {
  if (!serves(params.H, params.D, params.block_kv, params.next_n))
    return "fp8_paged_mqa_logits (sm90): this H, D, block_kv and next_n are not served (capabilities.h)";
  if (params.batches == 0 || params.max_context_len == 0 || params.num_shares == 0) return nullptr;
  // Keys and rows are 32-bit indices in the kernel; TMA strides are multiples of 16 bytes.
  if (params.max_context_len >= (int64_t(1) << 31) - kKeysPerTile || params.kv_block_stride % 16 != 0 ||
      params.batches * params.next_n * params.H >= (int64_t(1) << 31))
    return "fp8_paged_mqa_logits (sm90): max_context_len and B * next_n * H must stay below 2^31, and a cache "
           "block's stride must be a multiple of 16 bytes";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  static_assert(sizeof(kServedPagedHeads) / sizeof(kServedPagedHeads[0]) == 4, "the dispatch covers every H");
  switch (params.H) {
    case 8: return launch_head_dim<8>(params, device_index, cuda_stream);
    case 16: return launch_head_dim<16>(params, device_index, cuda_stream);
    case 32: return launch_head_dim<32>(params, device_index, cuda_stream);
    case 64: return launch_head_dim<64>(params, device_index, cuda_stream);
  }
  return "fp8_paged_mqa_logits (sm90): this H is not served (capabilities.h)";
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
