"""The live processes of this machine, read from /proc: the JIT's builder and its build child use this
to find the compiler processes a build left (dependency-free: the build child loads it by path)."""

from __future__ import annotations

import os


def live_processes() -> list:
    """(pid, parent pid, process group) of every live (not zombie) process; empty without /proc."""
    table = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # the command name may hold spaces and ')'
        if fields[0] != b"Z":
            table.append((int(name), int(fields[1]), int(fields[2])))
    return table
