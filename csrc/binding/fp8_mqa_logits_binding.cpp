// ATen binding of fp8_mqa_logits (module_fp8_mqa_logits).
//
//   logits[m, n] = sum_h relu(kv_scale[n] * dot(Q[m,h,:], K[n,:])) * w[m,h]   for n in [s_m, e_m)
//   -inf elsewhere when clean_logits (else unspecified; the CPU path leaves it untouched);
//   s_m, e_m = ks[m], ke[m] clamped to [0, N].
//
// This file only validates the arguments against the contract (docs/operator.md), fills
// aiter::Fp8MqaLogitsParams and hands them to the CPU path or to the GPU backend of q's device.
// Every contract violation is a TORCH_CHECK naming the argument: TypeError for a dtype, ValueError
// for a rank, shape, stride, size, alignment or an `out` that overlaps an input, NotImplementedError
// for a shape or device no compiled kernel serves, RuntimeError for mixed devices and launch failures. The fake kernels in
// aiter/ops/fp8_mqa_logits.py (_check_metadata) repeat these checks on metadata, in the same order and
// words: change both together.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "binding/checks.h"
#include "binding/empty_tensor.h"
#include "binding/gpu_backends.h"
#include "binding/ops.h"
#include "common/fp8_mqa_logits_params.h"
#include "cpu/fp8_mqa_logits_cpu.h"

namespace {

using namespace aiter::checks;

#define AITER_OP "fp8_mqa_logits: "

// Largest row count / key count the device kernels address (2^31 less a few tiles): TMA tensor-map
// dimensions and the kernels' int key indices are 32-bit.
constexpr int64_t kMaxDeviceRows = (int64_t(1) << 31) - 1024;
// TMA (sm90) and the 16-byte global->LDS loads (gfx950) need 16-byte aligned Q and K rows.
constexpr int64_t kDeviceAlignment = 16;

void check_bounds_dtype(const at::Tensor& t, const char* name) {
  check_dtype(AITER_OP, t, name, at::kInt, "torch.int32",
              t.scalar_type() == at::kLong ? " (int64 bounds are not accepted: pass .to(torch.int32))"
                                           : "");
}

// The bytes of a validated tensor (contiguous, or 2-D with a dense last dim: weights, out): `rows`
// runs of `run` bytes, `pitch` bytes apart, from `first`.
struct ByteRuns {
  int64_t first, rows, pitch, run;
};

ByteRuns byte_runs(const at::Tensor& t) {
  const auto first = static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr()));
  const int64_t item = t.element_size();
  if (t.dim() == 2 && !t.is_contiguous()) return {first, t.size(0), t.stride(0) * item, t.size(1) * item};
  return {first, 1, t.numel() * item, t.numel() * item};
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Whether two sets of runs share a byte: each run of the one with fewer runs against the other.
bool runs_meet(ByteRuns a, ByteRuns b) {
  const auto end = [](const ByteRuns& r) { return r.first + (r.rows - 1) * r.pitch + r.run; };
  if (a.first >= end(b) || b.first >= end(a)) return false;
  if (a.rows > b.rows) std::swap(a, b);
  for (int64_t i = 0; i < a.rows; ++i) {
    const int64_t lo = a.first + i * a.pitch;
    // b's first run that ends after lo is the only one that can start before lo + a.run.
    const int64_t j = std::max<int64_t>(0, floor_div(lo - b.run - b.first, b.pitch) + 1);
    if (j < b.rows && b.first + j * b.pitch < lo + a.run) return true;
  }
  return false;
}

// The kernels read every input while they write out, so a shared byte gives wrong logits and a
// corrupted input. torch's rule (get_overlap_status, as its own out= ops use): tensors of two
// storages never overlap; bytes are compared, so views of another dtype count. It answers TooHard
// for a row-padded out or weights, whose runs are then compared exactly: a buffer that interleaves
// out's rows with another input's is accepted.
void check_no_overlap(const at::Tensor& out, const at::Tensor& t, const char* name) {
  const at::MemOverlapStatus status = at::get_overlap_status(out, t);
  const bool overlap =
      status == at::MemOverlapStatus::Full || status == at::MemOverlapStatus::Partial ||
      (status == at::MemOverlapStatus::TooHard && out.storage().is_alias_of(t.storage()) &&
       runs_meet(byte_runs(out), byte_runs(t)));
  TORCH_CHECK_VALUE(!overlap, AITER_OP, "out overlaps ", name, " in memory; the op writes out while it reads ",
                    name, ", so pass an out that shares no memory with any input");
}

