// How a backend states what it serves: one `capabilities.h` per backend folder, holding constexpr
// lists that the binding checks calls against, the launcher dispatches over, and aiter/backends.py
// reads for is_supported and the JIT's target detection (so each fact is written once). Keep every
// fact on one line, `constexpr int kName[] = {a, b};`, `constexpr bool kName = true;` or
// `constexpr const char kName[] = "text";`: the Python side parses exactly those forms.
#pragma once
#include <cstddef>

namespace aiter {

template <size_t Count>
constexpr bool listed(const int (&values)[Count], long long value) {
  for (size_t i = 0; i < Count; ++i)
    if (values[i] == value) return true;
  return false;
}

template <size_t Count>
constexpr int largest(const int (&values)[Count]) {
  int most = values[0];
  for (size_t i = 1; i < Count; ++i) most = values[i] > most ? values[i] : most;
  return most;
}

template <size_t Count>
constexpr int smallest(const int (&values)[Count]) {
  int least = values[0];
  for (size_t i = 1; i < Count; ++i) least = values[i] < least ? values[i] : least;
  return least;
}

}  // namespace aiter
