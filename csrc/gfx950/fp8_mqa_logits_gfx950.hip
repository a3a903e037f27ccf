// fp8_mqa_logits for AMD gfx950 (MI355X, CDNA4): the host launcher. Device check, launch plan and
// the dispatch to one of the kernel instances (instances.h; the kernel is kernel.h).
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]      for n in [s_m, e_m)
//                  -inf                                                      elsewhere, if clean
//
// Tensors (row-major; the ATen binding validates them; the kernel reads them as kernel.h states):
//   q [M, H, D] and kv [N, D] fp8 e4m3 bytes, 16-byte aligned; kv_scale [N] fp32; w [M, H] fp32
//   (row stride weights_stride); ks, ke [M] int32; out [M, N] or [M, out_columns] fp32 or bf16.
// Host code only: the device pass of this file compiles nothing.
#if !defined(__HIP_DEVICE_COMPILE__)
#include <hip/hip_runtime.h>
#include <stdint.h>

#include <atomic>
#include <cstring>

#include "common/fp8_mqa_logits_params.h"
#include "gfx950/capabilities.h"
#include "gfx950/instances.h"
#include "gfx950/launch_plan.h"
#include "gfx950/launcher.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

namespace {

// One row of the dispatch table: an instance's parameters and its launch.
struct Instance {
  int heads, head_dim;
  bool small, bf16, compressed;
  const char* (*launch)(const KernelArgs& args, void* stream);
};

#define GFX950_TABLE_ROW(NAME, H, D, SMALL, ELEMENT, COMPRESSED) \
  Instance{H, D, SMALL, sizeof(ELEMENT) == 2, COMPRESSED, &launch_##NAME},
constexpr Instance kInstances[] = {GFX950_INSTANCES(GFX950_TABLE_ROW)};
#undef GFX950_TABLE_ROW

constexpr const Instance* find_instance(int heads, int head_dim, bool small, bool bf16, bool compressed) {
  for (const Instance& instance : kInstances)
    if (instance.heads == heads && instance.head_dim == head_dim && instance.small == small &&
        instance.bf16 == bf16 && instance.compressed == compressed)
      return &instance;
  return nullptr;
}

// Every (H, D) capabilities.h serves has an instance of every path and format.
constexpr bool every_served_shape_has_instances() {
  for (int heads : kServedHeads)
    for (int head_dim : kServedHeadDims)
      for (int format = 0; format < 8; ++format)
        if (find_instance(heads, head_dim, format & 1, format & 2, format & 4) == nullptr) return false;
  return true;
}
static_assert(every_served_shape_has_instances(), "capabilities.h serves an (H, D) without kernel instances");

// ... and every instance is of a served (H, D): the two lists say the same.
constexpr bool every_instance_is_served() {
  for (const Instance& instance : kInstances)
    if (!serves(instance.heads, instance.head_dim)) return false;
  return true;
}
static_assert(every_instance_is_served(), "instances.h lists an (H, D) that capabilities.h does not serve");

}  // namespace

const char* check_device(int device_index) {
  static constexpr const char* kNotServed = "the gfx950 backend runs on gfx950 GPUs (MI350X, MI355X) only";
  // The answer per device never changes: asked once (hipGetDeviceProperties is not cheap). Calls
  // come from threads without the GIL, hence atomics; two first callers may both ask, harmlessly.
  static constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> served[kMaxDevices];  // 0 unknown, 1 yes, 2 no
  std::atomic<int8_t>* known = device_index >= 0 && device_index < kMaxDevices ? &served[device_index] : nullptr;
  int8_t answer = known != nullptr ? known->load(std::memory_order_relaxed) : 0;
  if (answer == 0) {
    hipDeviceProp_t props;
    if (hipGetDeviceProperties(&props, device_index) != hipSuccess)
      return "the gfx950 backend cannot query this GPU's architecture";
    answer = std::strncmp(props.gcnArchName, kArchPrefix, sizeof(kArchPrefix) - 1) == 0 ? 1 : 2;
    if (known != nullptr) known->store(answer, std::memory_order_relaxed);
  }
  return answer == 1 ? nullptr : kNotServed;
}

const char* launch(const Fp8MqaLogitsParams& p, int fixed_grid_splits, int device_index, void* stream) {
  if (!serves(p.H, p.D)) return "fp8_mqa_logits (gfx950): this H and D are not served (capabilities.h)";
  if (p.M <= 0 || p.N <= 0) return nullptr;
  if (p.N > kMaxKeys || p.out_columns > kMaxKeys)
    return "fp8_mqa_logits (gfx950): N and max_seqlen_k must be below 2^25 (32-bit buffer offsets)";
  if (p.M > INT32_MAX / 2)
    return "fp8_mqa_logits (gfx950): M must be below 2^30 rows";
  if ((reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.kv)) % 16 != 0)
    return "fp8_mqa_logits (gfx950): q and kv must be 16-byte aligned";
  int num_cus = 0;
  if (hipDeviceGetAttribute(&num_cus, hipDeviceAttributeMultiprocessorCount, device_index) != hipSuccess ||
      num_cus <= 0)
    return "fp8_mqa_logits (gfx950): cannot query the number of CUs";
  const int element_bytes = p.logits_dtype == LogitsDtype::kBFloat16 ? 2 : 4;
  if (!pair_stores_reach(geometry_of(int(p.H), false, int(p.D)), 1, p.out_stride, p.N, element_bytes))
    return "fp8_mqa_logits (gfx950): at H = 16 the output's row stride plus N must stay within 2^31 - 4 bytes "
           "(one store per row pair)";
  // The plan's -inf fill units are the full layout's; the compressed layout's tails are not on it.
  const bool clean_in_plan = p.clean_logits && !p.compressed;
  const LaunchPlan plan = plan_launch(p.M, p.N, p.H, p.D, p.out_stride, element_bytes, fixed_grid_splits,
                                      num_cus, clean_in_plan);
  KernelArgs args;
  args.q = p.q;
  args.kv = p.kv;
  args.kv_scales = p.kv_scales;
  args.weights = p.weights;
  args.ks = p.ks;
  args.ke = p.ke;
  args.out = p.out;
  args.weights_stride = p.weights_stride;
  args.out_stride = p.out_stride;
  args.M = int32_t(p.M);
  args.N = int32_t(p.N);
  args.clean = clean_in_plan ? 1 : 0;
  args.out_columns = int32_t(p.out_columns);
  args.compressed_tails = p.compressed && p.clean_logits ? 1 : 0;
  args.fixed_grid_splits = plan.balanced ? 0 : plan.fixed_grid_splits;
  args.num_workgroups = plan.grid_x;
  args.reverse_blocks = plan.reverse_blocks ? 1 : 0;
  args.grid_x = plan.grid_x;
  args.grid_y = plan.grid_y;
  const Instance* instance = find_instance(int(p.H), int(p.D), plan.small,
                                           p.logits_dtype == LogitsDtype::kBFloat16, p.compressed);
  if (instance == nullptr) return "fp8_mqa_logits (gfx950): no kernel instance for this H, D and format";
  return instance->launch(args, stream);
}

}  // namespace gfx950
}  // namespace aiter
#endif  // !__HIP_DEVICE_COMPILE__
