// module_fp8_mqa_logits: the library every native op of this package lives in (built by aiter/jit).
//
// Importing it (a plain Python extension module, so that importlib and torch's cpp_extension load it
// as before) registers the ops of binding/ops.h with torch's dispatcher; Python calls them as
// torch.ops.<ops_namespace>.<name> (aiter/ops/native.py), where `ops_namespace` is an attribute of
// this module. This file is the only one that includes torch's registration header: the binding
// files include ATen's Tensor alone, and nothing here uses pybind11.
#include <Python.h>

#include <torch/library.h>

#include <exception>
#include <memory>
#include <string>

#include "binding/ops.h"

namespace {

constexpr const char kNamespace[] = "aiter_native";

// The schema of every op; the function behind each is in binding/ops.h.
void define_ops(torch::Library& m) {
  m.def("fp8_mqa_logits(Tensor q, Tensor kv, Tensor kv_scales, Tensor weights, Tensor cu_starts, Tensor cu_ends, "
        "bool clean_logits, Tensor(a!)? out, int split_n, int max_seqlen_k, str logits_dtype) -> Tensor",
        TORCH_FN(aiter::fp8_mqa_logits));
  m.def("cpu_simd_variant() -> str", TORCH_FN(aiter::cpu_simd_variant));
  m.def("compiled_backends() -> str[]", TORCH_FN(aiter::compiled_backends));
  m.def("get_paged_mqa_logits_metadata(Tensor context_lens, int block_kv, int num_sms) -> Tensor",
        TORCH_FN(aiter::get_paged_mqa_logits_metadata));
  m.def("fp8_paged_mqa_logits(Tensor q, Tensor kv_cache, Tensor weights, Tensor context_lens, Tensor block_table, "
        "Tensor schedule_meta, int max_context_len, bool clean_logits, str logits_dtype) -> Tensor",
        TORCH_FN(aiter::fp8_paged_mqa_logits));
  m.def("paged_cpu_simd_variant() -> str", TORCH_FN(aiter::paged_cpu_simd_variant));
  m.def("check_paged_block_table(str device) -> ()", TORCH_FN(aiter::check_paged_block_table));
  m.def("top_k_per_row_prefill(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor(a!) indices, "
        "Tensor(b!)? values, int num_rows, int stride0, int stride1, int k) -> ()",
        TORCH_FN(aiter::top_k_per_row_prefill));
  m.def("top_k_per_row_decode(Tensor logits, int next_n, Tensor seq_lens, Tensor(a!) indices, Tensor(b!)? values, "
        "int num_rows, int stride0, int stride1, int k) -> ()",
        TORCH_FN(aiter::top_k_per_row_decode));
}

// Registers the ops under kNamespace, or kNamespace_<n> when another copy of this library (another
// build, loaded from another path in the same process) holds it already: each copy's ops stay its
// own, as each copy's module object does. Returns the namespace taken. The Library lives as long as
// the process (an extension module is never unloaded), so its ops stay registered.
std::string register_ops() {
  for (int copy = 1;; ++copy) {
    const std::string ns = copy == 1 ? kNamespace : kNamespace + ("_" + std::to_string(copy));
    std::unique_ptr<torch::Library> library;
    try {
      // The constructor TORCH_LIBRARY expands to, taken directly for a namespace chosen at load time.
      library = std::make_unique<torch::Library>(torch::Library::DEF, ns, std::nullopt, __FILE__, __LINE__);
    } catch (const c10::Error&) {
      continue;  // the namespace is taken
    }
    define_ops(*library);
    library.release();
    return ns;
  }
}

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    C10_STRINGIZE(TORCH_EXTENSION_NAME),
    "The DeepSeek-V3.2 / GLM-5 lightning-indexer logits (fp8 Q and K): prefill (fp8_mqa_logits) and decode over "
    "a paged K cache (fp8_paged_mqa_logits). Importing it registers the ops as torch.ops.<ops_namespace>.*.",
    -1,
    nullptr,
};

}  // namespace

#define AITER_MODULE_INIT_NAME(name) C10_CONCATENATE(PyInit_, name)

PyMODINIT_FUNC AITER_MODULE_INIT_NAME(TORCH_EXTENSION_NAME)() {
  std::string ns;
  try {
    ns = register_ops();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_ImportError, "%s: registering its ops with torch failed: %s",
                 C10_STRINGIZE(TORCH_EXTENSION_NAME), e.what());
    return nullptr;
  }
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  if (PyModule_AddStringConstant(module, "ops_namespace", ns.c_str()) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
