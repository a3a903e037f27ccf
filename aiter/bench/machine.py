"""What the benchmark measures about the machine: a timer, the compute peak and the copy bandwidth.

GPU: CUDA events around the timed call alone, a cold L2 (a buffer of 4x the L2 is written before
each timed call, outside the events), warm-up first, median. Peak = torch._scaled_mm at 8192^3 with
e4m3 inputs, unit scales and bf16 output (the faster of use_fast_accum off and on); bandwidth = a 1 GiB device-to-device copy, bytes read +
written. CPU: perf_counter, median; peak = the best float32 matmul rate torch reaches on this CPU (fastest
call: a busy machine only slows calls down); bandwidth = the fastest 256 MiB tensor copy, bytes
read + written. The clock and power read is NVML's (pynvml / nvidia-ml-py) where importable, else
nvidia-smi's, else "n/a". The CUDA-graph time is per call of a graph of back-to-back calls, replayed.
"""

from __future__ import annotations

import platform
import shutil
import statistics
import subprocess
import time

import torch


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
        return f"{props.name} ({arch})"
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"CPU {model}, {torch.get_num_threads()} threads"


class GpuTimer:
    """Median over ``iters`` timed calls, each after a write of 4x the L2 (cold L2). On ROCm the
    write is at least 1 GiB: MI355X's 256 MiB MALL sits behind its 4 MiB-per-XCD L2, which is what
    the device reports as L2."""

    def __init__(self, device: torch.device, iters: int = 20, warmup: int = 3):
        self.device = device
        self.iters = max(10, iters)
        self.warmup = warmup
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (64 << 20)
        flush_bytes = max(4 * l2, (1 << 30) if torch.version.hip else 0)
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.float32, device=device)

    def samples(self, fn, warm_up: bool = True) -> list:
        """µs of ``iters`` calls of fn(), each after the L2 flush; ``warmup`` calls first when warm_up
        (one otherwise: the call after another op's turn finds its code and plan cold)."""
        # The events must sit on the stream the op runs on: the current stream of *this* device.
        with torch.cuda.device(self.device):
            for _ in range(self.warmup if warm_up else 1):
                fn()
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
            for s, e in zip(starts, ends):
                self.flush.fill_(1.0)
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def __call__(self, fn) -> float:
        """Median µs of fn()."""
        return statistics.median(self.samples(fn))


class CpuTimer:
    """Median (or best) µs over 3..``iters`` calls, stopping early once ``budget_s`` is spent."""

    def __init__(self, iters: int = 10, budget_s: float = 3.0, best: bool = False):
        self.iters = iters
        self.budget_s = budget_s
        self.best = best

    def samples(self, fn, warm_up: bool = True, min_iters: int = 3) -> list:
        """µs of at least ``min_iters`` (at most ``iters``) calls, after a warm-up call when warm_up."""
        if warm_up:
            fn()  # warm-up (first-touch of outputs, thread pool start)
        times = []
        t_end = time.perf_counter() + self.budget_s
        while len(times) < max(1, min(self.iters, min_iters)) or (len(times) < self.iters and time.perf_counter() < t_end):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        return times

    def __call__(self, fn) -> float:
        times = self.samples(fn)
        return min(times) if self.best else statistics.median(times)


def gpu_fp8_peak_tflops(device: torch.device, timer: GpuTimer, n: int = 8192) -> float:
    fp8 = torch.float8_e4m3fn
    a = torch.randn(n, n, device=device).to(fp8)
    b = torch.randn(n, n, device=device).to(fp8).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device=device, dtype=torch.float32)
    best_us = float("inf")
    for fast_accum in (False, True):  # the faster of the two is the machine's peak
        try:
            us = timer(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                use_fast_accum=fast_accum))
        except RuntimeError:  # a backend without the fast-accumulation variant
            continue
        best_us = min(best_us, us)
    if best_us == float("inf"):
        return float("nan")  # no FP8 GEMM here: the % of peak column says nan rather than dividing by 0
    return 2.0 * n**3 / (best_us * 1e-6) / 1e12


