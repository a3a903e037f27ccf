"""Build (or load from the cache) the native modules now, instead of on the first calls:

    python -m aiter.jit                      # the CPU module and every GPU family of this machine's GPUs
    python -m aiter.jit --family prefill     # the CPU module and the prefill kernels only

The GPU targets are this machine's (AITER_JIT_TARGETS overrides); each module is built once into the
cache the calls use (AITER_JIT_DIR), so a later first call loads it in milliseconds.
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    from . import core, module_specs, targets

    parser = argparse.ArgumentParser(prog="python -m aiter.jit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=module_specs.FAMILIES,
                        help="a GPU op family to build (repeatable; default: all)")
    args = parser.parse_args(argv)
    core.get_module()
    print(f"{core.build_config.MODULE_NAME}: {core.last_load_info.get('path')}")
    for family in args.family or module_specs.FAMILIES:
        for target in module_specs.family_targets(family):
            if target in targets.detect_targets():
                core.get_family_module(family, target)
                print(f"{family} on {target}: {core.family_load_info[(family, target)].get('path')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
