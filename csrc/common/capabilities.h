// How a backend states what it serves: one `capabilities.h` per backend folder, its support table,
// holding constexpr lists that the binding checks calls against, the launchers dispatch over, the
// instance files instantiate, aiter/jit/build_config.py lists the instance sources from, and
// aiter/backends.py reads for is_supported and the JIT's target detection (so each fact is written
// once; op_tests/test_support_table.py checks the README's and docs/operator.md's matrices against
// it). Keep every fact on one line, `constexpr int kName[] = {a, b};`, `constexpr int kName = 8;`,
// `constexpr bool kName = true;` or `constexpr const char kName[] = "text";`: the Python side
// parses exactly those forms.
//
// Every backend writes every logits format of the contract (docs/operator.md): float32 or bfloat16,
// the full or the compressed layout, with or without clean_logits. So the table has no format
// column; a backend that lacked one would need it back, with the binding's refusal.
#pragma once
#include <cstddef>
#include <type_traits>
#include <utility>

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

template <size_t Count>
constexpr size_t count_of(const int (&)[Count]) {
  return Count;
}

namespace capabilities_detail {

template <const auto& kValues, class Result, class Visit, size_t... I>
Result dispatch_listed(long long value, Visit& visit, Result otherwise, std::index_sequence<I...>) {
  Result result = otherwise;
  (void)((value == kValues[I] ? (result = visit(std::integral_constant<int, kValues[I]>{}), true) : false) || ...);
  return result;
}

}  // namespace capabilities_detail

// A switch over a table column: visit(std::integral_constant<int, kValues[i]>{}) for the first i
// with kValues[i] == value, else `otherwise`. The launchers dispatch a call's H, D and next_n to
// their kernel instances through it, so a value added to the table is dispatched with no case to
// write (and an instance that does not compile for it fails the build).
template <const auto& kValues, class Result, class Visit>
Result dispatch_listed(long long value, Visit visit, Result otherwise) {
  constexpr size_t kCount = sizeof(kValues) / sizeof(kValues[0]);
  return capabilities_detail::dispatch_listed<kValues>(value, visit, otherwise, std::make_index_sequence<kCount>{});
}

}  // namespace aiter
