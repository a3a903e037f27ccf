// The table of GPU backends compiled into module_fp8_mqa_logits that have a paged decode kernel
// (fp8_paged_mqa_logits and its metadata): the only place the paged binding names a backend, as
// gpu_backends.h is for prefill. Each entry forwards to its backend's launcher and capability
// statement; the binding checks a call against the entry that runs on the tensors' GPU (sm90 today; a
// GPU of a backend without a paged kernel is refused by name). Torch-free and vendor-runtime-free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "binding/gpu_backends.h"  // describe_list
#include "common/fp8_paged_mqa_logits_params.h"

#ifdef AITER_WITH_SM90
#include "sm90/capabilities.h"
#include "sm90/launcher.h"
#include "sm90/paged/launcher.h"
#endif

namespace aiter {

struct PagedGpuBackend {
  const char* name;         // the JIT target of the same name
  std::string serves_text;  // "H in {32, 64}, D in {128}, block_kv in {64}, next_n in {1, 2}"
  bool (*serves)(long long heads, long long head_dim, long long block_kv, long long next_n);
  const char* (*check_device)(int device_index);  // nullptr when the GPU runs this backend
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

// The compiled GPU backends with a paged kernel, in the order they are tried for a device.
inline const std::vector<PagedGpuBackend>& paged_gpu_backends() {
  static const std::vector<PagedGpuBackend> table = {
#ifdef AITER_WITH_SM90
      {"sm90",
       "H in " + describe_list(sm90::kServedPagedHeads) + ", D in " + describe_list(sm90::kServedPagedHeadDims) +
           ", block_kv in " + describe_list(sm90::kServedPagedBlockKv) + ", next_n in " +
           describe_list(sm90::kServedPagedNextN) + " with next_n x H <= " +
           std::to_string(sm90::kServedPagedColumns),
       &sm90::paged::serves, &sm90::check_device, &sm90::paged::num_shares, &sm90::paged::metadata,
       &sm90::paged::launch, &sm90::paged::take_block_table_fault},
#endif
      // gfx950 has no paged kernel: its GPUs are refused by name.
  };
  return table;
}

}  // namespace aiter
