"""The one error type of the JIT builder, shared by its modules (core, cache_dir, build_lock)."""


class JitBuildError(RuntimeError):
    """The extension could not be built or loaded: a compile or link failure (the message carries the
    compiler's first errors), a cache folder that cannot be trusted or written (the message names the
    path and what to do)."""


# Its public home, which tracebacks and reprs name: users import it from aiter.jit.core.
JitBuildError.__module__ = "aiter.jit.core"
