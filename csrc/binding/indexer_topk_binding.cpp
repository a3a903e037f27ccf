// ATen binding of top_k_per_row_prefill and top_k_per_row_decode (module_fp8_mqa_logits): aiter's
// argument order, the indexer's top-k over each row's visible logits.
//
//   indices[r, 0..k): the absolute columns of row r's k largest visible logits, ascending; ties go to the
//   lower column; -inf and NaN never chosen; -1 after the last chosen column when fewer are choosable.
//
// This file only validates the arguments (errors name them: TypeError for a dtype, ValueError for a
// rank, size, stride or value, NotImplementedError for a device without a top-k kernel, RuntimeError for
// mixed devices), fills aiter::TopkPerRowParams (common/indexer_topk_params.h states the windows and
// the order) and hands them to the CPU path or to the attached GPU top-k kernel of the tensors' device
// (gpu_backends.h: sm90; a gfx950 GPU is refused by name). The fused indexer ops
// (aiter/ops/indexer_topk.py) call these on bounded chunks of the logits.
#include <ATen/core/Tensor.h>

#include <c10/core/DeviceGuard.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "binding/checks.h"
#include "binding/gpu_backends.h"
#include "binding/ops.h"
#include "common/indexer_topk_params.h"
#include "cpu/indexer_topk_cpu.h"

namespace {

using namespace aiter::checks;

constexpr const char kPrefillOp[] = "top_k_per_row_prefill: ";
constexpr const char kDecodeOp[] = "top_k_per_row_decode: ";

void check_int32_vector(const char* op, const at::Tensor& t, const char* name, const at::Device& device) {
  check_defined(op, t, name);
  check_dtype(op, t, name, at::kInt, "torch.int32",
              t.scalar_type() == at::kLong ? " (int64 is not accepted: pass .to(torch.int32))" : "");
  check_same_device(op, t, name, device, "logits");
  check_contiguous(op, t, name);
}

// An output [>= num_rows, >= k] of `dtype`, last dim contiguous, on logits' device.
void check_output(const char* op, const at::Tensor& t, const char* name, at::ScalarType dtype, const char* dtype_text,
                  int64_t num_rows, int64_t k, const at::Device& device) {
  check_defined(op, t, name);
  check_dtype(op, t, name, dtype, dtype_text);
  check_dim(op, t, name, 2, "[num_rows, k]");
  check_same_device(op, t, name, device, "logits");
  TORCH_CHECK_VALUE(t.size(0) >= num_rows && t.size(1) >= k, op, name, " must have at least num_rows = ", num_rows,
                    " rows and k = ", k, " columns, got shape ", t.sizes());
  TORCH_CHECK_VALUE(k <= 1 || t.stride(1) == 1, op, name,
                    " must have a contiguous last dim (stride(1) == 1), got strides ", t.strides());
  TORCH_CHECK_VALUE(num_rows <= 1 || t.stride(0) >= k, op, name, " row stride (stride(0) = ", t.stride(0),
                    ") must be >= k = ", k, ", got strides ", t.strides());
}

// logits, num_rows, stride0, stride1 and k, common to both ops; fills the logits part of `p`.
void check_logits(const char* op, const at::Tensor& logits, int64_t num_rows, int64_t stride0, int64_t stride1,
                  int64_t k, aiter::TopkPerRowParams* p) {
  check_defined(op, logits, "logits");
  TORCH_CHECK_TYPE(logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kBFloat16, op,
                   "logits must have dtype torch.float32 or torch.bfloat16, got ", logits.scalar_type());
  check_dim(op, logits, "logits", 2, "[num_rows, width]");
  TORCH_CHECK_VALUE(k >= 1 && k <= aiter::kTopkMaxK, op, "k must be in [1, ", aiter::kTopkMaxK, "], got ", k);
  TORCH_CHECK_VALUE(num_rows >= 0 && num_rows <= logits.size(0), op, "num_rows must be in [0, logits.size(0) = ",
                    logits.size(0), "], got ", num_rows);
  const int64_t width = logits.size(1);
  // The strides are the logits' own (aiter and vLLM pass logits.stride(0), logits.stride(1)); any other
  // value would read outside the tensor or another row.
  TORCH_CHECK_VALUE(num_rows <= 1 || stride0 == logits.stride(0), op, "stride0 must be logits.stride(0) = ",
                    logits.stride(0), ", got ", stride0);
  TORCH_CHECK_VALUE(width <= 1 || stride1 == logits.stride(1), op, "stride1 must be logits.stride(1) = ",
                    logits.stride(1), ", got ", stride1);
  TORCH_CHECK_VALUE(num_rows <= kInt32Max && width <= kInt32Max, op,
                    "logits must have fewer than 2^31 rows and columns (indices are int32), got shape ",
                    logits.sizes());
  const at::Device device = logits.device();
  TORCH_CHECK_NOT_IMPLEMENTED(device.is_cpu() || device.is_cuda(), op, "logits is on ", device,
                              ", which has no top-k kernel (cpu or cuda tensors only)");
  p->logits = logits.data_ptr();
  p->logits_bf16 = logits.scalar_type() == at::kBFloat16;
  p->rows = num_rows;
  p->width = width;
  p->stride0 = num_rows > 1 ? logits.stride(0) : width;
  p->stride1 = width > 1 ? logits.stride(1) : 1;
  p->k = k;
}

void check_indices(const char* op, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                   aiter::TopkPerRowParams* p, const at::Device& device) {
  check_output(op, indices, "indices", at::kInt, "torch.int32", p->rows, p->k, device);
  p->indices = indices.data_ptr<int32_t>();
  p->indices_stride = p->rows > 1 ? indices.stride(0) : p->k;
  if (values.has_value() && values->defined()) {
    check_output(op, *values, "values", at::kFloat, "torch.float32", p->rows, p->k, device);
    p->values = values->data_ptr<float>();
    p->values_stride = p->rows > 1 ? values->stride(0) : p->k;
  }
}

void run(const char* op, const aiter::TopkPerRowParams& p, const at::Device& device) {
  if (p.rows == 0) return;
  if (device.is_cpu()) {
    aiter::top_k_per_row_cpu(p);
    return;
  }
  const auto& table = aiter::topk_gpu_backends();
  TORCH_CHECK_NOT_IMPLEMENTED(table.size() > 0, op, "logits is on ", device, ", but ", aiter::kNoGpuBackendHint,
                              " (a top-k kernel exists for sm90, not yet for gfx950); pass CPU tensors");
  std::string why_not;
  const aiter::TopkGpuBackend* backend = aiter::find_backend(table, device.index(), &why_not);
  TORCH_CHECK_NOT_IMPLEMENTED(backend != nullptr, op, "no top-k kernel for ", device, ": ", why_not,
                              " (gfx950 has no top-k kernel yet); use CPU tensors");
  const c10::DeviceGuard guard(device);
  const char* err = backend->launch(p, device.index(), backend->current_stream(device.index()));
  TORCH_CHECK(err == nullptr, op, backend->name, " launch failed on ", device, ": ", err);
}

}  // namespace

