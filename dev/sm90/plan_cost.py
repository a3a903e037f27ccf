"""What the sm90 kernel's per-CTA plan scan costs on its own, next to the whole op.

    python -m dev.sm90.plan_cost

Builds a probe kernel (torch's load_inline, the JIT's sm_90a flags) that runs only
`sm90::plan_shares` from csrc/sm90/plan.cuh, on the op's grid (one CTA per SM, the kernel's thread
count and shared-memory layout), and times it with the op's timer (CUDA events, cold L2) on the
benchmark's window layouts and on a long chunk of short windows (M = 65536 rows of 64 keys). The same
grid launched with no work gives the launch's own cost; the difference is the scan, which says what
building the plan once per call into a workspace could save at most (every CTA scans all M rows today; a workspace plan would read a few
bytes per CTA instead, plus a launch of its own).
"""

from __future__ import annotations

import torch
from torch.utils.cpp_extension import load_inline

import aiter
from aiter.bench.machine import GpuTimer
from aiter.jit import build_config
from aiter.testing.mqa_logits import make_inputs, make_windows

PROBE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include "sm90/plan.cuh"

namespace aiter { namespace sm90 {
// The same grid and shared memory doing nothing: what launching and retiring it costs.
__global__ void __launch_bounds__(kThreads, 1) launch_only(long long* shares) {
  if (threadIdx.x == 0) shares[blockIdx.x] = blockIdx.x;
}

template <int H>
__global__ void __launch_bounds__(kThreads, 1) plan_only(const KernelArgs args, long long* shares) {
  extern __shared__ uint8_t dynamic_smem[];
  SharedStorage& smem = shared_storage(dynamic_smem);
  plan_shares<H>(args, smem);
  if (threadIdx.x == 0) shares[blockIdx.x] = smem.plan_share[0].units + smem.plan_share[1].units + smem.plan_share[0].block;
}
}}

void plan_only(torch::Tensor ks, torch::Tensor ke, int64_t N, int64_t H, bool clean, bool scan, torch::Tensor shares) {
  aiter::Fp8MqaLogitsParams p{};
  p.ks = ks.data_ptr<int32_t>();
  p.ke = ke.data_ptr<int32_t>();
  p.M = ks.size(0);
  p.N = N;
  p.H = static_cast<int32_t>(H);
  p.D = 128;
  p.clean_logits = clean;
  const size_t smem = sizeof(aiter::sm90::SharedStorage) + 1024;
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  long long* out = reinterpret_cast<long long*>(shares.data_ptr<int64_t>());
  if (!scan) {
    cudaFuncSetAttribute(aiter::sm90::launch_only, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    aiter::sm90::launch_only<<<shares.size(0), aiter::sm90::kThreads, smem, stream>>>(out);
    return;
  }
  auto kernel = H == 32 ? aiter::sm90::plan_only<32> : aiter::sm90::plan_only<64>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  kernel<<<shares.size(0), aiter::sm90::kThreads, smem, stream>>>(p, out);
}
"""

SHAPES = (("causal", 8192, 8192), ("causal", 16384, 32000), ("multi_req", 8192, 8192), ("causal", 1024, 1024),
          ("short64", 65536, 65536))


def windows(mode, M, N):
    if mode == "short64":
        ke = (torch.arange(M, dtype=torch.int64) + 1).clamp(max=N)
        return (ke - 64).clamp(min=0).to(torch.int32).cuda(), ke.to(torch.int32).cuda()
    return make_windows(mode, M, N, "cuda")


def main():
    probe = load_inline(
        "aiter_sm90_plan_probe", cpp_sources="void plan_only(torch::Tensor, torch::Tensor, int64_t, int64_t, bool, bool, torch::Tensor);",
        cuda_sources=PROBE, functions=["plan_only"], extra_include_paths=[str(build_config.csrc_dir())],
        extra_cuda_cflags=[f for f in build_config.SM90_NVCC_FLAGS if f != "-O3"] + ["-O3"], verbose=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shares = torch.empty(sms, dtype=torch.int64, device="cuda")
    timer = GpuTimer(torch.device("cuda"), iters=20)
    empty = torch.zeros(1, dtype=torch.int32, device="cuda")
    launch_us = timer(lambda: probe.plan_only(empty, empty, 1, 32, False, False, shares))
    print(f"the same grid doing nothing (launch, smem carve-out, retire): {launch_us:.1f} µs")
    print("| shape | mode | H | clean | plan only µs | scan µs (plan - launch) | whole op µs | scan / op |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, M, N in SHAPES:
        for H in (32, 64):
            q, kv, s, w = make_inputs(M, N, H, 128, "cuda", seed=M + N + H)
            ks, ke = windows(mode, M, N)
            for clean in (True, False):
                plan_us = timer(lambda: probe.plan_only(ks, ke, N, H, clean, True, shares))
                op_us = timer(lambda: aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, clean))
                scan_us = plan_us - launch_us
                print(f"| {M}x{N} | {mode} | {H} | {'yes' if clean else 'no'} | {plan_us:.1f} | {scan_us:.1f} |"
                      f" {op_us:.1f} | {scan_us / op_us:.3f} |", flush=True)


if __name__ == "__main__":
    main()
