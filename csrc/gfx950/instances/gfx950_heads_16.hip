// The gfx950 fp8_mqa_logits kernel instances of H = 16: D 128 and 64, main and small-M paths, float32
// and bfloat16 logits, full and compressed layouts (instances.h). One file per H so that the JIT
// compiles them in parallel.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// Tensors: q [M, 16, D], kv [N, D], kv_scales [N], weights [M, 16], ks / ke [M], out [M, N] or
// [M, max_seqlen_k] (kernel.h has their layouts).
#include "gfx950/instances.h"
#include "gfx950/kernel.h"

GFX950_INSTANCES_OF_HEADS(GFX950_DEFINE_INSTANCE, 16)
