"""The boundary between this package's public ops and its native library.

Every custom op in the ``aiter`` namespace is described once, by an :class:`Op`: its torch schema (the
arguments, their types and defaults, and which ones it writes), the native op it calls, the tensors it
refuses while they require grad, and its fake kernel. :func:`register` makes everything else from
that one description, the same way for every op:

- the schema's definition in the ``aiter`` library fragment;
- one implementation for every device (CompositeExplicitAutograd): the native library dispatches on
  the tensors' device itself;
- an Autograd kernel: the ops have no backward, and without this kernel torch's fallback attaches a
  grad_fn whose backward only warns, so a gradient would go missing silently; this one refuses at the
  call and then goes on below autograd (an output made there carries no grad_fn);
- for an op that writes an argument, an ADInplaceOrView kernel with torch's rules for an in-place write
  (torch's own fallback bumps only mutated outputs, and these ops return nothing);
- the fake (meta) kernel, which repeats the binding's checks on metadata so that torch.compile,
  torch.export and CUDA-graph capture trace the op and refuse bad arguments while tracing.

The kernels are generated from the schema as plain Python functions of the op's own parameters (as
:func:`collections.namedtuple` generates its class), because a kernel taking ``*args`` and looping over
them costs a measurable share of a small call's host time; :func:`kernel_source` shows them.

The rest are the pieces every op file shares: c10's dtype names, the one table of logits dtypes, the
argument checks of the public entries, and the fake kernels' metadata checks, which raise the
binding's exception types with its messages.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.autograd import forward_ad

from aiter import backends
from aiter.ops import native

# Other packages may define ops in the "aiter" namespace too, hence a fragment. Plain Library + impl
# rather than torch.library.custom_op, whose per-call Python overhead is several times this one's; that
# matters for the small shapes, whose GPU time is a few microseconds.
_lib = torch.library.Library("aiter", "FRAGMENT")

INT32_MAX = 2**31 - 1
# The most bytes a logits tensor an op allocates may take (the binding's kMaxLogitsBytes).
MAX_LOGITS_BYTES = 1 << 48

# The logits dtypes every op serves, by the name the binding takes ("" = out's dtype, or float32 for a
# new tensor). The public entries pass a torch.dtype; this is the only translation of it.
LOGITS_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def logits_dtype_name(logits_dtype) -> str:
    return "" if logits_dtype is None else LOGITS_DTYPES.get(logits_dtype, str(logits_dtype))


# c10's names, which the binding's messages print.
C10_DTYPE_NAMES = {
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.float16: "Half", torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16",
    torch.bool: "Bool", torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2: "Float8_e5m2",
    torch.float8_e4m3fnuz: "Float8_e4m3fnuz", torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
}
C10_LAYOUT_NAMES = {
    torch.strided: "Strided", torch.sparse_coo: "Sparse", torch.sparse_csr: "SparseCsr",
    torch.sparse_csc: "SparseCsc", torch.sparse_bsr: "SparseBsr", torch.sparse_bsc: "SparseBsc",
    torch._mkldnn: "Mkldnn", torch.jagged: "Jagged",
}


# ---- devices --------------------------------------------------------------------------------------


def default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@functools.lru_cache(maxsize=None)
def gpu_backend(index: int):
    return backends.gpu_backend_for(torch, index)


def device_backend(device):
    """The backend that would run an op on ``device`` (None: default_device()) for the is_supported
    checks: the CPU backend for the CPU, the GPU's own for a visible CUDA or ROCm device; None where
    none would: an unreadable device, another device type, no visible GPU, a GPU no backend runs on."""
    try:
        dev = default_device() if device is None else torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        return None
    if dev.type == "cpu":
        return backends.backends()["cpu"]
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return gpu_backend(dev.index if dev.index is not None else torch.cuda.current_device())


# ---- the public entries' checks of Python values -----------------------------------------------------
# The schema's own refusals of a wrong Python type name no argument in the op's words, and a silent
# conversion (bool(x), int(x)) would read a mistake as a value; the entries check first.


def check_bool(value, name, function):
    # bool(x) would read None as False and "False" as True.
    if not isinstance(value, bool):
        raise TypeError(f"{function}: {name} must be a bool (True or False), got {type(value).__name__} {value!r}")
    return value


def check_int(value, name, function):
    # bool is an int in Python; a count or a stride given as True is a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{function}: {name} must be an int, got {type(value).__name__} {value!r}")
    return value


def check_count(value, name, function, least, meaning):
    # An int >= least; a bool is not a count.
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{function}: {name} must be an int >= {least} ({meaning}), got {value!r}")
    return value


def check_tensor(value, name, function):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{function}: {name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def logits_dtype(value, function, out=None) -> torch.dtype:
    """The public entries' one form of ``logits_dtype``: a torch.dtype (None: out's dtype, else
    float32). Which dtypes are served is the op's check (its fake kernel and the binding)."""
    if value is not None and not isinstance(value, torch.dtype):
        raise TypeError(f"{function}: logits_dtype must be torch.float32 or torch.bfloat16 (a torch.dtype, not a "
                        f"string), got {type(value).__name__} {value!r}")
    if out is None or not isinstance(out, torch.Tensor):
        return torch.float32 if value is None else value
    if value is not None and out.dtype != value:
        raise TypeError(f"{function}: out has dtype {out.dtype} but logits_dtype is {value}; pass one that agrees")
    return out.dtype


