// Minimal NumPy .npy reader/writer (format versions 1.0-3.0, C order), shipped by jaxconv to-cpp.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace jaxconv_npy {

/// A .npy file's contents: dtype descr ('<f4'), shape and raw little-endian bytes.
struct Array {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

/// Any problem reading or writing a .npy file; what() is one line naming the file.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// "(2, 3)", as numpy prints shapes.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

/// Descr with the byte-order mark numpy uses: '|' for one-byte types, '<' for little-endian.
inline std::string normalize_descr(std::string d) {
  if (d.size() >= 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=')) d[0] = (d.size() == 3 && d[2] == '1') ? '|' : '<';
  return d;
}

/// Bytes per element of a descr such as '<f4' (0 when it has no fixed size).
inline size_t item_size(const std::string& descr) {
  size_t i = 0;
  while (i < descr.size() && !(descr[i] >= '0' && descr[i] <= '9')) ++i;
  if (i == descr.size()) return 0;
  try {
    return static_cast<size_t>(std::stoul(descr.substr(i)));
  } catch (...) {
    return 0;
  }
}

namespace detail {

inline size_t skip_space(const std::string& h, size_t i) {
  while (i < h.size() && (h[i] == ' ' || h[i] == '\t')) ++i;
  return i;
}

inline size_t value_of(const std::string& h, const std::string& key, const std::string& path) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) k = h.find("\"" + key + "\"");
  if (k == std::string::npos) throw Error(path + ": .npy header has no '" + key + "'");
  size_t c = h.find(':', k + key.size() + 2);
  if (c == std::string::npos) throw Error(path + ": bad .npy header near '" + key + "'");
  return skip_space(h, c + 1);
}

inline void parse_header(const std::string& h, const std::string& path, Array& a, bool& fortran) {
  size_t i = value_of(h, "descr", path);
  if (i >= h.size() || (h[i] != '\'' && h[i] != '"'))
    throw Error(path + ": the .npy dtype is not a simple type (structured arrays are not supported)");
  size_t e = h.find(h[i], i + 1);
  if (e == std::string::npos) throw Error(path + ": bad .npy header (descr)");
  a.descr = h.substr(i + 1, e - i - 1);
  i = value_of(h, "fortran_order", path);
  fortran = h.compare(i, 4, "True") == 0;
  i = value_of(h, "shape", path);
  if (i >= h.size() || h[i] != '(') throw Error(path + ": bad .npy header (shape)");
  size_t close = h.find(')', i);
  if (close == std::string::npos) throw Error(path + ": bad .npy header (shape)");
  std::string dims = h.substr(i + 1, close - i - 1);
  size_t p = 0;
  while (p < dims.size()) {
    p = skip_space(dims, p);
    if (p >= dims.size()) break;
    if (dims[p] < '0' || dims[p] > '9') throw Error(path + ": bad .npy header (shape)");
    int64_t v = 0;
    while (p < dims.size() && dims[p] >= '0' && dims[p] <= '9') v = v * 10 + (dims[p++] - '0');
    if (p < dims.size() && dims[p] == 'L') ++p;
    a.shape.push_back(v);
    p = skip_space(dims, p);
    if (p < dims.size() && dims[p] == ',') ++p;
  }
}

}  // namespace detail

/// Reads a whole .npy file; throws Error on anything it cannot represent.
inline Array load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path + ": " + std::strerror(errno));
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw Error(path + " is not a .npy file (no \\x93NUMPY magic)");
  int major = static_cast<unsigned char>(magic[6]);
  uint32_t len = 0;
  unsigned char b[4] = {0, 0, 0, 0};
  if (major == 1) {
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw Error(path + ": truncated .npy header");
    len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw Error(path + ": truncated .npy header");
    len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    throw Error(path + ": unsupported .npy format version " + std::to_string(major));
  }
  if (len > (1u << 24)) throw Error(path + ": bad .npy header length");
  std::string header(len, '\0');
  if (!f.read(&header[0], len)) throw Error(path + ": truncated .npy header");
  Array a;
  bool fortran = false;
  detail::parse_header(header, path, a, fortran);
  a.descr = normalize_descr(a.descr);
  if (fortran) throw Error(path + " is in Fortran order; save it in C order (np.ascontiguousarray)");
  size_t item = item_size(a.descr);
  if (item == 0) throw Error(path + ": unsupported .npy dtype '" + a.descr + "'");
  size_t count = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && count > (static_cast<size_t>(1) << 48) / static_cast<size_t>(d))
      throw Error(path + ": shape " + shape_text(a.shape) + " is too large");
    count *= static_cast<size_t>(d);
  }
  a.bytes.resize(count * item);
  if (!a.bytes.empty() && !f.read(a.bytes.data(), static_cast<std::streamsize>(a.bytes.size())))
    throw Error(path + " is truncated: shape " + shape_text(a.shape) + " of '" + a.descr + "' needs " +
                std::to_string(a.bytes.size()) + " data bytes");
  return a;
}

/// Writes a .npy file (format 1.0).
inline void save(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                 const void* data, size_t nbytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff), static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (nbytes) f.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace jaxconv_npy
