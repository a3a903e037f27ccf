// What each binding file adds to module_fp8_mqa_logits; module.cpp holds the one PYBIND11_MODULE and
// calls them, so that every op's binding stays in a file of its own.
#pragma once
#include <torch/extension.h>

namespace aiter {

// fp8_mqa_logits (prefill), cpu_simd_variant, compiled_backends: fp8_mqa_logits_binding.cpp.
void register_fp8_mqa_logits(pybind11::module_& m);
// get_paged_mqa_logits_metadata, fp8_paged_mqa_logits (decode), paged_cpu_simd_variant:
// fp8_paged_mqa_logits_binding.cpp.
void register_fp8_paged_mqa_logits(pybind11::module_& m);
// top_k_per_row_prefill, top_k_per_row_decode: indexer_topk_binding.cpp.
void register_indexer_topk(pybind11::module_& m);

}  // namespace aiter
