// Argument checks the ATen bindings share. Each takes `op`, the prefix every message of that op
// starts with ("fp8_mqa_logits: "), and names the argument: TypeError for a dtype, ValueError for a
// layout, rank, size or stride, RuntimeError for a tensor on another device. The fake kernels in
// aiter/ops/ repeat these messages word for word: change both together.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>

namespace aiter {
namespace checks {

// The most bytes a logits tensor an op allocates may take: 2^48 (256 TiB), beyond any device's
// memory, so that a width no machine can hold is refused by name before the size arithmetic can
// overflow (the fake kernels check the same bound).
constexpr int64_t kMaxLogitsBytes = int64_t(1) << 48;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

inline void check_defined(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.defined(), op, name, " is an undefined tensor");
  // Sparse and mkldnn tensors have no strided storage: say so by name before any pointer is taken.
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, op, name, " must be a dense (strided) tensor, got layout ",
                    t.layout());
}

inline void check_dtype(const char* op, const at::Tensor& t, const char* name, at::ScalarType want,
                        const char* want_text, const char* hint = "") {
  TORCH_CHECK_TYPE(t.scalar_type() == want, op, name, " must have dtype ", want_text, ", got ", t.scalar_type(),
                   hint);
}

inline void check_fp8(const char* op, const at::Tensor& t, const char* name) {
  check_dtype(op, t, name, at::kFloat8_e4m3fn, "torch.float8_e4m3fn",
              t.element_size() == 1
                  ? " (the bytes are decoded as e4m3fn, so another one-byte dtype is not accepted)"
                  : "");
}

inline void check_dim(const char* op, const at::Tensor& t, const char* name, int64_t dim, const char* layout) {
  TORCH_CHECK_VALUE(t.dim() == dim, op, name, " must be ", dim, "-D ", layout, ", got shape ", t.sizes());
}

inline void check_size(const char* op, const at::Tensor& t, const char* name, int64_t dim, int64_t want,
                       const char* what) {
  TORCH_CHECK_VALUE(t.size(dim) == want, op, name, ".size(", dim, ") must be ", what, " = ", want, ", got shape ",
                    t.sizes());
}

inline void check_contiguous(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.is_contiguous(), op, name, " must be contiguous, got shape ", t.sizes(), " with strides ",
                    t.strides(), " (call .contiguous())");
}

// Every tensor of a call lives on the device of its first one (`first_name`: q, or context_lens).
inline void check_same_device(const char* op, const at::Tensor& t, const char* name, const at::Device& device,
                              const char* first_name = "q") {
  TORCH_CHECK(t.device() == device, op, name, " is on ", t.device(), " but ", first_name, " is on ", device,
              "; all tensors must be on ", first_name, "'s device");
}

// A 2-D tensor whose rows may be padded but whose last dim is dense (weights, out, block_table).
inline void check_row_major(const char* op, const at::Tensor& t, const char* name, const char* cols_name) {
  const int64_t rows = t.size(0), cols = t.size(1);
  TORCH_CHECK_VALUE(cols <= 1 || t.stride(1) == 1, op, name,
                    " must have a contiguous last dim (stride(1) == 1), got strides ", t.strides());
  TORCH_CHECK_VALUE(rows <= 1 || t.stride(0) >= cols, op, name, " row stride (stride(0) = ", t.stride(0),
                    ") must be >= ", cols_name, " = ", cols, ", got strides ", t.strides());
}

// The row stride a kernel walks a checked row-major 2-D tensor with (any value serves one row).
inline int64_t row_stride(const at::Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

}  // namespace checks
}  // namespace aiter
