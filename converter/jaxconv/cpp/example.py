"""example.cc: a command-line program that runs the model on .npy files and writes .npy results."""

from __future__ import annotations

from jaxconv.cpp import dims as cdims
from jaxconv.cpp.model import CppModel
from jaxconv.cpp.names import cpp_string
from jaxconv.cpp.types import CPP_TYPES

_SUPPORT = r"""
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

std::string dtype_name(const std::string& descr) {
  static const std::map<std::string, std::string> names = {DTYPE_NAMES};
  auto it = names.find(descr);
  return it == names.end() ? "not supported" : it->second;
}

std::string where(const char* input, const std::string& file) { return std::string("input ") + input + " (" + file + ")"; }

jaxconv_npy::Array load_input(const std::string& file, const char* input, const char* descr) {
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

void match_shape(const jaxconv_npy::Array& a, const char* input, const std::string& file, const char* expected,
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

inline void check_expr(const jaxconv_npy::Array& a, const char* input, const std::string& file, const char* expected, size_t k,
                int64_t value, const char* expr) {
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

int64_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
    throw UsageError(what + " needs a non-negative integer, got '" + text + "'");
  return std::stoll(text);
}

void parse_dim(const std::string& text, const std::vector<std::string>& known, Dims& dims) {
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
const T* data_of(const jaxconv_npy::Array& a) {
  return reinterpret_cast<const T*>(a.bytes.data());
}

template <typename T>
void save_output(const std::string& dir, const char* name, const char* descr, const std::vector<T>& data,
                 const std::vector<int64_t>& shape) {
  std::string path = dir + "/" + name + ".npy";
  jaxconv_npy::save(path, descr, shape, data.data(), data.size() * sizeof(T));
  std::printf("wrote %s %s %s\n", path.c_str(), dtype_name(descr).c_str(), jaxconv_npy::shape_text(shape).c_str());
}
"""


