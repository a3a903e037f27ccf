"""aiter/backends.py reads each backend's csrc/<backend>/capabilities.h: what it parses must be what
the C++ compiles (a g++ program prints the same lists), so is_supported, the JIT's targets and the
binding's checks cannot drift apart."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from aiter import backends
from aiter.jit import build_config

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the capability headers")

PRINTER = r"""
#include <cstdio>
#include "BACKEND/capabilities.h"
template <unsigned long N> void print(const char* name, const int (&v)[N]) {
  std::printf("%s", name);
  for (unsigned long i = 0; i < N; ++i) std::printf(" %d", v[i]);
  std::printf("\n");
}
int main() {
  using namespace aiter::BACKEND;
  print("heads", kServedHeads);
  print("head_dims", kServedHeadDims);
  std::printf("serves %d %d\n", serves(kServedHeads[0], kServedHeadDims[0]) ? 1 : 0, serves(7, 7) ? 1 : 0);
  std::printf("fixed_grid %d\n", kHasFixedGrid ? 1 : 0);
  return 0;
}
"""


@pytest.mark.parametrize("name", ["sm90", "gfx950"])
def test_parsed_lists_match_the_compiled_ones(name, tmp_path):
    source = tmp_path / "print.cpp"
    source.write_text(PRINTER.replace("BACKEND", name))
    exe = tmp_path / "print"
    subprocess.run(["g++", "-std=c++17", f"-I{build_config.csrc_dir()}", str(source), "-o", str(exe)], check=True)
    lines = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                              check=True).stdout.splitlines())
    backend = backends.backends()[name]
    assert tuple(int(v) for v in lines["heads"].split()) == backend.heads
    assert tuple(int(v) for v in lines["head_dims"].split()) == backend.head_dims
    assert lines["serves"] == "1 0"
    assert lines["fixed_grid"] == str(int(backend.has_fixed_grid))
    assert backend.serves(backend.heads[0], backend.head_dims[0]) and not backend.serves(7, 7)


def test_cpu_serves_any_shape_and_gpus_name_their_device():
    cpu = backends.backends()["cpu"]
    assert cpu.serves(1, 1) and cpu.serves(1000, 3) and not cpu.serves(0, 128)
    assert backends.backends()["sm90"].compute_capability == (9, 0)
    assert backends.backends()["gfx950"].arch_prefix == "gfx950"
    assert backends.backends()["gfx950"].has_fixed_grid and not backends.backends()["sm90"].has_fixed_grid
