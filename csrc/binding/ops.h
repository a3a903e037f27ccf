// The functions behind module_fp8_mqa_logits's native ops, one binding file per op family;
// module.cpp registers each with torch's dispatcher under its schema (kOps there): an op added here
// gets its schema there. Declaring them needs ATen's Tensor only, so a binding file does not parse
// torch's registration templates.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace aiter {

// fp8_mqa_logits_binding.cpp: the prefill op (writes `out` when given, else returns a new tensor),
// the SIMD variant its CPU path runs here, and the backends this build holds ("cpu", "sm90", ...).
at::Tensor fp8_mqa_logits(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_scales,
                          const at::Tensor& weights, const at::Tensor& cu_starts, const at::Tensor& cu_ends,
                          bool clean_logits, const c10::optional<at::Tensor>& out, int64_t split_n,
                          int64_t max_seqlen_k, const std::string& logits_dtype);
std::string cpu_simd_variant();
std::vector<std::string> compiled_backends();

// fp8_paged_mqa_logits_binding.cpp: the decode op's schedule and logits, and the SIMD variant of its
// CPU path.
at::Tensor get_paged_mqa_logits_metadata(const at::Tensor& context_lens, int64_t block_kv, int64_t num_sms);
at::Tensor fp8_paged_mqa_logits(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& weights,
                                const at::Tensor& context_lens, const at::Tensor& block_table,
                                const at::Tensor& schedule_meta, int64_t max_context_len, bool clean_logits,
                                const std::string& logits_dtype);
std::string paged_cpu_simd_variant();

}  // namespace aiter
