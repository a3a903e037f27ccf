// A CPU task's per-thread scratch: one 64-byte aligned block (every part a whole number of cache
// lines and of the widest vector), freed when the thread's share of the work ends.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/work_scheduler.h"

namespace aiter {
namespace cpu {

inline int64_t round_up(int64_t value, int64_t multiple) {
  return scheduler::ceil_div(value, multiple) * multiple;
}

template <class T>
struct AlignedScratch {
  T* ptr;
  // `op` and `limit` name the caller and its per-thread bound in the out-of-memory error.
  AlignedScratch(int64_t elements, const char* op, const std::string& limit) {
    const size_t bytes = static_cast<size_t>(round_up(elements * static_cast<int64_t>(sizeof(T)), 64));
    ptr = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (ptr == nullptr)
      throw std::runtime_error(std::string(op) + " (CPU): out of memory allocating a thread's " +
                               std::to_string(bytes) + "-byte scratch (" + limit + ")");
  }
  ~AlignedScratch() { std::free(ptr); }
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
};

// Parses "<v0>,<v1>,...", exactly `count` decimal integers (the chunk overrides the tests set);
// false when the text is malformed.
inline bool parse_counts(const char* text, int count, long long* values) {
  const char* cursor = text;
  for (int i = 0; i < count; ++i) {
    char* end;
    values[i] = std::strtoll(cursor, &end, 10);
    if (end == cursor || *end != (i + 1 < count ? ',' : '\0')) return false;
    cursor = *end ? end + 1 : end;
  }
  return true;
}

}  // namespace cpu
}  // namespace aiter
