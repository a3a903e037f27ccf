// Host (CPU) path of fp8_paged_mqa_logits (the decode op) and of its scheduling metadata: any H, D,
// block_kv and next_n, the exact contract semantics, fp32 accumulation. Torch-free interface; the
// implementation uses only ATen's intra-op thread pool (ATen/Parallel.h).
#pragma once
#include <cstdint>

#include "common/fp8_paged_mqa_logits_params.h"

namespace aiter {

namespace cpu {
// Logical keys decoded together into one transposed K group ([D][kPagedKeyGroup] floats), gathered
// through the block table whatever block_kv is (a group spans several cache blocks of 16 keys, or a
// part of a larger one), so every variant's micro-tile (16 or 64 keys) stays full on long contexts.
// 32 KiB at D = 128, within an L1 data cache.
constexpr int kPagedKeyGroup = 64;
// Work items per thread: tasks are even shares of the (batch, cache block) units, handed out
// dynamically, so that batches of very different lengths even out.
constexpr int kPagedTasksPerThread = 8;
}  // namespace cpu

// Computes the whole op on the calling process's ATen intra-op threads.
// Precondition: `params` was validated by the binding (shapes, strides; every block_table entry a
// row reads lies in [0, num_blocks)). Writes keys [0, keys(b, j)) of every row and, with
// clean_logits, -inf in columns [keys(b, j), max_context_len); leaves the rest untouched.
// Bitwise deterministic: each logit is summed in a fixed order (d ascending, then h ascending)
// whatever the thread count or task split. The SIMD variant is the widest this CPU runs (avx512,
// avx2 or generic), capped by AITER_FP8_MQA_CPU_SIMD (cpu/simd_level.h); the variants may differ
// from each other in the last bits (FMA contraction). Per-thread scratch: (next_n * H * D + 64 * D +
// 128) floats. Throws std::runtime_error when it cannot be allocated.
void fp8_paged_mqa_logits_cpu(const Fp8PagedMqaLogitsParams& params);

// The scheduling metadata on the host: schedule_meta [num_shares + 1][2] int32, row p = (batch, block),
// the first unit of share p of the work scheduler's units (each batch's cache blocks, batches in
// order; see common/work_scheduler.h), row num_shares = (batches, 0). context_lens is [batches]
// (next_n ignored) or, when lens_per_row, [batches][next_n]. No key limit applies (the metadata op
// has no max_context_len). Preconditions: batches < 2^31, block_kv >= 1, num_shares >= 1.
void paged_mqa_logits_metadata_cpu(const int32_t* context_lens, int64_t batches, int64_t next_n,
                                   bool lens_per_row, int64_t block_kv, int64_t num_shares,
                                   int32_t* schedule_meta);

// Name of the SIMD variant fp8_paged_mqa_logits_cpu runs here: "generic", "avx2" or "avx512".
const char* fp8_paged_mqa_logits_cpu_variant();

}  // namespace aiter