def pair(value, name, function, what):
    """DeepGEMM's (tensor, scale) arguments: a tuple or list of two."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{function}: {name} must be the pair ({what})")
    return value


def fp8_queries(q, function, what="q e4m3fn",
                refusal="a q scale means FP4 queries, which this package does not serve; pass q=(q_fp8, None) with "
                        "e4m3fn queries"):
    """DeepGEMM's q = (q, q_scale): q_scale must be None (a scale means FP4 queries)."""
    q_fp8, q_scale = pair(q, "q", function, f"{what}, q_scale or None")
    if q_scale is not None:
        raise NotImplementedError(f"{function}: {refusal}")
    return q_fp8


# ---- the fake kernels' metadata checks ---------------------------------------------------------------
# They refuse what the binding refuses, in the same order, with the same exception types and messages
# (op_tests/test_validation.py and test_paged_mqa_logits.py run every bad input through both).


class Checks:
    """The binding's argument checks on metadata, every message prefixed by ``op: ``."""

    def __init__(self, op: str):
        self.prefix = op + ": "

    def require(self, cond, error, message):
        """Raise error(prefix + message()) unless cond. A symbolic cond (dynamic shapes) becomes a guard
        or a runtime assert, as in torch's own meta kernels."""
        if cond is not True:
            torch._check_with(error, cond, lambda: self.prefix + message())

    def dense(self, t, name):
        self.require(t.layout == torch.strided, ValueError,
                     lambda: f"{name} must be a dense (strided) tensor, got layout "
                             f"{C10_LAYOUT_NAMES.get(t.layout, t.layout)}")

    def dtype(self, t, name, want, hint=""):
        self.require(t.dtype == want, TypeError,
                     lambda: f"{name} must have dtype {want}, got "
                             f"{C10_DTYPE_NAMES.get(t.dtype, t.dtype)}{hint}")

    def fp8(self, t, name):
        self.dtype(t, name, torch.float8_e4m3fn,
                   " (the bytes are decoded as e4m3fn, so another one-byte dtype is not accepted)"
                   if t.element_size() == 1 else "")

    def int32(self, t, name, hint=" (int64 is not accepted: pass .to(torch.int32))"):
        self.dtype(t, name, torch.int32, hint if t.dtype == torch.int64 else "")

    def dim(self, t, name, dim, layout):
        self.require(t.dim() == dim, ValueError, lambda: f"{name} must be {dim}-D {layout}, got shape {list(t.shape)}")

    def size(self, t, name, dim, want, what):
        self.require(t.shape[dim] == want, ValueError,
                     lambda: f"{name}.size({dim}) must be {what} = {want}, got shape {list(t.shape)}")

    def contiguous(self, t, name):
        self.require(t.is_contiguous(), ValueError,
                     lambda: f"{name} must be contiguous, got shape {list(t.shape)} with strides {list(t.stride())} "
                             "(call .contiguous())")

    def row_major(self, t, name, cols_name):
        rows, cols = t.shape
        self.require(cols <= 1 or t.stride(1) == 1, ValueError,
                     lambda: f"{name} must have a contiguous last dim (stride(1) == 1), got strides "
                             f"{list(t.stride())}")
        self.require(rows <= 1 or t.stride(0) >= cols, ValueError,
                     lambda: f"{name} row stride (stride(0) = {t.stride(0)}) must be >= {cols_name} = {cols}, got "
                             f"strides {list(t.stride())}")

    def served_device(self, device, name, registered_op, kernel="meta/fake kernel"):
        # Meta tensors are the fake kernel's own; the real op refuses them.
        self.require(device.type in ("cpu", "cuda", "meta"), NotImplementedError,
                     lambda: f"{name} is on {device}, which has no kernel here (cpu or cuda tensors only; the "
                             f"{kernel} of torch.ops.aiter.{registered_op} handles meta tensors)")

    def same_device(self, named, device):
        for name, t in named:
            self.require(t.device == device, RuntimeError,
                         lambda: f"{name} is on {t.device} but q is on {device}; all tensors must be on q's device")

    def logits_dtype(self, logits_dtype):
        self.require(logits_dtype is None or logits_dtype in LOGITS_DTYPES, ValueError,
                     lambda: f"logits_dtype must be torch.float32 or torch.bfloat16, got {logits_dtype}")


