"""Each backend's support table (csrc/<backend>/capabilities.h) is the one statement of what it
serves: the instance files the build compiles, the launchers' dispatch and the support matrices of
README.md and docs/operator.md must all follow it. CPU-only (g++ for the dispatch helper)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aiter import backends
from aiter.jit import build_config

ROOT = Path(__file__).resolve().parents[1]
CSRC = build_config.csrc_dir()
SM90 = backends.backends()["sm90"]
GFX950 = backends.backends()["gfx950"]


# ------------------------------------------------------------------------------------------------
# Instance files and source lists
# ------------------------------------------------------------------------------------------------

SLOTS = [
    # (folder, file name pattern, the slot macro, the header it includes, the table column)
    ("sm90/instances", "heads_slot_{}.cu", "AITER_SM90_HEADS_SLOT", "sm90/launch_instance.cuh", SM90.heads),
    ("sm90/paged/instances", "paged_heads_slot_{}.cu", "AITER_SM90_PAGED_HEADS_SLOT",
     "sm90/paged/launch_instance.cuh", SM90.paged_heads),
]


@pytest.mark.parametrize("folder,pattern,macro,header,heads", SLOTS, ids=["prefill", "paged"])
def test_sm90_builds_one_instance_file_per_served_heads(folder, pattern, macro, header, heads):
    """build_config compiles slot i for kServedHeads[i], each in its own translation unit (the H
    compile in parallel); a table longer than the slots there are names the file to add."""
    listed = [s for s in build_config.SM90_SOURCES if s.startswith(folder + "/")]
    assert listed == [f"{folder}/{pattern.format(i)}" for i in range(len(heads))]
    for i in range(len(heads)):
        path = CSRC / folder / pattern.format(i)
        assert path.is_file(), (f"{len(heads)} served H but no {path.relative_to(CSRC)}: add it as a copy of "
                                f"{pattern.format(0)} with {macro} {i}")


@pytest.mark.parametrize("folder,pattern,macro,header,heads", SLOTS, ids=["prefill", "paged"])
def test_sm90_slot_files_are_all_the_same_but_their_index(folder, pattern, macro, header, heads):
    """No slot is special: each defines its index and includes the instance header, which
    instantiates launch_heads for that position of the table."""
    files = sorted((CSRC / folder).iterdir())
    assert files and all(re.fullmatch(pattern.replace("{}", r"\d+").replace(".", r"\."), f.name) for f in files)
    first = (CSRC / folder / pattern.format(0)).read_text()
    for f in files:
        index = int(re.search(r"(\d+)\.cu$", f.name).group(1))
        text = f.read_text()
        assert re.search(rf"^#define {macro} {index}$", text, re.M), f
        assert f'#include "{header}"' in text, f
        assert text == first.replace(f"[0]", f"[{index}]").replace(f"{macro} 0", f"{macro} {index}"), f


def test_gfx950_instance_files_follow_the_table():
    """gfx950 names each kernel after its H, so its instance files are per H: one per served H,
    each expanding its own H, and instances.h's list is the table's."""
    listed = [s for s in build_config.GFX950_SOURCES if s.startswith("gfx950/instances/")]
    assert listed == [f"gfx950/instances/gfx950_heads_{h}.hip" for h in GFX950.heads]
    for h in GFX950.heads:
        text = (CSRC / "gfx950" / "instances" / f"gfx950_heads_{h}.hip").read_text()
        assert re.findall(r"GFX950_INSTANCES_OF_HEADS\(GFX950_DEFINE_INSTANCE, (\d+)\)", text) == [str(h)]
    on_disk = sorted(int(m.group(1)) for f in (CSRC / "gfx950" / "instances").iterdir()
                     if (m := re.fullmatch(r"gfx950_heads_(\d+)\.hip", f.name)))
    assert on_disk == sorted(GFX950.heads)
    instances = (CSRC / "gfx950" / "instances.h").read_text()
    body = instances[instances.index("#define GFX950_INSTANCES(X)"):].split("\n\n")[0]
    assert tuple(int(h) for h in re.findall(r"GFX950_INSTANCES_OF_HEADS\(X, (\d+)\)", body)) == GFX950.heads


def test_no_backend_states_a_logits_format_flag():
    """Every backend writes every logits format: no flag says otherwise, so the binding has no
    refusal behind one."""
    for name in ("sm90", "gfx950"):
        assert not [k for k in build_config.read_capabilities(name) if k.startswith("kServes")]


# ------------------------------------------------------------------------------------------------
# The dispatch helper
# ------------------------------------------------------------------------------------------------

DISPATCH = r"""
#include <cstdio>
#include "sm90/capabilities.h"
using namespace aiter;
int main() {
  for (int h = 0; h <= 256; ++h) {
    const int got = dispatch_listed<sm90::kServedHeads>(h, [](auto heads) { return decltype(heads)::value; }, -1);
    if (got != -1) std::printf("%d %d\n", h, got);
  }
  return 0;
}
"""


PAGED_SERVES = r"""
#include <cstdio>
#include "sm90/capabilities.h"
int main() {
  for (int h = 1; h <= 160; ++h)
    for (int d : {32, 64, 128, 256})
      for (int b : {8, 16, 32, 64, 128})
        for (int n = 1; n <= 8; ++n)
          if (aiter::sm90::serves_paged(h, d, b, n)) std::printf("%d %d %d %d\n", h, d, b, n);
  return 0;
}
"""


def _compile_and_run(tmp_path, name: str, text: str) -> str:
    source = tmp_path / f"{name}.cpp"
    source.write_text(text)
    exe = tmp_path / name
    subprocess.run(["g++", "-std=c++17", f"-I{CSRC}", str(source), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the capability header")
def test_paged_serves_is_the_same_rule_in_python_and_cpp(tmp_path):
    """sm90's paged table is its lists and the tile's column bound (next_n x H): backends.py's
    serves_paged answers as the compiled serves_paged does, on a grid around the table."""
    compiled = {tuple(int(v) for v in line.split()) for line in _compile_and_run(tmp_path, "paged",
                                                                                  PAGED_SERVES).splitlines()}
    parsed = {(h, d, b, n) for h in range(1, 161) for d in (32, 64, 128, 256) for b in (8, 16, 32, 64, 128)
              for n in range(1, 9) if SM90.serves_paged(h, d, b, n)}
    assert compiled and compiled == parsed


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the dispatch helper")
def test_dispatch_visits_exactly_the_listed_values(tmp_path):
    """dispatch_listed (common/capabilities.h), the launchers' switch over a table column, reaches
    every listed value with that value as a constant, and nothing else."""
    out = _compile_and_run(tmp_path, "dispatch", DISPATCH).split()
    pairs = list(zip(out[::2], out[1::2]))
    assert pairs == [(str(h), str(h)) for h in sorted(SM90.heads)]


# ------------------------------------------------------------------------------------------------
# The documents' support matrices
# ------------------------------------------------------------------------------------------------


def _table_after(text: str, heading: str, start: int = 0) -> tuple[dict, int]:
    """The markdown table that follows ``heading`` (from ``start``): first cell -> cells."""
    at = text.index(heading, start)
    rows = {}
    lines = text[at:].splitlines()[1:]
    begun = False
    for line in lines:
        if line.startswith("|"):
            begun = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set(cells[0]) <= set("-"):
                rows[cells[0]] = cells
        elif begun:
            break
    return rows, at + len(heading)


def _values(cell: str, sep: str = ",") -> tuple:
    return tuple(int(v) for v in cell.split(sep))


def _row(rows: dict, prefix: str) -> list:
    found = [cells for name, cells in rows.items() if name.startswith(prefix)]
    assert len(found) == 1, (prefix, list(rows))
    return found[0]


def test_readme_matrix_is_the_table():
    rows, _ = _table_after((ROOT / "README.md").read_text(), "## What is supported")
    sm90 = _row(rows, "CUDA sm_90a")
    assert _values(sm90[1]) == SM90.heads and _values(sm90[2]) == SM90.head_dims
    paged = {name: _values(re.search(rf"\b{name} ([\d/]+)", sm90[4]).group(1), "/")
             for name in ("H", "D", "block_kv", "next_n")}
    assert paged == {"H": SM90.paged_heads, "D": SM90.paged_head_dims, "block_kv": SM90.paged_block_kv,
                     "next_n": SM90.paged_next_n}
    # The lists read as a product: where the column bound cuts it, the matrix must say so.
    assert max(SM90.paged_heads) * max(SM90.paged_next_n) <= SM90.paged_columns or "next_n x H" in sm90[4]
    gfx950 = _row(rows, "ROCm gfx950")
    assert _values(gfx950[1]) == GFX950.heads and _values(gfx950[2]) == GFX950.head_dims
    assert gfx950[4].startswith("not yet") == (GFX950.paged_heads == ())


def test_operator_doc_matrices_are_the_table():
    text = (ROOT / "docs" / "operator.md").read_text()
    prefill, end = _table_after(text, "## Supported today")
    for backend, prefix in ((SM90, "CUDA sm_90a"), (GFX950, "ROCm gfx950")):
        cells = _row(prefill, prefix)
        assert _values(cells[1]) == backend.heads and _values(cells[2]) == backend.head_dims, prefix
    paged, _ = _table_after(text, "## Supported today", end)
    cells = _row(paged, "CUDA sm_90a")
    assert (_values(cells[1]), _values(cells[2]), _values(cells[3]), _values(cells[4])) == (
        SM90.paged_heads, SM90.paged_head_dims, SM90.paged_block_kv, SM90.paged_next_n)
    assert max(SM90.paged_heads) * max(SM90.paged_next_n) <= SM90.paged_columns or "next_n x H" in cells[-1]
    cells = _row(paged, "ROCm gfx950")
    assert (cells[1] == "") == (GFX950.paged_heads == ()) and "no paged kernel" in cells[-1]
