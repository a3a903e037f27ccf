// The prefill CPU path's task bodies, templated on the operand format (the scheme is at the top of
// cpu/fp8_mqa_logits_cpu.cpp): the fp32 format, the whole-depth and chunked tasks, the stores. Included
// only by the variant units, each of which instantiates them for its format under its own target
// attribute. Everything here has internal linkage, so each unit keeps its own copies, compiled for
// its own target, and no two units' instances of an inline function are merged at link time.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/e4m3.h"
#include "common/work_scheduler.h"
#include "cpu/bf16_round.h"
#include "cpu/fp8_mqa_logits_cpu.h"
#include "cpu/fp8_mqa_logits_cpu_tasks.h"
#include "cpu/simd_lanes.h"

namespace aiter {
namespace cpu {
namespace prefill {
namespace {

using cpu::kKeyBlock;
using cpu::kMaxRowsPerTask;
using cpu::Simd;
using cpu::head_group_epilogue;
using scheduler::ceil_div;

// Operands as fp32: depth = D, acc += q * k, one key per lane (W lanes, NV vectors per tile).
template <int W, int NV, int HG>
struct Fp32Format {
  static constexpr int kTile = W * NV;
  static constexpr int kHeadGroup = HG;
  static int64_t depth(int64_t D) { return D; }

  // dst[i * stride] for i < depth: one Q head row or K row, decoded.
  static AITER_CPU_INLINE void decode(const uint8_t* src, int64_t D, uint32_t* dst, int64_t stride) {
    const float* table = e4m3_table();
    float* out = reinterpret_cast<float*>(dst);
    for (int64_t d = 0; d < D; ++d) out[d * stride] = table[src[d]];
  }

  // acc[h][v] += q[h][d] * kt[d][v] for d < depth, d ascending: the HGH heads starting at q (row
  // stride q_stride), the tile starting at kt (leading dim kKeyBlock). The one FMA chain both paths
  // run, so a depth chunk continues exactly the whole-depth path's sequence.
  template <int HGH>
  static AITER_CPU_INLINE void accumulate(typename Simd<W>::floats (&acc)[HGH][NV], const uint32_t* q_words,
                                          int64_t q_stride, int64_t depth, const uint32_t* kt_words) {
    typedef typename Simd<W>::floats vf;
    const float* __restrict q = reinterpret_cast<const float*>(q_words);
    const float* __restrict kt = reinterpret_cast<const float*>(kt_words);
    for (int64_t d = 0; d < depth; ++d) {
      const float* krow = kt + d * kKeyBlock;
      vf k[NV];
      for (int v = 0; v < NV; ++v) k[v] = *reinterpret_cast<const vf*>(krow + v * W);
      for (int h = 0; h < HGH; ++h) {
        const vf qb = q[h * q_stride + d] - vf{};  // broadcast (x - 0 is exactly x)
        for (int v = 0; v < NV; ++v) acc[h][v] += qb * k[v];
      }
    }
  }

  // The HGH heads starting at q, the tile starting at kt (leading dim kKeyBlock).
  template <int HGH>
  static AITER_CPU_INLINE void head_group(const uint32_t* q_words, int64_t depth,
                                          const uint32_t* kt_words, const float* scales,
                                          const float* w, float* logits) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v) acc[h][v] = vf{};
    accumulate<HGH>(acc, q_words, depth, depth, kt_words);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }

  // Chunked path. Words [word_begin, word_begin + word_count) of one decoded row: the elements
  // of the same indices (one per word).
  static AITER_CPU_INLINE void decode_words(const uint8_t* row, int64_t D, int64_t word_begin,
                                            int64_t word_count, uint32_t* dst, int64_t stride) {
    (void)D;
    decode(row + word_begin, word_count, dst, stride);
  }

