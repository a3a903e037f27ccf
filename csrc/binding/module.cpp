// module_fp8_mqa_logits: the CPU module, the library every native op of this package lives in (built
// by aiter/jit, always the first one loaded).
//
// Importing it (a plain Python extension module, so that importlib and torch's cpp_extension load it
// as before) registers the ops of binding/ops.h with torch's dispatcher; Python calls them as
// torch.ops.<ops_namespace>.<name> (aiter/ops/native.py), where `ops_namespace` is an attribute of
// this module. The ops validate every call and run CPU tensors here; a GPU call runs through the
// entry of its op family that a GPU module attached (attach_gpu_family below, binding/gpu_backends.h),
// so each GPU module holds one family's kernels and is built only when a call needs it. This file is
// the only one that includes torch's registration header: the binding files include ATen's Tensor
// alone, and nothing here uses pybind11.
#include <Python.h>

#include <torch/library.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "binding/gpu_backends.h"
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

// attach_gpu_family(capsule): adds the entry of a family's GPU module (its `gpu_family` attribute) to
// the registry its bindings read. A capsule of another layout of gpu_backends.h's structs is refused:
// calling through it would read the wrong fields.
PyObject* attach_gpu_family(PyObject*, PyObject* capsule) {
  const auto* family = static_cast<const aiter::GpuFamily*>(PyCapsule_GetPointer(capsule, aiter::kGpuFamilyCapsule));
  if (family == nullptr) return nullptr;  // not a capsule of that name: PyCapsule_GetPointer set the error
  if (family->layout != aiter::kGpuFamilyLayout ||
      std::memcmp(family->struct_sizes, aiter::kGpuFamilyStructSizes, sizeof(aiter::kGpuFamilyStructSizes)) != 0) {
    PyErr_Format(PyExc_ImportError,
                 "%s: the GPU module of %s/%s was built against another layout of binding/gpu_backends.h "
                 "(layout %u, this module's %u); rebuild both from one source tree",
                 C10_STRINGIZE(TORCH_EXTENSION_NAME), family->target, family->family,
                 static_cast<unsigned>(family->layout), static_cast<unsigned>(aiter::kGpuFamilyLayout));
    return nullptr;
  }
  const bool added = (family->prefill == nullptr || aiter::gpu_backends().add(family->prefill)) &&
                     (family->paged == nullptr || aiter::paged_gpu_backends().add(family->paged)) &&
                     (family->topk == nullptr || aiter::topk_gpu_backends().add(family->topk));
  if (!added) {
    PyErr_Format(PyExc_RuntimeError, "%s: no room for the GPU module of %s/%s (%d entries per family at most)",
                 C10_STRINGIZE(TORCH_EXTENSION_NAME), family->target, family->family,
                 aiter::BackendRegistry<aiter::GpuBackend>::kCapacity);
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"attach_gpu_family", attach_gpu_family, METH_O,
     "attach_gpu_family(capsule): route this module's GPU calls of one op family to the GPU module whose "
     "`gpu_family` capsule this is."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    C10_STRINGIZE(TORCH_EXTENSION_NAME),
    "The DeepSeek-V3.2 / GLM-5 lightning-indexer logits (fp8 Q and K): prefill (fp8_mqa_logits) and decode over "
    "a paged K cache (fp8_paged_mqa_logits). Importing it registers the ops as torch.ops.<ops_namespace>.*.",
    -1,
    module_methods,
};

}  // namespace

namespace aiter {

// One registry per family for this copy of the library: a second copy (another namespace) has its
// own, so GPU modules are attached to each copy that uses them.
BackendRegistry<GpuBackend>& gpu_backends() {
  static BackendRegistry<GpuBackend> registry;
  return registry;
}
BackendRegistry<PagedGpuBackend>& paged_gpu_backends() {
  static BackendRegistry<PagedGpuBackend> registry;
  return registry;
}
BackendRegistry<TopkGpuBackend>& topk_gpu_backends() {
  static BackendRegistry<TopkGpuBackend> registry;
  return registry;
}

}  // namespace aiter

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
