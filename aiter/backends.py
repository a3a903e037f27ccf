"""The backends of module_fp8_mqa_logits and what each serves, read from their own statements.

Each GPU backend states its heads, head dims, logits options and device in
``csrc/<backend>/capabilities.h``; the
binding and the kernels compile against those lists, and this module parses the same lines, so
``is_supported``, the JIT's target detection and the native checks never disagree. The CPU path
serves any H >= 1 and D >= 1, with every option. Parsing happens once per process and reads two small files.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from aiter.jit import build_config


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str  # "cpu", "sm90", "gfx950": the JIT target of the same name
    heads: tuple | None  # None: any H >= 1
    head_dims: tuple | None  # None: any D >= 1
    compute_capability: tuple | None = None  # CUDA devices this backend runs on
    arch_prefix: str | None = None  # ROCm devices (gcnArchName prefix)
    has_fixed_grid: bool = False  # takes the caller's split_n
    bf16_logits: bool = True  # writes logits_dtype=bfloat16
    compressed_logits: bool = True  # writes the compressed layout (max_seqlen_k > 0)
    compressed_clean_logits: bool = True  # ... with clean_logits (its -inf tail)
    # The decode op (fp8_paged_mqa_logits): H, D, block_kv and next_n its paged kernel serves; a
    # backend without one has paged_heads == (). None: any value >= 1.
    paged_heads: tuple | None = None
    paged_head_dims: tuple | None = None
    paged_block_kv: tuple | None = None
    paged_next_n: tuple | None = None

    def serves(self, heads: int, head_dim: int, bf16_logits: bool = False, compressed: bool = False,
               clean_logits: bool = False) -> bool:
        if heads < 1 or head_dim < 1:
            return False
        if (bf16_logits and not self.bf16_logits) or (compressed and not self.compressed_logits):
            return False
        if compressed and clean_logits and not self.compressed_clean_logits:
            return False
        return (self.heads is None or heads in self.heads) and (self.head_dims is None or head_dim in self.head_dims)

    def serves_paged(self, heads: int, head_dim: int, block_kv: int, next_n: int) -> bool:
        facts = ((self.paged_heads, heads), (self.paged_head_dims, head_dim), (self.paged_block_kv, block_kv),
                 (self.paged_next_n, next_n))
        return all(value >= 1 and (served is None or value in served) for served, value in facts)

    def describe(self) -> str:
        def values(v):
            return "any" if v is None else "{" + ", ".join(map(str, v)) + "}"

        return f"H in {values(self.heads)} and D in {values(self.head_dims)}"


_INT_LIST = re.compile(r"constexpr\s+int\s+(k\w+)\[\]\s*=\s*\{([^}]*)\};")
_STRING = re.compile(r"constexpr\s+const\s+char\s+(k\w+)\[\]\s*=\s*\"([^\"]*)\";")
_BOOL = re.compile(r"constexpr\s+bool\s+(k\w+)\s*=\s*(true|false);")


def _read_capabilities(backend: str) -> dict:
    text = (build_config.csrc_dir() / backend / "capabilities.h").read_text()
    facts: dict = {name: tuple(int(v) for v in body.split(",") if v.strip()) for name, body in _INT_LIST.findall(text)}
    facts.update(_STRING.findall(text))
    facts.update((name, value == "true") for name, value in _BOOL.findall(text))
    return facts


def _gpu_backend(name: str) -> Backend:
    facts = _read_capabilities(name)
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
        bf16_logits=facts.get("kServesBf16Logits", False),
        compressed_logits=facts.get("kServesCompressedLogits", False),
        compressed_clean_logits=facts.get("kServesCompressedCleanLogits", False),
        paged_heads=facts.get("kServedPagedHeads", ()),
        paged_head_dims=facts.get("kServedPagedHeadDims", ()),
        paged_block_kv=facts.get("kServedPagedBlockKv", ()),
        paged_next_n=facts.get("kServedPagedNextN", ()),
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
