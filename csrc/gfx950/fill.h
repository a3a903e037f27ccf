// gfx950 fp8_mqa_logits: the -inf fill. With clean_logits, the columns of a block's rows that its
// compute stages do not write are set to -inf here, in fill units (full layout), or each row's
// tail past its window's keys (compressed layout: compressed_tails). Both store whole 16-byte
// chunks of -inf (four floats, eight bfloat16) and only the partial chunks at a part's ends
// element by element (layout.h, FillRow).
//
//   logits[m, n] = -inf   for n outside [s_m, e_m), when clean_logits
//   the stages write keys [first_key, covered_end) of every row of the block (masked stages store
//   -inf for the keys outside a row's window); the fill writes the other columns of the row, the
//   parts [0, first_key) and [covered_end, N), as the row's fill chunks (left part first). Fill
//   unit u of a block is chunk positions [u P, (u + 1) P) of each of its rows (P = fill_cols /
//   chunk elements; the last unit also takes the few positions past fill_units x P).
//
// Layouts touched: out [M, N] rows of Element (float or bfloat16), or [M, out_columns] in the
// compressed layout, through buffer resources: a run of whole chunks through one that ends at its
// last chunk, the partial chunks through the row's (num_records N or out_columns x element bytes);
// both 0 for a block position past M, so the hardware drops those stores. The block's
// segment_rows in LDS.
// Why units: a fill unit is priced like one compute stage (tunables.h, kFillUnitElems), so a
// workgroup's even share of units is an even share of time whether it fills or computes. The
// kernel writes a segment's fill units between its stages (kernel.h; geometry.h,
// fill_between_stages), so the stores drain while the MFMAs run. Why 16-byte chunks: a whole
// chunk costs the wave one VMEM and one VALU instruction (a float unit is 4 stores per wave, a
// bfloat16 one 2, where one element per lane took 16), so little of the fill's issue competes with
// the stage loop's.
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "common/work_scheduler.h"
#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/plan.h"
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

// Sixteen bytes of the element's -inf: four float -inf or eight bfloat16 -inf (0xff80), made
// where it is stored: behind the empty asm the compiler cannot hoist it out of the segment loop,
// where its VGPRs would stay live through the stage loops (hoisted, h16 took 255 VGPRs, not 252,
// and h64_small 256, not 252).
template <typename Element>
__device__ __forceinline__ v4i neg_inf_chunk() {
  const int bits = sizeof(Element) == 4 ? int(0xff800000u) : int(0xff80ff80u);
  v4i chunk{bits, bits, bits, bits};
  asm volatile("" : "+v"(chunk));
  return chunk;
}

// The chunks of part `part` among fill positions `positions` of one row, by the row's
// kRowThreads threads: the whole ones as 16-byte stores at consecutive addresses, through a
// resource that ends after the run's last chunk (the lanes past it are dropped); the partial ones
// (at most two) one element per lane, by the row's first 2 V threads. row_present: the block
// position holds a row (else both resources are empty).
template <typename Element, int kRowThreads>
__device__ __forceinline__ void store_fill_part(uint64_t row_address, bool row_present, const FillRow& row,
                                                int part, ColumnRange positions, int thread_of_row) {
  constexpr uint32_t kElementBytes = sizeof(Element);
  constexpr int kPerChunk = chunk_elements(kElementBytes);
  const ColumnRange chunks = positions_in_part(row, kPerChunk, part, positions.begin, positions.end);
  if (chunks.end <= chunks.begin) return;
  const ColumnRange columns = fill_part(row, part);
  const ColumnRange whole_in_part = whole_chunks(columns, row.phase, kPerChunk);
  const int whole_begin = max(chunks.begin, whole_in_part.begin), whole_end = min(chunks.end, whole_in_part.end);
  if (whole_begin < whole_end) {
    const int count = whole_end - whole_begin;
    const v4i rsrc = make_rsrc(row_address + uint64_t(chunk_first_column(whole_begin, row.phase, kPerChunk)) * kElementBytes,
                               row_present ? uint32_t(count) * kChunkBytes : 0u);
    const v4i neg_inf = neg_inf_chunk<Element>();
    for (int k = 0; k < count; k += kRowThreads)
      buffer_store_b128(neg_inf, rsrc, uint32_t(k + thread_of_row) * kChunkBytes, 0, 0);
  }
  const PartialChunks partial = partial_chunks(chunks, whole_in_part);
  if (partial.head >= 0 || partial.tail >= 0) {
    const v4i rsrc = make_rsrc(row_address, row_present ? uint32_t(row.row_end) * kElementBytes : 0u);
    const int chunk = thread_of_row < kPerChunk ? partial.head : partial.tail;
    const int column = chunk_first_column(chunk, row.phase, kPerChunk) + thread_of_row % kPerChunk;
    const bool fill = thread_of_row < 2 * kPerChunk && chunk >= 0 && column_in(columns, column);
    float neg_inf = -__builtin_inff();
    asm volatile("" : "+v"(neg_inf));  // made here, as neg_inf_chunk
    buffer_store_logit<Element>(neg_inf, rsrc, fill ? uint32_t(column) * kElementBytes : kOutOfRange);
  }
}

