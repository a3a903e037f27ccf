"""The backends of module_fp8_mqa_logits and what each serves, read from their own statements.

Each GPU backend states its heads, head dims, paged shapes and device in its support table,
``csrc/<backend>/capabilities.h``; the binding, the launchers' dispatch and the instance files compile
against those lists, build_config lists the instance sources from them, and this module reads the
same lines (build_config.read_capabilities), so ``is_supported``, the JIT's target detection and the
native checks never disagree. Every backend writes every logits format (float32 or bfloat16, full or
compressed, clean or not). The CPU path serves any H >= 1 and D >= 1. Parsing happens once per
process and reads two small files.
"""

from __future__ import annotations

import dataclasses
import functools

from aiter.jit import build_config


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str  # "cpu", "sm90", "gfx950": the JIT target of the same name
    heads: tuple | None  # None: any H >= 1
    head_dims: tuple | None  # None: any D >= 1
    compute_capability: tuple | None = None  # CUDA devices this backend runs on
    arch_prefix: str | None = None  # ROCm devices (gcnArchName prefix)
    has_fixed_grid: bool = False  # takes the caller's split_n
    # The decode op (fp8_paged_mqa_logits): H, D, block_kv and next_n its paged kernel serves; a
    # backend without one has paged_heads == (). None: any value >= 1.
    paged_heads: tuple | None = None
    paged_head_dims: tuple | None = None
    paged_block_kv: tuple | None = None
    paged_next_n: tuple | None = None
    paged_columns: int | None = None  # the most next_n x H a batch's tile holds (None: any)

    def serves(self, heads: int, head_dim: int, bf16_logits: bool = False, compressed: bool = False,
               clean_logits: bool = False) -> bool:
        """Whether this backend serves (H, D); every logits format is served, so the format's
        arguments (the call's options, as is_supported passes them) never change the answer."""
        del bf16_logits, compressed, clean_logits
        if heads < 1 or head_dim < 1:
            return False
        return (self.heads is None or heads in self.heads) and (self.head_dims is None or head_dim in self.head_dims)

    def serves_paged(self, heads: int, head_dim: int, block_kv: int, next_n: int) -> bool:
        facts = ((self.paged_heads, heads), (self.paged_head_dims, head_dim), (self.paged_block_kv, block_kv),
                 (self.paged_next_n, next_n))
        if self.paged_columns is not None and next_n * heads > self.paged_columns:
            return False
        return all(value >= 1 and (served is None or value in served) for served, value in facts)


def _gpu_backend(name: str) -> Backend:
    facts = build_config.read_capabilities(name)
    missing = [k for k in ("kServedHeads", "kServedHeadDims") if k not in facts]
    if missing:
        raise RuntimeError(f"aiter: csrc/{name}/capabilities.h does not state {missing} in the parsed form")
    return Backend(
        name=name,
        heads=facts["kServedHeads"],
        head_dims=facts["kServedHeadDims"],
        compute_capability=facts.get("kComputeCapability"),
        arch_prefix=facts.get("kArchPrefix"),
        has_fixed_grid=facts.get("kHasFixedGrid", False),
        paged_heads=facts.get("kServedPagedHeads", ()),
        paged_head_dims=facts.get("kServedPagedHeadDims", ()),
        paged_block_kv=facts.get("kServedPagedBlockKv", ()),
        paged_next_n=facts.get("kServedPagedNextN", ()),
        paged_columns=facts.get("kServedPagedColumns"),
    )


@functools.lru_cache(maxsize=None)
def backends() -> dict:
    """name -> Backend for every backend this package has sources for."""
    return {
        "cpu": Backend(name="cpu", heads=None, head_dims=None),
        "sm90": _gpu_backend("sm90"),
        "gfx950": _gpu_backend("gfx950"),
    }


def gpu_backend_for(torch_module, index: int) -> Backend | None:
    """The backend that runs on GPU ``index`` of this torch build (CUDA or ROCm), or None."""
    if torch_module.version.hip:
        arch = getattr(torch_module.cuda.get_device_properties(index), "gcnArchName", "") or ""
        matches = [b for b in backends().values() if b.arch_prefix and arch.startswith(b.arch_prefix)]
    elif torch_module.version.cuda:
        capability = tuple(torch_module.cuda.get_device_capability(index))
        matches = [b for b in backends().values() if b.compute_capability == capability]
    else:
        matches = []
    return matches[0] if matches else None
