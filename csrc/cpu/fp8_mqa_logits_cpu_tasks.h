// The prefill CPU path's plan (how the work is cut into tasks) and its SIMD variants' task entry
// points: the interface between cpu/fp8_mqa_logits_cpu.cpp, which plans and dispatches, and the
// variant units cpu/fp8_mqa_logits_cpu_<variant>.cpp, each compiled for its own target.
#pragma once
#include <cstdint>

#include "common/fp8_mqa_logits_params.h"

namespace aiter {
namespace cpu {
namespace prefill {

// How the work is cut into tasks; every kernel format uses the same cut.
struct Plan {
  int64_t rows_per_task;
  int64_t row_blocks;
  int64_t keys_per_chunk;  // multiple of kKeyBlock
  int64_t key_chunks;
  int64_t tasks;
  int64_t depth;  // rows of a transposed K block: D (fp32) or ceil(D / 2) (bf16 pairs)
  // The chunked path (see the scheme at the top) and its chunk sizes; 0 on the whole-depth path.
  bool chunked;
  int64_t depth_chunk;  // words, <= depth
  int64_t head_chunk;   // heads, <= H; a multiple of 4 unless it is H
  int64_t span_keys;    // multiple of kKeyBlock, <= keys_per_chunk
  // Per-thread scratch, in 32-bit words, each part a multiple of 16 (64-byte aligned). Whole depth:
  // decoded Q, transposed K block, block scales, tile logits. Chunked: decoded Q chunk, the span's
  // transposed K chunks, accumulators, span logits, span scales.
  int64_t q_words;
  int64_t kt_words;
  int64_t acc_words;
  int64_t logits_words;
  int64_t scratch_words;
};

// Runs task `task` of `plan` (whole-depth or chunked entry) with the calling thread's scratch.
using TaskFn = void (*)(const Fp8MqaLogitsParams&, const Plan&, int64_t, uint32_t*);

// The variants' entry points (each defined in its own unit, present when the build holds it;
// cpu/simd_level.h). Register blocking: 4 heads x NV vectors of accumulators + NV key vectors + one
// broadcast: 21 of the 32 zmm registers (avx512, avx512bf16: 64 keys per tile), 11 of the 16 ymm
// (avx2: 16 keys), and the same shape in 16-byte vectors for SSE2 / NEON (generic).
void task_generic(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch);
void task_generic_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                          uint32_t* scratch);
void task_avx2(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch);
void task_avx2_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                       uint32_t* scratch);
void task_avx512(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task, uint32_t* scratch);
void task_avx512_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                         uint32_t* scratch);
void task_avx512bf16(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                     uint32_t* scratch);
void task_avx512bf16_chunked(const Fp8MqaLogitsParams& params, const Plan& plan, int64_t task,
                             uint32_t* scratch);

}  // namespace prefill
}  // namespace cpu
}  // namespace aiter
