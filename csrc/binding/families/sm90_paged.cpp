// The backend entry of the paged family on sm90: what its GPU module exports (gpu_family_module.cpp).
// One file per (family, target), so that the module's key hashes this family's launcher alone.
#include "binding/current_stream.h"
#include "binding/gpu_backends.h"
#include "sm90/capabilities.h"
#include "sm90/device.h"
#include "sm90/paged/launcher.h"

namespace aiter {

namespace {

const PagedGpuBackend kEntry{
    "sm90",
    "H in " + describe_list(sm90::kServedPagedHeads) + ", D in " + describe_list(sm90::kServedPagedHeadDims) +
        ", block_kv in " + describe_list(sm90::kServedPagedBlockKv) + ", next_n in " +
        describe_list(sm90::kServedPagedNextN) + " with next_n x H <= " + std::to_string(sm90::kServedPagedColumns),
    &sm90::paged::serves,
    &sm90::check_device,
    &current_stream,
    &sm90::paged::num_shares,
    &sm90::paged::metadata,
    &sm90::paged::launch,
    &sm90::paged::take_block_table_fault};

}  // namespace

const GpuFamily& gpu_family_export() {
  static const GpuFamily exported = gpu_family_of("sm90", &kEntry);
  return exported;
}

}  // namespace aiter
