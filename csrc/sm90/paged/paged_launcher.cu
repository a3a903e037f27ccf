// Host side of the Hopper paged decode backend: what it serves, the schedule's shares, the metadata
// kernel's launch, and the dispatch of a call to its kernel instance.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//
// Tensors: as in common/fp8_paged_mqa_logits_params.h. Each (H, D, next_n, logits element) is an
// instance of its own (launch_instance.cuh), built in instances/ one file per H; this file
// dispatches on H (capabilities.h's list) and holds none.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "sm90/capabilities.h"
#include "sm90/cuda_errors.h"
#include "sm90/device.h"  // sm_count
#include "sm90/paged/launch_instance.cuh"
#include "sm90/paged/launcher.h"
#include "sm90/paged/metadata.cuh"
#include "sm90/paged/shape.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// The claim word of the device's bad block_table record and the NaN scales a bad entry's keys get
// (one of each per device: module globals live in each device's context). Zero: nothing claimed.
__device__ int32_t g_block_table_claim;
#define AITER_NAN4 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u
#define AITER_NAN16 AITER_NAN4, AITER_NAN4, AITER_NAN4, AITER_NAN4
__device__ __align__(16) uint32_t g_nan_scale_bits[kPagedNanScales] = {AITER_NAN16, AITER_NAN16, AITER_NAN16,
                                                                         AITER_NAN16};
#undef AITER_NAN16
#undef AITER_NAN4

namespace {

// One device's bad block_table record (docs/operator.md, "Bad block_table entries"): the record in
// pinned host memory that the kernels write through its mapped device address (only when they meet
// a bad entry, so a good launch adds no work to the stream), the claim word and the NaN scales.
struct FaultChannel {
  std::mutex mutex;
  PagedBlockTableFault* host_record = nullptr;    // pinned, mapped
  PagedBlockTableFault* device_record = nullptr;  // its device address
  int32_t* claim = nullptr;
  const float* nan_scales = nullptr;
};

constexpr int kMaxFaultDevices = 64;

FaultChannel* fault_channel(int device_index) {
  static FaultChannel channels[kMaxFaultDevices];
  return device_index >= 0 && device_index < kMaxFaultDevices ? &channels[device_index] : nullptr;
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

// The record, the claim word and the NaN scales of the current device (the binding's device guard),
// made on first use. Caller holds the mutex.
const char* open_channel(FaultChannel& channel, cudaStream_t stream) {
  if (channel.host_record != nullptr) return nullptr;
  void* claim = nullptr;
  void* scales = nullptr;
  if (cudaGetSymbolAddress(&claim, g_block_table_claim) != cudaSuccess ||
      cudaGetSymbolAddress(&scales, g_nan_scale_bits) != cudaSuccess)
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot find the block_table record's device words");
  void* host = nullptr;
  void* mapped = nullptr;
  if (cudaHostAlloc(&host, sizeof(PagedBlockTableFault), cudaHostAllocMapped) != cudaSuccess)
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot allocate the block_table record (pinned, mapped)");
  if (cudaHostGetDevicePointer(&mapped, host, 0) != cudaSuccess) {
    cudaFreeHost(host);
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot map the block_table record for the device");
  }
  std::memset(host, 0, sizeof(PagedBlockTableFault));
  channel.host_record = static_cast<PagedBlockTableFault*>(host);
  channel.device_record = static_cast<PagedBlockTableFault*>(mapped);
  channel.claim = static_cast<int32_t*>(claim);
  channel.nan_scales = static_cast<const float*>(scales);
  return nullptr;
}

}  // namespace

bool serves(long long heads, long long head_dim, long long block_kv, long long next_n) {
  return serves_paged(heads, head_dim, block_kv, next_n);
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

namespace {

const char* launch_kernel(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t cuda_stream);

}  // namespace

const char* launch(const Fp8PagedMqaLogitsParams& params, int device_index, void* stream) {
  if (!serves(params.H, params.D, params.block_kv, params.next_n))
    return "fp8_paged_mqa_logits (sm90): this H, D, block_kv and next_n are not served (capabilities.h)";
  if (params.batches == 0 || params.max_context_len == 0 || params.num_shares == 0) return nullptr;
  FaultChannel* channel = fault_channel(device_index);
  if (channel == nullptr) return "fp8_paged_mqa_logits (sm90): device index out of range";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  Fp8PagedMqaLogitsParams with_record = params;
  {
    const std::lock_guard<std::mutex> lock(channel->mutex);
    if (const char* err = open_channel(*channel, cuda_stream)) return err;
    with_record.block_table_fault = channel->device_record;
    with_record.block_table_claim = channel->claim;
    with_record.nan_scales = channel->nan_scales;
  }
  return launch_kernel(with_record, device_index, cuda_stream);
}

const char* take_block_table_fault(int device_index, void* stream, bool wait, PagedBlockTableFault* fault) {
  *fault = PagedBlockTableFault{};
  FaultChannel* channel = fault_channel(device_index);
  if (channel == nullptr) return "fp8_paged_mqa_logits (sm90): device index out of range";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const std::lock_guard<std::mutex> lock(channel->mutex);
  if (channel->host_record == nullptr) return nullptr;  // no launch on this device yet
  if (is_capturing(cuda_stream)) return nullptr;      // a capture neither waits nor resets
  if (wait && cudaStreamSynchronize(cuda_stream) != cudaSuccess)
    return explain_failure(cuda_stream, "fp8_paged_mqa_logits (sm90): waiting for the paged calls failed");
  volatile PagedBlockTableFault* record = channel->host_record;
  if (record->found == 0) return nullptr;
  std::atomic_thread_fence(std::memory_order_acquire);  // the fields were written before `found`
  fault->found = 1;
  fault->batch = record->batch;
  fault->column = record->column;
  fault->value = record->value;
  fault->num_blocks = record->num_blocks;
  record->found = 0;
  // Kernels behind this point on the stream may claim the record again.
  if (cudaMemsetAsync(channel->claim, 0, sizeof(int32_t), cuda_stream) != cudaSuccess)
    return explain_failure(cuda_stream, "fp8_paged_mqa_logits (sm90): cannot reset the block_table record");
  return nullptr;
}

namespace {

const char* launch_kernel(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t cuda_stream) {
  // Keys and rows are 32-bit indices in the kernel; TMA strides are multiples of 16 bytes.
  if (params.max_context_len >= (int64_t(1) << 31) - kKeysPerTile || params.kv_block_stride % 16 != 0 ||
      params.batches * params.next_n * params.H >= (int64_t(1) << 31))
    return "fp8_paged_mqa_logits (sm90): max_context_len and B * next_n * H must stay below 2^31, and a cache "
           "block's stride must be a multiple of 16 bytes";
  return dispatch_listed<kServedPagedHeads>(
      params.H, [&](auto heads) { return launch_heads<decltype(heads)::value>(params, device_index, cuda_stream); },
      "fp8_paged_mqa_logits (sm90): this H is not served (capabilities.h)");
}

}  // namespace

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
