// The paged decode CPU path's plan (how the units are cut into tasks, the scratch, the fault log) and
// its SIMD variants' task entry points: the interface between cpu/fp8_paged_mqa_logits_cpu.cpp, which
// plans and dispatches, and the variant units cpu/fp8_paged_mqa_logits_cpu_<variant>.cpp, each
// compiled for its own target.
#pragma once
#include <cstdint>
#include <mutex>

#include "common/fp8_paged_mqa_logits_params.h"
#include "common/work_scheduler.h"
#include "cpu/simd_lanes.h"

namespace aiter {
namespace cpu {
namespace paged {

constexpr int kHeadGroup = 4;  // heads whose accumulators share the registers of one micro-tile

// Keys row j of batch b sees (scheduler::paged_row_keys, limited to max_context_len).
AITER_CPU_INLINE int64_t row_keys(const Fp8PagedMqaLogitsParams& p, int64_t b, int64_t j) {
  const int32_t len = p.context_lens[p.lens_per_row ? b * p.next_n + j : b];
  return scheduler::paged_row_keys(len, p.next_n, j, p.lens_per_row, p.max_context_len);
}

// The first out-of-range block_table entry the tasks read (the smallest (batch, column) of those
// seen): the slow path of a caller bug, so a mutex is enough.
class FaultLog {
 public:
  void record(int64_t batch, int64_t column, int32_t value, int64_t num_blocks) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (first_.found && (first_.batch < batch || (first_.batch == batch && first_.column <= column))) return;
    first_ = PagedBlockTableFault{1, static_cast<int32_t>(batch), static_cast<int32_t>(column), value, num_blocks};
  }
  PagedBlockTableFault first() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return first_;
  }

 private:
  std::mutex mutex_;
  PagedBlockTableFault first_{};
};

// How the units are cut into tasks, and each thread's scratch.
struct Plan {
  const int64_t* unit_ends;  // [B]: units of batches 0..b (the scheduler's inclusive prefix sums)
  int64_t total_units;
  int64_t tasks;
  bool chunked;
  int64_t depth_chunk, head_chunk;  // chunked path only
  // Per-thread scratch, in floats, each part a multiple of 16 (64-byte aligned). Whole depth: the
  // decoded Q rows of a batch, the transposed K group, its scales, a micro-tile's logits. Chunked:
  // the Q chunk of a row, the K group's depth chunk, the accumulators of a head chunk, the scales
  // and the group's logits of a row.
  int64_t q_floats;
  int64_t kt_floats;
  int64_t acc_floats;
  int64_t scratch_floats;
  FaultLog* faults;
};

// Runs task `task` of `plan` with the calling thread's scratch.
using TaskFn = void (*)(const Fp8PagedMqaLogitsParams&, const Plan&, int64_t, float*);

// The variants' entry points (each defined in its own unit, present when the build holds it;
// cpu/simd_level.h). Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512), 11 of the 16 ymm (avx2), the same shape in 16-byte
// vectors (generic). bf16 pairs are the prefill path's alone: its avx512bf16 level runs avx512 here.
void task_generic(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch);
void task_avx2(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch);
void task_avx512(const Fp8PagedMqaLogitsParams& p, const Plan& plan, int64_t task, float* scratch);

}  // namespace paged
}  // namespace cpu
}  // namespace aiter