// Compressed logits hold a row's window from column 0: each must fit the max_seqlen_k columns. Read
// on the host, so only for CPU tensors (a GPU kernel writes the first max_seqlen_k keys of a longer
// window and no more: the caller's guarantee, as in DeepGEMM).
void check_windows_fit(const at::Tensor& cu_starts, const at::Tensor& cu_ends, int64_t N, int64_t max_seqlen_k) {
  const int32_t* starts = cu_starts.data_ptr<int32_t>();
  const int32_t* ends = cu_ends.data_ptr<int32_t>();
  for (int64_t m = 0; m < cu_starts.size(0); ++m) {
    const int64_t begin = std::clamp<int64_t>(starts[m], 0, N), end = std::clamp<int64_t>(ends[m], 0, N);
    TORCH_CHECK_VALUE(end - begin <= max_seqlen_k, AITER_OP, "row ", m, "'s window [", begin, ", ", end,
                      ") holds ", end - begin, " keys, more than max_seqlen_k = ", max_seqlen_k,
                      " (compressed logits hold each window from column 0)");
  }
}

// What names the width of the logits in the messages: max_seqlen_k, or kv's N (the full layout).
const char* width_name(bool compressed) { return compressed ? "max_seqlen_k" : "N"; }

// Refuses a new [rows, cols] result beyond kMaxLogitsBytes (row stride padded to 256 bytes).
void check_logits_size(int64_t rows, int64_t cols, at::ScalarType dtype, bool compressed) {
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t per_256_bytes = 256 / itemsize;
  bool fits = cols <= kMaxLogitsBytes / itemsize;
  if (fits) {
    const int64_t row_bytes = std::max<int64_t>(1, (cols + per_256_bytes - 1) / per_256_bytes) * 256;
    fits = rows == 0 || row_bytes <= kMaxLogitsBytes / rows;
  }
  TORCH_CHECK_VALUE(fits, AITER_OP, "the logits [M = ", rows, ", ", width_name(compressed), " = ", cols,
                    "] would take more than 2^48 bytes: ",
                    compressed ? "max_seqlen_k (or M) is too large"
                               : "q's M and kv's N are too large for the full layout (max_seqlen_k > 0 gives the "
                                 "compressed one)");
}

// A new [rows, cols] logits tensor whose row stride is a multiple of 256 bytes (DeepGEMM and aiter pad
// too; some top-k kernels need an aligned row stride): a view of a padded buffer. An allocation
// failure names the width.
at::Tensor allocate_logits(int64_t rows, int64_t cols, const at::TensorOptions& options, bool compressed) {
  const int64_t per_256_bytes = 256 / static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
  const int64_t padded = std::max<int64_t>(1, (cols + per_256_bytes - 1) / per_256_bytes) * per_256_bytes;
  at::Tensor buffer;
  try {
    buffer = aiter::empty_tensor({rows, padded}, options);
  } catch (const c10::Error& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, AITER_OP, "cannot allocate the logits [M = ", rows, ", ",
                     width_name(compressed), " = ", cols, "] on ", options.device(), ": ",
                     compressed ? "max_seqlen_k (or M) is too large" : "M x N is too large (or pass out=)",
                     " for its memory (", e.what_without_backtrace(), ")");
  }
  return buffer.narrow(1, 0, cols);
}

void check_device_sizes(int64_t M, int64_t N, int64_t H, const at::Tensor& q, const at::Tensor& kv) {
  TORCH_CHECK_VALUE(N <= kMaxDeviceRows, AITER_OP, "kv has N = ", N,
                    " keys; the GPU kernels address at most ", kMaxDeviceRows,
                    " (split the chunk or use CPU tensors)");
  TORCH_CHECK_VALUE(M * H <= kMaxDeviceRows, AITER_OP, "q has M * H = ", M, " * ", H, " = ", M * H,
                    " rows; the GPU kernels address at most ", kMaxDeviceRows, " (split the rows)");
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(q.data_ptr()) % kDeviceAlignment == 0, AITER_OP,
                    "q's data pointer must be ", kDeviceAlignment,
                    "-byte aligned for the GPU kernels (got a view at storage offset ",
                    q.storage_offset(), "; pass q.clone())");
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(kv.data_ptr()) % kDeviceAlignment == 0, AITER_OP,
                    "kv's data pointer must be ", kDeviceAlignment,
                    "-byte aligned for the GPU kernels (got a view at storage offset ",
                    kv.storage_offset(), "; pass kv.clone())");
}

