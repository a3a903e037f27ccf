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
// The per-thread scratch bounds (as the prefill path's): the whole-depth path keeps a batch's decoded
// Q rows (next_n * H * D floats) and a group's whole Kt[D][64]; a shape whose Q rows would pass
// kPagedQScratchBytes or whose Kt would pass kPagedKtScratchBytes (D > 1024) takes the chunked
// path, whose scratch is about (kPagedHeadChunk + 64) * kPagedDepthChunk + 64 * kPagedHeadChunk
// floats (100 KiB) whatever H and D, and which gives the same bits.
constexpr long kPagedQScratchBytes = 1L << 20;
constexpr long kPagedKtScratchBytes = 256L << 10;
// Depth steps per chunk: Kt[128][64] is 32 KiB, within L1, as the whole-depth group at D = 128.
constexpr int kPagedDepthChunk = 128;
// Heads per chunk (a multiple of the 4-head groups): their accumulators are 64 x 64 floats.
constexpr int kPagedHeadChunk = 64;
// Work items per thread: tasks are even shares of the (batch, cache block) units, handed out
// dynamically, so that batches of very different lengths even out.
constexpr int kPagedTasksPerThread = 8;
}  // namespace cpu

// Computes the whole op on the calling process's ATen intra-op threads.
// Precondition: `params` was validated by the binding (shapes, strides). block_table is not
// trusted: each entry a row reads is read once and checked; an entry outside [0, num_blocks) reads
// no memory, its keys' logits are NaN, and the first such entry (smallest batch, then column) is
// returned (found = 0 when none). Writes keys [0, keys(b, j)) of every row and, with clean_logits,
// -inf in columns [keys(b, j), max_context_len); leaves the rest untouched.
// Bitwise deterministic: each logit is summed in a fixed order (d ascending, then h ascending)
// whatever the thread count, task split or chunking. The SIMD variant is the widest this CPU runs
// (avx512, avx2 or generic), capped by AITER_FP8_MQA_CPU_SIMD (cpu/simd_level.h); the variants may
// differ from each other in the last bits (FMA contraction). Per-thread scratch: bounded (above).
// Throws std::runtime_error when it cannot be allocated, or when AITER_FP8_PAGED_CPU_CHUNKS is
// malformed.
PagedBlockTableFault fp8_paged_mqa_logits_cpu(const Fp8PagedMqaLogitsParams& params);

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
