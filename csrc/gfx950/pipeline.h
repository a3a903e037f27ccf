// gfx950 fp8_mqa_logits: the K pipeline. Global K and kv_scale -> LDS ring by the 16-byte LDS DMA,
// prefetch_stages stages ahead, with hand-placed waits; B fragments and scales out of the ring.
//
//   logits[m, n] = kv_scale[n] * sum_h relu(Q[m,h,:] . K[n,:]) * w[m,h]
//   stage i of a block holds keys [first_key + i S, + S) (S = stage_keys); K[n,:] and kv_scale[n]
//   of those keys are what this file moves.
//
// Layouts touched: kv [N, D] fp8 and kv_scales [N] fp32 through buffer resources whose
// num_records stop at N (and at 0 for a stage past the segment: still issued, so every iteration
// issues the same VMEM count); the ring slots of layout.h (swizzled K, a kv_scale area per wave);
// the B fragment layout of the MFMA.
// Why inline asm: the DMAs (buffer_load ... lds) are invisible to the compiler, which therefore
// neither waits for nor drains them: the one s_waitcnt vmcnt(N) per stage is placed here by hand,
// N counting the logits stores that vmcnt also counts (geometry.vmcnt_wait), and the asm comment
// "gfx950-stage-vmem" states the VMEM count per stage for the ISA checker (dev/isa/gfx950.py).
#pragma once
#include <hip/hip_runtime.h>
#include <stdint.h>

#include "gfx950/geometry.h"
#include "gfx950/layout.h"
#include "gfx950/primitives.h"
#include "gfx950/workgroup.h"

namespace aiter {
namespace gfx950 {

// Per-lane constants of a wave's ring traffic (VGPRs, computed once).
template <int kSteps>
struct RingLanes {
  uint32_t dma[2];               // K DMA voffsets
  uint32_t scale_dma;            // kv_scale DMA voffset
  uint32_t b_read[kSteps][2];    // ds_read_b128 offsets of the B fragment (first sub-tile)
  uint32_t scale_read;           // ds_read_b32 offset of the kv_scale (first sub-tile)
};

// Resources of one stage's loads and the LDS destination of this wave's part of its slot.
struct StageLoad {
  v4i k_rsrc, scale_rsrc;
  uint32_t m0;
};

template <class V>
struct KeyPipeline {
  using Lds = LdsLayout<V>;
  using Lanes = RingLanes<V::kSteps>;
  const Workgroup<V> wg;  // a copy: a reference to a sibling member would keep the kernel object in scratch

  __device__ explicit KeyPipeline(const Workgroup<V>& workgroup) : wg(workgroup) {}

  __device__ Lanes lanes() const {
    Lanes lanes;
#pragma unroll
    for (int d = 0; d < 2; ++d)
      lanes.dma[d] =
          d < V::kGeometry.dmas_per_wave ? dma_voffset(V::geometry(), wg.wave, d, wg.lane) : 0u;
    lanes.scale_dma = uint32_t(wg.lane) * 4u;
    const int sub0 = wave_subtile(V::geometry(), wg.wave, 0);
#pragma unroll
    for (int s = 0; s < V::kSteps; ++s)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        lanes.b_read[s][q] = uint32_t(b_read_offset(V::geometry(), sub0, wg.lane, s, q));
    // The ring base is in the lane's scale address and hidden from the compiler, so the loop adds
    // only the slot's offset: otherwise it splits a constant (0x400) that ds_read2_b32's 8-bit
    // dword offsets cannot hold into a v_add_u32 per stage.
    lanes.scale_read = uint32_t(Lds::ring + scale_read_offset(V::geometry(), wg.wave, 0, wg.lane));
    asm volatile("" : "+v"(lanes.scale_read));
    return lanes;
  }

  static constexpr __device__ int slot_offset(int slot) {
    return Lds::ring + slot * V::kGeometry.slot_bytes;
  }
  static constexpr __device__ int next_slot(int slot) {
    return slot + 1 == V::kGeometry.slots ? 0 : slot + 1;
  }
  // The slot read in the previous iteration: stage i + prefetch_stages goes there.
  static constexpr __device__ int previous_slot(int slot) {
    return slot == 0 ? V::kGeometry.slots - 1 : slot - 1;
  }

