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
