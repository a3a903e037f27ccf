// The GPU backends the bindings dispatch to, one entry per (op family, target): what a family's GPU
// module (binding/gpu_family_module.cpp with its entry, binding/families/<target>_<family>.cpp; built
// and loaded on the first call of that family on a GPU of its target) hands to the CPU module, and
// the registry the bindings read them from.
//
// The CPU module (module_fp8_mqa_logits) holds the bindings and never names a backend: a GPU call is
// checked against the entry that runs on the tensors' GPU among those attached so far, and launched
// through it. Each entry forwards to its backend's own launcher and capability statement
// (csrc/<backend>/launcher.h, capabilities.h). Torch-free and vendor-runtime-free, so that both
// modules include it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/fp8_mqa_logits_params.h"
#include "common/fp8_paged_mqa_logits_params.h"
#include "common/indexer_topk_params.h"

namespace aiter {

// The device queries every entry carries: nullptr when GPU `device_index` runs this backend, else a
// static sentence saying what it runs on; and the device's current stream (torch's), as the opaque
// handle the launchers take.
using CheckDeviceFn = const char* (*)(int device_index);
using CurrentStreamFn = void* (*)(int device_index);

// Prefill: fp8_mqa_logits. Every backend writes every logits format (common/capabilities.h), so an
// entry states only its shapes and its grid.
struct GpuBackend {
  const char* name;            // the JIT target of the same name
  std::string serves_text;     // "H in {32, 64} and D in {128}"
  bool has_fixed_grid;         // takes split_n (fixed-grid splits); others refuse a nonzero one
  bool (*serves)(long long heads, long long head_dim);
  CheckDeviceFn check_device;
  CurrentStreamFn current_stream;
  // Device bytes the launch needs as scratch (0: none); the binding allocates them per call.
  size_t (*workspace_bytes)(const Fp8MqaLogitsParams& params, int device_index);
  const char* (*launch)(const Fp8MqaLogitsParams& params, int64_t split_n, void* workspace, int device_index,
                        void* stream);
};

// Paged decode: fp8_paged_mqa_logits, its metadata and the block-table check.
struct PagedGpuBackend {
  const char* name;         // the JIT target of the same name
  std::string serves_text;  // "H in {32, 64}, D in {128}, block_kv in {64}, next_n in {1, 2}"
  bool (*serves)(long long heads, long long head_dim, long long block_kv, long long next_n);
  CheckDeviceFn check_device;
  CurrentStreamFn current_stream;
  // The schedule_meta rows less one the kernel reads on this device (DeepGEMM's: its SM count).
  int64_t (*num_shares)(int device_index);
  // Writes schedule_meta [num_shares + 1][2] on the device (no host synchronisation); see
  // common/fp8_paged_mqa_logits_params.h for its content. nullptr on success, else the error text.
  const char* (*metadata)(const int32_t* context_lens, int64_t batches, int64_t next_n, bool lens_per_row,
                          int64_t block_kv, int64_t num_shares, int32_t* schedule_meta, int device_index,
                          void* stream);
  const char* (*launch)(const Fp8PagedMqaLogitsParams& params, int device_index, void* stream);
  // The out-of-range block_table entry earlier launches recorded, into *fault (found = 0: none);
  // with `wait` after synchronising with `stream`. nullptr on success, else the error text.
  const char* (*take_block_table_fault)(int device_index, void* stream, bool wait, PagedBlockTableFault* fault);
};

// Top-k: top_k_per_row_prefill / top_k_per_row_decode (and the fused indexer ops' selections).
struct TopkGpuBackend {
  const char* name;  // the JIT target of the same name
  CheckDeviceFn check_device;
  CurrentStreamFn current_stream;
  const char* (*launch)(const TopkPerRowParams& params, int device_index, void* stream);
};

// What a family's GPU module exports (a PyCapsule named kGpuFamilyCapsule holding a pointer to it):
// its target, its family and its one entry. The sizes let the CPU module refuse a module built
// against another layout of these structs instead of calling through a wrong one.
constexpr const char kGpuFamilyCapsule[] = "aiter.gpu_family";
constexpr uint32_t kGpuFamilyLayout = 1;  // bump when a struct above changes

struct GpuFamily {
  uint32_t layout;       // kGpuFamilyLayout
  uint32_t struct_sizes[4];  // sizeof GpuFamily, GpuBackend, PagedGpuBackend, TopkGpuBackend
  const char* target;    // "sm90", "gfx950"
  const char* family;    // "prefill", "paged", "topk"
  const GpuBackend* prefill;  // the entry of the family named; the others nullptr
  const PagedGpuBackend* paged;
  const TopkGpuBackend* topk;
};

// GpuFamily::struct_sizes as this build of these structs has them: what an export records and what
// the CPU module compares before it calls through an entry.
inline constexpr uint32_t kGpuFamilyStructSizes[4] = {sizeof(GpuFamily), sizeof(GpuBackend),
                                                      sizeof(PagedGpuBackend), sizeof(TopkGpuBackend)};

// The export of a family's GPU module (binding/families/<target>_<family>.cpp) built for `target`
// whose one entry is `entry`; the family follows from the entry's type. Constant expressions, so
// that the export is initialised before any code of the module runs.
constexpr GpuFamily gpu_family_of(const char* target, const char* family, const GpuBackend* prefill,
                                  const PagedGpuBackend* paged, const TopkGpuBackend* topk) {
  return {kGpuFamilyLayout,
          {kGpuFamilyStructSizes[0], kGpuFamilyStructSizes[1], kGpuFamilyStructSizes[2], kGpuFamilyStructSizes[3]},
          target, family, prefill, paged, topk};
}
constexpr GpuFamily gpu_family_of(const char* target, const GpuBackend* entry) {
  return gpu_family_of(target, "prefill", entry, nullptr, nullptr);
}
constexpr GpuFamily gpu_family_of(const char* target, const PagedGpuBackend* entry) {
  return gpu_family_of(target, "paged", nullptr, entry, nullptr);
}
constexpr GpuFamily gpu_family_of(const char* target, const TopkGpuBackend* entry) {
  return gpu_family_of(target, "topk", nullptr, nullptr, entry);
}

// The entries attached so far, in attach order. Appends are serialised (the Python loader calls
// them under its lock); a binding reads without a lock while another thread may attach, so an entry
// is published by a release store of the count after it is written, and never changes afterwards.
template <typename Backend>
class BackendRegistry {
 public:
  static constexpr int kCapacity = 16;

