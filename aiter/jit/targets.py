"""Which JIT targets this machine has: ``cpu`` always, plus the backend of each visible GPU."""

from __future__ import annotations

import functools
import os

import torch

KNOWN_TARGETS = ("cpu", "sm90", "gfx950")


def detect_targets() -> tuple:
    """cpu always, plus the backend of each visible GPU (sm90 for compute capability 9.0 under a
    CUDA torch, gfx950 for a gfx950 GPU under a ROCm torch: aiter/backends.py).
    ``AITER_JIT_TARGETS=cpu,sm90`` overrides (AOT images built on a machine without that GPU)."""
    forced = os.environ.get("AITER_JIT_TARGETS", "").strip()
    if forced:
        wanted = [t.strip() for t in forced.split(",") if t.strip()]
        unknown = [t for t in wanted if t not in KNOWN_TARGETS]
        if unknown:
            raise ValueError(f"AITER_JIT_TARGETS: unknown target(s) {unknown}; known: {KNOWN_TARGETS}")
        return tuple(["cpu"] + [t for t in KNOWN_TARGETS[1:] if t in wanted])
    targets = ["cpu"]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            target = gpu_target(index)
            if target is not None and target not in targets:
                targets.append(target)
    return tuple(t for t in KNOWN_TARGETS if t in targets)


@functools.lru_cache(maxsize=None)
def gpu_target(index: int) -> str | None:
    """The target whose kernels run on GPU ``index`` of this torch build, or None when no backend of
    this package runs on it (each backend's capabilities.h says what it runs on)."""
    from aiter import backends  # what each backend runs on: its own capabilities.h

    backend = backends.gpu_backend_for(torch, index)
    return backend.name if backend is not None else None


def device_target(device) -> str | None:
    """The GPU target of ``device`` (a torch.device or its name), or None for a CPU, meta or other
    device, and for a GPU that no backend runs on."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return gpu_target(index)
