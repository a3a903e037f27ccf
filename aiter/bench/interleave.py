"""The interleaved comparison of two (or more) callables: who runs when, and what the timings say.

A comparison runs in rounds; round r runs every side once, in the given order on even rounds and in
the reverse order on odd ones (A B, B A, A B, B A, ...), so a clock or power drift inside a round hits
both sides alike over the rounds. Each side's turn is one call of ``sample(fn, first_turn)``, which
returns that turn's timings (the GPU timer's: cold L2, CUDA events, >= 10 calls). Per side the result
holds the median of all its timings, the median of its round medians per round, and its median over the
rounds where it ran first and where it ran second (the order effect). The A/A control is the same
comparison of the op against itself: its ratio shows how far a ratio moves with no change at all.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Dict, List, Sequence, Tuple


def schedule(sides: Sequence[str], rounds: int) -> List[Tuple[str, ...]]:
    """The order of each round: ``sides`` on even rounds, reversed on odd ones."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if len(set(sides)) != len(sides) or not sides:
        raise ValueError(f"sides must be distinct names, got {list(sides)}")
    forward = tuple(sides)
    return [forward if r % 2 == 0 else forward[::-1] for r in range(rounds)]


def run(fns: Dict[str, Callable], rounds: int, sample: Callable[[Callable, bool], List[float]]) -> Dict[str, dict]:
    """Time each side of ``fns`` (name -> callable, in A, B order) in ``rounds`` interleaved rounds.

    ``sample(fn, first_turn)`` times one turn and returns its timings (µs); first_turn is True on the
    side's first turn (the timer warms up there). Returns name -> {median, first, second, round_medians,
    order (the side's position per round, 0 = first), samples (count)}."""
    names = list(fns)
    timings: Dict[str, List[List[float]]] = {n: [] for n in names}
    positions: Dict[str, List[int]] = {n: [] for n in names}
    for order in schedule(names, rounds):
        for pos, name in enumerate(order):
            times = list(sample(fns[name], not timings[name]))
            if not times:
                raise ValueError(f"the timer returned no timings for {name!r}")
            timings[name].append(times)
            positions[name].append(pos)
    out = {}
    for name in names:
        rounds_t, pos = timings[name], positions[name]
        first = [t for ts, p in zip(rounds_t, pos) if p == 0 for t in ts]
        second = [t for ts, p in zip(rounds_t, pos) if p == 1 for t in ts]
        out[name] = dict(median=statistics.median(t for ts in rounds_t for t in ts),
                         first=statistics.median(first) if first else None,
                         second=statistics.median(second) if second else None,
                         round_medians=[statistics.median(ts) for ts in rounds_t], order=pos,
                         samples=sum(len(ts) for ts in rounds_t))
    return out


def ratio(result: Dict[str, dict], numerator: str, denominator: str):
    """median(numerator) / median(denominator), or None where either is missing."""
    a, b = result.get(numerator), result.get(denominator)
    if not a or not b or not b["median"]:
        return None
    return a["median"] / b["median"]


def geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def compare(ours: Callable, baseline: Callable | None, rounds: int, sample, control: bool = True) -> dict:
    """The row's figures: ours against the baseline interleaved (A B, B A, ...), then, when ``control``,
    ours against a second handle on the same call (the A/A control, interleaved alike). Fields:
    us, baseline_us, ratio (baseline / ours), aa_us (the second handle's median), aa_ratio (aa_us / us,
    1 when nothing changes), ours_first_us / ours_second_us / baseline_first_us / baseline_second_us
    (medians over the rounds where that side ran first / second), ours_rounds_us / baseline_rounds_us
    (per-round medians) and order (ours' position per round)."""
    fns = {"ours": ours} if baseline is None else {"ours": ours, "baseline": baseline}
    ab = run(fns, rounds, sample)
    row = dict(us=ab["ours"]["median"], ours_first_us=ab["ours"]["first"], ours_second_us=ab["ours"]["second"],
               ours_rounds_us=ab["ours"]["round_medians"], order=ab["ours"]["order"], baseline_us=None,
               baseline_first_us=None, baseline_second_us=None, baseline_rounds_us=None, ratio=None,
               aa_us=None, aa_ratio=None)
    if baseline is not None:
        b = ab["baseline"]
        row.update(baseline_us=b["median"], baseline_first_us=b["first"], baseline_second_us=b["second"],
                   baseline_rounds_us=b["round_medians"], ratio=ratio(ab, "baseline", "ours"))
    if control:
        again = lambda: ours()  # noqa: E731 -- a second handle, so the two sides are distinct entries
        aa = run({"ours": ours, "ours again": again}, rounds, sample)
        row.update(aa_us=aa["ours again"]["median"], aa_ratio=ratio(aa, "ours again", "ours"))
    return row
