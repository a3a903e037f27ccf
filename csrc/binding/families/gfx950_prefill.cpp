// The backend entry of the prefill family on gfx950: what its GPU module exports (gpu_family_module.cpp).
// One file per (family, target), so that the module's key hashes this family's launcher alone.
#include "binding/current_stream.h"
#include "binding/gpu_backends.h"
#include "gfx950/capabilities.h"
#include "gfx950/launcher.h"

namespace aiter {

namespace {

const GpuBackend kEntry{
    "gfx950",
    describe_served(gfx950::kServedHeads, gfx950::kServedHeadDims),
    gfx950::kHasFixedGrid,
    [](long long heads, long long head_dim) { return gfx950::serves(heads, head_dim); },
    &gfx950::check_device,
    &current_stream,
    [](const Fp8MqaLogitsParams&, int) { return size_t(0); },  // plans inside the kernel
    [](const Fp8MqaLogitsParams& params, int64_t split_n, void*, int device_index, void* stream) {
      return gfx950::launch(params, static_cast<int>(split_n), device_index, stream);
    }};

}  // namespace

const GpuFamily& gpu_family_export() {
  static const GpuFamily exported = gpu_family_of("gfx950", &kEntry);
  return exported;
}

}  // namespace aiter
