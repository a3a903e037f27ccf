// Host (CPU) path of fp8_mqa_logits: any H and D, exact contract semantics, fp32 accumulation.
// Torch-free interface; the implementation uses only ATen's intra-op thread pool (ATen/Parallel.h).
#pragma once
#include "common/fp8_mqa_logits_params.h"

namespace aiter {

// The CPU path's tunables (the shared tunables header covers the device kernels only).
// Per-thread scratch is bounded by a constant whatever M, N, H and D (the contract's "a few MiB per
// thread"): at most kQScratchBytes + kKtScratchBytes + 512 B (1.25 MiB) on the whole-depth path and
// ~0.9 MiB on the chunked path (scheme at the top of fp8_mqa_logits_cpu.cpp). Timings quoted below
// are one thread's CPU time on a 2-core AVX512-BF16 Xeon (L1d 48 KiB, L2 2 MiB per core).
namespace cpu {
// Keys per transposed K block ([depth][kKeyBlock] 32-bit words, depth = D or D/2): 32 or 16 KiB at
// D = 128, within an L1 data cache, and a multiple of every micro-tile width (16 or 64 keys).
constexpr int kKeyBlock = 64;
// Query rows sharing one transposed K block. 16 rows reuse each decoded key 16 * H times, which
// makes the decode/transpose cost small next to the dot products (32 or 64 measured within noise of
// 16 on 1024x8192, and coarser tasks balance worse).
constexpr int kMaxRowsPerTask = 16;

// --- Whole-depth path (every common shape: H 32/64, D 128) ---
// Decoded Q of one task ([rows][H][depth] words) stays under this many bytes; rows shrink for large
// H * depth. When a single row exceeds it (H * depth > 256 Ki words), the chunked path. 1 MiB: the
// whole-depth path was as fast or faster than the chunked one at the large-H shapes measured below
// it (H = 300, D = 512: 8.2 vs 8.4 ms fp32, 10.4 vs 11.8 ms bf16).
constexpr long kQScratchBytes = 1L << 20;
// The whole-depth transposed K block (depth * kKeyBlock words) stays under this many bytes: depth up
// to 1024 words (D <= 1024 fp32, D <= 2048 bf16 pairs); above it, the chunked path, whose K chunks
// stay in L1. Measured (chunked vs whole depth): at depth 2048 words the chunked path is faster or
// equal (fp32 D = 2048: 10.5 vs 17.1 ms; bf16 D = 4096: 18.9 vs 18.6 ms), at depth <= 1024 mixed
// (fp32 D = 1024: 10-20% faster; bf16 D = 1024..2048, H = 64: ~8% slower), so this keeps the
// whole-depth path, unchanged, up to where it stops being competitive, at 1/4 of L2.
constexpr long kKtScratchBytes = 256L << 10;

// --- Chunked path (a task's Q row or the whole-depth K block would exceed the bounds above) ---
// Depth chunk, in 32-bit words of a K row (D elements fp32, D/2 pairs bf16: a pair is never split):
// a K block's chunk [kDepthChunk][kKeyBlock] is 32 KiB, within L1 (a span's: 128 KiB), and the
// accumulators are stored and reloaded once per 128 depth steps. 128 measured best of 64, 128, 256
// and 512 (e.g. fp32 D = 4096: 12.6 ms vs 18.8 ms at 256).
constexpr int kDepthChunk = 128;
// Rows x heads of a chunked task's (row block, head chunk): the head chunk takes min(H, 512) heads
// (a multiple of the micro-kernels' head group, 4, so the head groups are the whole-depth path's),
// the row block 512 / heads rows (1 .. kMaxRowsPerTask). It bounds the accumulators
// ([rows x heads][kSpanKeys] fp32, 512 KiB) and the Q chunk ([rows x heads][kDepthChunk], 256 KiB),
// and every decoded K element serves 512 (row, head) pairs (16 x H for H < 32): K decoding costs
// ~1/512 of the dot products. Heads first, because for many heads the task split then goes over
// rows and leaves long key spans (a span re-decodes its rows' Q): at H = 5000, D = 64, M = 8 (fp32)
// 32 heads x 16 rows took 1.2x the (unbounded) whole-depth path's time, 512 heads x 1 row 1.06x.
constexpr int kChunkRowHeads = 512;
// Keys per span: the accumulators of one (row block, head chunk) cover a span of keys (512 KiB, see
// kChunkRowHeads), and each decoded Q chunk is reused over the span's 256 keys, so decoding Q once
// per span costs ~1/256 of the dot products; 128 and 512 measured within noise. A multiple of
// kKeyBlock.
constexpr int kSpanKeys = 256;

// Work items per thread the task split aims for, so that dynamic scheduling evens out windows of
// very different lengths (causal, multi-request).
constexpr int kTasksPerThread = 8;
}  // namespace cpu

// Computes the whole op on the calling process's ATen intra-op threads.
// Precondition: `params` was validated by the binding (shapes, strides, M > 0, N > 0).
// Every in-window element is written; outside the window, -inf when params.clean_logits, else
// untouched.
// Bitwise deterministic: each element is summed in a fixed order (d ascending, then h ascending)
// whatever the thread count, task split or depth/head chunking. The SIMD variant is the best this
// CPU runs; AITER_FP8_MQA_CPU_SIMD=generic|avx2|avx512|avx512bf16 caps it (to test the narrower
// ones). AITER_FP8_MQA_CPU_CHUNKS=<depth words>,<heads>,<keys> forces the chunked path with those
// chunk sizes (heads a multiple of 4, keys of 64), to test it on small shapes against the
// whole-depth path, which must give the same bits.
// Throws std::runtime_error (a RuntimeError in Python) when the scratch cannot be allocated or the
// override is malformed.
void fp8_mqa_logits_cpu(const Fp8MqaLogitsParams& params);

// Name of the SIMD variant fp8_mqa_logits_cpu runs here: "generic", "avx2", "avx512" or "avx512bf16".
const char* fp8_mqa_logits_cpu_variant();

}  // namespace aiter
