"""Packaging of aiter. The normal install is pure Python: the native modules are compiled on first
use by aiter/jit/core.py. Two extras live here:

* csrc/ is copied into wheels as aiter/_csrc, where aiter/jit/build_config.csrc_dir() looks first,
  so a non-editable install can still build on first use (and sdists carry csrc/ too).
* AITER_BUILD_AOT=1 compiles the modules now (the CPU module, and one per GPU op family of each
  target), for images that ship prebuilt. It uses the installed torch, so run it without build
  isolation:
      AITER_BUILD_AOT=1 AITER_JIT_TARGETS=cpu,sm90 python -m pip install --no-build-isolation .
  Targets default to what this machine's GPUs need (AITER_JIT_TARGETS overrides, e.g. on a build
  host without a GPU). Each library (without debug info or a symbol table) and a fingerprint of its
  sources land in aiter/jit/; at run time the JIT uses one when its sources, flags and torch version
  match. A CPU-only wheel, for a machine that should skip the first build:
      AITER_BUILD_AOT=1 AITER_JIT_TARGETS=cpu python -m pip wheel --no-build-isolation --no-deps . -w dist
"""

import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
SKIP = shutil.ignore_patterns("*.o", "*.so", "__pycache__")


class BuildPyWithCsrc(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install uses the checkout's csrc/ directly
        dst = Path(self.build_lib) / "aiter" / "_csrc"
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(CSRC, dst, ignore=SKIP)


class SdistWithCsrc(sdist):
    # setuptools collects the sdist's file list in egg_info, which never calls a subclass's
    # add_defaults; add csrc/ (and CMakeLists.txt) to the release tree directly.
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        extra = [p for p in sorted(CSRC.rglob("*")) if p.is_file() and p.suffix not in (".o", ".so")]
        extra.append(HERE / "CMakeLists.txt")
        for p in extra:
            if p.is_file():
                dest = Path(base_dir) / p.relative_to(HERE)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest)


# What the ahead-of-time build adds to the JIT's flags (see aot_build).
STRIP_COMPILE_FLAGS = ["-g0"]
STRIP_LINK_FLAGS = ["-s"]


def aot_build():
    """(ext_modules, cmdclass) of the ahead-of-time build, or nothing when not asked for: the CPU
    module, and one extension per GPU op family of each target (the JIT's modules, aiter/jit/module_specs.py)."""
    if os.environ.get("AITER_BUILD_AOT", "").lower() not in ("1", "true", "yes", "on"):
        return [], {}
    sys.path.insert(0, os.fspath(HERE))
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    from aiter.jit import aot, module_specs, targets

    wanted = targets.detect_targets()
    specs = module_specs.all_specs(wanted)
    # Fingerprint the sources before compiling: if they change during the build, the runtime sees
    # a mismatch and rebuilds, rather than trusting a library built from other sources.
    fingerprints = {spec.name: aot.aot_fingerprint(spec) for spec in specs}
    # setuptools compiles with the interpreter's CFLAGS, -g among them: -g0 after them drops the debug
    # info, and -s links without a symbol table (the dynamic symbols the loader needs stay), so the
    # wheel's libraries are about the JIT builds' size. Neither changes the code, so they are not part
    # of the fingerprint: the runtime compares against the JIT's own flags.
    exts = []
    for spec in specs:
        make = CppExtension if spec.targets == ("cpu",) else CUDAExtension
        exts.append(make(
            name=f"aiter.jit.{spec.name}",
            sources=[os.path.relpath(s, HERE) for s in spec.sources],
            include_dirs=list(spec.include_dirs),
            extra_compile_args={"cxx": list(spec.extra_cflags) + STRIP_COMPILE_FLAGS,
                                "nvcc": list(spec.extra_cuda_cflags)},
            extra_link_args=list(spec.extra_ldflags) + STRIP_LINK_FLAGS,
        ))
    by_name = {spec.name: spec for spec in specs}

    class BuildAot(BuildExtension):
        def run(self):
            print(f"aiter: ahead-of-time build of {', '.join(f'{s.name} ({s.label})' for s in specs)}",
                  file=sys.stderr)
            super().run()
            for e in self.extensions:
                spec = by_name[e.name.rsplit(".", 1)[-1]]
                out_dir = Path(self.get_ext_fullpath(e.name)).parent
                meta = {"targets": list(spec.targets), "fingerprint": fingerprints[spec.name]}
                (out_dir / aot.aot_meta_name(spec.name)).write_text(json.dumps(meta, indent=1))

        def build_extension(self, ext):
            # The GPU modules share sources (the entry unit, the device queries) compiled with each
            # module's own TORCH_EXTENSION_NAME: one object folder per extension keeps them apart.
            base = self.build_temp
            self.build_temp = os.path.join(base, ext.name)
            try:
                super().build_extension(ext)
            finally:
                self.build_temp = base

    return exts, {"build_ext": BuildAot}


ext_modules, aot_cmdclass = aot_build()
setup(
    cmdclass={"build_py": BuildPyWithCsrc, "sdist": SdistWithCsrc, **aot_cmdclass},
    ext_modules=ext_modules,
)