// The attached GPU backend that runs on q's device, or a NotImplementedError saying why none does.
const aiter::GpuBackend& backend_for(const at::Device& device) {
  const auto& table = aiter::gpu_backends();
  TORCH_CHECK_NOT_IMPLEMENTED(table.size() > 0, AITER_OP, "q is on ", device, ", but ", aiter::kNoGpuBackendHint,
                              "; pass CPU tensors");
  std::string why_not;
  const aiter::GpuBackend* backend = aiter::find_backend(table, device.index(), &why_not);
  TORCH_CHECK_NOT_IMPLEMENTED(backend != nullptr, AITER_OP, "no kernel for ", device, ": ", why_not,
                              "; use CPU tensors");
  return *backend;
}

// The GPU backend that will run this call, after the checks only it can answer (H and D served,
// split_n, the kernels' size and alignment limits): made before the output is allocated.
const aiter::GpuBackend& checked_gpu_backend(const at::Tensor& q, const at::Tensor& kv, int64_t split_n,
                                             int64_t max_seqlen_k) {
  const bool compressed = max_seqlen_k > 0;
  const at::Device device = q.device();
  const aiter::GpuBackend& backend = backend_for(device);
  const int64_t M = q.size(0), H = q.size(1), D = q.size(2), N = kv.size(0);
  TORCH_CHECK_NOT_IMPLEMENTED(backend.serves(H, D), AITER_OP, "the ", backend.name, " kernel serves ",
                              backend.serves_text, ", got q of shape ", q.sizes(), " (H = ", H, ", D = ", D,
                              "); use CPU tensors");
  TORCH_CHECK_VALUE(split_n == 0 || backend.has_fixed_grid, AITER_OP, "split_n (the fixed grid's splits) is an ",
                    "option of backends with a fixed grid (gfx950); the ", backend.name,
                    " kernel has none, so pass split_n=0 or None");
  TORCH_CHECK_VALUE(split_n <= std::numeric_limits<int32_t>::max(), AITER_OP, "split_n must fit in int32, got ",
                    split_n);
  TORCH_CHECK_VALUE(!compressed || max_seqlen_k <= kMaxDeviceRows, AITER_OP, "max_seqlen_k = ", max_seqlen_k,
                    " is more columns than the GPU kernels address (", kMaxDeviceRows, ")");
  check_device_sizes(M, N, H, q, kv);
  return backend;
}

}  // namespace

