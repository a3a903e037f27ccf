"""Shared pytest fixtures of op_tests.

``device``: every test that takes it runs on "cpu" and, when torch sees a GPU, on "cuda" (ROCm
builds of torch report their GPUs as "cuda" too), so one suite checks the CPU path and every GPU
kernel. Without a GPU the cuda case is skipped with the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# The repository root, so that tests of the development tools (dev/) import them from any cwd.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEVICE_PARAMS = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    ),
]


@pytest.fixture(params=DEVICE_PARAMS)
def device(request) -> str:
    return request.param


@pytest.fixture
def fp8_aware_allclose(monkeypatch):
    """opcheck's schema test compares every input before/after with torch.allclose, which torch
    2.13 does not implement for float8 on the CPU. Compare float8 tensors bit for bit instead
    (stricter than allclose); every other dtype goes to the original."""
    original = torch.allclose

    def allclose(a, b, *args, **kwargs):
        if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and b.dtype == a.dtype:
            return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        return original(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose)