def _shape_repr(dims: tuple[int | str, ...]) -> str:
    inner = ", ".join(str(d) for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def usage(model: CppModel) -> str:
    opts = "[--model FILE.onnx] [--threads N]" + (" [--dim NAME=SIZE]" if model.symbols else "")
    files = " ".join(f"{t.name}.npy" for t in model.inputs)
    return f"usage: {model.cls}_example {opts} --out DIR {files}".rstrip()


def render(model: CppModel) -> str:
    c = model.cls
    names = ", ".join(f"{{{cpp_string(t.descr)}, {cpp_string(t.dtype)}}}" for t in CPP_TYPES.values())
    help_lines = [f"Runs {c} (JAX function {model.function}) with ONNX Runtime on .npy inputs and writes "
                  f"{', '.join(t.name + '.npy' for t in model.outputs)} into DIR.", "inputs:"]
    help_lines += [f"  {t.name}.npy: {t.doc} (npy dtype {t.type.descr})" for t in model.inputs]
    help_lines.append("--model: " + ("load this .onnx instead of the embedded model" if model.embed
                                     else "the model to load (default: model.onnx of the generated project)"))
    out: list[str] = [
        f"// {c}_example: runs {c} on .npy files and writes .npy results; generated by jaxconv to-cpp.",
        '#include "model.h"',
        '#include "npy.h"',
        "",
        "#include <cstdint>",
        "#include <cstdio>",
        "#include <exception>",
        "#include <filesystem>",
        "#include <map>",
        "#include <stdexcept>",
        "#include <string>",
        "#include <system_error>",
        "#include <vector>",
        "",
        "#ifndef JAXCONV_MODEL_PATH",
        '#define JAXCONV_MODEL_PATH "model.onnx"',
        "#endif",
        "",
        "namespace {",
        "",
        f"const char kProg[] = {cpp_string(c + '_example')};",
        f"const char kUsage[] = {cpp_string(usage(model))};",
        f"const char kHelp[] = {cpp_string(chr(10).join(help_lines) + chr(10))};",
        f"constexpr size_t kNumInputs = {len(model.inputs)};",
        "const std::vector<std::string> kSymbols = {" + ", ".join(cpp_string(s) for s in model.symbols) + "};",
        "const char* const kInputList = " + cpp_string(", ".join(t.name for t in model.inputs) or "none") + ";",
        "",
        cdims.HELPERS_CC.rstrip(),
        _SUPPORT.replace("DTYPE_NAMES", names).rstrip(),
        "",
        "int run_main(int argc, char** argv) {",
        "  std::string out_dir;",
        '  std::string model_path = ' + ('"";' if model.embed else "JAXCONV_MODEL_PATH;"),
        "  int threads = 0;",
        "  Dims dims;",
        "  std::vector<std::string> files;",
        "  for (int i = 1; i < argc; ++i) {",
        "    std::string arg = argv[i];",
        "    auto value = [&]() -> std::string {",
        "      if (i + 1 >= argc) throw UsageError(arg + \" needs a value\");",
        "      return argv[++i];",
        "    };",
        "    if (arg == \"-h\" || arg == \"--help\") {",
        "      std::printf(\"%s\\n%s\", kUsage, kHelp);",
        "      return 0;",
        "    } else if (arg == \"--out\") {",
        "      out_dir = value();",
        "    } else if (arg == \"--model\") {",
        "      model_path = value();",
        "    } else if (arg == \"--threads\") {",
        "      threads = static_cast<int>(parse_size(value(), \"--threads\"));",
        "    } else if (arg == \"--dim\") {",
        "      parse_dim(value(), kSymbols, dims);",
        "    } else if (arg.size() > 1 && arg[0] == '-') {",
        "      throw UsageError(\"unknown option \" + arg);",
        "    } else {",
        "      files.push_back(arg);",
        "    }",
        "  }",
        "  if (out_dir.empty()) throw UsageError(\"missing --out DIR\");",
        "  if (files.size() != kNumInputs)",
        "    throw UsageError(\"expected \" + std::to_string(kNumInputs) + \" input .npy files (\" + kInputList + \"), got \" +",
        "                     std::to_string(files.size()));",
    ]
    for i, t in enumerate(model.inputs):
        expected = cpp_string(_shape_repr(t.dims))
        pattern = ", ".join(
            f"{{-1, {cpp_string(str(d).strip())}}}" if cdims.is_symbol(d) else (f"{{{d}, nullptr}}" if isinstance(d, int) else "{-1, nullptr}")
            for d in t.dims)
        out.append(f"  jaxconv_npy::Array in{i} = load_input(files[{i}], {cpp_string(t.name)}, {cpp_string(t.type.descr)});")
        if t.dims:
            out.append(f"  const DimPattern pattern{i}[] = {{{pattern}}};")
            out.append(f"  match_shape(in{i}, {cpp_string(t.name)}, files[{i}], {expected}, pattern{i}, {len(t.dims)}, dims);")
        else:
            out.append(f"  match_shape(in{i}, {cpp_string(t.name)}, files[{i}], {expected}, nullptr, 0, dims);")
    for s in model.symbols:
        out.append(f"  const int64_t {model.symbol_idents[s]} = dim_value(dims, {cpp_string(s)});")
    for i, t in enumerate(model.inputs):
        for k, d in enumerate(t.dims):
            if isinstance(d, str) and not cdims.is_symbol(d):
                out.append(f"  check_expr(in{i}, {cpp_string(t.name)}, files[{i}], {cpp_string(_shape_repr(t.dims))}, {k}, "
                           f"{model.dim_expr(d)}, {cpp_string(d)});")
    if model.embed:
        out.append(f"  {c} model = model_path.empty() ? {c}(threads) : {c}(model_path, threads);")
    else:
        out.append(f"  {c} model(model_path, threads);")
    args = [f"data_of<{t.type.cpp}>(in{i})" for i, t in enumerate(model.inputs)]
    args += [model.symbol_idents[s] for s in model.symbols]
    out += [
        f"  {c}::Outputs result = model.run({', '.join(args)});",
        "  std::error_code ec;",
        "  std::filesystem::create_directories(out_dir, ec);",
        "  if (ec) throw std::runtime_error(\"cannot create \" + out_dir + \": \" + ec.message());",
    ]
    for t in model.outputs:
        out.append(f"  save_output(out_dir, {cpp_string(t.name)}, {cpp_string(t.type.descr)}, result.{t.ident}.data, "
                   f"result.{t.ident}.shape);")
    out += [
        "  return 0;",
        "}",
        "",
        "}  // namespace",
        "",
        "int main(int argc, char** argv) {",
        "  try {",
        "    return run_main(argc, argv);",
        "  } catch (const UsageError& e) {",
        "    std::fprintf(stderr, \"%s: error: %s (see --help)\\n\", kProg, e.what());",
        "    return 2;",
        "  } catch (const std::exception& e) {",
        "    std::fprintf(stderr, \"%s: error: %s\\n\", kProg, e.what());",
        "    return 1;",
        "  }",
        "}",
        "",
    ]
    return "\n".join(out)
