// CPU top_k_per_row: each row's choosable columns as 64-bit sort keys (the logit's order-preserving
// key above, the complemented column below, so that of two equal logits the lower column is the
// larger key), a linear-time selection of the k largest, then the chosen columns in ascending order.
#include "cpu/indexer_topk_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

namespace aiter {
namespace {

float load_logit(const TopkPerRowParams& p, int64_t r, int64_t c) {
  const int64_t offset = r * p.stride0 + c * p.stride1;
  if (!p.logits_bf16) return static_cast<const float*>(p.logits)[offset];
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p.logits)[offset]) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

void select_row(const TopkPerRowParams& p, int64_t r, std::vector<uint64_t>& keys, std::vector<int32_t>& chosen) {
  int64_t begin = 0, end = 0;
  topk_row_window(p, r, &begin, &end);
  keys.clear();
  for (int64_t c = begin; c < end; ++c) {
    const uint32_t key = topk_key(load_logit(p, r, c));
    if (key != 0u) keys.push_back((static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(c)));
  }
  const size_t k = static_cast<size_t>(p.k);
  if (keys.size() > k) {
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k) - 1, keys.end(),
                     std::greater<uint64_t>());
    keys.resize(k);
  }
  chosen.clear();
  for (uint64_t key : keys) chosen.push_back(static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key)));
  std::sort(chosen.begin(), chosen.end());

  int32_t* out = p.indices + r * p.indices_stride;
  float* vals = p.values != nullptr ? p.values + r * p.values_stride : nullptr;
  for (size_t i = 0; i < k; ++i) {
    const bool filled = i < chosen.size();
    out[i] = filled ? chosen[i] : -1;
    if (vals != nullptr) vals[i] = filled ? load_logit(p, r, chosen[i]) : -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

void top_k_per_row_cpu(const TopkPerRowParams& p) {
  if (p.rows <= 0) return;
  // A grain of a few rows: a row is at least k outputs and a pass over its window.
  at::parallel_for(0, p.rows, 4, [&](int64_t first, int64_t last) {
    std::vector<uint64_t> keys;
    std::vector<int32_t> chosen;
    for (int64_t r = first; r < last; ++r) select_row(p, r, keys, chosen);
  });
}

}  // namespace aiter