  // head_group's loop over `depth` steps of a depth chunk (q row stride q_stride), continuing the
  // accumulators stored at acc_buf (head h at acc_buf + h * acc_stride; zero when `first`).
  template <int HGH>
  static AITER_CPU_INLINE void head_group_chunk(const uint32_t* q_words, int64_t q_stride,
                                                int64_t depth, const uint32_t* kt_words,
                                                float* acc_buf, int64_t acc_stride, bool first) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = first ? vf{} : *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    accumulate<HGH>(acc, q_words, q_stride, depth, kt_words);
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        *reinterpret_cast<vf*>(acc_buf + h * acc_stride + v * W) = acc[h][v];
  }

  // head_group's epilogue on the accumulators stored at acc_buf.
  template <int HGH>
  static AITER_CPU_INLINE void head_group_finish(const float* acc_buf, int64_t acc_stride,
                                                 const float* scales, const float* w,
                                                 float* logits) {
    typedef typename Simd<W>::floats vf;
    vf acc[HGH][NV];
    for (int h = 0; h < HGH; ++h)
      for (int v = 0; v < NV; ++v)
        acc[h][v] = *reinterpret_cast<const vf*>(acc_buf + h * acc_stride + v * W);
    head_group_epilogue<W, NV, HGH>(acc, scales, w, logits);
  }
};

// Dispatches the last, partial head group (1 .. HG heads) to its register-blocked instance.
template <class Format, int HG>
AITER_CPU_INLINE void head_group_tail(int heads, const uint32_t* q, int64_t depth,
                                      const uint32_t* kt, const float* scales, const float* w,
                                      float* logits) {
  if (heads == HG) {
    Format::template head_group<HG>(q, depth, kt, scales, w, logits);
  } else if constexpr (HG > 1) {
    head_group_tail<Format, HG - 1>(heads, q, depth, kt, scales, w, logits);
  }
}

// One tile of keys for one query row, every head: logits = the tile's logits.
template <class Format>
AITER_CPU_INLINE void tile_all_heads(const uint32_t* q_row, int64_t H, int64_t depth,
                                     const uint32_t* kt, const float* scales, const float* w,
                                     float* logits) {
  constexpr int HG = Format::kHeadGroup;
  for (int j = 0; j < Format::kTile; ++j) logits[j] = 0.0f;
  int64_t h = 0;
  for (; h + HG <= H; h += HG)
    Format::template head_group<HG>(q_row + h * depth, depth, kt, scales, w + h, logits);
  if (h < H)
    head_group_tail<Format, HG - 1>(static_cast<int>(H - h), q_row + h * depth, depth, kt, scales,
                                    w + h, logits);
}

// Columns [first, first + count) of output row r: `values` (float32), stored as logits_dtype.
AITER_CPU_INLINE void store_columns(const Fp8MqaLogitsParams& params, int64_t r, int64_t first,
                                    const float* values, int64_t count) {
  if (count <= 0) return;
  if (params.logits_dtype == LogitsDtype::kFloat32) {
    std::memcpy(static_cast<float*>(params.out) + r * params.out_stride + first, values, count * sizeof(float));
  } else {
    uint16_t* row = static_cast<uint16_t*>(params.out) + r * params.out_stride + first;
    for (int64_t i = 0; i < count; ++i) row[i] = cpu::bf16_bits(values[i]);
  }
}

// Columns [begin, end) of output row r: -inf.
void fill_columns_neg_inf(const Fp8MqaLogitsParams& params, int64_t r, int64_t begin, int64_t end) {
  if (begin >= end) return;
  if (params.logits_dtype == LogitsDtype::kFloat32) {
    float* row = static_cast<float*>(params.out) + r * params.out_stride;
    std::fill(row + begin, row + end, -std::numeric_limits<float>::infinity());
  } else {
    uint16_t* row = static_cast<uint16_t*>(params.out) + r * params.out_stride;
    std::fill(row + begin, row + end, cpu::bf16_bits(-std::numeric_limits<float>::infinity()));
  }
}

// Keys [first_key, first_key + count) of row r, whose clamped window starts at window_begin:
// `values`, at their columns (the compressed layout counts from window_begin).
AITER_CPU_INLINE void store_keys(const Fp8MqaLogitsParams& params, int64_t r, int64_t window_begin,
                                 int64_t first_key, const float* values, int64_t count) {
  store_columns(params, r, params.compressed ? first_key - window_begin : first_key, values, count);
}

// The clamped windows [window_begin, window_end) of rows [row_begin, row_end)
// (scheduler::row_window; empty or inverted: window_begin = window_end = 0), -inf outside them
// within keys [chunk_begin, chunk_end) when clean_logits, and the key range
// [union_begin, union_end) that any of the rows needs there: the union of the windows' parts inside
// the chunk (empty: union_begin = union_end = 0).
AITER_CPU_INLINE void task_windows(const Fp8MqaLogitsParams& params, int64_t row_begin,
                                   int64_t row_end, int64_t chunk_begin, int64_t chunk_end,
                                   int64_t* window_begin, int64_t* window_end, int64_t* union_begin,
                                   int64_t* union_end) {
  const scheduler::KeyRange chunk{chunk_begin, chunk_end};
  auto task_union = scheduler::BlockUnion<>::empty_within(params.N);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t i = r - row_begin;
    const scheduler::KeyRange window = scheduler::row_window(params.ks[r], params.ke[r], params.N);
    window_begin[i] = window.empty() ? 0 : window.begin;
    window_end[i] = window.empty() ? 0 : window.end;
    if (params.clean_logits && !params.compressed) {
      fill_columns_neg_inf(params, r, chunk_begin, std::min(chunk_end, window_begin[i]));
      // An empty row (window_begin = window_end = 0) is all -inf.
      fill_columns_neg_inf(params, r, std::max(chunk_begin, window_end[i]), chunk_end);
    } else if (params.clean_logits && chunk_begin == 0) {
      // Compressed: keys outside the window have no column; the row's tail does, once per row.
      fill_columns_neg_inf(params, r, window_end[i] - window_begin[i], params.out_columns);
    }
    task_union.add(scheduler::intersect(window, chunk));
  }
  *union_begin = task_union.range().begin;
  *union_end = task_union.range().end;
}

