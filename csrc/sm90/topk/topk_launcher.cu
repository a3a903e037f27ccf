// Host side of the Hopper top-k kernels on the caller's stream; no allocation and no synchronisation,
// so a launch may be captured in a CUDA graph.
//
//   register_select.cuh: rows with unit column stride of at most ~33K columns: a row's keys in one
//     CTA's registers, read from global memory once; one wave of CTAs takes the rows in turn.
//   cluster_select.cuh: rows with unit column stride whose window, split over a cluster of at most
//     kMaxCluster CTAs, fits in their shared memory: the row is read from global memory once.
//   two_pass_select.cuh: any other row (a column stride, or windows too long to stage): one CTA per
//     row, the row read from global memory twice.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "sm90/topk/cluster_select.cuh"
#include "sm90/topk/launcher.h"
#include "sm90/topk/register_select.cuh"
#include "sm90/topk/two_pass_select.cuh"

namespace aiter {
namespace sm90 {
namespace topk {

namespace {

constexpr int kMaxDevices = 64;
// Keys per CTA the cluster plan aims at: small enough that a few CTAs share an SM (one waits on its
// barriers while another's bulk copies are in flight), large enough that the cluster's barriers and
// histogram sums stay a small part of a CTA's time.
constexpr int64_t kTargetSliceKeys = 8192;
// Fewest keys per CTA when the cluster grows only to spread few rows over the SMs.
constexpr int64_t kMinSliceKeys = 1024;

struct DeviceInfo {
  int sms = 0;
  int smem_optin = 0;  // bytes of dynamic shared memory a cluster CTA may opt in to
};

template <typename Elem, int kKeys>
cudaError_t set_register_select_smem_one() {
  return cudaFuncSetAttribute(register_select::register_select_kernel<Elem, kKeys>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(register_select::smem_bytes<Elem, kKeys>()));
}
template <typename Elem>
cudaError_t set_register_select_smem() {
  cudaError_t err = set_register_select_smem_one<Elem, register_select::kKeysSmall>();
  if (err == cudaSuccess) err = set_register_select_smem_one<Elem, register_select::kKeysMedium>();
  if (err == cudaSuccess) err = set_register_select_smem_one<Elem, register_select::kKeysLarge>();
  return err;
}

// The SM count, the opt-in shared memory and the kernels' shared-memory ceilings of one device, asked
// into a fresh DeviceInfo: every step may run again with the same result.
cudaError_t query_device(int device_index, DeviceInfo& d) {
  cudaError_t err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device_index);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_index);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(top_k_per_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kSmemBytes));
  // The cluster kernels' dynamic shared memory may take what their static part leaves.
  cudaFuncAttributes attr_f32 = {}, attr_bf16 = {};
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr_f32, cluster_select::cluster_select_kernel<float>);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr_bf16, cluster_select::cluster_select_kernel<uint16_t>);
  if (err == cudaSuccess) err = set_register_select_smem<float>();
  if (err == cudaSuccess) err = set_register_select_smem<uint16_t>();
  if (err != cudaSuccess) return err;
  const size_t static_bytes = attr_f32.sharedSizeBytes > attr_bf16.sharedSizeBytes ? attr_f32.sharedSizeBytes
                                                                                    : attr_bf16.sharedSizeBytes;
  d.smem_optin -= static_cast<int>(static_bytes);
  err = cudaFuncSetAttribute(cluster_select::cluster_select_kernel<float>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(cluster_select::cluster_select_kernel<uint16_t>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin);
  return err;
}

// Once per device, published for every later call; callers racing the first call wait for its
// answer (a query that fails is asked again by the next call).
const char* device_info(int device_index, const DeviceInfo** out) {
  struct Slot {
    std::mutex mutex;
    std::atomic<bool> ready{false};
    DeviceInfo info;
  };
  static Slot slots[kMaxDevices];
  if (device_index < 0 || device_index >= kMaxDevices) return "top_k_per_row (sm90): device index out of range";
  Slot& slot = slots[device_index];
  if (!slot.ready.load(std::memory_order_acquire)) {
    const std::lock_guard<std::mutex> lock(slot.mutex);
    if (!slot.ready.load(std::memory_order_relaxed)) {
      DeviceInfo d;
      const cudaError_t err = query_device(device_index, d);
      if (err != cudaSuccess) return cudaGetErrorString(err);
      slot.info = d;
      slot.ready.store(true, std::memory_order_release);
    }
  }
  *out = &slot.info;
  return nullptr;
}

struct ClusterPlan {
  int cluster = 0;  // CTAs per row; 0: the row does not fit, use the two-pass kernel
  int stage_capacity = 0;  // elements each CTA stages
  size_t smem_bytes = 0;
};

