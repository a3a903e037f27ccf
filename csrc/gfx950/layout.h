// gfx950 fp8_mqa_logits: where every byte lives. MFMA fragment layouts, the swizzled LDS ring slot,
// the LDS-DMA addressing that fills it, the ds_read offsets that drain it, the logits store
// offsets, and the LDS carve-up of the whole workgroup.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]
//   = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]          (kv_scale > 0, a precondition)
//
// Layouts touched: Q [M, H, D] and K [N, D] fp8 bytes (D = 64 or 128) as MFMA A/B fragments; a K
// stage in LDS (S keys x D / 16 chunks of 16 B, swizzled) with per-wave kv_scale areas; the
// accumulator C (32 x 32) and the out [M, N] rows it is stored to; the plan and block-row tables
// in LDS.
// Why here: the kernel (pipeline.h, epilogue.h, the stage loop), its host emulation and the layout
// tests (dev/gfx950/) must use the very same index functions. Host + device, constexpr,
// torch-free and allocation-free.
#pragma once
#include <stdint.h>

#include "gfx950/geometry.h"

namespace aiter {
namespace gfx950 {

constexpr uint32_t kOutOfRange = 0x80000000u;  // >= every num_records the kernel builds
// num_records of the H = 16 pair resource (one resource for a row pair): the largest multiple of 4
// below 2^31, so that no num_records the kernel builds has bit 31 set and only the out-of-range
// offsets (kOutOfRange and above) do.
constexpr uint32_t kPairRecords = kOutOfRange - 4u;

// ------------------------------------------------------------------------------------------------
// MFMA v_mfma_f32_32x32x64_f8f6f4 fragments (CDNA4 ISA).
// A (32 x 64) and B (64 x 32): lane l holds row (A) / column (B) l % 32 and 32 of the 64 k values,
// 8 dwords. Which 32 is the hardware's business, but it is the same permutation for A and B, so any
// consistent assignment of head_dim bytes to (lane half, byte) gives the same dot product. We use:
// step s, lane half h = l / 32, byte b  <->  head_dim index 64 s + 32 h + b, i.e. 16-byte chunk
// 4 s + 2 h + b / 16 of the D-byte Q or K row (steps s < D / 64).
// Accumulator (32 x 32): lane l, element v holds row c_row(l, v) (= A row of the tile) and column
// l % 32 (= key of the sub-tile). c_row(l, v) is v modulo 2 (and 4): which of a packed tile's two
// rows an element belongs to is known at compile time.
// ------------------------------------------------------------------------------------------------
GFX950_FN int frag_chunk(int lane, int step, int half_read) {
  return 4 * step + 2 * (lane / 32) + half_read;
}
GFX950_FN int c_row(int lane, int v) { return 8 * (v / 4) + 4 * (lane / 32) + v % 4; }
GFX950_FN int c_col(int lane) { return lane % 32; }

// ------------------------------------------------------------------------------------------------
// LDS slot layout and swizzle.
// A stage's K is S keys x C chunks of 16 B (C = D / 16: 8 at D = 128, 4 at D = 64). Chunk c of key
// k goes to chunk position
//   p = C k + (c ^ swizzle(k)),
//   swizzle(k) = (k & 7) ^ ((k >> 3) & 1)          C = 8: a key is half a 256-byte bank line
//   swizzle(k) = ((k >> 1) & 3) ^ ((k >> 3) & 1)   C = 4: a key is a quarter of one
// which makes every ds_read_b128 of the B fragments (16 consecutive keys, one chunk index per
// phase) conflict-free both for 64 banks (16 lanes per pass) and 32 banks (8 lanes per pass):
// C = 8: within 16 consecutive keys, keys of equal parity get distinct chunk columns, and within 8
// consecutive keys all columns differ. C = 4: within 16 keys, those of equal k % 4 (same quarter of
// a bank line) get distinct columns (bits 2 and 3 of k change different bits), and within 8 keys
// those of equal parity (same half of a 128-byte line) do (bits 1 and 2 do). The swizzle depends on
// k & 15 only, so sub-tile j of a stage is sub-tile 0 shifted by a constant.
// Position p lives at byte padded_chunk(p) of the slot: wave w's DMAs fill positions
// [64 D w, 64 D (w + 1)) (D = DMAs per wave), followed by that wave's 64 kv_scales, so each
// wave's part is one contiguous LDS-DMA target and its scales sit at a fixed instruction offset.
// ------------------------------------------------------------------------------------------------
GFX950_FN int swizzle(int chunks, int key) {
  return chunks == 8 ? (key & 7) ^ ((key >> 3) & 1) : ((key >> 1) & 3) ^ ((key >> 3) & 1);
}
GFX950_FN int lds_chunk(Geometry geometry, int key, int c) {
  return key * geometry.chunks_per_key + (c ^ swizzle(geometry.chunks_per_key, key));
}
GFX950_FN int chunk_key(Geometry geometry, int p) { return p / geometry.chunks_per_key; }
GFX950_FN int chunk_col(Geometry geometry, int p) {
  return (p % geometry.chunks_per_key) ^ swizzle(geometry.chunks_per_key, chunk_key(geometry, p));
}
GFX950_FN int padded_chunk(Geometry geometry, int p) {
  const int per_wave = geometry.dmas_per_wave * kLanes;
  return (p / per_wave) * geometry.wave_part_bytes + (p % per_wave) * kChunkBytes;
}
// Byte offset (within a slot) of wave `wave`'s kv_scale area.
GFX950_FN int scale_area(Geometry geometry, int wave) {
  return wave * geometry.wave_part_bytes + geometry.dmas_per_wave * kDmaBytes;
}

// K DMA d of wave w: LDS destination M0 + d * 1024 + 16 lane with M0 = slot + w * wave_part; the
// global side is stage base + voffset + d * 1024 (the instruction offset applies to both).
GFX950_FN int dma_position(Geometry geometry, int wave, int d, int lane) {
  return kLanes * (geometry.dmas_per_wave * wave + d) + lane;
}
GFX950_FN int dma_m0(Geometry geometry, int wave) { return wave * geometry.wave_part_bytes; }
GFX950_FN int dma_inst_offset(int d) { return d * kDmaBytes; }
GFX950_FN uint32_t dma_voffset(Geometry geometry, int wave, int d, int lane) {
  const int p = dma_position(geometry, wave, d, lane);
  return uint32_t(chunk_key(geometry, p) * geometry.head_dim + chunk_col(geometry, p) * kChunkBytes -
                  dma_inst_offset(d));
}
// kv_scale DMA of a wave: same M0, instruction offset = its K bytes, lane l loads the scale of
// stage key 64 * key_group + l. The buffer base is moved back by the instruction offset.
GFX950_FN int scale_inst_offset(Geometry geometry) { return geometry.dmas_per_wave * kDmaBytes; }
GFX950_FN int scale_first_key(Geometry geometry, int wave) {
  return wave_key_group(geometry, wave) * kSubTiles * kTileCols;
}

// ds_read_b128 of the B fragment: byte offset within the slot for the wave's first sub-tile
// (stage-local sub-tile `sub`), lane, MFMA step and 16-byte half; later sub-tiles add
// subtile_stride().
GFX950_FN int b_read_offset(Geometry geometry, int sub, int lane, int step, int half_read) {
  return padded_chunk(geometry, lds_chunk(geometry, kTileCols * sub + lane % 32,
                                          frag_chunk(lane, step, half_read)));
}
GFX950_FN int subtile_stride(Geometry geometry) {
  return padded_chunk(geometry, kTileCols * geometry.chunks_per_key) - padded_chunk(geometry, 0);
}
// ds_read_b32 of the kv_scale for (wave, its sub-tile j, lane): within the wave's own scale area.
GFX950_FN int scale_read_offset(Geometry geometry, int wave, int j, int lane) {
  return scale_area(geometry, wave) + 4 * (kTileCols * j + lane % 32);
}

// ------------------------------------------------------------------------------------------------
// Output stores. After the permlane32 swap, lanes 0-31 hold row A of a pair and lanes 32-63 row B,
// each for key (sub-tile base + lane % 32). Each row is stored by its own buffer store (a dword, or
// a short for bfloat16 logits) with a per-row resource (base = the row's key k0, num_records =
// (key_limit - k0) * element bytes, 0 for a missing row; key_limit = N, or s_m + out_columns in the
// compressed layout), so the hardware drops keys past the limit and missing rows; the other
// half-wave gets an out-of-range offset. Masked stages also push out-of-window lanes out of range
// (clean_logits=False, or the compressed layout) or store -inf there (full layout, True).
// H = 16 stores both rows of a pair with one store instead (Epilogue::store_pair_at_once): one
// resource at the lower row's key k0 with num_records = kPairRecords, each half-wave at its row's
// offset from there (WaveRows::pair_offset), the key limits kept by the stage masks.
// ------------------------------------------------------------------------------------------------
GFX950_FN uint32_t store_offset(int sub, int lane, int half, int element_bytes) {
  return uint32_t(kTileCols * sub + lane % 32) * uint32_t(element_bytes) | (lane / 32 == half ? 0u : kOutOfRange);
}
// Raw-buffer range check as the kernel relies on it (offset = voffset + instruction offset).
GFX950_FN bool buffer_in_range(uint64_t offset, uint64_t bytes, uint64_t num_records) {
  return offset + bytes <= num_records;
}

// ------------------------------------------------------------------------------------------------
// -inf fill in 16-byte chunks (fill.h). A row's -inf columns are two parts, [0, left_end) and
// [right_begin, row_end) (full layout: left of the block's first key and right of its covered
// keys; compressed tails: no left part, [keys, out_columns)). The row is cut into the 16-byte
// chunks of memory: with E-byte elements, V = 16 / E per chunk and phase = (row address / E) % V,
// chunk c holds columns [c V - phase, c V - phase + V) (chunk 0 starts before the row when the
// row does not start on 16 bytes). A part's chunks are those holding one of its columns; the row's
// fill positions number them, the left part's first. A whole chunk (all its columns in the part)
// is one 16-byte store; the part's first and last chunks may be partial, and are stored element by
// element, never touching a column outside the part: those are the compute's or another row's.
// The two parts never share a chunk: both are non-empty only when the block computes, and then
// right_begin - left_end is at least a stage (64 keys).
// ------------------------------------------------------------------------------------------------
struct FillRow {
  int left_end, right_begin, row_end;
  int phase;  // the row's first column within its 16-byte chunk, in elements
};
struct ColumnRange {  // columns, or chunks, [begin, end); empty when end <= begin
  int begin, end;
};
GFX950_FN int chunk_elements(int element_bytes) { return kChunkBytes / element_bytes; }
GFX950_FN int chunk_phase(uint64_t row_address, int element_bytes) {
  return int(row_address / uint64_t(element_bytes) % uint64_t(chunk_elements(element_bytes)));
}
GFX950_FN int chunk_of_column(int column, int phase, int per_chunk) { return (column + phase) / per_chunk; }
GFX950_FN int chunk_first_column(int chunk, int phase, int per_chunk) { return chunk * per_chunk - phase; }
// Part 0 (left) or 1 (right) of the row, in columns.
GFX950_FN ColumnRange fill_part(FillRow row, int part) {
  return part == 0 ? ColumnRange{0, row.left_end} : ColumnRange{row.right_begin, row.row_end};
}
// The chunks holding a column of `columns`, and those whose every column is in it.
GFX950_FN ColumnRange part_chunks(ColumnRange columns, int phase, int per_chunk) {
  return columns.begin < columns.end
             ? ColumnRange{chunk_of_column(columns.begin, phase, per_chunk),
                           chunk_of_column(columns.end - 1, phase, per_chunk) + 1}
             : ColumnRange{0, 0};
}
GFX950_FN ColumnRange whole_chunks(ColumnRange columns, int phase, int per_chunk) {
  return ColumnRange{(columns.begin + phase + per_chunk - 1) / per_chunk, (columns.end + phase) / per_chunk};
}
GFX950_FN int part_chunk_count(FillRow row, int part, int per_chunk) {
  const ColumnRange chunks = part_chunks(fill_part(row, part), row.phase, per_chunk);
  return chunks.end > chunks.begin ? chunks.end - chunks.begin : 0;
}
GFX950_FN int fill_chunks(FillRow row, int per_chunk) {
  return part_chunk_count(row, 0, per_chunk) + part_chunk_count(row, 1, per_chunk);
}
// The chunks of part `part` among the row's fill positions [first, end).
GFX950_FN ColumnRange positions_in_part(FillRow row, int per_chunk, int part, int first, int end) {
  const int left = part_chunk_count(row, 0, per_chunk);
  const int from = part == 0 ? 0 : left;
  const int to = part == 0 ? left : left + part_chunk_count(row, 1, per_chunk);
  const int begin = first > from ? first : from, stop = end < to ? end : to;
  if (stop <= begin) return ColumnRange{0, 0};
  const int base = part_chunks(fill_part(row, part), row.phase, per_chunk).begin - from;
  return ColumnRange{base + begin, base + stop};
}
// The partial chunks among `chunks` (a run of a part's chunks): its first when that is the
// part's partial first chunk, its last when that is the part's partial last one (and not the
// same chunk); -1 for none.
struct PartialChunks {
  int head, tail;
};
GFX950_FN PartialChunks partial_chunks(ColumnRange chunks, ColumnRange whole) {
  if (chunks.end <= chunks.begin) return PartialChunks{-1, -1};
  const int head = chunks.begin < whole.begin ? chunks.begin : -1;
  const int last = chunks.end - 1;
  return PartialChunks{head, last >= whole.end && last != head ? last : -1};
}
GFX950_FN bool column_in(ColumnRange columns, int column) {
  return column >= columns.begin && column < columns.end;
}
// Fill unit u of a block covers the fill positions [u P, (u + 1) P) of each of its rows, P =
// fill_cols / V; the block's last unit also takes those past its fill_units x P (a row may have up
// to four more chunks than fill columns / V: the partial ones at its parts' ends).
GFX950_FN int unit_positions(Geometry geometry, int element_bytes) {
  return geometry.fill_cols / chunk_elements(element_bytes);
}
// Threads on one row of a fill unit: whole waves, so that the row's resources stay wave-uniform;
// one wave per row, two where a block has fewer rows than the workgroup has waves.
GFX950_FN int fill_row_threads(Geometry geometry) {
  return kLanes * (geometry.block_rows < kWaves ? kWaves / geometry.block_rows : 1);
}
GFX950_FN ColumnRange unit_position_range(Geometry geometry, int element_bytes, int unit, int fill_units,
                                          int row_chunks) {
  const int per_unit = unit_positions(geometry, element_bytes);
  const int end = unit + 1 == fill_units ? row_chunks
                                         : ((unit + 1) * per_unit < row_chunks ? (unit + 1) * per_unit : row_chunks);
  return ColumnRange{unit * per_unit, end};
}

// ------------------------------------------------------------------------------------------------
// LDS carve-up of one variant (byte offsets from the workgroup's LDS base):
//   ring                   slots x slot_bytes: the K stages (above)
//   row_windows            int2 (begin, end) per row while the balanced plan is built; aliases the
//                          ring, which no stage uses yet
//   nonempty_mask          uint64 per 64-row chunk: bit i = row 64 c + i has a non-empty window
//   chunk_nonempty_prefix  int per chunk + 1: non-empty rows before chunk c (the last: all of them)
//   block_units_prefix     int per plan block + 1: units of the blocks before b (the last: all)
//   segment_rows           int4 (row, begin, end, 0) per block row of the current segment; row -1
//                          for a position past M
// ------------------------------------------------------------------------------------------------
template <class V>
struct LdsLayout {
  static constexpr Geometry kGeometry = V::kGeometry;
  static constexpr int align16(int x) { return (x + 15) & ~15; }
  static constexpr int chunks = kGeometry.plan_rows / kLanes;
  static constexpr int ring_bytes = kGeometry.slots * kGeometry.slot_bytes;
  static constexpr int row_windows_bytes = kGeometry.plan_rows * 8;
  static constexpr int ring = 0;
  static constexpr int row_windows = 0;
  static constexpr int nonempty_mask =
      align16(ring_bytes > row_windows_bytes ? ring_bytes : row_windows_bytes);
  static constexpr int chunk_nonempty_prefix = nonempty_mask + chunks * 8;
  static constexpr int block_units_prefix = align16(chunk_nonempty_prefix + (chunks + 1) * 4);
  static constexpr int segment_rows = align16(block_units_prefix + (kGeometry.plan_blocks + 1) * 4);
  static constexpr int bytes = segment_rows + kGeometry.block_rows * 16;
  static_assert(bytes <= 160 * 1024, "gfx950 LDS is 160 KiB per CU");
};

}  // namespace gfx950
}  // namespace aiter
