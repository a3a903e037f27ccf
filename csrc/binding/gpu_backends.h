// The table of GPU backends compiled into module_fp8_mqa_logits: the only place the binding names a
// backend. Each entry forwards to the backend's own launcher and capability statement
// (csrc/<backend>/launcher.h, capabilities.h); the binding checks a call against the entry that runs
// on q's GPU and launches through it. Every backend writes every logits format
// (common/capabilities.h), so an entry states only its shapes and its grid. Torch-free and
// vendor-runtime-free: the binding stays one host-compiler file whatever the build holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8_mqa_logits_params.h"

#ifdef AITER_WITH_SM90
#include "sm90/capabilities.h"
#include "sm90/launcher.h"
#endif
#ifdef AITER_WITH_GFX950
#include "gfx950/capabilities.h"
#include "gfx950/launcher.h"
#endif

namespace aiter {

struct GpuBackend {
  const char* name;            // the JIT target of the same name
  std::string serves_text;     // "H in {32, 64} and D in {128}"
  bool has_fixed_grid;         // takes split_n (fixed-grid splits); others refuse a nonzero one
  bool (*serves)(long long heads, long long head_dim);
  const char* (*check_device)(int device_index);  // nullptr when the GPU runs this backend
  // Device bytes the launch needs as scratch (0: none); the binding allocates them per call.
  size_t (*workspace_bytes)(const Fp8MqaLogitsParams& params, int device_index);
  const char* (*launch)(const Fp8MqaLogitsParams& params, int64_t split_n, void* workspace, int device_index,
                        void* stream);
};

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

// The compiled GPU backends, in the order they are tried for a device.
inline const std::vector<GpuBackend>& gpu_backends() {
  static const std::vector<GpuBackend> table = {
#ifdef AITER_WITH_SM90
      {"sm90", describe_served(sm90::kServedHeads, sm90::kServedHeadDims), sm90::kHasFixedGrid,
       [](long long heads, long long head_dim) { return sm90::serves(heads, head_dim); }, &sm90::check_device,
       &sm90::workspace_bytes,
       [](const Fp8MqaLogitsParams& params, int64_t, void* workspace, int device_index, void* stream) {
         return sm90::launch(params, workspace, device_index, stream);
       }},
#endif
#ifdef AITER_WITH_GFX950
      {"gfx950", describe_served(gfx950::kServedHeads, gfx950::kServedHeadDims), gfx950::kHasFixedGrid,
       [](long long heads, long long head_dim) { return gfx950::serves(heads, head_dim); }, &gfx950::check_device,
       [](const Fp8MqaLogitsParams&, int) { return size_t(0); },  // plans inside the kernel
       [](const Fp8MqaLogitsParams& params, int64_t split_n, void*, int device_index, void* stream) {
         return gfx950::launch(params, static_cast<int>(split_n), device_index, stream);
       }},
#endif
  };
  return table;
}

}  // namespace aiter
