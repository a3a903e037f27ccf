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
