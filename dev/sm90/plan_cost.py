"""What the sm90 plan costs on its own, next to the whole op.

    python -m dev.sm90.plan_cost

Builds a probe (torch's load_inline, the JIT's sm_90a flags) from csrc/sm90/plan.cuh and times, with
the op's timer (CUDA events, cold L2), on the benchmark's window layouts and on a long chunk of short
windows (M = 65536 rows of 64 keys):
  price   `price_blocks_kernel` alone (the op's grid for it);
  cut     a kernel of the op's main grid, threads and shared memory that runs only `cut_shares` on
          those prices, minus the same grid launched with no work (the launch's own cost, printed).
          (Both start from a cold L2; in the op the cut finds the prices in L2, just written.)
In the op the main kernel is the pricing kernel's programmatic dependent, so what the op pays is
about the pricing's run time plus the cut, not a second launch.
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
// The main kernel's grid and shared memory doing nothing (work = false) or only the cut.
template <int H>
__global__ void __launch_bounds__(kThreads, 1) cut_only(const KernelArgs args, const int2* block_units, bool work,
                                                       long long* sink) {
  extern __shared__ uint8_t dynamic_smem[];
  SharedStorage& smem = shared_storage(dynamic_smem);
  if (work) cut_shares<H>(args, block_units, smem);
  if (threadIdx.x == 0) sink[blockIdx.x] = work ? smem.plan_share[0].block + smem.plan_share[1].units : 0;
}
}}

// stage 0: pricing kernel; 1: cut; 2: the cut's grid doing nothing.
void plan_stage(torch::Tensor ks, torch::Tensor ke, int64_t N, int64_t H, bool clean, int64_t stage,
                torch::Tensor workspace, torch::Tensor sink) {
  aiter::Fp8MqaLogitsParams p{};
  p.ks = ks.data_ptr<int32_t>();
  p.ke = ke.data_ptr<int32_t>();
  p.M = ks.size(0);
  p.N = N;
  p.H = static_cast<int32_t>(H);
  p.D = 128;
  p.clean_logits = clean;
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  int2* units = reinterpret_cast<int2*>(workspace.data_ptr());
  const int64_t rows = aiter::sm90::kQTileCols / H, blocks = (p.M + rows - 1) / rows;
  if (stage == 0) {
    const unsigned ctas = static_cast<unsigned>((blocks + aiter::sm90::kPriceThreads - 1) / aiter::sm90::kPriceThreads);
    auto kernel = H == 32 ? aiter::sm90::price_blocks_kernel<32, 128> : aiter::sm90::price_blocks_kernel<64, 128>;
    kernel<<<ctas, aiter::sm90::kPriceThreads, 0, stream>>>(p, units);
    return;
  }
  const size_t smem = sizeof(aiter::sm90::SharedStorage) + 1024;
  auto kernel = H == 32 ? aiter::sm90::cut_only<32> : aiter::sm90::cut_only<64>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  kernel<<<sink.size(0), aiter::sm90::kThreads, smem, stream>>>(p, units, stage == 1,
                                                               reinterpret_cast<long long*>(sink.data_ptr<int64_t>()));
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
        "aiter_sm90_plan_probe",
        cpp_sources="void plan_stage(torch::Tensor, torch::Tensor, int64_t, int64_t, bool, int64_t, torch::Tensor, torch::Tensor);",
        cuda_sources=PROBE, functions=["plan_stage"], extra_include_paths=[str(build_config.csrc_dir())],
        extra_cuda_cflags=[f for f in build_config.SM90_NVCC_FLAGS if f != "-O3"] + ["-O3"], verbose=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.empty(sms, dtype=torch.int64, device="cuda")
    workspace = torch.empty(8 * (65536 // 12 + 1), dtype=torch.uint8, device="cuda")  # the largest M below, H = 32
    timer = GpuTimer(torch.device("cuda"), iters=20)
    empty = torch.zeros(1, dtype=torch.int32, device="cuda")
    launch_us = timer(lambda: probe.plan_stage(empty, empty, 1, 32, False, 2, workspace, sink))
    print(f"the main kernel's grid doing nothing (launch, smem carve-out, retire): {launch_us:.1f} µs")
    print("| shape | mode | H | clean | price µs | cut µs (minus launch) | whole op µs | (price + cut) / op |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, M, N in SHAPES:
        for H in (32, 64):
            q, kv, s, w = make_inputs(M, N, H, 128, "cuda", seed=M + N + H)
            ks, ke = windows(mode, M, N)
            for clean in (True, False):
                price_us = timer(lambda: probe.plan_stage(ks, ke, N, H, clean, 0, workspace, sink))
                cut_us = timer(lambda: probe.plan_stage(ks, ke, N, H, clean, 1, workspace, sink)) - launch_us
                op_us = timer(lambda: aiter.fp8_mqa_logits(q, kv, s, w, ks, ke, clean))
                print(f"| {M}x{N} | {mode} | {H} | {'yes' if clean else 'no'} | {price_us:.1f} | {cut_us:.1f} |"
                      f" {op_us:.1f} | {(price_us + cut_us) / op_us:.3f} |", flush=True)


if __name__ == "__main__":
    main()
