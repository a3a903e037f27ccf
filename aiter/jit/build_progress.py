"""What a running build says while it runs: a line every PROGRESS_S seconds with the number of
ninja's steps done (a build can take minutes: silence would look like a hang)."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

from .module_specs import ModuleSpec

# Seconds between the progress lines of a running build.
PROGRESS_S = 10.0

NINJA_STEP = re.compile(rb"^\[(\d+)/(\d+)\] ", re.MULTILINE)


def progress_line(spec: ModuleSpec, log_tail: bytes, seconds: float, total: int | None = None) -> str:
    """What a running build has done so far: the last ninja status line in its log (ninja prints
    one as each step ends), else 0 of the ``total`` steps of build.ninja once it is written."""
    steps = NINJA_STEP.findall(log_tail)
    if steps:
        done = f"{int(steps[-1][0])}/{int(steps[-1][1])} build steps done"
    elif total:
        done = f"0/{total} build steps done"
    else:
        done = "preparing"
    return f"aiter: {spec.name} for {spec.label}: {done}, {seconds:.0f} s"


class Progress:
    """Prints progress lines on stderr from a thread of its own until ``stop``."""

    def __init__(self, spec: ModuleSpec, log_path: Path):
        self.spec, self.log_path, self.t0 = spec, log_path, time.time()
        self._stop = threading.Event()
        self._thread = None
        if PROGRESS_S > 0:
            self._thread = threading.Thread(target=self._run, args=(PROGRESS_S,), daemon=True)
            self._thread.start()

    def _run(self, every: float):
        while not self._stop.wait(every):
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - (64 << 10)))
                    tail = f.read()
            except OSError:
                tail = b""
            print(progress_line(self.spec, tail, time.time() - self.t0, self._total()), file=sys.stderr,
                  flush=True)

    def _total(self) -> int | None:
        """The number of steps in the build.ninja torch writes beside the log, once it is there."""
        try:
            text = (self.log_path.parent / "build.ninja").read_text(errors="replace")
        except OSError:
            return None
        return sum(1 for line in text.splitlines() if line.startswith("build ")) or None

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