template <class Format>
AITER_CPU_INLINE void run_task(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                               uint32_t* scratch) {
  constexpr int kTile = Format::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  const int64_t N = params.N, H = params.H, D = params.D, depth = plan.depth;
  const int64_t row_begin = (task / plan.key_chunks) * plan.rows_per_task;
  const int64_t row_end = std::min(params.M, row_begin + plan.rows_per_task);
  const int64_t chunk_begin = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t chunk_end = std::min(N, chunk_begin + plan.keys_per_chunk);

  uint32_t* q_decoded = scratch;                                        // [rows][H][depth]
  uint32_t* kt_block = q_decoded + plan.q_words;                        // [depth][kKeyBlock]
  float* scales = reinterpret_cast<float*>(kt_block + plan.kt_words);  // [kKeyBlock]
  float* logits = scales + kKeyBlock;                                   // tile: [kTile]

  int64_t window_begin[kMaxRowsPerTask], window_end[kMaxRowsPerTask], union_begin, union_end;
  task_windows(params, row_begin, row_end, chunk_begin, chunk_end, window_begin, window_end,
               &union_begin, &union_end);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t i = r - row_begin;
    if (std::max(window_begin[i], chunk_begin) < std::min(window_end[i], chunk_end)) {
      for (int64_t h = 0; h < H; ++h)
        Format::decode(params.q + (r * H + h) * D, D, q_decoded + (i * H + h) * depth, 1);
    }
  }

  for (int64_t block_begin = union_begin; block_begin < union_end; block_begin += kKeyBlock) {
    const int64_t block_keys = std::min<int64_t>(kKeyBlock, union_end - block_begin);
    bool needed = false;
    for (int64_t i = 0; i < row_end - row_begin; ++i)
      needed |= std::max(window_begin[i], block_begin) <
                std::min(window_end[i], block_begin + block_keys);
    if (!needed) continue;  // a gap between the windows (e.g. between requests)

    for (int64_t j = 0; j < block_keys; ++j) {
      Format::decode(params.kv + (block_begin + j) * D, D, kt_block + j, kKeyBlock);
      scales[j] = params.kv_scales[block_begin + j];
    }
    if (block_keys < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
      for (int64_t d = 0; d < depth; ++d)
        std::memset(kt_block + d * kKeyBlock + block_keys, 0,
                    (kKeyBlock - block_keys) * sizeof(uint32_t));
      std::memset(scales + block_keys, 0, (kKeyBlock - block_keys) * sizeof(float));
    }

    for (int64_t r = row_begin; r < row_end; ++r) {
      const int64_t i = r - row_begin;
      // The row's keys inside this block.
      const int64_t overlap_begin = std::max(window_begin[i], block_begin);
      const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
      if (overlap_begin >= overlap_end) continue;
      const uint32_t* q_row = q_decoded + i * H * depth;
      const float* w_row = params.weights + r * params.weights_stride;
      for (int64_t t = (overlap_begin - block_begin) / kTile * kTile; block_begin + t < overlap_end;
           t += kTile) {
        tile_all_heads<Format>(q_row, H, depth, kt_block + t, scales + t, w_row, logits);
        const int64_t from = std::max(overlap_begin, block_begin + t);
        const int64_t to = std::min(overlap_end, block_begin + t + kTile);
        store_keys(params, r, window_begin[i], from, logits + (from - block_begin - t), to - from);
      }
    }
  }
}

