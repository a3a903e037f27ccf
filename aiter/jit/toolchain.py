"""The compilers and flags of a JIT build: which host compiler, which GPU compiler, what each says
it is (part of the cache key), the link flags, and the flags taken from the environment."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess

from .errors import JitBuildError


def host_compiler() -> str:
    """The C++ compiler for host code and the final link.

    ``AITER_CXX`` wins when set. Otherwise the distribution's /usr/bin/g++ is preferred over a
    ``CXX`` that points elsewhere: torch's wheels are built with a gcc-toolset that does not exist at
    run time and load the system's shared libstdc++; a foreign ``CXX`` (conda or manylinux toolchains)
    may link libstdc++ statically, giving the extension a second copy of the iostream and locale
    state, which crashed at first iostream use on the GPU machine. The link flags in
    ``link_flags`` guard against that as well, for an explicit ``AITER_CXX``.
    """
    explicit = os.environ.get("AITER_CXX")
    if explicit:
        return explicit
    if os.path.exists("/usr/bin/g++"):
        return "/usr/bin/g++"
    return os.environ.get("CXX") or "c++"


def link_flags() -> list:
    # The explicit -lstdc++ comes before the driver's implicit libraries, so even a driver run with
    # -static-libstdc++ resolves the C++ runtime against the shared libstdc++.so (measured: NEEDED
    # libstdc++.so.6 and no embedded copy); -shared-libgcc keeps one unwinder for exceptions that
    # cross into torch (TORCH_CHECK's c10::Error).
    # --no-as-needed stays on for torch's own libraries that follow, as cpp_extension links them.
    return ["-shared-libgcc", "-Wl,--no-as-needed", "-lstdc++"]


def env_flags(variable: str) -> list:
    """The flags in environment variable ``variable``, split as a POSIX shell splits words (quotes
    group, nothing is expanded or run). Each reaches the compiler as exactly that one argument
    (``build_arg``)."""
    try:
        flags = shlex.split(os.environ.get(variable, ""))
    except ValueError as e:
        raise JitBuildError(f"aiter: {variable} cannot be split into flags: {e}") from e
    for flag in flags:
        check_build_arg(flag, variable)
    return flags


def check_build_arg(flag: str, origin: str):
    # A ninja variable is one line: a line break inside an argument cannot be written into it.
    if any(c in flag for c in "\n\r\0"):
        raise JitBuildError(f"aiter: {origin}: the flag {flag!r} holds a line break or NUL, which no"
                            " compiler command line of the build can carry")


def build_arg(flag: str) -> str:
    """``flag`` as torch's build.ninja must hold it to reach the compiler unchanged: torch writes the
    flags into the file as they are and ninja runs each command through /bin/sh, so the flag is
    shell-quoted (no backtick, ``$(...)`` or glob acts) and its ``$`` doubled (ninja's escape)."""
    check_build_arg(flag, "a build flag")
    return shlex.quote(flag).replace("$", "$$")


def gpu_compiler(target: str) -> str:
    """The nvcc (sm90) or hipcc (gfx950) torch's cpp_extension will use, found the way it finds
    CUDA_HOME / ROCM_HOME (environment, then PATH, then the default prefix), without importing it
    (that import alone costs ~0.1 s on every cached load)."""
    tool, envs, prefix = (("nvcc", ("CUDA_HOME", "CUDA_PATH"), "/usr/local/cuda") if target == "sm90"
                          else ("hipcc", ("ROCM_HOME", "ROCM_PATH"), "/opt/rocm"))
    for env in envs:
        if os.environ.get(env):
            return os.path.join(os.environ[env], "bin", tool)
    found = shutil.which(tool)
    return found if found else os.path.join(prefix, "bin", tool)


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> str:
    """``path --version`` (its whole output: release and build), or why there is none."""
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {type(e).__name__}"


def toolchain_identity(targets) -> dict:
    """Path and version of every compiler that builds for ``targets``: part of the cache key, so a
    toolkit upgrade (same paths, new compiler) does not load a build made by the old one."""
    tools = {"cxx": host_compiler()}
    for target in targets:
        if target != "cpu":
            tools[target] = gpu_compiler(target)
    return {name: [path, tool_version(path)] for name, path in tools.items()}
