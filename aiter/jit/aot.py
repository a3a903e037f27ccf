"""Ahead-of-time builds (setup.py with AITER_BUILD_AOT=1): the fingerprint a packaged library must
match to be used instead of a JIT build, and the lookup of that library next to this file.

Each module (the CPU module, each GPU family module) is packaged as ``aiter/jit/<name><ext suffix>``
with ``<name>.aot.json`` beside it, so an image may ship any subset of them."""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
from pathlib import Path

import torch

from .cache_key import BUILDER_VERSION, file_digest, hashed_files, relative
from .module_specs import ModuleSpec


def aot_meta_name(name: str) -> str:
    return f"{name}.aot.json"


def aot_fingerprint(spec: ModuleSpec) -> dict:
    """What an ahead-of-time build must match to be used instead of a JIT build."""
    files = [[relative(p, spec.root), file_digest(p)] for p in hashed_files(spec)]
    digest = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:24]
    # The flags too: AITER_JIT_EXTRA_CFLAGS at run time asks for a build the AOT image is not.
    flags = [list(spec.extra_cflags), list(spec.extra_cuda_cflags), list(spec.extra_ldflags)]
    flag_digest = hashlib.sha256(json.dumps(flags).encode()).hexdigest()[:24]
    return {"sources": digest, "flags": flag_digest, "torch": torch.__version__, "builder": BUILDER_VERSION}


def prebuilt(spec: ModuleSpec, here: Path | None = None) -> Path | None:
    """The AOT library of ``spec`` next to this file, if it was built from the same sources, flags
    and torch for the same targets."""
    if os.environ.get("AITER_JIT_IGNORE_AOT"):
        return None
    here = here or Path(__file__).resolve().parent
    meta_path = here / aot_meta_name(spec.name)
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    candidates = [here / (spec.name + s) for s in importlib.machinery.EXTENSION_SUFFIXES]
    library = next((c for c in candidates if c.is_file()), None)
    if library is None or meta.get("targets") != list(spec.targets):
        return None
    if meta.get("fingerprint") != aot_fingerprint(spec):
        return None
    return library
