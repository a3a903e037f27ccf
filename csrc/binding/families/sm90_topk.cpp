// The backend entry of the topk family on sm90: what its GPU module exports (gpu_family_module.cpp).
// One file per (family, target), so that the module's key hashes this family's launcher alone.
#include "binding/current_stream.h"
#include "binding/gpu_backends.h"
#include "sm90/device.h"
#include "sm90/topk/launcher.h"

namespace aiter {

namespace {

const TopkGpuBackend kEntry{"sm90", &sm90::check_device, &current_stream, &sm90::topk::launch};

}  // namespace

const GpuFamily& gpu_family_export() {
  static const GpuFamily exported = gpu_family_of("sm90", &kEntry);
  return exported;
}

}  // namespace aiter
