// What every Hopper kernel family (prefill, paged decode, top-k) asks of the GPU before a launch:
// whether it runs this backend, and its SM count. Torch-free; defined in device.cu, which each
// family's module compiles, so no family needs another family's launcher.
#pragma once

namespace aiter {
namespace sm90 {

// nullptr when GPU `device_index` runs this backend (compute capability kComputeCapability), else a
// static sentence saying what it runs on.
const char* check_device(int device_index);
// The GPU's SM count, queried once per device (the persistent grids have one CTA per SM); 0 when the
// query fails.
int sm_count(int device_index);

}  // namespace sm90
}  // namespace aiter
