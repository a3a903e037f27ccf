"""Small-shape latency: CUDA-event time per launch (cold L2) vs back-to-back launches in a CUDA graph
(warm, no host gaps), to separate kernel time from launch and host overhead. usage: small_shapes.py LIB"""
import statistics
import sys

import torch

sys.path.insert(0, __file__.rsplit("/tools/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import run_dev  # noqa: E402
from aiter.testing.mqa_logits import make_inputs, make_windows  # noqa: E402

run_dev.load(sys.argv[1])
run_dev.NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for M, N in ((1024, 1024), (128, 4096), (64, 8192)):
    for H in (32, 64):
        q, kv, s, w = make_inputs(M, N, H, 128, "cuda", 1)
        ks, ke = make_windows("causal", M, N, "cuda")
        out = torch.empty(M, N, device="cuda")
        cold = run_dev.cuda_time(lambda: run_dev.run(q, kv, s, w, ks, ke, True, out), flush)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                run_dev.run(q, kv, s, w, ks, ke, True, out)
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            a, b = torch.cuda.Event(True), torch.cuda.Event(True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e3 / 20)
        print(f"{M}x{N} H={H}: cold event {cold:.1f} us, warm graph {statistics.median(ts):.1f} us per launch")
