// The paged decode CPU path's task bodies, templated on the micro-tile (the scheme is at the top of
// cpu/fp8_paged_mqa_logits_cpu.cpp): the micro-kernels, the block-table gather, the whole-depth and
// chunked walks over a batch's keys. Included only by the variant units, each of which instantiates
// them for its tile under its own target attribute; everything here has internal linkage, so each
// unit keeps its own copies, compiled for its own target.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/e4m3.h"
#include "common/work_scheduler.h"
#include "cpu/bf16_round.h"
#include "cpu/fp8_paged_mqa_logits_cpu.h"
#include "cpu/fp8_paged_mqa_logits_cpu_tasks.h"
#include "cpu/simd_lanes.h"

namespace aiter {
namespace cpu {
namespace paged {
namespace {

using cpu::kPagedKeyGroup;
using scheduler::ceil_div;

template <int W>
using Lanes = cpu::Simd<W>;

// A micro-tile of W x NV consecutive key lanes of a transposed K group.
template <int W, int NV>
struct MicroTile {
  static constexpr int kKeys = W * NV;
  static_assert(kPagedKeyGroup % kKeys == 0, "a key group holds whole micro-tiles");
  typedef typename Lanes<W>::floats vf;

  // logits[k] += relu(scales[k] * sum_d q[h][d] * kt[d][k]) * w[h] for the HG heads from q (rows D
  // floats apart), h ascending; kt's rows are kPagedKeyGroup floats apart.
  template <int HG>
  static AITER_CPU_INLINE void heads(const float* __restrict q, int64_t D, const float* __restrict kt,
                                     const float* __restrict scales, const float* __restrict w,
                                     float* __restrict logits) {
    vf acc[HG][NV];
    for (int h = 0; h < HG; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    for (int64_t d = 0; d < D; ++d) {
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(kt + d * kPagedKeyGroup + v * W);
      for (int h = 0; h < HG; ++h) {
        const vf qb = q[h * D + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    cpu::head_group_epilogue<W, NV, HG>(acc, scales, w, logits);
  }

  // One depth chunk of heads(): the accumulators start at zero (first) or from `saved` ([HG][NV][W]
  // floats), run the same FMA chain over the chunk's `depth` steps (q's rows q_stride floats apart),
  // and are stored back, or on the last chunk go through heads()'s epilogue: the same bits.
  template <int HG>
  static AITER_CPU_INLINE void heads_chunk(const float* __restrict q, int64_t q_stride, int64_t depth,
                                           const float* __restrict kt, float* __restrict saved, bool first,
                                           bool last, const float* __restrict scales, const float* __restrict w,
                                           float* __restrict logits) {
    vf acc[HG][NV];
    for (int h = 0; h < HG; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(saved + (h * NV + v) * W);
    for (int64_t d = 0; d < depth; ++d) {
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(kt + d * kPagedKeyGroup + v * W);
      for (int h = 0; h < HG; ++h) {
        const vf qb = q[h * q_stride + d] - vf{};
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
    if (last) {
      cpu::head_group_epilogue<W, NV, HG>(acc, scales, w, logits);
    } else {
      for (int h = 0; h < HG; ++h)
        for (int v = 0; v < NV; ++v) *reinterpret_cast<vf*>(saved + (h * NV + v) * W) = acc[h][v];
    }
  }

  // heads_chunk for the `heads` (1..4) heads of one head group.
  static AITER_CPU_INLINE void head_group_chunk(int heads, const float* q, int64_t q_stride, int64_t depth,
                                                const float* kt, float* saved, bool first, bool last,
                                                const float* scales, const float* w, float* logits) {
    switch (heads) {
      case 4:
        heads_chunk<4>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      case 3:
        heads_chunk<3>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      case 2:
        heads_chunk<2>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
      default:
        heads_chunk<1>(q, q_stride, depth, kt, saved, first, last, scales, w, logits);
        break;
    }
  }

  // logits[0, kKeys) = the tile's logits over all H heads of one query row.
  static AITER_CPU_INLINE void all_heads(const float* q_row, int64_t H, int64_t D, const float* kt,
                                         const float* scales, const float* w, float* logits) {
    for (int k = 0; k < kKeys; ++k) logits[k] = 0.0f;
    int64_t h = 0;
    for (; h + kHeadGroup <= H; h += kHeadGroup) heads<kHeadGroup>(q_row + h * D, D, kt, scales, w + h, logits);
    switch (H - h) {  // the last, partial head group
      case 3:
        heads<3>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      case 2:
        heads<2>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      case 1:
        heads<1>(q_row + h * D, D, kt, scales, w + h, logits);
        break;
      default:
        break;
    }
  }
};

// Columns [first, first + count) of output row r: `values`, stored as logits_dtype.
AITER_CPU_INLINE void store_columns(const Fp8PagedMqaLogitsParams& p, int64_t r, int64_t first, const float* values,
                                    int64_t count) {
  if (p.logits_dtype == LogitsDtype::kFloat32) {
    std::memcpy(static_cast<float*>(p.out) + r * p.out_stride + first, values, count * sizeof(float));
  } else {
    uint16_t* row = static_cast<uint16_t*>(p.out) + r * p.out_stride + first;
    for (int64_t i = 0; i < count; ++i) row[i] = cpu::bf16_bits(values[i]);
  }
}

// The group's keys [group_begin, group_begin + group_keys) of batch b: each key's K row (nullptr for
// an out-of-range block_table entry) and scale (NaN for one). Returns whether every entry was good.
AITER_CPU_INLINE bool gather_group(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                   int64_t group_begin, int64_t group_keys, const uint8_t** key_rows,
                                   float* scales) {
  const int32_t* entries = p.block_table + b * p.block_table_stride;
  const int64_t block_kv = p.block_kv, D = p.D;
  bool good = true;
  int64_t column = -1;
  const uint8_t* block = nullptr;
  for (int64_t l = 0; l < group_keys; ++l) {
    const int64_t key = group_begin + l;
    if (key / block_kv != column) {
      column = key / block_kv;
      const int32_t id = __atomic_load_n(entries + column, __ATOMIC_RELAXED);
      if (is_cache_block(id, p.num_blocks)) {
        block = p.kv_cache + static_cast<int64_t>(id) * p.kv_block_stride;
      } else {
        block = nullptr;
        good = false;
        plan.faults->record(b, column, id, p.num_blocks);
      }
    }
    const int64_t slot = key % block_kv;
    if (block != nullptr) {
      key_rows[l] = block + slot * D;
      std::memcpy(&scales[l], block + block_kv * D + 4 * slot, sizeof(float));
    } else {
      key_rows[l] = nullptr;
      scales[l] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  // Lanes past the last key: finite, and never stored.
  std::memset(scales + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
  return good;
}

// Depth [d0, d0 + depth) of the group's keys into kt[depth][kPagedKeyGroup]: a bad entry's keys and
// the lanes past the last key are zero.
AITER_CPU_INLINE void decode_group(const uint8_t* const* key_rows, int64_t group_keys, int64_t d0, int64_t depth,
                                   float* kt) {
  const float* table = e4m3_table();
  for (int64_t l = 0; l < group_keys; ++l) {
    const uint8_t* k = key_rows[l];
    if (k != nullptr) {
      k += d0;
      for (int64_t d = 0; d < depth; ++d) kt[d * kPagedKeyGroup + l] = table[k[d]];
    } else {
      for (int64_t d = 0; d < depth; ++d) kt[d * kPagedKeyGroup + l] = 0.0f;
    }
  }
  if (group_keys < kPagedKeyGroup) {
    for (int64_t d = 0; d < depth; ++d)
      std::memset(kt + d * kPagedKeyGroup + group_keys, 0, (kPagedKeyGroup - group_keys) * sizeof(float));
  }
}

// Keys [key_begin, key_end) of batch b, for each of its rows that sees them (whole-depth path).
template <class Tile>
AITER_CPU_INLINE void run_batch_keys(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                     int64_t key_begin, int64_t key_end, float* scratch) {
  const int64_t H = p.H, D = p.D, next_n = p.next_n;
  float* q_rows = scratch;                    // [next_n][H][D]
  float* kt = q_rows + plan.q_floats;         // [D][kPagedKeyGroup]
  float* scales = kt + plan.kt_floats;        // [kPagedKeyGroup]
  float* logits = scales + kPagedKeyGroup;    // [Tile::kKeys]
  const float* table = e4m3_table();
  const uint8_t* key_rows[kPagedKeyGroup];

  for (int64_t j = 0; j < next_n; ++j) {
    if (row_keys(p, b, j) <= key_begin) continue;  // sees none of these keys
    const uint8_t* q = p.q + (b * next_n + j) * H * D;
    float* decoded = q_rows + j * H * D;
    for (int64_t i = 0; i < H * D; ++i) decoded[i] = table[q[i]];
  }

  for (int64_t group_begin = key_begin; group_begin < key_end; group_begin += kPagedKeyGroup) {
    const int64_t group_keys = std::min<int64_t>(kPagedKeyGroup, key_end - group_begin);
    gather_group(p, plan, b, group_begin, group_keys, key_rows, scales);
    decode_group(key_rows, group_keys, 0, D, kt);

    for (int64_t j = 0; j < next_n; ++j) {
      const int64_t end = std::min(group_begin + group_keys, row_keys(p, b, j));
      if (end <= group_begin) continue;
      const int64_t r = b * next_n + j;
      const float* q_row = q_rows + j * H * D;
      const float* w_row = p.weights + r * p.weights_stride;
      for (int64_t t = 0; group_begin + t < end; t += Tile::kKeys) {
        Tile::all_heads(q_row, H, D, kt + t, scales + t, w_row, logits);
        store_columns(p, r, group_begin + t, logits, std::min<int64_t>(Tile::kKeys, end - group_begin - t));
      }
    }
  }
}

// The same keys on the chunked path (scheme at the top): per group and row, head chunks, depth chunks.
template <class Tile>
AITER_CPU_INLINE void run_batch_keys_chunked(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t b,
                                             int64_t key_begin, int64_t key_end, float* scratch) {
  constexpr int64_t kTiles = kPagedKeyGroup / Tile::kKeys;
  const int64_t H = p.H, D = p.D, next_n = p.next_n;
  const int64_t depth_chunk = plan.depth_chunk, head_chunk = plan.head_chunk;
  float* q_chunk = scratch;                   // [head_chunk][depth_chunk]
  float* kt = q_chunk + plan.q_floats;        // [depth_chunk][kPagedKeyGroup]
  float* acc = kt + plan.kt_floats;           // [head_chunk / 4][kTiles][4][Tile::kKeys]
  float* scales = acc + plan.acc_floats;      // [kPagedKeyGroup]
  float* logits = scales + kPagedKeyGroup;    // [kPagedKeyGroup]
  const float* table = e4m3_table();
  const uint8_t* key_rows[kPagedKeyGroup];
  const bool single_depth_chunk = D <= depth_chunk;

  for (int64_t group_begin = key_begin; group_begin < key_end; group_begin += kPagedKeyGroup) {
    const int64_t group_keys = std::min<int64_t>(kPagedKeyGroup, key_end - group_begin);
    gather_group(p, plan, b, group_begin, group_keys, key_rows, scales);
    if (single_depth_chunk) decode_group(key_rows, group_keys, 0, D, kt);

    for (int64_t j = 0; j < next_n; ++j) {
      const int64_t end = std::min(group_begin + group_keys, row_keys(p, b, j));
      if (end <= group_begin) continue;
      const int64_t r = b * next_n + j;
      const int64_t tiles = ceil_div(end - group_begin, Tile::kKeys);
      const uint8_t* q_row = p.q + r * H * D;
      const float* w_row = p.weights + r * p.weights_stride;
      std::memset(logits, 0, sizeof(float) * kPagedKeyGroup);
      for (int64_t h0 = 0; h0 < H; h0 += head_chunk) {
        const int64_t heads = std::min(head_chunk, H - h0);
        for (int64_t d0 = 0; d0 < D; d0 += depth_chunk) {
          const int64_t depth = std::min(depth_chunk, D - d0);
          if (!single_depth_chunk) decode_group(key_rows, group_keys, d0, depth, kt);
          for (int64_t h = 0; h < heads; ++h) {
            const uint8_t* q = q_row + (h0 + h) * D + d0;
            float* decoded = q_chunk + h * depth;
            for (int64_t d = 0; d < depth; ++d) decoded[d] = table[q[d]];
          }
          for (int64_t g = 0; g < heads; g += kHeadGroup) {
            for (int64_t t = 0; t < tiles; ++t) {
              const int64_t lane = t * Tile::kKeys;
              Tile::head_group_chunk(static_cast<int>(std::min<int64_t>(kHeadGroup, heads - g)), q_chunk + g * depth,
                                     depth, depth, kt + lane, acc + ((g / kHeadGroup) * kTiles + t) * 4 * Tile::kKeys,
                                     d0 == 0, d0 + depth >= D, scales + lane, w_row + h0 + g, logits + lane);
            }
          }
        }
      }
      store_columns(p, r, group_begin, logits, end - group_begin);
    }
  }
}

// One task: share `task` of the units, batch by batch.
template <class Tile>
AITER_CPU_INLINE void run_task(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch) {
  const int64_t first = scheduler::share_begin(plan.total_units, plan.tasks, task);
  int64_t left = scheduler::share_begin(plan.total_units, plan.tasks, task + 1) - first;
  scheduler::PagedUnit at = scheduler::paged_unit(plan.unit_ends, p.batches, first);
  while (left > 0 && at.batch < p.batches) {
    const int64_t b = at.batch;
    const int64_t units = plan.unit_ends[b] - (b > 0 ? plan.unit_ends[b - 1] : 0);
    const int64_t take = std::min(left, units - at.block);
    if (take > 0) {
      const int64_t batch_keys =
          scheduler::paged_batch_keys(p.context_lens, b, p.next_n, p.lens_per_row, p.max_context_len);
      const int64_t key_begin = at.block * p.block_kv;
      const int64_t key_end = std::min((at.block + take) * p.block_kv, batch_keys);
      if (plan.chunked)
        run_batch_keys_chunked<Tile>(p, plan, b, key_begin, key_end, scratch);
      else
        run_batch_keys<Tile>(p, plan, b, key_begin, key_end, scratch);
      left -= take;
    }
    at = scheduler::PagedUnit{b + 1, 0};
  }
}

}  // namespace
}  // namespace paged
}  // namespace cpu
}  // namespace aiter
