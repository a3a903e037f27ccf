"""Summary of the timeline probe's output (dev/sm90/probes/timeline.patch), per call of 132 CTAs.

    python dev/sm90/probes/timeline_report.py probe.txt

The probe prints, per CTA, an A line (entry globaltimer, the programmatic-launch wait and the plan
cut, in SM cycles from the CTA's entry), a B line (the producer's first Q and K issue and its end)
and a C line per math warpgroup (first full Q slot, first finished MMA, end, tiles, end globaltimer).
Prints min / median / max over the CTAs of each checkpoint.
"""

from __future__ import annotations

import sys

CTAS = 132


def calls(lines):
    group = []
    for line in lines:
        group.append(line)
        kinds = [entry.split()[3] for entry in group]
        if kinds.count("A") == CTAS and kinds.count("B") == CTAS and sum(k.startswith("C") for k in kinds) == 3 * CTAS:
            yield group
            group = []


def spread(values):
    values = sorted(values)
    return f"{values[0]}/{values[len(values) // 2]}/{values[-1]}"


def main(path: str) -> None:
    lines = [line for line in open(path) if line.startswith("PROBE")]
    for index, group in enumerate(calls(lines)):
        entry, producer, math = {}, {}, {}
        for line in group:
            fields = line.split()
            cta, kind = int(fields[2]), fields[3]
            if kind == "A":
                entry[cta] = dict(start_ns=int(fields[5]), wait=int(fields[7]), cut=int(fields[9]))
            elif kind == "B":
                producer[cta] = dict(first_q=int(fields[5]), first_k=int(fields[7]), end=int(fields[9]))
            else:
                math.setdefault(cta, []).append(dict(q_full=int(fields[5]), first_mma=int(fields[7]), end=int(fields[9]),
                                                     tiles=int(fields[11]), end_ns=int(fields[13])))
        first_start = min(e["start_ns"] for e in entry.values())
        print(f"call {index} [min/median/max over CTAs; SM cycles from the CTA's entry]")
        print("  start skew (ns)", spread([e["start_ns"] - first_start for e in entry.values()]))
        print("  launch wait done", spread([e["wait"] for e in entry.values()]), "| plan cut", spread([e["cut"] for e in entry.values()]))
        print("  producer: first Q issued", spread([p["first_q"] for p in producer.values()]),
              "| first K issued", spread([p["first_k"] for p in producer.values()]), "| done", spread([p["end"] for p in producer.values()]))
        print("  math: first Q slot full", spread([min(w["q_full"] for w in ws) for ws in math.values()]),
              "| first MMA done", spread([min([w["first_mma"] for w in ws if w["first_mma"] >= 0] or [-1]) for ws in math.values()]))
        print("  math: last warpgroup's end", spread([max(w["end"] for w in ws) for ws in math.values()]),
              "| tiles per warpgroup", spread([ws[0]["tiles"] for ws in math.values()]))
        print("  CTA end (ns from the first CTA's start)", spread([max(w["end_ns"] for w in ws) - first_start for ws in math.values()]))


if __name__ == "__main__":
    main(sys.argv[1])