// Dispatches the last, partial head group (1 .. HG heads) of a depth chunk / of the epilogue.
template <class Format, int HG>
AITER_CPU_INLINE void head_group_chunk_tail(int heads, const uint32_t* q, int64_t q_stride,
                                            int64_t depth, const uint32_t* kt, float* acc,
                                            int64_t acc_stride, bool first) {
  if (heads == HG) {
    Format::template head_group_chunk<HG>(q, q_stride, depth, kt, acc, acc_stride, first);
  } else if constexpr (HG > 1) {
    head_group_chunk_tail<Format, HG - 1>(heads, q, q_stride, depth, kt, acc, acc_stride, first);
  }
}
template <class Format, int HG>
AITER_CPU_INLINE void head_group_finish_tail(int heads, const float* acc, int64_t acc_stride,
                                             const float* scales, const float* w, float* logits) {
  if (heads == HG) {
    Format::template head_group_finish<HG>(acc, acc_stride, scales, w, logits);
  } else if constexpr (HG > 1) {
    head_group_finish_tail<Format, HG - 1>(heads, acc, acc_stride, scales, w, logits);
  }
}

// One depth chunk of one tile for one query row, heads [0, heads) of a head chunk: q holds
// [heads][depth] words, acc [heads][acc_stride] floats (the tile's lanes at offset 0).
template <class Format>
AITER_CPU_INLINE void tile_chunk(const uint32_t* q, int64_t heads, int64_t depth,
                                 const uint32_t* kt, float* acc, int64_t acc_stride, bool first) {
  constexpr int HG = Format::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    Format::template head_group_chunk<HG>(q + h * depth, depth, depth, kt, acc + h * acc_stride,
                                          acc_stride, first);
  if (h < heads)
    head_group_chunk_tail<Format, HG - 1>(static_cast<int>(heads - h), q + h * depth, depth, depth,
                                          kt, acc + h * acc_stride, acc_stride, first);
}

