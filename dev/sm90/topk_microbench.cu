// The sm90 top-k kernels alone on synthetic logits: the shipped launcher (register_select.cuh for rows
// up to ~33K columns, cluster_select.cuh where its plan fits, else two_pass_select.cuh) against the
// two-pass kernel launched directly (the kernel before the cluster one), same inputs, same run. A microbenchmark (dev tree, not shipped); an A/B of
// two builds of the cluster kernel runs this binary from each tree, interleaved.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icsrc -o /tmp/topk_microbench \
//        dev/sm90/topk_microbench.cu && /tmp/topk_microbench [--iters N] [--k K] [--no-old]
//
// Rows: prefill [4096, 32768] and [1024, 131072] float32 and bfloat16 (whole rows and causal windows,
// row r seeing the first N - M + r + 1 keys; ragged windows of random start and length, a third of
// them shorter than k; multi_req: four requests of N / 4 keys and M / 4 causal queries each), decode
// [64 .. 256, 8192 .. 65536] float32. Logits: a
// hash of (row, column) shaped like the indexer's (a relu'd sum, many in a narrow range), so the
// threshold's bin holds what real rows hold. Each call runs on a cold L2 (a 256 MiB write before it,
// outside the timed span); the median of --iters calls. GB/s = the windows' logits bytes over the
// time, against the H200's ~4.2 TB/s copy bandwidth. The kernels' indices must agree bit for bit (all
// are exact); a mismatch is printed and makes the exit status 1. The op tests stay the gate for a
// kernel change: these rows are few.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sm90/topk/topk_launcher.cu"

namespace {

using aiter::TopkPerRowParams;

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// max(0, sum of 4 uniforms - 1.6) * 3 + a small uniform: a third of the row near 0, the rest spread
// over a few octaves.
__global__ void fill_logits(void* out, bool bf16, int64_t rows, int64_t width, uint64_t seed) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int j = 0; j < 4; ++j) s += (mix(seed + uint64_t(i) * 4 + j) >> 8) * (1.0f / 16777216.0f);
    const float v = fmaxf(0.f, s - 1.6f) * 3.0f + (mix(~(seed + uint64_t(i))) >> 8) * (1e-3f / 16777216.0f);
    if (bf16)
      static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    else
      static_cast<float*>(out)[i] = v;
  }
}

