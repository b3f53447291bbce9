// Support code of the example programs that jaxconv to-cpp generates: .npy inputs checked against
// the model's dtypes and shapes, symbolic dimensions bound from the files, .npy outputs.
// Shared, unchanged, by every generated example.cc.
#pragma once

#include "jaxconv_dims.h"
#include "npy.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace jaxconv_example {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Bound {
  int64_t value;
  std::string from;
};
using Dims = std::map<std::string, Bound>;

// One expected dimension: a fixed size, a bare symbol (bound from the file), or neither (an expression, checked later).
struct DimPattern {
  int64_t fixed;
  const char* symbol;
};

inline std::string dtype_name(const std::string& descr) {
  static const std::map<std::string, std::string> names = {
      {"<f4", "float32"},
      {"<f8", "float64"},
      {"<f2", "float16"},
      {"<V2", "bfloat16"},
      {"|i1", "int8"},
      {"<i2", "int16"},
      {"<i4", "int32"},
      {"<i8", "int64"},
      {"|u1", "uint8"},
      {"<u2", "uint16"},
      {"<u4", "uint32"},
      {"<u8", "uint64"},
      {"|b1", "bool"},
      {"<c8", "complex64"},
      {"<c16", "complex128"}};
  auto it = names.find(descr);
  return it == names.end() ? "not supported" : it->second;
}

inline std::string where(const char* input, const std::string& file) { return std::string("input ") + input + " (" + file + ")"; }

inline jaxconv_npy::Array load_input(const std::string& file, const char* input, const char* descr) {
  jaxconv_npy::Array a;
  try {
    a = jaxconv_npy::load(file);
  } catch (const jaxconv_npy::Error& e) {
    throw std::runtime_error(std::string("input ") + input + ": " + e.what());
  }
  if (a.descr != descr)
    throw std::runtime_error(where(input, file) + ": dtype '" + a.descr + "' (" + dtype_name(a.descr) + "), expected '" +
                             descr + "' (" + dtype_name(descr) + ")");
  return a;
}

inline void match_shape(const jaxconv_npy::Array& a, const char* input, const std::string& file, const char* expected,
                 const DimPattern* pattern, size_t rank, Dims& dims) {
  std::string got = jaxconv_npy::shape_text(a.shape);
  if (a.shape.size() != rank)
    throw std::runtime_error(where(input, file) + ": shape " + got + " has " + std::to_string(a.shape.size()) +
                             " dimensions, expected " + std::to_string(rank) + ": " + expected);
  for (size_t k = 0; k < rank; ++k) {
    const DimPattern& p = pattern[k];
    if (p.symbol != nullptr) {
      auto it = dims.find(p.symbol);
      if (it == dims.end()) {
        dims[p.symbol] = Bound{a.shape[k], where(input, file)};
      } else if (it->second.value != a.shape[k]) {
        throw std::runtime_error(where(input, file) + ": shape " + got + " gives " + p.symbol + "=" +
                                 std::to_string(a.shape[k]) + " (expected " + expected + "), but " + it->second.from +
                                 " gives " + p.symbol + "=" + std::to_string(it->second.value));
      }
    } else if (p.fixed >= 0 && a.shape[k] != p.fixed) {
      throw std::runtime_error(where(input, file) + ": shape " + got + ", expected " + expected + " (dimension " +
                               std::to_string(k) + " is " + std::to_string(a.shape[k]) + ", not " +
                               std::to_string(p.fixed) + ")");
    }
  }
}

inline void check_expr(const jaxconv_npy::Array& a, const char* input, const std::string& file, const char* expected,
                       size_t k, int64_t value, const char* expr) {
  if (a.shape[k] != value)
    throw std::runtime_error(where(input, file) + ": shape " + jaxconv_npy::shape_text(a.shape) + ", expected " +
                             expected + " (dimension " + std::to_string(k) + " is " + std::to_string(a.shape[k]) +
                             ", but " + expr + " = " + std::to_string(value) + ")");
}

inline int64_t dim_value(const Dims& dims, const char* name) {
  auto it = dims.find(name);
  if (it == dims.end())
    throw UsageError(std::string("dimension ") + name + " is not the size of any input dimension; pass --dim " + name +
                     "=SIZE");
  return it->second.value;
}

inline int64_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
    throw UsageError(what + " needs a non-negative integer, got '" + text + "'");
  return std::stoll(text);
}

inline void parse_dim(const std::string& text, const std::vector<std::string>& known, Dims& dims) {
  size_t eq = text.find('=');
  if (eq == std::string::npos) throw UsageError("--dim takes NAME=SIZE, got '" + text + "'");
  std::string name = text.substr(0, eq);
  bool ok = false;
  std::string list;
  for (const std::string& k : known) {
    ok = ok || k == name;
    list += (list.empty() ? "" : ", ") + k;
  }
  if (!ok) throw UsageError("--dim " + name + ": the model has no dimension " + name + " (it has: " + (list.empty() ? "none" : list) + ")");
  dims[name] = Bound{parse_size(text.substr(eq + 1), "--dim " + name), "--dim"};
}

template <typename T>
inline const T* data_of(const jaxconv_npy::Array& a) {
  return reinterpret_cast<const T*>(a.bytes.data());
}

template <typename T>
inline size_t count_of(const jaxconv_npy::Array& a) {
  return a.bytes.size() / sizeof(T);
}

template <typename T>
inline void save_output(const std::string& dir, const char* name, const char* descr, const std::vector<T>& data,
                 const std::vector<int64_t>& shape) {
  std::string path = dir + "/" + name + ".npy";
  jaxconv_npy::save(path, descr, shape, data.data(), data.size() * sizeof(T));
  std::printf("wrote %s %s %s\n", path.c_str(), dtype_name(descr).c_str(), jaxconv_npy::shape_text(shape).c_str());
}

}  // namespace jaxconv_example
