"""The native ops of module_fp8_mqa_logits: the one way the Python side calls the library.

Loading the CPU module registers every op with torch's dispatcher (csrc/binding/module.cpp) in the
namespace its module object names, ``ops_namespace``: ``aiter_native``, or ``aiter_native_<n>`` when
another copy of the library (another build) is already loaded in the process. The public ops,
``torch.ops.aiter.*`` (registered in Python by aiter/ops/), call them through :func:`ops`; they are
not an API of their own (no fake kernels, no autograd rules, arguments in the binding's order).

The kernels of a GPU are in one module per op family and target (aiter/jit/module_specs.py):
``ops(family, device)`` loads the family's module for ``device``'s target on its first GPU call and
attaches it to the CPU module, so a call builds only what it needs. A CPU device (or a GPU that no
backend runs on, which the op then refuses by name) loads nothing more.
"""

from __future__ import annotations

import threading

import torch

_loaded = None  # (the CPU module object, its torch.ops namespace)
# (id of the CPU module, family, device type, device index) of every device whose family module is
# attached to that CPU module.
_attached: set = set()
_attach_lock = threading.Lock()
# (family, device) -> the namespace, for the arguments a call has already resolved: every op call
# goes through ops(), and a small GPU call's host time is a few microseconds, so a repeated call is
# one dict lookup. Only devices with an index (a tensor's .device has one) and CPU devices are kept:
# "cuda" alone means the current device, which can change.
_resolved: dict = {}


def _cpu_ops():
    global _loaded
    from aiter.jit.core import get_module  # never at import: the first call builds or loads

    module = get_module()
    loaded = _loaded
    if loaded is None or loaded[0] is not module:
        loaded = _loaded = (module, getattr(torch.ops, module.ops_namespace))
    return loaded


def _attach(module, family: str, device: torch.device):
    from aiter.jit import core, module_specs, targets

    if family not in module_specs.FAMILIES:
        raise ValueError(f"aiter: unknown op family {family!r}; known: {module_specs.FAMILIES}")
    target = targets.device_target(device)
    if target is None or target not in module_specs.family_targets(family):
        return  # nothing to load: the binding refuses this device, naming why
    family_module = core.get_family_module(family, target)
    module.attach_gpu_family(family_module.gpu_family)


def ops(family: str | None = None, device=None):
    """``torch.ops.<ops_namespace>`` of module_fp8_mqa_logits; the first call builds or loads it.

    ``family`` ("prefill", "paged" or "topk") and ``device`` (where the call's tensors are): on a GPU,
    the family's kernels for that GPU are built or loaded first, once per process."""
    namespace = _resolved.get((family, device))
    if namespace is not None:
        return namespace
    namespace = _resolve(family, device)
    if device is None or (isinstance(device, torch.device) and (device.type == "cpu" or device.index is not None)):
        _resolved[(family, device)] = namespace
    return namespace


def _resolve(family, device):
    module, namespace = _cpu_ops()
    if family is None or device is None:
        return namespace
    device = torch.device(device)
    if device.type == "cpu":
        return namespace
    if device.index is None and device.type == "cuda" and torch.cuda.is_available():
        device = torch.device(device.type, torch.cuda.current_device())
    key = (id(module), family, device.type, device.index)
    if key not in _attached:
        with _attach_lock:
            if key not in _attached:
                _attach(module, family, device)
                _attached.add(key)
    return namespace
