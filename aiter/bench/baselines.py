"""Reference timings of other implementations, for the benchmark's ratio column.

DEEPGEMM_H200: DeepGEMM v2.6.1 sm_90 fp8_mqa_logits, measured on one H200, from the project's
issue #3 / shared/design/hopper-notes.md. Microseconds, (clean_logits=True, clean_logits=False),
keyed by (mode, M, N, H); the "small" shapes use causal windows. D = 128.
"""

from __future__ import annotations

DEEPGEMM_SOURCE = "DeepGEMM v2.6.1 sm_90, measured on one H200 (issue #3 / shared/design/hopper-notes.md)"

# The contract's benchmark shapes, (mode, M, N): causal, multi_req (4 requests), small (causal).
BENCHMARK_SHAPES = (
    ("causal", 8192, 8192),
    ("causal", 4096, 32768),
    ("causal", 2048, 65536),
    ("causal", 1024, 131072),
    ("causal", 16384, 32000),
    ("multi_req", 4096, 32768),
    ("multi_req", 2048, 65536),
    ("multi_req", 1024, 131072),
    ("multi_req", 8192, 8192),
    ("causal", 128, 4096),
    ("causal", 64, 8192),
    ("causal", 1024, 1024),
)
# (clean, no-clean) µs in the order of BENCHMARK_SHAPES.
_H32 = (
    (360, 295), (1049, 1024), (1086, 1074), (1094, 1080), (3342, 3140),
    (385, 271), (391, 282), (394, 284), (173, 95),
    (24.5, 21.4), (39.1, 36.4), (17.6, 13.2),
)
_H64 = (
    (582, 514), (1870, 1848), (1952, 1958), (1977, 1952), (5705, 5911),
    (596, 475), (605, 495), (610, 499), (230, 152),
    (23.4, 20.6), (37.1, 34.4), (21.1, 17.0),
)

DEEPGEMM_H200 = {
    (mode, M, N, H): times
    for H, table in ((32, _H32), (64, _H64))
    for (mode, M, N), times in zip(BENCHMARK_SHAPES, table)
}


def deepgemm_h200_us(mode: str, M: int, N: int, H: int, clean: bool):
    """DeepGEMM's µs for this row on the H200, or None where it was not measured."""
    times = DEEPGEMM_H200.get((mode, M, N, H))
    if times is None:
        return None
    return float(times[0] if clean else times[1])