// Fill units [unit_begin, unit_end) of the block (0-based among its fill units); all threads, no
// barrier (the caller's segment holds segment_rows). Rows in rounds of kRowsAtOnce, each row by
// fill_row_threads threads (whole waves).
template <class V, typename Element>
__device__ void fill_neg_inf(const Workgroup<V>& wg, const FillFacts& block, int unit_begin,
                             int unit_end) {
  constexpr uint32_t kElementBytes = sizeof(Element);
  constexpr int kPerChunk = chunk_elements(kElementBytes);
  constexpr int kRowThreads = fill_row_threads(V::geometry());
  constexpr int kRowsAtOnce = kThreads / kRowThreads;
  static_assert(V::kGeometry.fill_cols % kPerChunk == 0 && V::kGeometry.block_rows % kRowsAtOnce == 0,
                "a fill unit is whole chunks of each row, and its rows whole rounds");
  const KernelArgs& args = wg.args;
  const int4* rows = wg.template at<int4>(LdsLayout<V>::segment_rows);
  const int row_of_wave = wg.wave / (kRowThreads / kLanes);
  const int thread_of_row = wg.tid % kRowThreads;
  for (int slot0 = 0; slot0 < V::kGeometry.block_rows; slot0 += kRowsAtOnce) {
    const int row = uniform(rows[slot0 + row_of_wave].x);
    const uint64_t row_address =
        uint64_t(args.out) + uint64_t(row < 0 ? 0 : row) * uint64_t(args.out_stride) * kElementBytes;
    const FillRow fill_row{block.first_key, block.covered_end, args.N,
                           uniform(chunk_phase(row_address, kElementBytes))};
    const int row_chunks = fill_chunks(fill_row, kPerChunk);
    for (int u = unit_begin; u < unit_end; ++u) {
      const ColumnRange positions =
          unit_position_range(V::geometry(), kElementBytes, u, block.fill_units, row_chunks);
#pragma unroll
      for (int part = 0; part < 2; ++part)
        store_fill_part<Element, kRowThreads>(row_address, row >= 0, fill_row, part, positions, thread_of_row);
    }
  }
}

// The compressed layout's tails with clean_logits: row m's columns [keys_m, out_columns), keys_m =
// e_m - s_m cut at out_columns (an empty row is all tail): the right part of a row without a left
// one. The compute stores columns [0, keys_m) only, so the two never meet. Not on the plan (its
// rows' prices have no fill units): workgroup w of the W in the grid takes rows w, w + W, ...
// whole, all 512 threads on one row, before its compute (nothing of it is live yet). The grid
// comes from the arguments: reading gridDim (implicit kernel arguments) made the compiler spill
// in the stage loops (ISA check).
template <class V, typename Element>
__device__ void fill_compressed_tails(const Workgroup<V>& wg) {
  constexpr uint32_t kElementBytes = sizeof(Element);
  constexpr int kPerChunk = chunk_elements(kElementBytes);
  const KernelArgs& args = wg.args;
  const int workgroups = args.grid_x * args.grid_y;
  const int workgroup = int(__builtin_amdgcn_workgroup_id_x() + __builtin_amdgcn_workgroup_id_y() * args.grid_x);
  const int columns = args.out_columns;
  for (int m = workgroup; m < args.M; m += workgroups) {
    const scheduler::KeyRange window = scheduler::row_window(args.ks[m], args.ke[m], args.N);
    const int keys = uniform(int(window.size() < int64_t(columns) ? window.size() : int64_t(columns)));
    const uint64_t row_address = uint64_t(args.out) + uint64_t(m) * uint64_t(args.out_stride) * kElementBytes;
    const FillRow tail{0, keys, columns, uniform(chunk_phase(row_address, kElementBytes))};
    store_fill_part<Element, kThreads>(row_address, true, tail, 1, ColumnRange{0, fill_chunks(tail, kPerChunk)},
                                       wg.tid);
  }
}

}  // namespace gfx950
}  // namespace aiter
