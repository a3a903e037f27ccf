// The functions behind module_fp8_mqa_logits's native ops, one binding file per op family;
// module.cpp registers each with torch's dispatcher under its schema (define_ops there): an op added
// here gets its schema there. Declaring them needs ATen's Tensor only, so a binding file does not parse
// torch's registration templates.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace aiter {

// fp8_mqa_logits_binding.cpp: the prefill op (writes `out` when given, else returns a new tensor),
// the SIMD variant its CPU path runs here, and the backends loaded in this process ("cpu", then each
// target whose GPU module has been attached: "sm90", ...).
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
// Synchronises with the device's current stream and raises the bad block_table entry a paged call
// recorded there since the last report.
void check_paged_block_table(const std::string& device);

// indexer_topk_binding.cpp: aiter's unfused top-k per row, absolute columns ascending, -1 after the
// last (prefill: each row's [row_starts, row_ends); decode: the keys each row sees).
void top_k_per_row_prefill(const at::Tensor& logits, const at::Tensor& row_starts, const at::Tensor& row_ends,
                           const at::Tensor& indices, const std::optional<at::Tensor>& values, int64_t num_rows,
                           int64_t stride0, int64_t stride1, int64_t k);
void top_k_per_row_decode(const at::Tensor& logits, int64_t next_n, const at::Tensor& seq_lens,
                          const at::Tensor& indices, const std::optional<at::Tensor>& values, int64_t num_rows,
                          int64_t stride0, int64_t stride1, int64_t k);

}  // namespace aiter
