// Symbolic dimension arithmetic of the C++ code that jaxconv to-cpp generates (jax.export's
// semantics: floordiv and mod round toward negative infinity); overflow throws DimError.
// Shared, unchanged, by every generated library and example.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace jaxconv_dims {

/// Dimension arithmetic that overflows int64_t or divides by zero (symbolic sizes out of range).
class DimError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

inline int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw DimError("a dimension overflows int64_t");
  return r;
}

inline int64_t sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw DimError("a dimension overflows int64_t");
  return r;
}

inline int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw DimError("a dimension overflows int64_t");
  return r;
}

inline int64_t neg(int64_t a) { return sub(0, a); }

/// Python's floor division, as jax.export's symbolic dimensions define it.
inline int64_t floordiv(int64_t a, int64_t b) {
  if (b == 0) throw DimError("a dimension divides by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw DimError("a dimension overflows int64_t");
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

inline int64_t mod(int64_t a, int64_t b) { return sub(a, mul(floordiv(a, b), b)); }
inline int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace jaxconv_dims
