// One paged decode kernel instance's host side: its two tensor maps and the launch.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors: q [B * next_n * H rows, D bytes] (2-D map, box next_n x H rows); kv_cache's keys
// [num_blocks][block_kv][D bytes] (3-D map, block stride kv_block_stride, box one block); both with
// the D-byte swizzle. launch_heads<H> is explicitly instantiated for each served H in its own file
// (instances/paged_heads_slot_<i>.cu: kServedPagedHeads[i]); paged_launcher.cu (the dispatch on H)
// sees only the declaration.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include "common/fp8_paged_mqa_logits_params.h"

namespace aiter {
namespace sm90 {
namespace paged {

// The instances of one H: the call's D, next_n and logits element dispatched to their kernel (every
// D and next_n of capabilities.h's kServedPagedHeadDims and kServedPagedNextN whose next_n x H fits
// kServedPagedColumns). nullptr on success, else a static message.
template <int H>
const char* launch_heads(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream);

}  // namespace paged
}  // namespace sm90
}  // namespace aiter

#ifdef AITER_SM90_PAGED_INSTANCE_FILE
#include <cuda_bf16.h>

#include "sm90/capabilities.h"
#include "sm90/common/launch.cuh"
#include "sm90/cuda_errors.h"
#include "sm90/paged/kernel.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// The keys of the cache as [num_blocks][block_kv][D bytes]: box one block, D-byte swizzle.
template <int D>
bool make_cache_map(CUtensorMap* map, const Fp8PagedMqaLogitsParams& params) {
  const launch_detail::EncodeTiledFn encode = launch_detail::encode_tiled();
  if (encode == nullptr) return false;
  constexpr CUtensorMapSwizzle kSwizzle = D == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(params.block_kv),
                              static_cast<cuuint64_t>(params.num_blocks)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(params.kv_block_stride)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(D), static_cast<cuuint32_t>(params.block_kv), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<uint8_t*>(params.kv_cache), dims, strides, box,
                elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, kSwizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int H, int D, int NEXT_N, typename Element>
const char* launch_instance(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  using Shape = PagedShape<H, D, NEXT_N>;
  // TMA's alignment rules (the binding checks them too), said precisely before encoding, so that an
  // encoder failure below is something else (explain_failure names a sticky context error).
  if (reinterpret_cast<uintptr_t>(params.q) % 16 != 0 || reinterpret_cast<uintptr_t>(params.kv_cache) % 16 != 0)
    return "fp8_paged_mqa_logits (sm90): q and kv_cache must start 16-byte aligned (the kernel reads them with TMA)";
  if (params.kv_block_stride % 16 != 0)
    return "fp8_paged_mqa_logits (sm90): kv_cache's blocks must lie a multiple of 16 bytes apart (TMA)";
  CUtensorMap q_map, k_map;
  if (!launch_detail::make_row_map<D>(&q_map, params.q, static_cast<uint64_t>(params.batches) * Shape::kCols,
                                      Shape::kCols) ||
      !make_cache_map<D>(&k_map, params))
    return explain_failure(stream,
                           "fp8_paged_mqa_logits (sm90): cuTensorMapEncodeTiled failed for q's or kv_cache's tensor "
                           "map (the driver has no tensor-map encoder, or it refused the map's dims)");
  const size_t smem = sizeof(PagedSharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  if (const char* err = launch_detail::reserve_shared_memory<fp8_paged_mqa_logits_sm90_kernel<H, D, NEXT_N, Element>>(
          device_index, smem))
    return explain_failure(stream, err);
  fp8_paged_mqa_logits_sm90_kernel<H, D, NEXT_N, Element>
      <<<static_cast<unsigned>(params.num_shares), kPagedThreads, smem, stream>>>(q_map, k_map, params);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : launch_error_text(err);
}

static_assert(kServedPagedColumns <= 2 * kWgmmaCols, "capabilities.h's column bound is the widest tile PagedShape takes");

template <int H, int D, int NEXT_N>
const char* launch_element(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  return params.logits_dtype == LogitsDtype::kBFloat16
             ? launch_instance<H, D, NEXT_N, __nv_bfloat16>(params, device_index, stream)
             : launch_instance<H, D, NEXT_N, float>(params, device_index, stream);
}

template <int H>
const char* launch_heads(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t stream) {
  return dispatch_listed<kServedPagedHeadDims>(
      params.D,
      [&](auto head_dim) {
        constexpr int kHeadDim = decltype(head_dim)::value;
        return dispatch_listed<kServedPagedNextN>(
            params.next_n,
            [&](auto next_n) -> const char* {
              constexpr int kNextN = decltype(next_n)::value;
              if constexpr (kNextN * H <= kServedPagedColumns)
                return launch_element<H, kHeadDim, kNextN>(params, device_index, stream);
              else
                return "fp8_paged_mqa_logits (sm90): next_n x H is more columns than a batch's tile holds "
                       "(capabilities.h)";
            },
            "fp8_paged_mqa_logits (sm90): this next_n is not served (capabilities.h)");
      },
      "fp8_paged_mqa_logits (sm90): this D is not served (capabilities.h)");
}

// An instance file: the instances of the served H at position AITER_SM90_PAGED_HEADS_SLOT of
// kServedPagedHeads.
#ifdef AITER_SM90_PAGED_HEADS_SLOT
static_assert(AITER_SM90_PAGED_HEADS_SLOT < count_of(kServedPagedHeads),
              "build_config compiles a paged_heads_slot file for each served H only");
template const char* launch_heads<kServedPagedHeads[AITER_SM90_PAGED_HEADS_SLOT]>(const Fp8PagedMqaLogitsParams&,
                                                                                   int, cudaStream_t);
#endif

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
#endif  // AITER_SM90_PAGED_INSTANCE_FILE
