// A new uninitialised tensor, as at::empty makes it, through the operator's declaration alone:
// ATen/ops/empty.h pulls in ATen's Context and device-guard machinery, which the binding files have
// no other use for.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_ops.h>

namespace aiter {

inline at::Tensor empty_tensor(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::_ops::empty_memory_format::call(c10::fromIntArrayRefSlow(sizes),
                                             c10::optTypeMetaToScalarType(options.dtype_opt()), options.layout_opt(),
                                             options.device_opt(), options.pinned_memory_opt(),
                                             c10::impl::check_tensor_options_and_extract_memory_format(options, std::nullopt));
}

}  // namespace aiter
