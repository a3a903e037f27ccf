// The one translation unit of the CPU module's bindings: the op registration (module.cpp) and each
// op's ATen binding, compiled together so that torch's registration and ATen headers, which are most
// of their compile time, are parsed once instead of four times (the cost of a first build). Each file
// keeps its own job and its own includes; their file-local helpers share one anonymous namespace
// here, so two of them may not define the same name (the build says so if they do).
#include "binding/module.cpp"
#include "binding/fp8_mqa_logits_binding.cpp"
#include "binding/fp8_paged_mqa_logits_binding.cpp"
#include "binding/indexer_topk_binding.cpp"
