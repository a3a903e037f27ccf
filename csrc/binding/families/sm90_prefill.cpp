// The backend entry of the prefill family on sm90: what its GPU module exports (gpu_family_module.cpp).
// One file per (family, target), so that the module's key hashes this family's launcher alone.
#include "binding/current_stream.h"
#include "binding/gpu_backends.h"
#include "sm90/capabilities.h"
#include "sm90/launcher.h"

namespace aiter {

namespace {

const GpuBackend kEntry{
    "sm90",
    describe_served(sm90::kServedHeads, sm90::kServedHeadDims),
    sm90::kHasFixedGrid,
    [](long long heads, long long head_dim) { return sm90::serves(heads, head_dim); },
    &sm90::check_device,
    &current_stream,
    &sm90::workspace_bytes,
    [](const Fp8MqaLogitsParams& params, int64_t, void* workspace, int device_index, void* stream) {
      return sm90::launch(params, workspace, device_index, stream);
    }};

}  // namespace

const GpuFamily& gpu_family_export() {
  static const GpuFamily exported = gpu_family_of("sm90", &kEntry);
  return exported;
}

}  // namespace aiter
