// One kernel instance's host side: tensor maps, shared-memory reservation, the pricing kernel and
// the main kernel as its programmatic dependent.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m]) clamped to [0, N]
//
// Tensors: Q [M, H, D] and K [N, D] e4m3 get 2-D tensor maps (rows of D bytes, D-byte swizzle: the
// layout wgmma reads from shared memory); everything else goes to the kernel as pointers in
// Fp8MqaLogitsParams. launch_heads<H> is explicitly instantiated for each served H in its own file
// (instances/heads_slot_<i>.cu: kServedHeads[i]) so that the JIT compiles the H in parallel, and
// launcher.cu (the dispatch on H) sees only the declaration below.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/fp8_mqa_logits_params.h"

namespace aiter {
namespace sm90 {

// What a launch of any instance gets from the dispatch.
struct LaunchContext {
  const Fp8MqaLogitsParams& params;
  void* workspace;  // the plan's block prices: plan_workspace_bytes(num_blocks)
  int device_index;
  int num_sms;
  cudaStream_t stream;
};

// The instances of one H: the call's D and logits format dispatched to their kernel (every D of
// capabilities.h's kServedHeadDims, every format). nullptr on success, else a static message.
template <int H>
const char* launch_heads(const LaunchContext& context);

}  // namespace sm90
}  // namespace aiter

// The definition, for the instance files only (they define AITER_SM90_INSTANCE_FILE first).
#ifdef AITER_SM90_INSTANCE_FILE
#include <cuda_bf16.h>

#include "sm90/capabilities.h"
#include "sm90/cuda_errors.h"
#include "sm90/kernel.cuh"
#include "sm90/plan.cuh"

namespace aiter {
namespace sm90 {
namespace launch_detail {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, fetched through the runtime so the module needs no -lcuda.
inline EncodeTiledFn encode_tiled() {
  static EncodeTiledFn encoder = []() -> EncodeTiledFn {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiledFn>(entry);
  }();
  return encoder;
}

// A [rows, D-byte] fp8 matrix read in boxes of `box_rows` rows, with the D-byte swizzle for wgmma.
template <int D>
bool make_row_map(CUtensorMap* map, const void* base, uint64_t rows, uint32_t box_rows) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return false;
  constexpr CUtensorMapSwizzle kSwizzle =
      D == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : D == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_32B;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(D), rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(D)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(D), box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, kSwizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One flag per device and kernel: the kernel's dynamic shared-memory limit is raised once per device.
constexpr int kMaxDevices = 64;

template <auto kKernel>
const char* reserve_shared_memory(int device_index, size_t smem) {
  static std::atomic<bool> reserved[kMaxDevices] = {};
  if (device_index < kMaxDevices && reserved[device_index].load(std::memory_order_acquire)) return nullptr;
  if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
      cudaSuccess)
    return "sm90: cannot reserve the kernel's shared memory";
  if (device_index < kMaxDevices) reserved[device_index].store(true, std::memory_order_release);
  return nullptr;
}

}  // namespace launch_detail

// The pricing kernel, then the main kernel as its programmatic dependent (plan.cuh says why).
template <int H, int D, class Logits>
const char* launch_instance(const LaunchContext& context) {
  const Fp8MqaLogitsParams& params = context.params;
  // TMA needs 16-byte aligned bases (the binding checks it too): said precisely here, so that an
  // encoder failure below is something else.
  if (reinterpret_cast<uintptr_t>(params.q) % 16 != 0 || reinterpret_cast<uintptr_t>(params.kv) % 16 != 0)
    return "fp8_mqa_logits (sm90): q and kv must start 16-byte aligned (the kernel reads them with TMA)";
  CUtensorMap q_map, k_map;
  if (!launch_detail::make_row_map<D>(&q_map, params.q, static_cast<uint64_t>(params.M) * H, kQBoxRows) ||
      !launch_detail::make_row_map<D>(&k_map, params.kv, static_cast<uint64_t>(params.N), kKeysPerTile))
    return explain_failure(context.stream,
                           "fp8_mqa_logits (sm90): cuTensorMapEncodeTiled failed for q's or kv's tensor map (the "
                           "driver has no tensor-map encoder, or it refused the map's dims)");
  const size_t smem = sizeof(SharedStorage) + 1024;  // + room to align the tiles to 1024 bytes
  if (const char* err = launch_detail::reserve_shared_memory<fp8_mqa_logits_sm90_kernel<H, D, Logits>>(
          context.device_index, smem))
    return explain_failure(context.stream, err);

  int2* block_units = static_cast<int2*>(context.workspace);
  const int64_t blocks = (params.M + BlockShape<H>::kRowsPerBlock - 1) / BlockShape<H>::kRowsPerBlock;
  const unsigned price_ctas = static_cast<unsigned>((blocks + kPriceThreads - 1) / kPriceThreads);
  // Both kernels are programmatic dependents of what precedes them on the stream: each one's CTAs
  // may start before that finishes, and wait for it (grid_dependency_wait) before reading its results.
  cudaLaunchAttribute dependent_launch[1];
  dependent_launch[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent_launch[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.stream = context.stream;
  config.attrs = dependent_launch;
  config.numAttrs = 1;
  config.gridDim = dim3(price_ctas);
  config.blockDim = dim3(kPriceThreads);
  cudaError_t err = cudaLaunchKernelEx(&config, price_blocks_kernel<H>, params, block_units);
  if (err != cudaSuccess) return launch_error_text(err);

  config.gridDim = dim3(context.num_sms);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  err = cudaLaunchKernelEx(&config, fp8_mqa_logits_sm90_kernel<H, D, Logits>, q_map, k_map, params,
                           static_cast<const int2*>(block_units));
  return err == cudaSuccess ? nullptr : launch_error_text(err);
}

// The four logits formats of one (H, D): float32 or bfloat16, full or compressed layout.
template <int H, int D>
const char* launch_format(const LaunchContext& context) {
  const bool compressed = context.params.compressed;
  if (context.params.logits_dtype == LogitsDtype::kBFloat16)
    return compressed ? launch_instance<H, D, LogitsFormat<__nv_bfloat16, true>>(context)
                      : launch_instance<H, D, LogitsFormat<__nv_bfloat16, false>>(context);
  return compressed ? launch_instance<H, D, LogitsFormat<float, true>>(context)
                    : launch_instance<H, D, LogitsFormat<float, false>>(context);
}

template <int H>
const char* launch_heads(const LaunchContext& context) {
  return dispatch_listed<kServedHeadDims>(
      context.params.D, [&](auto head_dim) { return launch_format<H, decltype(head_dim)::value>(context); },
      "fp8_mqa_logits (sm90): this D is not served (capabilities.h)");
}

// An instance file: the instances of the served H at position AITER_SM90_HEADS_SLOT of kServedHeads.
#ifdef AITER_SM90_HEADS_SLOT
static_assert(AITER_SM90_HEADS_SLOT < count_of(kServedHeads),
              "build_config compiles a heads_slot file for each served H only");
template const char* launch_heads<kServedHeads[AITER_SM90_HEADS_SLOT]>(const LaunchContext&);
#endif

}  // namespace sm90
}  // namespace aiter
#endif  // AITER_SM90_INSTANCE_FILE