  // Adds `backend` unless present; false when the registry is full.
  bool add(const Backend* backend) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const int n = count_.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i)
      if (entries_[i] == backend) return true;
    if (n == kCapacity) return false;
    entries_[n] = backend;
    count_.store(n + 1, std::memory_order_release);
    return true;
  }
  int size() const { return count_.load(std::memory_order_acquire); }
  const Backend& operator[](int i) const { return *entries_[i]; }

 private:
  std::mutex mutex_;
  std::atomic<int> count_{0};
  const Backend* entries_[kCapacity] = {};
};

// The first entry of `table` that runs on GPU `device_index`, or nullptr with `why_not` holding each
// entry's reason (its check_device message), for the binding's refusal.
template <typename Backend>
const Backend* find_backend(const BackendRegistry<Backend>& table, int device_index, std::string* why_not) {
  for (int i = 0; i < table.size(); ++i) {
    const char* mismatch = table[i].check_device(device_index);
    if (mismatch == nullptr) return &table[i];
    *why_not += std::string(why_not->empty() ? "" : "; ") + mismatch;
  }
  return nullptr;
}

// The registries of the CPU module (defined in binding/module.cpp; a family's GPU module never
// calls these).
BackendRegistry<GpuBackend>& gpu_backends();
BackendRegistry<PagedGpuBackend>& paged_gpu_backends();
BackendRegistry<TopkGpuBackend>& topk_gpu_backends();

// "{a, b, c}": a capabilities.h list as error messages quote it.
template <size_t Count>
std::string describe_list(const int (&values)[Count]) {
  std::string text = "{";
  for (size_t i = 0; i < Count; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "}";
}

template <size_t Heads, size_t HeadDims>
std::string describe_served(const int (&heads)[Heads], const int (&head_dims)[HeadDims]) {
  return "H in " + describe_list(heads) + " and D in " + describe_list(head_dims);
}

// The message part that names the GPUs no attached backend runs on.
constexpr const char kNoGpuBackendHint[] =
    "no GPU backend of this package is loaded for it (sm90 runs on compute capability 9.0: H100, H200; "
    "gfx950 on MI350 / MI355X; its kernels are built on the first call on such a GPU)";

}  // namespace aiter
