// The Python module of one GPU op family on one target (module_fp8_mqa_logits_<target>_<family>,
// built by aiter/jit on the first call of that family on such a GPU): the family's kernels, its
// backend entry (binding/families/<target>_<family>.cpp, compiled beside this file) and this file,
// which exports the entry as the PyCapsule `gpu_family`. Importing it registers nothing: the Python
// loader (aiter/ops/native.py) hands the capsule to the CPU module (attach_gpu_family), whose
// bindings validate every call and then launch through the entry.
#include <Python.h>
#include <c10/macros/Macros.h>

#include "binding/gpu_backends.h"

namespace aiter {
// Defined by the family's entry file.
const GpuFamily& gpu_family_export();
}  // namespace aiter

namespace {

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    C10_STRINGIZE(TORCH_EXTENSION_NAME),
    "The GPU kernels of one op family of module_fp8_mqa_logits on one target; aiter/ops/native.py attaches its "
    "`gpu_family` capsule to the CPU module.",
    -1,
    nullptr,
};

}  // namespace

#define AITER_MODULE_INIT_NAME(name) C10_CONCATENATE(PyInit_, name)

PyMODINIT_FUNC AITER_MODULE_INIT_NAME(TORCH_EXTENSION_NAME)() {
  const aiter::GpuFamily& family = aiter::gpu_family_export();
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  // The capsule points at a constant of this library, which is never unloaded: no destructor.
  PyObject* capsule =
      PyCapsule_New(const_cast<aiter::GpuFamily*>(&family), aiter::kGpuFamilyCapsule, nullptr);
  if (capsule == nullptr || PyModule_AddObject(module, "gpu_family", capsule) != 0) {
    Py_XDECREF(capsule);  // PyModule_AddObject takes the reference only when it succeeds
    Py_DECREF(module);
    return nullptr;
  }
  if (PyModule_AddStringConstant(module, "target", family.target) != 0 ||
      PyModule_AddStringConstant(module, "family", family.family) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
