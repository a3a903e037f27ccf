"""What the benchmarks' command lines and tables share: the input-set and timing options, the run's
printed and written tables, and the number format."""

from __future__ import annotations

import argparse
import json
import sys
import time

from aiter.bench import machine
from aiter.testing.mqa_logits import INPUT_SETS


def int_list(example: str):
    """An argparse type: comma-separated integers >= 1, as a tuple; its error shows `example`."""
    def parse(text: str):
        try:
            values = tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. {example}")
        if not values or any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= 1")
        return values
    return parse


def _add_timing_options(p: argparse.ArgumentParser) -> None:
    """The options of the interleaved timing (aiter.bench.interleave) and of the output files."""
    p.add_argument("--rounds", type=int, help="interleaved rounds per row (GPU: at least 4, the default; CPU: 2)")
    p.add_argument("--iters", type=int, help="timed calls per turn (GPU: at least 10; CPU default 1)")
    p.add_argument("--no-control", action="store_true", help="skip the A/A control (halves the time per row)")
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph timing of rows under 50 µs")
    p.add_argument("--time-limit", type=float, metavar="S", help="start no new row after S seconds")
    p.add_argument("--estimate", action="store_true", help="print the estimated GPU run time per row and exit")
    p.add_argument("--device", help="cpu or cuda[:i] (default: the GPU if visible)")
    p.add_argument("--out", metavar="PREFIX", help="also write PREFIX.json and PREFIX.md")


def _add_input_set_option(p: argparse.ArgumentParser) -> None:
    """--inputs: which input set(s) a logits bench draws (aiter.testing.mqa_logits.INPUT_SETS)."""
    p.add_argument("--inputs", choices=("both",) + INPUT_SETS,
                   help="input set(s): engine, make_inputs or both (default: both on a GPU, make_inputs on the CPU)")


def input_sets(choice, on_gpu: bool) -> tuple:
    """The input sets that --inputs `choice` names; None: both on a GPU, make_inputs on the CPU."""
    return {"both": INPUT_SETS, "engine": ("engine",), "make_inputs": ("make_inputs",)}[
        choice or ("both" if on_gpu else "make_inputs")]


def parse_with_shared_options(p: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """argv parsed by p with the options both logits benches take added after p's own (the input sets,
    the interleaved timing, the output files); the timing options' bounds checked as argparse errors."""
    _add_input_set_option(p)
    _add_timing_options(p)
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds: must be >= 1")
    if args.iters is not None and args.iters < 1:
        p.error("--iters: must be >= 1")
    return args


def run_and_report(args, run, to_markdown, count_rows, table_end="\n", count_to_stdout=False) -> int:
    """Runs the bench (run(args)), prints its markdown table (ended by table_end) on stdout, writes
    PREFIX.json (the result) and PREFIX.md (the table) for --out PREFIX, then prints the row count
    (count_rows(result)) and wall time, on stderr unless count_to_stdout; returns the exit status 0."""
    start = time.time()
    result = run(args)
    text = to_markdown(result)
    print(text, end=table_end)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text)
    print(f"({count_rows(result)} rows in {time.time() - start:.0f} s)",
          file=sys.stdout if count_to_stdout else sys.stderr)
    return 0


def table_head(table: dict, columns) -> list:
    """The markdown lines that open one input set's table: its name, the GPU clock and power before
    and after it, and the header row of `columns`."""
    return [f"### inputs: {table['inputs']}", "",
            f"GPU before: {machine.format_clock_power(table['clock_before'])} | "
            f"after: {machine.format_clock_power(table['clock_after'])}", "",
            "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def fmt(x, digits=1):
    """`digits` decimals from 1 up, 3 significant figures below 1 (0.4997 prints 0.5, not 0); '-' for None."""
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.{digits}f}"
    return f"{x:.3g}"
