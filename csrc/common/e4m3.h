// float8_e4m3fn decoded on the host: the CPU path's operand tables and the gfx950 host emulation.
// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
// Torch-free and header-only; the table is built once per process.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

namespace aiter {

inline float e4m3_to_float(uint8_t bits) {
  const int exponent = (bits >> 3) & 15, mantissa = bits & 7;
  float magnitude;
  if (exponent == 15 && mantissa == 7)
    magnitude = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  else
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1+m/8) 2^(e-7)
  return (bits & 0x80) ? -magnitude : magnitude;
}

// value[b] = e4m3_to_float(b) for every byte b.
inline const float* e4m3_table() {
  struct Table {
    float value[256];
    Table() {
      for (int b = 0; b < 256; ++b) value[b] = e4m3_to_float(static_cast<uint8_t>(b));
    }
  };
  static const Table table;
  return table.value;
}

}  // namespace aiter
