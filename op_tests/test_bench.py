"""The benchmark module's table on the CPU: every logits variant gets its row, timed against the same
variant in plain torch (which it also checks the op against), and the markdown has one line per row."""

from __future__ import annotations

import argparse

from aiter.bench import fp8_mqa_logits as bench


def test_every_variant_gets_a_row_on_the_cpu():
    args = argparse.Namespace(device="cpu", shapes="causal:64x256", quick=False, heads="4", head_dims=None,
                              clean="both", iters=3, variants="full,bf16,compressed,compressed-bf16", out=None)
    result = bench.run(args)
    rows = result["rows"]
    assert [(r["variant"], r["clean"]) for r in rows] == [
        (v, c) for v in ("full", "bf16", "compressed", "compressed-bf16") for c in (True, False)]
    assert all(r["us"] > 0 and r["baseline_us"] > 0 and r["in_window_pairs"] > 0 for r in rows)
    table = bench.to_markdown(result)
    assert sum(line.startswith("| 64x256 |") for line in table.splitlines()) == len(rows)


def test_the_decode_bench_gets_its_rows_on_the_cpu():
    """The decode op's bench (aiter.bench.fp8_paged_mqa_logits) on two small rows: both logits dtypes
    timed, the bytes it counts positive, the plain-torch baseline timed, one markdown line per row."""
    from aiter.bench import fp8_paged_mqa_logits as paged_bench

    args = argparse.Namespace(device="cpu", rows="8x2x300x1,4x3x129x2", iters=1, out=None)
    result = paged_bench.run(args)
    rows = result["rows"]
    assert [(r["H"], r["B"], r["context"], r["next_n"]) for r in rows] == [(8, 2, 300, 1), (4, 3, 129, 2)]
    assert all(r["us_f32"] > 0 and r["us_bf16"] > 0 and r["gbps"] > 0 and r["baseline_us"] > 0 for r in rows)
    table = paged_bench.to_markdown(result)
    assert sum(line.startswith(("| 8 | 2 |", "| 4 | 3 |")) for line in table.splitlines()) == 2
