// The paged decode kernel's exact path: rows that see 1..kExactKeys keys, on the CUDA cores.
//
//   logits[b * next_n + j, p] = sum_h relu(scale(b, p) * Q[b,j,h,:] . K(b, p)) * w[b * next_n + j, h]
//                               for p < keys(b, j) <= kExactKeys
//
// Tensors: q [B, next_n, H, D] e4m3 and the rows' keys in kv_cache (plain 16-byte loads through the
// block table), their scales, weights [B * next_n, H] f32; out [B * next_n, max_context_len] f32 or
// bf16 (written: the row's visible keys).
// Why: Hopper's FP8 wgmma accumulates with ~14-bit precision, and a row with a few logits can
// cancel them all to the size of that error (common/exact.cuh, tunables.h: kExactKeys), in decode
// as in prefill. Each (key, head) term is an exact fp8 dot product (common/exact.cuh: dot_e4m3_row,
// on the rows in global memory), the heads are summed in a fixed order in double: deterministic. The
// math warpgroups skip these rows' values.
#pragma once
#include <cstdint>

#include "sm90/common/exact.cuh"
#include "sm90/common/store.cuh"
#include "sm90/paged/schedule.cuh"
#include "sm90/paged/shared_storage.cuh"

namespace aiter {
namespace sm90 {
namespace paged {

// Warp 3 of the producer warpgroup (`lane`), on the rows r = CTA + k grid of all B * next_n rows.
template <int H, int D, int NEXT_N, typename Element>
__device__ void exact_short_rows(const PagedArgs& args, PagedSharedStorage& smem, int lane) {
  const int64_t rows = args.batches * NEXT_N;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t b = row / NEXT_N;
    const int j = static_cast<int>(row % NEXT_N);
    const int keys = static_cast<int>(scheduler::paged_row_keys(
        args.context_lens[args.lens_per_row ? row : b], NEXT_N, j, args.lens_per_row, args.max_context_len));
    if (!is_exact_row(keys)) continue;  // uniform over the warp
    const int32_t* table_row = args.block_table + b * args.block_table_stride;
    // Each entry read is checked before it addresses the cache; a bad one reads nothing, makes its
    // keys' logits NaN and is recorded (schedule.cuh: report_bad_block).
    const uint32_t cache_blocks = cache_block_limit(args);
    const float nan = __int_as_float(0x7fc00000);
    for (int term = lane; term < keys * H; term += 32) {
      const int key = term / H, head = term % H;
      const int32_t block = __ldg(table_row + key / args.block_kv);
      double dot = nan;
      if (static_cast<uint32_t>(block) < cache_blocks) {
        const uint8_t* key_row =
            args.kv_cache + int64_t(block) * args.kv_block_stride + int64_t(key % args.block_kv) * D;
        dot = dot_e4m3_row<D>(reinterpret_cast<const uint4*>(args.q + (row * H + head) * D),
                              reinterpret_cast<const uint4*>(key_row), 0);
      } else {
        report_bad_block(args, b, key / args.block_kv, block);
      }
      smem.exact_part[key][head] = (dot + fabs(dot)) * __ldg(args.weights + row * args.weights_stride + head);
    }
    __syncwarp();
    if (lane < keys) {
      double sum = 0.0;
      for (int head = 0; head < H; ++head) sum += smem.exact_part[lane][head];  // 2 relu(dot) w, in h order
      const int32_t block = __ldg(table_row + lane / args.block_kv);
      float scale = nan;
      if (static_cast<uint32_t>(block) < cache_blocks)
        scale = *reinterpret_cast<const float*>(args.kv_cache + int64_t(block) * args.kv_block_stride +
                                                args.block_kv * D + 4 * (lane % args.block_kv));
      else
        report_bad_block(args, b, lane / args.block_kv, block);
      store_logit(static_cast<Element*>(args.out) + row * args.out_stride + lane, static_cast<float>(0.5 * sum * scale));
    }
    __syncwarp();  // before the next row overwrites exact_part
  }
}

}  // namespace paged
}  // namespace sm90
}  // namespace aiter
