// fp8_paged_mqa_logits: the torch-free argument block shared by every backend (the decode op).
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//                               for p < keys(b, j)
//                               -inf for keys(b, j) <= p < max_context_len when clean_logits (else untouched)
//   keys(b, j) = context_lens[b] - next_n + j + 1 (one length per batch) or context_lens[b, j] (one per
//                row), clamped to [0, max_context_len]  (scheduler::paged_row_keys)
//   K(b, p), scale(b, p): slot p % block_kv of cache block block_table[b, p / block_kv]
//
// Layouts (all row-major, checked by the ATen binding before any backend sees them):
//   q              [B, next_n, H, D]  float8_e4m3fn bytes, contiguous
//   kv_cache       [num_blocks, block_kv, 1, D + 4] uint8: block i starts at byte i * kv_block_stride
//                  (>= block_kv * (D + 4)); it holds block_kv keys of D e4m3fn bytes (slot s at byte
//                  s * D), then block_kv float32 scales (slot s at byte block_kv * D + 4 s, unaligned
//                  when block_kv * D is not a multiple of 4). Scales > 0 (precondition, as for prefill).
//   weights        [B * next_n, H]    float32, row stride weights_stride (elements), last dim contiguous
//   context_lens   [B] (lens_per_row false) or [B, next_n] (true) int32, contiguous; any int32 value
//   block_table    [B, max_blocks]    int32, row stride block_table_stride (elements), last dim
//                  contiguous; max_blocks * block_kv >= max_context_len. Entries of a batch's visible
//                  blocks (its first ceil(batch_keys / block_kv)) lie in [0, num_blocks); the others are
//                  never read and may hold anything.
//   schedule_meta  [num_shares + 1, 2] int32, contiguous, from get_paged_mqa_logits_metadata on the same
//                  context_lens and block_kv: row p = (batch, block), the first unit of share p of
//                  num_shares (the work scheduler's units and shares: each batch's cache blocks, in
//                  order, over every batch); row num_shares = (B, 0). Shares count units of the context
//                  lengths without the max_context_len clamp. The CPU path plans its own shares.
//   out            [B * next_n, max_context_len] float32 or bfloat16 (logits_dtype), row stride out_stride
//                  (elements), last dim contiguous
//
// Out-of-range block_table entries. A visible entry outside [0, num_blocks) is a caller bug, and the
// table may even be rewritten by another thread during the call, so no backend trusts a value it
// did not check: each backend reads an entry, compares it (one unsigned compare) and uses that same
// value. A bad entry reads no memory; its keys' logits are NaN (the CPU path also refuses the call
// afterwards), and the first bad entry found is recorded in a PagedBlockTableFault that the binding
// turns into a ValueError naming block_table.
#pragma once
#include <cstdint>

#include "common/logits_dtype.h"

namespace aiter {

// NaN floats behind Fp8PagedMqaLogitsParams::nan_scales: one block's scales for any served block_kv.
constexpr int kPagedNanScales = 64;

// Where a backend records the first out-of-range block_table entry it read. The CPU path fills it on
// the host; a GPU kernel writes it into pinned host memory mapped for the device (the thread that
// claims the record writes the fields, fences, then sets `found`), so the host sees it without a
// copy or a synchronisation.
struct PagedBlockTableFault {
  int32_t found;   // 0: every entry read was a block of kv_cache
  int32_t batch;   // b of the entry block_table[b, column]
  int32_t column;
  int32_t value;   // the value read
  int64_t num_blocks;  // kv_cache's blocks in that call
};

#if defined(__CUDACC__) || defined(__HIPCC__)
#define AITER_PAGED_PARAMS_FN __host__ __device__ inline
#else
#define AITER_PAGED_PARAMS_FN inline
#endif

// Whether a block_table value names a block of a cache of num_blocks blocks. (The sm90 kernel
// makes it one unsigned compare against min(num_blocks, 2^31), where negative values wrap above.)
AITER_PAGED_PARAMS_FN bool is_cache_block(int32_t value, int64_t num_blocks) {
  return value >= 0 && value < num_blocks;
}

struct Fp8PagedMqaLogitsParams {
  const uint8_t* q;
  const uint8_t* kv_cache;
  const float* weights;
  const int32_t* context_lens;
  const int32_t* block_table;
  const int32_t* schedule_meta;
  void* out;
  int64_t batches;  // B
  int64_t next_n;
  int32_t H;
  int32_t D;
  int64_t num_blocks;
  int64_t block_kv;
  int64_t kv_block_stride;  // bytes
  int64_t max_blocks;       // block_table columns
  int64_t block_table_stride;
  int64_t weights_stride;
  int64_t out_stride;
  int64_t max_context_len;
  int64_t num_shares;  // schedule_meta rows - 1
  // GPU kernels only: where the first bad block_table entry is recorded (host-mapped memory), the
  // device word a reporting thread claims it with (0 -> 1), and kPagedNanScales NaN floats, 16-byte
  // aligned, that a bad entry's scales are copied from instead of the cache. The CPU path ignores them.
  PagedBlockTableFault* block_table_fault;
  int32_t* block_table_claim;
  const float* nan_scales;
  LogitsDtype logits_dtype;
  bool lens_per_row;
  bool clean_logits;
};

}  // namespace aiter
