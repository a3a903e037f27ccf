"""The sm90 folder's layers, from its quoted #includes (no compiler, no GPU).

ptx/ and mma/ wrap PTX and include nothing of a kernel; common/ holds what the prefill and the paged
kernel compute the same way and includes only ptx/, mma/, common/ and the backend-wide tunables;
neither kernel includes the other's role files, so a paged instance compiles no prefill code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SM90 = Path(__file__).resolve().parents[1] / "csrc" / "sm90"
LAYERS = ("sm90/ptx/", "sm90/mma/", "sm90/common/")
# Backend-wide files either kernel may include.
BACKEND_WIDE = ("sm90/tunables.h", "sm90/capabilities.h", "sm90/cuda_errors.h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path: Path) -> list[str]:
    return INCLUDE.findall(path.read_text())


def sm90_files(folder: str) -> list[Path]:
    return sorted(p for p in (SM90 / folder).rglob("*") if p.suffix in (".h", ".cuh", ".cu"))


def closure(start: Path) -> set[str]:
    """Every sm90 header reachable from `start` (csrc-relative names)."""
    seen, pending = set(), [start]
    while pending:
        for name in includes(pending.pop()):
            if name.startswith("sm90/") and name not in seen:
                seen.add(name)
                pending.append(SM90.parent / name)
    return seen


def is_prefill_role_file(name: str) -> bool:
    """A file of the prefill kernel: sm90/<name> at the top level, other than the backend-wide ones."""
    return name.count("/") == 1 and name not in BACKEND_WIDE


@pytest.mark.parametrize("layer", ["ptx", "mma", "common"])
def test_shared_layers_include_only_shared_layers(layer):
    for path in sm90_files(layer):
        for name in includes(path):
            if name.startswith("sm90/"):
                assert name.startswith(LAYERS) or name == "sm90/tunables.h", f"{path} includes {name}"


def test_paged_instances_compile_no_prefill_file():
    instances = sm90_files("paged/instances")
    assert instances
    for path in instances:
        reached = closure(path)
        assert "sm90/paged/kernel.cuh" in reached  # the walk follows the real chain
        prefill = sorted(name for name in reached if is_prefill_role_file(name))
        assert not prefill, f"{path.name} compiles prefill files: {prefill}"


def test_paged_kernel_files_include_only_paged_and_shared_files():
    for path in sm90_files("paged"):
        if path.name.endswith("launcher.cu"):
            continue  # the dispatch, not the kernel
        for name in includes(path):
            if name.startswith("sm90/"):
                assert name.startswith(("sm90/paged/",) + LAYERS) or name in BACKEND_WIDE, f"{path} includes {name}"


def test_prefill_files_include_no_paged_file():
    for path in sorted(SM90.glob("*")) + sm90_files("instances"):
        if path.is_file():
            for name in includes(path):
                assert not name.startswith("sm90/paged/"), f"{path} includes {name}"


def test_the_quad_reduce_scatter_is_defined_once():
    written = [p for p in SM90.rglob("*.cuh") if "void quad_reduce_scatter(" in p.read_text()]
    assert [p.relative_to(SM90).as_posix() for p in written] == ["common/reduce.cuh"]
