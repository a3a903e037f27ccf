"""The HIP runtime through ctypes, just enough to load a gfx950 code object and launch its kernels:
the hardware probes (op_tests/test_gfx950_hardware.py) need neither torch's ROCm build nor a
compiled extension, only libamdhip64 and a gfx950 device.

    runtime = HipRuntime.open()          # or raises Unavailable with the reason
    module = runtime.load(code_object)   # raises Unavailable when no device runs it
    buf = runtime.malloc(nbytes); runtime.upload(buf, data); runtime.launch(module, "name", 1, 64, args)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2


class Unavailable(RuntimeError):
    """No HIP runtime, no device, or no device that runs the code object: the reason to skip."""


class HipError(RuntimeError):
    pass


def _library() -> ctypes.CDLL:
    names = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"]
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    names += [os.path.join(rocm, "lib", n) for n in names]
    found = ctypes.util.find_library("amdhip64")
    if found:
        names.insert(0, found)
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise Unavailable("no HIP runtime (libamdhip64) to load: " + "; ".join(errors[:2]))


class HipRuntime:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        lib.hipGetErrorString.restype = ctypes.c_char_p
        lib.hipModuleLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + \
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.hipMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.hipFree.argtypes = [ctypes.c_void_p]
        lib.hipMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.hipMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        lib.hipModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        lib.hipModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]

    @classmethod
    def open(cls) -> "HipRuntime":
        rt = cls(_library())
        err = rt.lib.hipInit(0)
        if err != 0:
            raise Unavailable(f"hipInit failed: {rt.error(err)}")
        count = ctypes.c_int(0)
        err = rt.lib.hipGetDeviceCount(ctypes.byref(count))
        if err != 0 or count.value == 0:
            raise Unavailable(f"no HIP device (hipGetDeviceCount: {count.value} device(s), {rt.error(err)})")
        return rt

    def error(self, err: int) -> str:
        text = self.lib.hipGetErrorString(err)
        return f"error {err} ({text.decode() if text else '?'})"

    def check(self, err: int, what: str) -> None:
        if err != 0:
            raise HipError(f"{what}: {self.error(err)}")

    def load(self, code_object: bytes) -> ctypes.c_void_p:
        module = ctypes.c_void_p()
        err = self.lib.hipModuleLoadData(ctypes.byref(module), code_object)
        if err != 0:
            raise Unavailable(f"the gfx950 code object does not load on device 0 (not an MI355X / gfx950?): "
                              f"hipModuleLoadData {self.error(err)}")
        return module

    def malloc(self, nbytes: int) -> ctypes.c_void_p:
        ptr = ctypes.c_void_p()
        self.check(self.lib.hipMalloc(ctypes.byref(ptr), nbytes), f"hipMalloc({nbytes})")
        return ptr

    def free(self, ptr: ctypes.c_void_p) -> None:
        self.check(self.lib.hipFree(ptr), "hipFree")

    def memset(self, ptr: ctypes.c_void_p, value: int, nbytes: int) -> None:
        self.check(self.lib.hipMemset(ptr, value, nbytes), "hipMemset")

    def upload(self, ptr: ctypes.c_void_p, data: bytes, offset: int = 0) -> None:
        self.check(self.lib.hipMemcpy(ctypes.c_void_p(ptr.value + offset), data, len(data), MEMCPY_HOST_TO_DEVICE),
                   "hipMemcpy to the device")

    def download(self, ptr: ctypes.c_void_p, nbytes: int, offset: int = 0) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self.check(self.lib.hipMemcpy(buf, ctypes.c_void_p(ptr.value + offset), nbytes, MEMCPY_DEVICE_TO_HOST),
                   "hipMemcpy to the host")
        return buf.raw

    def launch(self, module: ctypes.c_void_p, name: str, grid: int, block: int, args: list) -> None:
        """Launches kernel `name` with (grid, 1, 1) x (block, 1, 1); args are ctypes values in the
        kernel's parameter order (c_void_p for pointers)."""
        fn = ctypes.c_void_p()
        self.check(self.lib.hipModuleGetFunction(ctypes.byref(fn), module, name.encode()), f"hipModuleGetFunction {name}")
        params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
        self.check(self.lib.hipModuleLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, None, params, None),
                   f"hipModuleLaunchKernel {name}")
        self.check(self.lib.hipDeviceSynchronize(), f"{name}: hipDeviceSynchronize")
