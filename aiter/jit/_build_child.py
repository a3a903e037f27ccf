"""Builds one JIT module in its own process: ``python _build_child.py JOB.json``.

Run as a script (not ``-m``) so that it needs torch only, not the aiter package. A separate process
keeps torch's in-process extension versioning and a half-loaded failed build out of the user's
process; the parent loads the finished library from its final place. Importing the module here
checks that it links and loads before the parent renames it into the cache.
"""

import json
import os
import sys

# A script's own directory comes first on sys.path: drop it, so that no file in aiter/jit/ (core.py,
# ...) can shadow a module that torch imports.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

from torch.utils.cpp_extension import load  # noqa: E402


def main(job_path: str) -> int:
    with open(job_path) as f:
        job = json.load(f)
    load(
        name=job["name"],
        sources=job["sources"],
        extra_cflags=job["extra_cflags"],
        extra_cuda_cflags=job["extra_cuda_cflags"],
        extra_ldflags=job["extra_ldflags"],
        extra_include_paths=job["include_dirs"],
        build_directory=job["build_dir"],
        verbose=True,
        is_python_module=True,
    )
    print(f"aiter: built {job['name']} in {job['build_dir']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
