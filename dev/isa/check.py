"""Compile the GPU sources for one target and check the generated ISA.

    python -m dev.isa.check --arch sm_90a --asm-out sm90.sass
    python -m dev.isa.check --arch gfx950 --asm-out gfx950.s
    python -m dev.isa.check --arch gfx950 --asm-out gfx950.s --cxx amdclang++ \
        --hazard-summary amdclang.txt --diff-against clang22.txt

--cxx, --hazard-summary and --diff-against are gfx950's: another compiler (ROCm's amdclang++
instead of Debian's clang++-22), the per-kernel hazard distances written to a file, and compared
with a file another compiler's run wrote.

The per-target checkers (dev/isa/sm90.py, dev/isa/gfx950.py) compile with the flags of
build_config.py, write the assembly to --asm-out and return an exit status; this file only picks one.
They are imported lazily so that one target's checker does not need the other's toolchain.
"""

from __future__ import annotations

import argparse
import importlib
import sys

CHECKERS = {"sm_90a": "dev.isa.sm90", "gfx950": "dev.isa.gfx950"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev.isa.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", required=True, choices=sorted(CHECKERS), help="target to compile and check")
    parser.add_argument("--asm-out", required=True, metavar="FILE", help="where to write the assembly")
    parser.add_argument("--cxx", metavar="COMPILER", help="gfx950: compile with COMPILER (e.g. amdclang++)")
    parser.add_argument("--hazard-summary", metavar="FILE", help="gfx950: write the hazard distances to FILE")
    parser.add_argument("--diff-against", metavar="FILE",
                        help="gfx950: print where the hazard distances differ from FILE's (another compiler's)")
    args = parser.parse_args(argv)
    options = {k: v for k, v in (("cxx", args.cxx), ("hazard_summary", args.hazard_summary),
                                 ("diff_against", args.diff_against)) if v is not None}
    if options and args.arch != "gfx950":
        names = ", ".join("--" + k.replace("_", "-") for k in options)
        print(f"check_isa: {names}: gfx950 only, not {args.arch}", file=sys.stderr)
        return 2
    module_name = CHECKERS[args.arch]
    try:
        checker = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        print(
            f"check_isa: no ISA checker for {args.arch} yet: {module_name} "
            f"({module_name.replace('.', '/')}.py) does not exist",
            file=sys.stderr,
        )
        return 2
    check = getattr(checker, "check", None)
    if not callable(check):
        print(f"check_isa: {module_name} has no check(asm_out) function", file=sys.stderr)
        return 2
    status = check(args.asm_out, **options)
    if not isinstance(status, int):
        print(f"check_isa: {module_name}.check returned {status!r}, not an exit status", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
