// gfx950 fp8_mqa_logits: the list of kernel instances and each one's host launch entry.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// One kernel per (heads, head dim, path, logits element, layout): every served H x D (capabilities.h;
// the launcher checks the two lists agree) x {main, small-M} x {float, bfloat16} x {full, compressed}. The element and
// the layout are template parameters because they change the stage loop (the bf16 convert, a
// range limit per row); D because it sets the MFMA step count and the fragments. Names:
// fp8_mqa_logits_gfx950_h<H>[_d64][_small][_bf16][_compressed] (D = 128 has no suffix); the ISA
// checker (dev/isa/gfx950.py) derives the same names from capabilities.h.
// Layouts: those of KernelArgs (workgroup.h). Why a list: the instance files define the kernels of
// one H each (instances/, compiled in parallel) and the launcher's table is built from the same
// entries, so the two cannot disagree.
#pragma once
#include "gfx950/workgroup.h"

// X(NAME, H, D, SMALL, ELEMENT, COMPRESSED) for every instance of heads H.
#define GFX950_INSTANCES_OF_HEADS(X, H)                                    \
  X(fp8_mqa_logits_gfx950_h##H, H, 128, false, float, false)               \
  X(fp8_mqa_logits_gfx950_h##H##_small, H, 128, true, float, false)        \
  X(fp8_mqa_logits_gfx950_h##H##_bf16, H, 128, false, __bf16, false)       \
  X(fp8_mqa_logits_gfx950_h##H##_small_bf16, H, 128, true, __bf16, false)  \
  X(fp8_mqa_logits_gfx950_h##H##_compressed, H, 128, false, float, true)   \
  X(fp8_mqa_logits_gfx950_h##H##_small_compressed, H, 128, true, float, true) \
  X(fp8_mqa_logits_gfx950_h##H##_bf16_compressed, H, 128, false, __bf16, true) \
  X(fp8_mqa_logits_gfx950_h##H##_small_bf16_compressed, H, 128, true, __bf16, true) \
  X(fp8_mqa_logits_gfx950_h##H##_d64, H, 64, false, float, false)          \
  X(fp8_mqa_logits_gfx950_h##H##_d64_small, H, 64, true, float, false)     \
  X(fp8_mqa_logits_gfx950_h##H##_d64_bf16, H, 64, false, __bf16, false)    \
  X(fp8_mqa_logits_gfx950_h##H##_d64_small_bf16, H, 64, true, __bf16, false) \
  X(fp8_mqa_logits_gfx950_h##H##_d64_compressed, H, 64, false, float, true) \
  X(fp8_mqa_logits_gfx950_h##H##_d64_small_compressed, H, 64, true, float, true) \
  X(fp8_mqa_logits_gfx950_h##H##_d64_bf16_compressed, H, 64, false, __bf16, true) \
  X(fp8_mqa_logits_gfx950_h##H##_d64_small_bf16_compressed, H, 64, true, __bf16, true)

#define GFX950_INSTANCES(X)        \
  GFX950_INSTANCES_OF_HEADS(X, 16) \
  GFX950_INSTANCES_OF_HEADS(X, 32) \
  GFX950_INSTANCES_OF_HEADS(X, 64)

namespace aiter {
namespace gfx950 {

// Launches instance NAME on `stream` (a hipStream_t) with the grid (args.grid_x, args.grid_y);
// nullptr on success, else the runtime's message. Defined next to the kernel (kernel.h).
#define GFX950_DECLARE_LAUNCH(NAME, H, D, SMALL, ELEMENT, COMPRESSED) \
  const char* launch_##NAME(const KernelArgs& args, void* stream);
GFX950_INSTANCES(GFX950_DECLARE_LAUNCH)
#undef GFX950_DECLARE_LAUNCH

}  // namespace gfx950
}  // namespace aiter
