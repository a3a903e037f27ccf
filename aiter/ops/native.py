"""The native ops of module_fp8_mqa_logits: the one way the Python side calls the library.

Loading the library registers its ops with torch's dispatcher (csrc/binding/module.cpp) in the
namespace its module object names, ``ops_namespace``: ``aiter_native``, or ``aiter_native_<n>`` when
another copy of the library (another build) is already loaded in the process. The public ops,
``torch.ops.aiter.*`` (registered in Python by aiter/ops/), call them through :func:`ops`; they are
not an API of their own (no fake kernels, no autograd rules, arguments in the binding's order).
"""

from __future__ import annotations

import torch

_loaded = None  # (the module object, its torch.ops namespace)


def ops():
    """``torch.ops.<ops_namespace>`` of module_fp8_mqa_logits; the first call builds or loads it."""
    global _loaded
    from aiter.jit.core import get_module  # never at import: the first call builds or loads

    module = get_module()
    loaded = _loaded
    if loaded is None or loaded[0] is not module:
        loaded = _loaded = (module, getattr(torch.ops, module.ops_namespace))
    return loaded[1]