def _byte_runs(t):
    """The bytes of a validated tensor (contiguous, or 2-D with a dense last dim) as (first, rows, pitch,
    run): `rows` runs of `run` bytes, `pitch` bytes apart, `first` counted from the start of its storage.
    None when a size or stride is symbolic."""
    item = t.element_size()
    if t.dim() == 2 and not t.is_contiguous():
        runs = (t.storage_offset() * item, t.shape[0], t.stride(0) * item, t.shape[1] * item)
    else:
        runs = (t.storage_offset() * item, 1, t.numel() * item, t.numel() * item)
    return runs if all(isinstance(v, int) for v in runs) else None


def _runs_meet(a, b):
    """Whether two sets of byte runs (see _byte_runs) share a byte; the binding's runs_meet."""
    if a[0] >= b[0] + (b[1] - 1) * b[2] + b[3] or b[0] >= a[0] + (a[1] - 1) * a[2] + a[3]:
        return False
    if a[1] > b[1]:
        a, b = b, a
    first, rows, pitch, run = b
    for i in range(a[1]):
        lo = a[0] + i * a[2]
        # b's first run that ends after lo is the only one that can start before lo + a's run.
        j = max(0, (lo - run - first) // pitch + 1)
        if j < rows and first + j * pitch < lo + a[3]:
            return True
    return False


def overlaps(out, t) -> bool:
    """The binding's rule (torch's): tensors of two storages never overlap; within one, bytes are
    compared, so a view of another dtype counts. False when a size or stride is symbolic (left to the
    real op)."""
    if out.untyped_storage()._cdata != t.untyped_storage()._cdata:
        return False
    a, b = _byte_runs(out), _byte_runs(t)
    if a is None or b is None or a[3] == 0 or b[3] == 0:
        return False
    return _runs_meet(a, b)


def logits_fit(rows, cols, dtype, row_multiple) -> bool:
    """Whether a new [rows, cols] result whose row pitch is a multiple of ``row_multiple`` elements
    stays within the binding's MAX_LOGITS_BYTES."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return cols <= MAX_LOGITS_BYTES // itemsize and (
        rows == 0 or max(1, (cols + row_multiple - 1) // row_multiple) * row_multiple * itemsize
        <= MAX_LOGITS_BYTES // max(rows, 1))


def new_logits(like, rows, cols, dtype, row_multiple):
    """A [rows, cols] result of ``dtype`` on ``like``'s device whose row pitch is a multiple of
    ``row_multiple`` elements, as the binding allocates it."""
    pitch = torch.sym_max(1, (cols + row_multiple - 1) // row_multiple) * row_multiple
    return like.new_empty_strided((rows, cols), (pitch, 1), dtype=dtype)


# ---- the op description and its registration --------------------------------------------------------


@dataclass(frozen=True)
class Native:
    """The native op an op calls: its name, its op family (which GPU module holds its kernels:
    aiter/jit/module_specs.py), the op argument whose device picks that module, and the values of the
    native arguments the op does not have, by native position (the op's own arguments fill the
    others in order). A ``ScalarType?`` argument passes as its binding name (:func:`logits_dtype_name`)."""

    name: str
    family: str
    device_of: str
    fixed: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Op:
    """One custom op ``torch.ops.aiter.<name>``, described once.

    ``schema``: the torch schema, ``name(args) -> result``; a ``Tensor(a!)`` argument is one the op
    writes. ``native``: what the implementation calls. ``no_grad``: the tensor arguments refused while
    they require grad or carry a forward-mode tangent (every argument the op writes is refused too, as
    torch's own out= functions do). ``fake(args)``: the fake kernel, given the arguments as a named
    tuple; it checks their metadata and returns the result's fake tensor (or None). ``label``: the
    name the errors of the Autograd and ADInplaceOrView kernels start with (default: the op's name;
    an op's out= variant speaks as the op).
    """

    schema: str
    native: Native
    fake: Callable
    no_grad: tuple[str, ...] = ()
    label: str | None = None


# Dispatch keysets, and whether the kernel below ADInplaceOrView is the CPU or CUDA one.
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_AFTER_AD_INPLACE_OR_VIEW = torch._C._after_ADInplaceOrView_keyset
_PLAIN_BACKENDS = frozenset(torch._C.DispatchKeySet(key).raw_repr()
                            for key in (torch._C.DispatchKey.CPU, torch._C.DispatchKey.CUDA))
_NEXT_IS_BACKEND: dict[int, bool] = {}  # by keyset.raw_repr(); a process meets a handful of keysets


def _next_is_backend(keyset) -> bool:
    """Whether the kernel below ADInplaceOrView is the implementation itself: nothing sits between
    (plain tensors, no fake, functional or Python mode). A redispatch re-enters the dispatcher and runs
    a second Python kernel, which about doubles an op's per-call overhead, so the Autograd and
    ADInplaceOrView kernels call the implementation directly then and redispatch any other keyset."""
    raw = keyset.raw_repr()
    known = _NEXT_IS_BACKEND.get(raw)
    if known is None:
        known = _NEXT_IS_BACKEND[raw] = (keyset & _AFTER_AD_INPLACE_OR_VIEW).raw_repr() in _PLAIN_BACKENDS
    return known


def _refuse_grad(op, named, written):
    """The refusal of an argument that requires grad or carries a tangent, naming the first."""
    if torch.is_grad_enabled():
        for name, t in named:
            if t is None or not t.requires_grad:
                continue
            if name in written:
                raise RuntimeError(
                    f"{op}: {name} is {'a leaf tensor' if t.is_leaf else 'a tensor'} that requires grad, but the "
                    f"op writes {name} in place and is not differentiable (torch's own out= functions refuse "
                    f"this too); pass a {name} that does not require grad, or call under torch.no_grad()")
            raise RuntimeError(
                f"{op}: {name} requires grad, but the op is not differentiable (it has no backward); call it "
                f"under torch.no_grad() or pass {name}.detach()")
    for name, t in named:
        if t is not None and forward_ad.unpack_dual(t).tangent is not None:
            raise RuntimeError(f"{op}: {name} carries a forward-mode AD tangent, but the op is not differentiable; "
                               f"pass forward_ad.unpack_dual({name}).primal")


def _refuse_inference(op, name):
    """torch's rule for an in-place write, as its own in-place ops apply it: an inference tensor has no
    version counter, so autograd could not see the write; torch refuses it outside inference mode even
    under no_grad."""
    raise RuntimeError(
        f"{op}: {name} is an inference tensor (made under torch.inference_mode()), which cannot be written "
        f"in place outside inference mode; pass {name}.clone() or call inside torch.inference_mode()")


def kernel_source(op: Op) -> str:
    """The Python source of the op's implementation, Autograd, ADInplaceOrView and fake kernels, as
    :func:`register` compiles it (print it to read what an op does between the dispatcher and the
    native library)."""
    schema = torch._C.parse_schema("aiter::" + op.schema)
    name = op.label or schema.name.split("::")[1]
    args = list(schema.arguments)
    params = ", ".join(a.name for a in args)
    # The dispatcher leaves out trailing arguments that have their default values.
    sig = ", ".join(f"{a.name}={a.default_value!r}" if a.has_default_value() else a.name for a in args)
    optional = {a.name for a in args if isinstance(a.type, torch.OptionalType)}
    written = [a.name for a in args if a.alias_info is not None and a.alias_info.is_write]
    refused = list(op.no_grad) + [n for n in written if n not in op.no_grad]
    unknown = [n for n in refused if n not in {a.name for a in args}]
    if unknown:
        raise ValueError(f"{name}: no_grad names {unknown}, which are not arguments")
    returns = "return " if schema.returns else ""

    native_args = [f"_dtype_name({a.name})" if str(a.real_type) == "Optional[ScalarType]" else a.name for a in args]
    for position in sorted(op.native.fixed):
        native_args.insert(position, f"_fixed[{position}]")
    lines = [f"def impl({sig}):",
             f"    {returns}_native.ops({op.native.family!r}, {op.native.device_of}.device)"
             f".{op.native.name}.default({', '.join(native_args)})"]

    lines.append(f"def autograd(keyset, {sig}):")
    if refused:
        needs = " or ".join(f"({n} is not None and {n}.requires_grad)" if n in optional else f"{n}.requires_grad"
                            for n in refused)
        named = ", ".join(f"({n!r}, {n})" for n in refused)
        lines += [f"    if (_grad_enabled() and ({needs})) or _forward_ad._current_level >= 0:",
                  f"        _refuse_grad({name!r}, ({named},), {tuple(written)!r})"]
    if written:
        # The next kernel is ADInplaceOrView's (the dispatcher includes that key outside inference mode,
        # where this kernel runs): called directly.
        lines.append(f"    {returns}inplace_or_view(keyset, {params})")
        lines.append(f"def inplace_or_view(keyset, {sig}):")
        for n in written:
            indent = "    "
            if n in optional:
                lines.append(f"    if {n} is not None:")
                indent = "        "
            lines += [f"{indent}if {n}.is_inference() and not _inference_mode_enabled():",
                      f"{indent}    _refuse_inference({name!r}, {n!r})",
                      f"{indent}_increment_version({n})"]
        after, below = "_AFTER_AD_INPLACE_OR_VIEW", "_below_inplace_or_view"
    else:
        after, below = "_AFTER_AUTOGRAD", "_below_autograd"
    lines += ["    if _next_is_backend(keyset):",
              f"        return impl({params})",
              f"    with {below}():",
              f"        return _op.redispatch(keyset & {after}, {params})"]
    lines += [f"def fake({sig}):", f"    return _fake(_Args({params}))"]
    return "\n".join(lines) + "\n"


def register(op: Op) -> torch._ops.OpOverload:
    """Define and register ``torch.ops.aiter.<name>`` from its description; returns its overload."""
    schema = torch._C.parse_schema("aiter::" + op.schema)
    name = schema.name.split("::")[1]
    _lib.define(op.schema)
    overload = getattr(torch.ops.aiter, name).default
    namespace = {
        "_native": native, "_dtype_name": logits_dtype_name, "_fixed": op.native.fixed, "_op": overload,
        "_fake": op.fake, "_Args": collections.namedtuple(f"{name}_args", [a.name for a in schema.arguments]),
        "_grad_enabled": torch.is_grad_enabled, "_forward_ad": forward_ad, "_refuse_grad": _refuse_grad,
        "_inference_mode_enabled": torch.is_inference_mode_enabled, "_refuse_inference": _refuse_inference,
        "_increment_version": torch.autograd.graph.increment_version, "_next_is_backend": _next_is_backend,
        "_below_autograd": torch._C._AutoDispatchBelowAutograd, "_AFTER_AUTOGRAD": _AFTER_AUTOGRAD,
        "_below_inplace_or_view": torch._C._AutoDispatchBelowADInplaceOrView,
        "_AFTER_AD_INPLACE_OR_VIEW": _AFTER_AD_INPLACE_OR_VIEW,
    }
    exec(compile(kernel_source(op), f"<aiter.ops kernels of {name}>", "exec"), namespace)
    _lib.impl(name, namespace["impl"], "CompositeExplicitAutograd")
    _lib.impl(name, namespace["autograd"], "Autograd", with_keyset=True)
    if "inplace_or_view" in namespace:
        _lib.impl(name, namespace["inplace_or_view"], "ADInplaceOrView", with_keyset=True)
    torch.library.register_fake("aiter::" + name, lib=_lib)(namespace["fake"])
    return overload