namespace aiter {

at::Tensor fp8_mqa_logits(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_scales,
                          const at::Tensor& weights, const at::Tensor& cu_starts,
                          const at::Tensor& cu_ends, bool clean_logits,
                          const c10::optional<at::Tensor>& out, int64_t split_n, int64_t max_seqlen_k,
                          const std::string& logits_dtype) {
  check_defined(AITER_OP, q, "q");
  check_defined(AITER_OP, kv, "kv");
  check_defined(AITER_OP, kv_scales, "kv_scales");
  check_defined(AITER_OP, weights, "weights");
  check_defined(AITER_OP, cu_starts, "cu_starts");
  check_defined(AITER_OP, cu_ends, "cu_ends");
  const bool has_out = out.has_value() && out->defined();
  if (has_out) check_defined(AITER_OP, *out, "out");
  TORCH_CHECK_VALUE(split_n >= 0, AITER_OP, "split_n must be >= 0 (0 = the kernel's own choice), got ", split_n);
  TORCH_CHECK_VALUE(max_seqlen_k >= 0, AITER_OP, "max_seqlen_k must be >= 0 (0 = the full [M, N] layout), got ",
                    max_seqlen_k);
  TORCH_CHECK_VALUE(logits_dtype.empty() || logits_dtype == "float32" || logits_dtype == "bfloat16", AITER_OP,
                    "logits_dtype must be torch.float32 or torch.bfloat16, got ", logits_dtype);

  check_fp8(AITER_OP, q, "q");
  check_fp8(AITER_OP, kv, "kv");
  check_dtype(AITER_OP, kv_scales, "kv_scales", at::kFloat, "torch.float32");
  check_dtype(AITER_OP, weights, "weights", at::kFloat, "torch.float32");
  check_bounds_dtype(cu_starts, "cu_starts");
  check_bounds_dtype(cu_ends, "cu_ends");
  if (has_out) {
    TORCH_CHECK_TYPE(out->scalar_type() == at::kFloat || out->scalar_type() == at::kBFloat16, AITER_OP,
                     "out must have dtype torch.float32 or torch.bfloat16, got ", out->scalar_type());
    const char* out_name = out->scalar_type() == at::kFloat ? "float32" : "bfloat16";
    TORCH_CHECK_TYPE(logits_dtype.empty() || logits_dtype == out_name, AITER_OP, "out has dtype torch.",
                     out_name, " but logits_dtype is torch.", logits_dtype, "; pass one that agrees");
  }
  const bool bf16_logits =
      has_out ? out->scalar_type() == at::kBFloat16 : logits_dtype == "bfloat16";
  const bool compressed = max_seqlen_k > 0;

  check_dim(AITER_OP, q, "q", 3, "[M, H, D]");
  check_dim(AITER_OP, kv, "kv", 2, "[N, D]");
  check_dim(AITER_OP, weights, "weights", 2, "[M, H]");
  check_dim(AITER_OP, cu_starts, "cu_starts", 1, "[M]");
  check_dim(AITER_OP, cu_ends, "cu_ends", 1, "[M]");
  const int64_t M = q.size(0), H = q.size(1), D = q.size(2), N = kv.size(0);
  TORCH_CHECK_VALUE(H >= 1 && D >= 1, AITER_OP, "q must have H >= 1 heads and head dim D >= 1, got shape ",
                    q.sizes());
  TORCH_CHECK_VALUE(H <= std::numeric_limits<int32_t>::max() && D <= std::numeric_limits<int32_t>::max(),
                    AITER_OP, "q's H and D must fit in int32, got shape ", q.sizes());
  check_size(AITER_OP, kv, "kv", 1, D, "q's head dim D");
  // 0-d when N == 1: aiter's per-token quantiser squeezes a one-key chunk's scales to a scalar.
  TORCH_CHECK_VALUE(kv_scales.dim() == 1 || (kv_scales.dim() == 2 && kv_scales.size(1) == 1) ||
                        (kv_scales.dim() == 0 && N == 1),
                    AITER_OP, "kv_scales must be [N], [N, 1] or (when N == 1) 0-d, got shape ", kv_scales.sizes(),
                    " with N = ", N);
  if (kv_scales.dim() > 0) check_size(AITER_OP, kv_scales, "kv_scales", 0, N, "kv's N");
  check_size(AITER_OP, weights, "weights", 0, M, "q's M");
  check_size(AITER_OP, weights, "weights", 1, H, "q's H");
  check_size(AITER_OP, cu_starts, "cu_starts", 0, M, "q's M");
  check_size(AITER_OP, cu_ends, "cu_ends", 0, M, "q's M");
  const int64_t width = compressed ? max_seqlen_k : N;  // columns of the logits
  if (has_out) {
    check_dim(AITER_OP, *out, "out", 2, compressed ? "[M, max_seqlen_k]" : "[M, N]");
    check_size(AITER_OP, *out, "out", 0, M, "q's M");
    check_size(AITER_OP, *out, "out", 1, width, compressed ? "max_seqlen_k" : "kv's N");
  }

  const at::Device device = q.device();
  TORCH_CHECK_NOT_IMPLEMENTED(device.is_cpu() || device.is_cuda(), AITER_OP, "q is on ", device,
                              ", which has no kernel here (cpu or cuda tensors only; the meta/fake "
                              "kernel of torch.ops.aiter.fp8_mqa_logits handles meta tensors)");
  check_same_device(AITER_OP, kv, "kv", device);
  check_same_device(AITER_OP, kv_scales, "kv_scales", device);
  check_same_device(AITER_OP, weights, "weights", device);
  check_same_device(AITER_OP, cu_starts, "cu_starts", device);
  check_same_device(AITER_OP, cu_ends, "cu_ends", device);
  if (has_out) check_same_device(AITER_OP, *out, "out", device);

  check_contiguous(AITER_OP, q, "q");
  check_contiguous(AITER_OP, kv, "kv");
  check_contiguous(AITER_OP, kv_scales, "kv_scales");
  check_contiguous(AITER_OP, cu_starts, "cu_starts");
  check_contiguous(AITER_OP, cu_ends, "cu_ends");
  check_row_major(AITER_OP, weights, "weights", "H");
  if (has_out) {
    check_row_major(AITER_OP, *out, "out", compressed ? "max_seqlen_k" : "N");
    check_no_overlap(*out, q, "q");
    check_no_overlap(*out, kv, "kv");
    check_no_overlap(*out, kv_scales, "kv_scales");
    check_no_overlap(*out, weights, "weights");
    check_no_overlap(*out, cu_starts, "cu_starts");
    check_no_overlap(*out, cu_ends, "cu_ends");
  }

  TORCH_CHECK_VALUE(split_n == 0 || !device.is_cpu(), AITER_OP, "split_n (the fixed grid's splits) is an ",
                    "option of backends with a fixed grid (gfx950); the CPU path has none, so pass split_n=0 or None");
  const aiter::GpuBackend* gpu_backend =
      device.is_cpu() ? nullptr : &checked_gpu_backend(q, kv, split_n, max_seqlen_k);
  const at::ScalarType result_dtype = bf16_logits ? at::kBFloat16 : at::kFloat;
  if (!has_out) check_logits_size(M, width, result_dtype, compressed);
  if (compressed && device.is_cpu()) check_windows_fit(cu_starts, cu_ends, N, max_seqlen_k);

  const c10::DeviceGuard guard(device);
  at::Tensor result = has_out ? *out : allocate_logits(M, width, q.options().dtype(result_dtype), compressed);

  aiter::Fp8MqaLogitsParams p{};
  p.q = static_cast<const uint8_t*>(q.data_ptr());
  p.kv = static_cast<const uint8_t*>(kv.data_ptr());
  p.kv_scales = kv_scales.data_ptr<float>();
  p.weights = weights.data_ptr<float>();
  p.ks = cu_starts.data_ptr<int32_t>();
  p.ke = cu_ends.data_ptr<int32_t>();
  p.out = result.data_ptr();
  p.M = M;
  p.N = N;
  p.H = static_cast<int32_t>(H);
  p.D = static_cast<int32_t>(D);
  p.weights_stride = row_stride(weights);
  p.out_stride = row_stride(result);
  p.out_columns = width;
  p.logits_dtype = bf16_logits ? aiter::LogitsDtype::kBFloat16 : aiter::LogitsDtype::kFloat32;
  p.compressed = compressed;
  p.clean_logits = clean_logits;

  if (M == 0 || width == 0) return result;
  if (N == 0) {  // every window is empty: compressed rows are all tail
    if (clean_logits) result.fill_(-std::numeric_limits<float>::infinity());
    return result;
  }
  if (gpu_backend == nullptr) {
    aiter::fp8_mqa_logits_cpu(p);
  } else {
    // Scratch from the caching allocator, ordered on the current stream like the output: no sync, and
    // inside a CUDA-graph capture it comes from the graph's pool.
    const size_t workspace_bytes = gpu_backend->workspace_bytes(p, device.index());
    const at::Tensor workspace =
        workspace_bytes > 0 ? aiter::empty_tensor({static_cast<int64_t>(workspace_bytes)}, q.options().dtype(at::kByte))
                            : at::Tensor();
    const char* err = gpu_backend->launch(p, split_n, workspace_bytes > 0 ? workspace.data_ptr() : nullptr,
                                          device.index(), gpu_backend->current_stream(device.index()));
    TORCH_CHECK(err == nullptr, AITER_OP, gpu_backend->name, " launch failed on ", device, ": ", err);
  }
  return result;
}

std::string cpu_simd_variant() { return aiter::fp8_mqa_logits_cpu_variant(); }

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names{"cpu"};
  const auto add = [&names](const char* name) {
    for (const std::string& known : names)
      if (known == name) return;
    names.emplace_back(name);
  };
  for (int i = 0; i < aiter::gpu_backends().size(); ++i) add(aiter::gpu_backends()[i].name);
  for (int i = 0; i < aiter::paged_gpu_backends().size(); ++i) add(aiter::paged_gpu_backends()[i].name);
  for (int i = 0; i < aiter::topk_gpu_backends().size(); ++i) add(aiter::topk_gpu_backends()[i].name);
  return names;
}

}  // namespace aiter
