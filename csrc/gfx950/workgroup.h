// gfx950 fp8_mqa_logits: what the kernel is given (KernelArgs, filled by the host launcher) and what
// one workgroup and its waves hold while they run. Device roles (plan.h, pipeline.h, epilogue.h,
// fill.h) take a Workgroup; nothing here computes.
//
//   logits[m, n] = sum_h relu(kv_scale[n] * Q[m,h,:] . K[n,:]) * w[m,h]   for n in [ks[m], ke[m])
//
// Layouts touched: the tensors of KernelArgs (row-major: q [M, H, D] and kv [N, D] fp8 bytes,
// kv_scales [N], weights [M, H] with row stride weights_stride, out [M, N] float32 or bfloat16 (the
// kernel's Element) with row stride out_stride, or the compressed [M, out_columns] (key n of row m
// at column n - s_m), ks / ke [M] int32 raw bounds); the workgroup's LDS (LdsLayout, layout.h).
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/primitives.h"

namespace aiter {
namespace gfx950 {

struct KernelArgs {
  const uint8_t* q;
  const uint8_t* kv;
  const float* kv_scales;
  const float* weights;
  const int32_t* ks;
  const int32_t* ke;
  void* out;  // float or bf16: the kernel's Element
  int64_t weights_stride;
  int64_t out_stride;
  int32_t M;
  int32_t N;
  // -inf outside the windows in the full layout: masked stages store it and the plan has fill
  // units. 0 in the compressed layout, whose -inf is its row tails (compressed_tails).
  int32_t clean;
  int32_t out_columns;       // the compressed layout's columns (the kernel's kCompressed); N in the full one
  int32_t compressed_tails;  // compressed with clean_logits: columns [e_m - s_m, out_columns) are -inf
  // 0: the balanced plan over num_workgroups workgroups; > 0: the fixed grid (blocks,
  // fixed_grid_splits), each block's units cut into this many contiguous shares.
  int32_t fixed_grid_splits;
  int32_t num_workgroups;
  int32_t reverse_blocks;  // fixed grid: workgroup x takes block (blocks - 1 - x)
  int32_t grid_x, grid_y;  // the launch's grid (the compressed tails walk rows over all of it)
};

// One workgroup of a kernel variant (V: a Variant, geometry.h): its arguments, its LDS and who
// this thread is.
template <class V>
struct Workgroup : V {
  using Lds = LdsLayout<V>;

  const KernelArgs& args;
  uint8_t* lds;
  const int tid, lane, wave;

  __device__ Workgroup(const KernelArgs& kernel_args, uint8_t* lds_base)
      : args(kernel_args),
        lds(lds_base),
        tid(__builtin_amdgcn_workitem_id_x()),
        lane(lane_id()),
        wave(uniform(__builtin_amdgcn_workitem_id_x() / kLanes)) {}

  template <class T>
  __device__ T* at(int byte_offset) const {
    return reinterpret_cast<T*>(lds + byte_offset);
  }
  __device__ uint32_t lds_address(int byte_offset) const {
    return uint32_t(uintptr_t((__attribute__((address_space(3))) uint8_t*)(lds))) + byte_offset;
  }
};

// What a wave holds for its rows during a segment (loaded once per segment, kept in VGPRs).
template <class V>
struct WaveRows {
  static constexpr int kRowsPerWave = V::kRowsPerWave;
  static constexpr int kPairsPerWave = V::kPairsPerWave;
  v8i q_frag[kTilesPerWave][V::kSteps];  // A fragments
  v4f weights[kTilesPerWave][4];         // w of the 16 (row, head)s each lane's accumulator elements hold
  uint64_t out_row[kRowsPerWave];     // byte address of the row's key 0 in out (uniform; compressed: s_m columns before the row)
  int key_limit[kRowsPerWave];        // keys stored below this: N, or s_m + out_columns (compressed)
  int valid[kRowsPerWave];
  uint32_t window_addr[kPairsPerWave];  // LDS address of the (s, e) of the pair row this lane stores
  // H = 16 stores a pair with one instruction (epilogue.h): the lower of its two rows' addresses
  // of key 0 (uniform), and per lane the byte offset from there of its key of the stage (the
  // wave's first sub-tile) in its own row (lanes 0-31 row A, 32-63 row B), or kOutOfRange for a
  // missing row.
  uint64_t pair_base[kPairsPerWave];
  uint32_t pair_offset[kPairsPerWave];
};

}  // namespace gfx950
}  // namespace aiter