struct Shape {
  const char* what;
  int64_t rows, width;
  bool bf16, causal;
  bool ragged = false;     // windows of random start and length, many shorter than k
  bool multi_req = false;  // four requests of width / 4 keys, rows / 4 causal queries each
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20, k = 2048;
  bool old = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--k") && i + 1 < argc) k = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-old")) old = false;
    else {
      std::fprintf(stderr, "usage: %s [--iters N] [--k K] [--no-old]\n", argv[0]);
      return 2;
    }
  }
  std::vector<Shape> shapes = {
      {"prefill", 4096, 32768, false, false},  {"prefill", 4096, 32768, true, false},
      {"prefill causal", 4096, 32768, false, true}, {"prefill", 1024, 131072, false, false},
      {"prefill", 1024, 131072, true, false},  {"prefill causal", 1024, 131072, false, true},
      {"prefill ragged", 4096, 32768, false, false, true}, {"prefill ragged", 4096, 32768, true, false, true},
      {"prefill multi_req", 4096, 32768, false, false, false, true},
  };
  for (int64_t b : {64, 128, 256})
    for (int64_t n : {8192, 16384, 32768, 65536}) shapes.push_back({"decode", b, n, false, false});

  int dev = 0;
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs | k = %d | cold L2, median of %d | GB/s of window logits, %% of 4200\n", prop.name,
              prop.multiProcessorCount, k, iters);
  std::printf("| shape | dtype | rows x width | kernel: CTAs per row, KiB each | new us | new GB/s | new %% of 4200 | old us | "
              "old GB/s | speedup | equal |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const size_t flush_bytes = size_t(256) << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaFuncSetAttribute(aiter::sm90::topk::top_k_per_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(aiter::sm90::topk::kSmemBytes)));
  int status = 0;
  for (const Shape& sh : shapes) {
    const size_t elem = sh.bf16 ? 2 : 4;
    void* logits = nullptr;
    int32_t *starts = nullptr, *ends = nullptr, *idx_new = nullptr, *idx_old = nullptr;
    CHECK(cudaMalloc(&logits, size_t(sh.rows) * sh.width * elem));
    CHECK(cudaMalloc(&starts, sh.rows * 4));
    CHECK(cudaMalloc(&ends, sh.rows * 4));
    CHECK(cudaMalloc(&idx_new, size_t(sh.rows) * k * 4));
    CHECK(cudaMalloc(&idx_old, size_t(sh.rows) * k * 4));
    fill_logits<<<1024, 256, 0, stream>>>(logits, sh.bf16, sh.rows, sh.width, 12345 + sh.rows + sh.width);
    std::vector<int32_t> hs(sh.rows, 0), he(sh.rows);
    double bytes = 0;
    for (int64_t r = 0; r < sh.rows; ++r) {
      he[r] = static_cast<int32_t>(sh.causal ? sh.width - sh.rows + r + 1 : sh.width);
      if (sh.ragged) {  // a window of any start and length, a third of them shorter than k
        const uint64_t h = (static_cast<uint64_t>(r) + 1) * 0x9E3779B97F4A7C15ull;
        hs[r] = static_cast<int32_t>((h >> 20) % sh.width);
        he[r] = static_cast<int32_t>(std::min<int64_t>(sh.width, hs[r] + static_cast<int64_t>((h >> 40) % (3 * k))));
      }
      if (sh.multi_req) {
        const int64_t per_rows = sh.rows / 4, per_keys = sh.width / 4, j = r / per_rows;
        hs[r] = static_cast<int32_t>(j * per_keys);
        he[r] = static_cast<int32_t>(hs[r] + per_keys - per_rows + r % per_rows + 1);
      }
      bytes += double(he[r] - hs[r]) * elem;
    }
    CHECK(cudaMemcpy(starts, hs.data(), sh.rows * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ends, he.data(), sh.rows * 4, cudaMemcpyHostToDevice));
    TopkPerRowParams p{};
    p.logits = logits;
    p.logits_bf16 = sh.bf16;
    p.rows = sh.rows;
    p.width = sh.width;
    p.stride0 = sh.width;
    p.stride1 = 1;
    p.row_starts = starts;
    p.row_ends = ends;
    p.indices_stride = k;
    p.k = k;
    auto time_it = [&](auto&& launch) {
      std::vector<float> ts;
      for (int i = 0; i < iters + 2; ++i) {
        CHECK(cudaMemsetAsync(flush, i, flush_bytes, stream));
        CHECK(cudaEventRecord(e0, stream));
        launch();
        CHECK(cudaEventRecord(e1, stream));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms * 1e3f);
      }
      return median(ts);
    };
    p.indices = idx_new;
    const double t_new = time_it([&] {
      const char* err = aiter::sm90::topk::launch(p, dev, stream);
      if (err != nullptr) {
        std::fprintf(stderr, "launch: %s\n", err);
        std::exit(2);
      }
    });
    // The launcher's choice: the register kernel, else the cluster plan (0 CTAs: the two-pass kernel).
    const aiter::sm90::topk::DeviceInfo* info = nullptr;
    aiter::sm90::topk::device_info(dev, &info);
    const aiter::sm90::topk::ClusterPlan plan = aiter::sm90::topk::plan_cluster(p, *info);
    const int register_keys = aiter::sm90::topk::register_instance(p);
    char kernel[64];
    if (register_keys > 0)
      std::snprintf(kernel, sizeof(kernel), "register (%d keys a thread): 1", register_keys);
    else if (plan.cluster > 0)
      std::snprintf(kernel, sizeof(kernel), "cluster: %d, %.1f", plan.cluster, plan.smem_bytes / 1024.0);
    else
      std::snprintf(kernel, sizeof(kernel), "two-pass: 1");
    double t_old = 0;
    bool equal = true;
    if (old) {
      TopkPerRowParams q = p;
      q.indices = idx_old;
      t_old = time_it([&] {
        aiter::sm90::topk::top_k_per_row_kernel<<<static_cast<unsigned>(q.rows), aiter::sm90::topk::kThreads,
                                                  aiter::sm90::topk::kSmemBytes, stream>>>(q);
        CHECK(cudaGetLastError());
      });
      std::vector<int32_t> a(size_t(sh.rows) * k), b(size_t(sh.rows) * k);
      CHECK(cudaMemcpy(a.data(), idx_new, a.size() * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(b.data(), idx_old, b.size() * 4, cudaMemcpyDeviceToHost));
      equal = a == b;
      if (!equal) status = 1;
    }
    const double gbps = bytes / (t_new * 1e-6) / 1e9;
    char old_cells[128] = "- | - | -";
    if (old)
      std::snprintf(old_cells, sizeof(old_cells), "%.1f | %.0f | %.2f", t_old, bytes / (t_old * 1e-6) / 1e9,
                    t_old / t_new);
    std::printf("| %s | %s | %lldx%lld | %s | %.1f | %.0f | %.0f%% | %s | %s |\n", sh.what,
                sh.bf16 ? "bf16" : "f32", static_cast<long long>(sh.rows), static_cast<long long>(sh.width),
                kernel, t_new, gbps, 100.0 * gbps / 4200.0, old_cells,
                old ? (equal ? "yes" : "NO") : "-");
    std::fflush(stdout);
    CHECK(cudaFree(logits));
    CHECK(cudaFree(starts));
    CHECK(cudaFree(ends));
    CHECK(cudaFree(idx_new));
    CHECK(cudaFree(idx_old));
  }
  return status;
}
