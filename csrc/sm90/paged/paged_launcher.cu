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
#include <mutex>

#include "sm90/capabilities.h"
#include "sm90/cuda_errors.h"
#include "sm90/launcher.h"
#include "sm90/paged/launch_instance.cuh"
#include "sm90/paged/launcher.h"
#include "sm90/paged/metadata.cuh"
#include "sm90/paged/shape.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// The device's record of bad block_table entries and the NaN scales a bad entry's keys get (one
// per device: module globals live in each device's context). Zero-initialised: no entry seen.
__device__ PagedBlockTableFault g_block_table_fault;
#define AITER_NAN4 0x7fc00000u, 0x7fc00000u, 0x7fc00000u, 0x7fc00000u
#define AITER_NAN16 AITER_NAN4, AITER_NAN4, AITER_NAN4, AITER_NAN4
__device__ __align__(16) uint32_t g_nan_scale_bits[kPagedNanScales] = {AITER_NAN16, AITER_NAN16, AITER_NAN16,
                                                                         AITER_NAN16};
#undef AITER_NAN16
#undef AITER_NAN4

namespace {

// The host side of one device's record (scheme in launcher.h and docs/operator.md, "Bad block_table
// entries"): the device addresses, a pinned host copy and the event of its last copy.
struct FaultChannel {
  std::mutex mutex;
  PagedBlockTableFault* device_record = nullptr;
  const float* nan_scales = nullptr;
  PagedBlockTableFault* host_record = nullptr;  // pinned
  cudaEvent_t copied = nullptr;
  bool pending = false;  // a copy was issued and its result not yet looked at
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

// The device addresses (current device: the binding's device guard). Caller holds the mutex.
const char* open_device_side(FaultChannel& channel, cudaStream_t stream) {
  if (channel.device_record != nullptr) return nullptr;
  void* record = nullptr;
  void* scales = nullptr;
  if (cudaGetSymbolAddress(&record, g_block_table_fault) != cudaSuccess ||
      cudaGetSymbolAddress(&scales, g_nan_scale_bits) != cudaSuccess)
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot find the block_table record's device address");
  channel.device_record = static_cast<PagedBlockTableFault*>(record);
  channel.nan_scales = static_cast<const float*>(scales);
  return nullptr;
}

// The pinned host copy and its event (never during a capture). Caller holds the mutex.
const char* open_host_side(FaultChannel& channel, cudaStream_t stream) {
  if (channel.host_record != nullptr) return nullptr;
  void* host = nullptr;
  if (cudaHostAlloc(&host, sizeof(PagedBlockTableFault), cudaHostAllocDefault) != cudaSuccess)
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot allocate the block_table record's pinned copy");
  if (cudaEventCreateWithFlags(&channel.copied, cudaEventDisableTiming) != cudaSuccess) {
    cudaFreeHost(host);
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot create the block_table record's event");
  }
  *static_cast<PagedBlockTableFault*>(host) = PagedBlockTableFault{};
  channel.host_record = static_cast<PagedBlockTableFault*>(host);
  return nullptr;
}

// Copies the device record behind the work on `stream` into the host copy, then records the event.
const char* copy_record(FaultChannel& channel, cudaStream_t stream) {
  if (const char* err = open_host_side(channel, stream)) return err;
  if (cudaMemcpyAsync(channel.host_record, channel.device_record, sizeof(PagedBlockTableFault),
                      cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaEventRecord(channel.copied, stream) != cudaSuccess)
    return explain_failure(stream, "fp8_paged_mqa_logits (sm90): cannot copy the block_table record to the host");
  channel.pending = true;
  return nullptr;
}

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
  const std::lock_guard<std::mutex> lock(channel->mutex);
  if (const char* err = open_device_side(*channel, cuda_stream)) return err;
  Fp8PagedMqaLogitsParams with_record = params;
  with_record.block_table_fault = channel->device_record;
  with_record.nan_scales = channel->nan_scales;
  if (const char* err = launch_kernel(with_record, device_index, cuda_stream)) return err;
  // In a capture the record stays on the device (sticky until taken): the next eager call copies it.
  return is_capturing(cuda_stream) ? nullptr : copy_record(*channel, cuda_stream);
}

const char* take_block_table_fault(int device_index, void* stream, bool wait, PagedBlockTableFault* fault) {
  *fault = PagedBlockTableFault{};
  FaultChannel* channel = fault_channel(device_index);
  if (channel == nullptr) return "fp8_paged_mqa_logits (sm90): device index out of range";
  const cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  const std::lock_guard<std::mutex> lock(channel->mutex);
  if (channel->device_record == nullptr && !wait) return nullptr;  // no launch on this device yet
  if (is_capturing(cuda_stream)) return nullptr;
  if (wait) {
    if (const char* err = open_device_side(*channel, cuda_stream)) return err;
    if (const char* err = copy_record(*channel, cuda_stream)) return err;
    if (cudaEventSynchronize(channel->copied) != cudaSuccess)
      return explain_failure(cuda_stream, "fp8_paged_mqa_logits (sm90): waiting for the block_table record failed");
  } else {
    if (!channel->pending) return nullptr;
    const cudaError_t done = cudaEventQuery(channel->copied);
    if (done == cudaErrorNotReady) return nullptr;  // looked at by a later call
    if (done != cudaSuccess) return launch_error_text(done);
  }
  channel->pending = false;
  if (channel->host_record->found != 0) {
    *fault = *channel->host_record;
    channel->host_record->found = 0;
    if (cudaMemsetAsync(channel->device_record, 0, sizeof(PagedBlockTableFault), cuda_stream) != cudaSuccess)
      return explain_failure(cuda_stream, "fp8_paged_mqa_logits (sm90): cannot reset the block_table record");
  }
  return nullptr;
}

namespace {

const char* launch_kernel(const Fp8PagedMqaLogitsParams& params, int device_index, cudaStream_t cuda_stream) {
  // Keys and rows are 32-bit indices in the kernel; TMA strides are multiples of 16 bytes.
  if (params.max_context_len >= (int64_t(1) << 31) - kKeysPerTile || params.kv_block_stride % 16 != 0 ||
      params.batches * params.next_n * params.H >= (int64_t(1) << 31))
    return "fp8_paged_mqa_logits (sm90): max_context_len and B * next_n * H must stay below 2^31, and a cache "
           "block's stride must be a multiple of 16 bytes";
  static_assert(sizeof(kServedPagedHeads) / sizeof(kServedPagedHeads[0]) == 4, "the dispatch covers every H");
  switch (params.H) {
    case 8: return launch_head_dim<8>(params, device_index, cuda_stream);
    case 16: return launch_head_dim<16>(params, device_index, cuda_stream);
    case 32: return launch_head_dim<32>(params, device_index, cuda_stream);
    case 64: return launch_head_dim<64>(params, device_index, cuda_stream);
  }
  return "fp8_paged_mqa_logits (sm90): this H is not served (capabilities.h)";
}

}  // namespace

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