// The epilogue of one tile for one query row, heads [0, heads) of a head chunk: logits += their
// terms.
template <class Format>
AITER_CPU_INLINE void tile_finish(const float* acc, int64_t heads, int64_t acc_stride,
                                  const float* scales, const float* w, float* logits) {
  constexpr int HG = Format::kHeadGroup;
  int64_t h = 0;
  for (; h + HG <= heads; h += HG)
    Format::template head_group_finish<HG>(acc + h * acc_stride, acc_stride, scales, w + h, logits);
  if (h < heads)
    head_group_finish_tail<Format, HG - 1>(static_cast<int>(heads - h), acc + h * acc_stride,
                                           acc_stride, scales, w + h, logits);
}

// The chunked path of one task (scheme at the top): spans of keys, head chunks, depth chunks.
template <class Format>
AITER_CPU_INLINE void run_task_chunked(const Fp8MqaLogitsParams& params, const Plan& plan,
                                       int64_t task, uint32_t* scratch) {
  constexpr int kTile = Format::kTile;
  static_assert(kKeyBlock % kTile == 0, "a K block holds whole tiles");
  static_assert(cpu::kChunkRowHeads % Format::kHeadGroup == 0,
                "head chunks hold whole head groups");
  static_assert(cpu::kSpanKeys % kKeyBlock == 0, "a span holds whole K blocks");
  const int64_t H = params.H, D = params.D, depth = plan.depth;
  const int64_t rows_per_task = plan.rows_per_task, depth_chunk = plan.depth_chunk,
                head_chunk = plan.head_chunk;
  const int64_t span_keys = plan.span_keys;
  const int64_t row_begin = (task / plan.key_chunks) * rows_per_task;
  const int64_t row_end = std::min(params.M, row_begin + rows_per_task);
  const int64_t chunk_begin = (task % plan.key_chunks) * plan.keys_per_chunk;
  const int64_t chunk_end = std::min(params.N, chunk_begin + plan.keys_per_chunk);

  // [rows_per_task][head_chunk][chunk_depth]
  uint32_t* q_decoded = scratch;
  // [span_keys / kKeyBlock][chunk_depth][kKeyBlock]
  uint32_t* kt_span = q_decoded + plan.q_words;
  // [rows_per_task][head_chunk][span_keys]
  float* acc = reinterpret_cast<float*>(kt_span + plan.kt_words);
  // [rows_per_task][span_keys]
  float* logits = acc + plan.acc_words;
  // [span_keys]
  float* scales = logits + rows_per_task * span_keys;

  int64_t window_begin[kMaxRowsPerTask], window_end[kMaxRowsPerTask], union_begin, union_end;
  task_windows(params, row_begin, row_end, chunk_begin, chunk_end, window_begin, window_end,
               &union_begin, &union_end);

  for (int64_t span_begin = union_begin; span_begin < union_end; span_begin += span_keys) {
    const int64_t span_end = std::min(union_end, span_begin + span_keys);
    bool active[kMaxRowsPerTask];
    bool any = false;
    for (int64_t i = 0; i < row_end - row_begin; ++i) {
      active[i] = std::max(window_begin[i], span_begin) < std::min(window_end[i], span_end);
      any |= active[i];
    }
    if (!any) continue;  // a gap between the windows (e.g. between requests)

    const int64_t lanes = ceil_div(span_end - span_begin, kKeyBlock) * kKeyBlock;
    for (int64_t j = 0; j < span_end - span_begin; ++j)
      scales[j] = params.kv_scales[span_begin + j];
    // Lanes past the span's last key: finite, and never stored.
    std::memset(scales + (span_end - span_begin), 0,
                (lanes - (span_end - span_begin)) * sizeof(float));
    for (int64_t i = 0; i < row_end - row_begin; ++i)
      if (active[i]) std::memset(logits + i * span_keys, 0, lanes * sizeof(float));

    for (int64_t h0 = 0; h0 < H; h0 += head_chunk) {
      const int64_t chunk_heads = std::min(head_chunk, H - h0);
      for (int64_t d0 = 0; d0 < depth; d0 += depth_chunk) {
        const int64_t chunk_depth = std::min(depth_chunk, depth - d0);
        const bool first = d0 == 0;
        for (int64_t i = 0; i < row_end - row_begin; ++i) {
          if (!active[i]) continue;
          for (int64_t h = 0; h < chunk_heads; ++h)
            Format::decode_words(params.q + ((row_begin + i) * H + h0 + h) * D, D, d0, chunk_depth,
                                 q_decoded + (i * head_chunk + h) * chunk_depth, 1);
        }
        // The K chunk of every needed block of the span; with a single depth chunk it serves every
        // head chunk, so it is decoded once per span.
        const bool decode_kt = h0 == 0 || depth > depth_chunk;
        for (int64_t block_begin = span_begin; block_begin < span_end; block_begin += kKeyBlock) {
          const int64_t block_keys = std::min<int64_t>(kKeyBlock, span_end - block_begin);
          bool needed = false;
          for (int64_t i = 0; i < row_end - row_begin; ++i)
            needed |= std::max(window_begin[i], block_begin) <
                      std::min(window_end[i], block_begin + block_keys);
          if (!needed) continue;

          // Block (block_begin - span_begin) / kKeyBlock of the span: [chunk_depth][kKeyBlock].
          uint32_t* kt_block = kt_span + (block_begin - span_begin) * chunk_depth;
          if (decode_kt) {
            for (int64_t j = 0; j < block_keys; ++j)
              Format::decode_words(params.kv + (block_begin + j) * D, D, d0, chunk_depth,
                                   kt_block + j, kKeyBlock);
            if (block_keys < kKeyBlock) {  // zero lanes past the last key: finite, and never stored
              for (int64_t d = 0; d < chunk_depth; ++d)
                std::memset(kt_block + d * kKeyBlock + block_keys, 0,
                            (kKeyBlock - block_keys) * sizeof(uint32_t));
            }
          }
          for (int64_t i = 0; i < row_end - row_begin; ++i) {
            // The row's keys inside this block.
            const int64_t overlap_begin = std::max(window_begin[i], block_begin);
            const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
            if (overlap_begin >= overlap_end) continue;
            for (int64_t t = (overlap_begin - block_begin) / kTile * kTile;
                 block_begin + t < overlap_end; t += kTile)
              tile_chunk<Format>(q_decoded + i * head_chunk * chunk_depth, chunk_heads, chunk_depth,
                                 kt_block + t,
                                 acc + i * head_chunk * span_keys + (block_begin - span_begin) + t,
                                 span_keys, first);
          }
        }
      }
      // The head chunk's epilogue, h ascending, into the span's logits.
      for (int64_t i = 0; i < row_end - row_begin; ++i) {
        if (!active[i]) continue;
        const float* w_row = params.weights + (row_begin + i) * params.weights_stride + h0;
        for (int64_t block_begin = span_begin; block_begin < span_end; block_begin += kKeyBlock) {
          const int64_t block_keys = std::min<int64_t>(kKeyBlock, span_end - block_begin);
          const int64_t overlap_begin = std::max(window_begin[i], block_begin);
          const int64_t overlap_end = std::min(window_end[i], block_begin + block_keys);
          if (overlap_begin >= overlap_end) continue;
          for (int64_t t = (overlap_begin - block_begin) / kTile * kTile;
               block_begin + t < overlap_end; t += kTile) {
            const int64_t span_offset = (block_begin - span_begin) + t;
            tile_finish<Format>(acc + i * head_chunk * span_keys + span_offset, chunk_heads,
                                span_keys, scales + span_offset, w_row,
                                logits + i * span_keys + span_offset);
          }
        }
      }
    }
    for (int64_t i = 0; i < row_end - row_begin; ++i) {
      if (!active[i]) continue;
      const int64_t overlap_begin = std::max(window_begin[i], span_begin);
      const int64_t overlap_end = std::min(window_end[i], span_end);
      store_keys(params, row_begin + i, window_begin[i], overlap_begin,
                 logits + i * span_keys + (overlap_begin - span_begin), overlap_end - overlap_begin);
    }
  }
}

}  // namespace
}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