def gpu_copy_gbps(device: torch.device, timer: GpuTimer, nbytes: int = 1 << 30) -> float:
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src))
    return 2.0 * nbytes / (us * 1e-6) / 1e9


def cpu_fp32_peak_gflops(sizes=(512, 1024, 2048)) -> float:
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        us = CpuTimer(iters=5, budget_s=1.0, best=True)(lambda: torch.mm(a, b))
        best = max(best, 2.0 * n**3 / (us * 1e-6) / 1e9)
    return best


def cpu_copy_gbps(nbytes: int = 256 << 20) -> float:
    src = torch.ones(nbytes // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    us = CpuTimer(iters=5, budget_s=1.0, best=True)(lambda: dst.copy_(src))
    return 2.0 * nbytes / (us * 1e-6) / 1e9



def graph_per_call_us(fns: dict, device: torch.device, calls: int = 20, replays: int = 4) -> dict:
    """name -> µs per call of fn inside a CUDA graph of ``calls`` back-to-back calls (hot L2, no event
    between calls: what a model step pays), the graphs replayed in turn (A B, B A, ...), median of
    ``replays`` replays each; None (and the reason in ``errors``) for a callable that cannot be captured."""
    graphs, errors = {}, {}
    with torch.cuda.device(device):
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        for name, fn in fns.items():
            try:
                with torch.cuda.stream(stream):
                    for _ in range(2):  # outside the graph: JIT, allocator, plan caches
                        fn()
                torch.cuda.synchronize(device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    for _ in range(calls):
                        fn()
                graph.replay()
                torch.cuda.synchronize(device)
                graphs[name] = graph
            except Exception as e:  # a host sync or an unsupported call inside the capture
                errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                torch.cuda.synchronize(device)
        times = {name: [] for name in graphs}
        order = list(graphs)
        for r in range(replays):
            for name in (order if r % 2 == 0 else order[::-1]):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graphs[name].replay()
                end.record()
                torch.cuda.synchronize(device)
                times[name].append(start.elapsed_time(end) * 1e3 / calls)
        del graphs
    out = {name: (statistics.median(times[name]) if name in times else None) for name in fns}
    out["errors"] = errors
    return out


def gpu_clock_power(device: torch.device) -> dict:
    """The SM clock (MHz) and board power (W) now: NVML where importable, else nvidia-smi, else n/a.
    The GPU is found by its UUID (CUDA_VISIBLE_DEVICES renumbers the CUDA indices), else by index."""
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "")
    uuid = uuid if not uuid or uuid.startswith("GPU-") else "GPU-" + uuid
    index = device.index if device.index is not None else torch.cuda.current_device()
    ids = [uuid, index] if uuid else [index]
    try:
        import pynvml

        pynvml.nvmlInit()
        for ident in ids:
            try:
                handle = (pynvml.nvmlDeviceGetHandleByUUID(ident) if isinstance(ident, str)
                          else pynvml.nvmlDeviceGetHandleByIndex(ident))
                return dict(sm_mhz=float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                            power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, source="nvml")
            except Exception:  # an unknown id form for this NVML: try the next
                continue
    except Exception:  # not installed, or no driver library
        pass
    smi = shutil.which("nvidia-smi")
    for ident in ids if smi else []:
        try:
            cmd = [smi, f"--id={ident}", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"]
            text = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
            sm, power = (float(v) for v in text.split(","))
            return dict(sm_mhz=sm, power_w=power, source="nvidia-smi")
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            continue
    return dict(sm_mhz=None, power_w=None, source="n/a")


def format_clock_power(reading: dict | None) -> str:
    if not reading or reading.get("source") == "n/a":
        return "n/a"
    return f"SM {reading['sm_mhz']:.0f} MHz, {reading['power_w']:.0f} W ({reading['source']})"
