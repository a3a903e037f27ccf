// Host (CPU) path of fp8_mqa_logits: any H and D, exact contract semantics, fp32 accumulation.
// Torch-free interface; the implementation uses only ATen's intra-op thread pool (ATen/Parallel.h).
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {

// The CPU path's tunables (the shared tunables header covers the device kernels only).
namespace cpu {
// Keys per transposed K block ([depth][kKeyBlock] 32-bit words, depth = D or D/2): 32 or 16 KiB at
// D = 128, within an L1 data cache, and a multiple of every micro-tile width (16 or 64 keys).
constexpr int kKeyBlock = 64;
// Query rows sharing one transposed K block. 16 rows reuse each decoded key 16 * H times, which
// makes the decode/transpose cost small next to the dot products (32 or 64 measured within noise of
// 16 on 1024x8192, and coarser tasks balance worse).
constexpr int kMaxRowsPerTask = 16;
// Decoded Q of one task ([rows][H][depth] words) stays under this many bytes; rows shrink (to 1) for
// very large H * D so the per-thread scratch stays within a few MiB.
constexpr long kQScratchBytes = 1L << 20;
// Work items per thread the task split aims for, so that dynamic scheduling evens out windows of
// very different lengths (causal, multi-request).
constexpr int kTasksPerThread = 8;
}  // namespace cpu

// Computes the whole op on the calling process's ATen intra-op threads.
// Precondition: `p` was validated by the binding (shapes, strides, M > 0, N > 0).
// Every in-window element is written; outside the window, -inf when p.clean_logits, else untouched.
// Bitwise deterministic: each element is summed in a fixed order (d ascending, then h ascending)
// whatever the thread count or task split. The SIMD variant is the best this CPU runs;
// AITER_FP8_MQA_CPU_SIMD=generic|avx2|avx512|avx512bf16 caps it (to test the narrower ones).
void fp8_mqa_logits_cpu(const Fp8MqaLogitsParams& p);

// Name of the SIMD variant fp8_mqa_logits_cpu runs here: "generic", "avx2", "avx512" or "avx512bf16".
const char* fp8_mqa_logits_cpu_variant();

}  // namespace aiter