// CTAs per row: enough that a slice of the widest window fits in shared memory and is about
// kTargetSliceKeys long; more when there are too few rows to fill the SMs twice over.
ClusterPlan plan_cluster(const TopkPerRowParams& p, const DeviceInfo& d) {
  ClusterPlan plan;
  if (p.width > 1 && p.stride1 != 1) return plan;
  const int64_t elem = p.logits_bf16 ? 2 : 4;
  const int64_t vec = 16 / elem;
  const int64_t width = p.width < 1 ? 1 : p.width;
  int64_t cluster = (width + kTargetSliceKeys - 1) / kTargetSliceKeys;
  const int64_t to_fill = (2 * int64_t(d.sms) + p.rows - 1) / p.rows;
  const int64_t most_for_fill = width / kMinSliceKeys > 1 ? width / kMinSliceKeys : 1;
  const int64_t fill = to_fill < most_for_fill ? to_fill : most_for_fill;
  if (fill > cluster) cluster = fill;
  if (cluster > cluster_select::kMaxCluster) cluster = cluster_select::kMaxCluster;
  // Staged elements per CTA: its slice (a multiple of the vector) and the head's offset.
  const int64_t chunk = ((width + cluster - 1) / cluster + vec - 1) / vec * vec;
  const int64_t stage = chunk + vec;
  const int64_t bytes = cluster_select::smem_bytes(stage, elem);
  if (bytes > d.smem_optin || stage * elem > int64_t(cluster_select::kPieceBytes) * cluster_select::kMaxPieces ||
      p.rows * cluster >= (int64_t(1) << 31))
    return plan;
  plan.cluster = static_cast<int>(cluster);
  plan.stage_capacity = static_cast<int>(stage);
  plan.smem_bytes = static_cast<size_t>(bytes);
  return plan;
}

// One wave of CTAs, each taking every grid-th row (fewer rows: one CTA each).
template <typename Elem, int kKeys>
cudaError_t launch_register_one(const TopkPerRowParams& p, const DeviceInfo& d, cudaStream_t stream) {
  const int64_t wave = int64_t(d.sms) * register_select::ctas_per_sm<kKeys>();
  register_select::register_select_kernel<Elem, kKeys>
      <<<static_cast<unsigned>(p.rows < wave ? p.rows : wave), register_select::kThreads,
         register_select::smem_bytes<Elem, kKeys>(), stream>>>(p);
  return cudaGetLastError();
}

// The register kernel's instance for these rows (keys per thread): the smallest that holds the widest
// possible window of contiguous columns; 0 when none does (the rows are for the other kernels).
template <typename Elem>
int register_instance(const TopkPerRowParams& p) {
  namespace rs = register_select;
  if (p.width > 1 && p.stride1 != 1) return 0;
  if (p.width <= rs::max_width<Elem, rs::kKeysSmall>()) return rs::kKeysSmall;
  if (p.width <= rs::max_width<Elem, rs::kKeysMedium>()) return rs::kKeysMedium;
  if (p.width <= rs::max_width<Elem, rs::kKeysLarge>()) return rs::kKeysLarge;
  return 0;
}
int register_instance(const TopkPerRowParams& p) {
  return p.logits_bf16 ? register_instance<uint16_t>(p) : register_instance<float>(p);
}

template <typename Elem>
cudaError_t launch_register(const TopkPerRowParams& p, int keys, const DeviceInfo& d, cudaStream_t stream) {
  namespace rs = register_select;
  if (keys == rs::kKeysSmall) return launch_register_one<Elem, rs::kKeysSmall>(p, d, stream);
  if (keys == rs::kKeysMedium) return launch_register_one<Elem, rs::kKeysMedium>(p, d, stream);
  return launch_register_one<Elem, rs::kKeysLarge>(p, d, stream);
}

template <typename Elem>
cudaError_t launch_cluster(const TopkPerRowParams& p, const ClusterPlan& plan, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.rows * plan.cluster), 1, 1);
  config.blockDim = dim3(cluster_select::kThreads, 1, 1);
  config.dynamicSmemBytes = plan.smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(plan.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, cluster_select::cluster_select_kernel<Elem>, p, plan.stage_capacity);
}

}  // namespace

const char* launch(const TopkPerRowParams& params, int device_index, void* stream) {
  if (params.rows == 0) return nullptr;
  if (params.k < 1 || params.k > kTopkMaxK || params.rows >= (int64_t(1) << 31) || params.width >= (int64_t(1) << 31))
    return "top_k_per_row (sm90): needs 1 <= k <= 4096 and fewer than 2^31 rows and columns";
  const DeviceInfo* d = nullptr;
  const char* err = device_info(device_index, &d);  // the binding's device guard makes the device current
  if (err != nullptr) return err;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (const int keys = register_instance(params)) {
    const cudaError_t launch_err = params.logits_bf16 ? launch_register<uint16_t>(params, keys, *d, s)
                                                      : launch_register<float>(params, keys, *d, s);
    return launch_err == cudaSuccess ? nullptr : cudaGetErrorString(launch_err);
  }
  const ClusterPlan plan = plan_cluster(params, *d);
  if (plan.cluster > 0) {
    const cudaError_t launch_err =
        params.logits_bf16 ? launch_cluster<uint16_t>(params, plan, s) : launch_cluster<float>(params, plan, s);
    if (launch_err == cudaSuccess) return nullptr;
    // A device that cannot place the cluster (a partitioned GPU: fewer SMs per GPC) refuses the launch
    // before it runs; the error is not sticky, and the two-pass kernel serves the rows instead.
    if (launch_err != cudaErrorInvalidClusterSize && launch_err != cudaErrorLaunchOutOfResources)
      return cudaGetErrorString(launch_err);
    (void)cudaGetLastError();
  }
  top_k_per_row_kernel<<<static_cast<unsigned>(params.rows), kThreads, kSmemBytes, s>>>(params);
  const cudaError_t launch_err = cudaGetLastError();
  return launch_err == cudaSuccess ? nullptr : cudaGetErrorString(launch_err);
}

}  // namespace topk
}  // namespace sm90
}  // namespace aiter