namespace aiter {

void top_k_per_row_prefill(const at::Tensor& logits, const at::Tensor& row_starts, const at::Tensor& row_ends,
                           const at::Tensor& indices, const std::optional<at::Tensor>& values, int64_t num_rows,
                           int64_t stride0, int64_t stride1, int64_t k) {
  aiter::TopkPerRowParams p{};
  check_logits(kPrefillOp, logits, num_rows, stride0, stride1, k, &p);
  const at::Device device = logits.device();
  check_int32_vector(kPrefillOp, row_starts, "rowStarts", device);
  check_int32_vector(kPrefillOp, row_ends, "rowEnds", device);
  TORCH_CHECK_VALUE(row_starts.dim() == 1 && row_starts.size(0) >= num_rows, kPrefillOp,
                    "rowStarts must be 1-D with at least num_rows = ", num_rows, " entries, got shape ",
                    row_starts.sizes());
  TORCH_CHECK_VALUE(row_ends.dim() == 1 && row_ends.size(0) >= num_rows, kPrefillOp,
                    "rowEnds must be 1-D with at least num_rows = ", num_rows, " entries, got shape ",
                    row_ends.sizes());
  check_indices(kPrefillOp, indices, values, &p, device);
  p.row_starts = row_starts.data_ptr<int32_t>();
  p.row_ends = row_ends.data_ptr<int32_t>();
  run(kPrefillOp, p, device);
}

void top_k_per_row_decode(const at::Tensor& logits, int64_t next_n, const at::Tensor& seq_lens,
                          const at::Tensor& indices, const std::optional<at::Tensor>& values, int64_t num_rows,
                          int64_t stride0, int64_t stride1, int64_t k) {
  aiter::TopkPerRowParams p{};
  check_logits(kDecodeOp, logits, num_rows, stride0, stride1, k, &p);
  const at::Device device = logits.device();
  TORCH_CHECK_VALUE(next_n >= 1 && next_n <= kInt32Max, kDecodeOp,
                    "next_n must be >= 1 (query tokens per batch), got ", next_n);
  check_int32_vector(kDecodeOp, seq_lens, "seqLens", device);
  TORCH_CHECK_VALUE(seq_lens.dim() == 1 || (seq_lens.dim() == 2 && (seq_lens.size(1) == next_n ||
                                                                     seq_lens.size(1) == 1)),
                    kDecodeOp, "seqLens must be [B] or [B, 1] (one length per batch) or [B, next_n] (one per row, "
                    "next_n = ", next_n, "), got shape ", seq_lens.sizes());
  const bool per_row = seq_lens.dim() == 2 && seq_lens.size(1) == next_n && next_n > 1;
  TORCH_CHECK_VALUE(seq_lens.size(0) * next_n >= num_rows, kDecodeOp, "seqLens has ", seq_lens.size(0),
                    " batches of next_n = ", next_n, " rows, fewer than num_rows = ", num_rows);
  check_indices(kDecodeOp, indices, values, &p, device);
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.next_n = next_n;
  p.lens_per_row = per_row;
  run(kDecodeOp, p, device);
}

}  // namespace aiter