  // Resources of stage `stage` of a block whose stages start at key first_key; stages at or past
  // stage_end load nothing (num_records 0) but are still issued.
  __device__ StageLoad stage_load(int first_key, int stage, int stage_end, int slot) const {
    const KernelArgs& args = wg.args;
    StageLoad load;
    const bool live = stage < stage_end;
    const int stage_key = first_key + stage * V::kStageKeys;
    const int scale_key = stage_key + scale_first_key(V::geometry(), wg.wave);
    load.k_rsrc = make_rsrc(uint64_t(args.kv) + uint64_t(stage_key) * V::kHeadDim,
                            live ? uint32_t(args.N - stage_key) * V::kHeadDim : 0u);
    load.scale_rsrc =
        make_rsrc(uint64_t(args.kv_scales) + uint64_t(scale_key) * 4u - scale_inst_offset(V::geometry()),
                  live && scale_key < args.N
                      ? uint32_t(args.N - scale_key) * 4u + scale_inst_offset(V::geometry())
                      : 0u);
    load.m0 = uint32_t(uniform(int(wg.lds_address(slot_offset(slot) + dma_m0(V::geometry(), wg.wave)))));
    return load;
  }

// One wave's loads of a stage: K DMA(s) at instruction offsets d * 1024, then the kv_scale DMA at
// the offset of the wave's scale area (M0 = the wave's part of the slot).
#define GFX950_STAGE_DMAS_1                                  \
  "buffer_load_dwordx4 %[dv0], %[rk], 0 offen lds\n\t"      \
  "buffer_load_dword %[sv], %[rs], 0 offen offset:%[so] lds"
#define GFX950_STAGE_DMAS_2                                              \
  "buffer_load_dwordx4 %[dv0], %[rk], 0 offen lds\n\t"                  \
  "buffer_load_dwordx4 %[dv1], %[rk], 0 offen offset:1024 lds\n\t"      \
  "buffer_load_dword %[sv], %[rs], 0 offen offset:%[so] lds"
#define GFX950_STAGE_OPERANDS                                                                 \
  [dv0] "v"(lanes.dma[0]), [sv] "v"(lanes.scale_dma), [rk] "s"(load.k_rsrc),                  \
      [rs] "s"(load.scale_rsrc), [so] "n"(scale_inst_offset(V::geometry())),                  \
      [wait] "n"(V::kGeometry.vmcnt_wait), "{m0}"(load.m0), [depth] "n"(V::kGeometry.prefetch_stages)

  // Prologue: no wait; s_nop 0 is the wait state an M0 write needs before an LDS DMA reads it.
  __device__ __forceinline__ void issue_prologue(const StageLoad& load, const Lanes& lanes) const {
    if constexpr (V::kGeometry.dmas_per_wave == 1)
      asm volatile("s_nop 0\n\t" GFX950_STAGE_DMAS_1 ::GFX950_STAGE_OPERANDS : "memory");
    else
      asm volatile("s_nop 0\n\t" GFX950_STAGE_DMAS_2 ::GFX950_STAGE_OPERANDS, [dv1] "v"(lanes.dma[1])
                   : "memory");
  }
  // Loop: wait until this wave's loads of the stage about to be read are done (vmcnt counts every
  // VMEM op issued after them: loads of the next D-1 stages and the stores of D stages), and its
  // LDS reads of the slot about to be refilled; barrier so all waves' loads are done; then load
  // stage i + D. The waitcnt and barrier are also M0's wait states.
  __device__ __forceinline__ void issue_in_loop(const StageLoad& load, const Lanes& lanes) const {
    if constexpr (V::kGeometry.dmas_per_wave == 1)
      asm volatile("s_waitcnt vmcnt(%[wait]) lgkmcnt(0)\n\ts_barrier\n\t" GFX950_STAGE_DMAS_1
                   "\n\t; gfx950-stage-vmem %[vm] depth %[depth]" ::GFX950_STAGE_OPERANDS,
                   [vm] "n"(V::kGeometry.loads_per_stage + V::kGeometry.stores_per_stage)
                   : "memory");
    else
      asm volatile("s_waitcnt vmcnt(%[wait]) lgkmcnt(0)\n\ts_barrier\n\t" GFX950_STAGE_DMAS_2
                   "\n\t; gfx950-stage-vmem %[vm] depth %[depth]" ::GFX950_STAGE_OPERANDS,
                   [dv1] "v"(lanes.dma[1]),
                   [vm] "n"(V::kGeometry.loads_per_stage + V::kGeometry.stores_per_stage)
                   : "memory");
  }
#undef GFX950_STAGE_OPERANDS
#undef GFX950_STAGE_DMAS_1
#undef GFX950_STAGE_DMAS_2

  // Retire this wave's DMAs, then wait for every wave, before another segment reuses the ring.
  __device__ __forceinline__ void drain() const {
    asm volatile("s_waitcnt vmcnt(0)" ::: "memory");
    sync_threads();
  }

  // kv_scale of the wave's sub-tile j in the slot at slot_offset (ds_read_b32).
  __device__ __forceinline__ float read_scale(int slot_offset, int j, const Lanes& lanes) const {
    return *wg.template at<float>(int(lanes.scale_read) + (slot_offset - Lds::ring) + j * kTileCols * 4);
  }
  // B fragments of the wave's sub-tile j (ds_read_b128 x 2 per MFMA step).
  __device__ __forceinline__ void read_b(v8i (&b)[V::kSteps], int slot_offset, int j,
                                         const Lanes& lanes) const {
    const int offset = slot_offset + j * subtile_stride(V::geometry());
#pragma unroll
    for (int s = 0; s < V::kSteps; ++s) {
      const v4i lo = *wg.template at<v4i>(int(lanes.b_read[s][0]) + offset);
      const v4i hi = *wg.template at<v4i>(int(lanes.b_read[s][1]) + offset);
      b[s] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
    }
  }
};

}  // namespace gfx950
}  // namespace aiter
