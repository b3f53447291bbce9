// Support code shared, unchanged, by every C++ library that jaxconv to-cpp generates: checked
// dimension arithmetic and element counts, tensors over caller memory, session options, and the
// check of a loaded model against the inputs and outputs the library was generated for.
// Internal to the generated NAME.cc files; not installed.
#pragma once

#include <onnxruntime_cxx_api.h>

#include "jaxconv_dims.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace jaxconv_ort {

/// "[2, 8]".
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// "Mlp: input x float32[b, 8]": the start of an error message about one tensor, built only on error.
inline std::string subject(const std::string& cls, const char* what, const char* doc) {
  return cls + ": " + what + (doc != nullptr ? std::string(" ") + doc : std::string());
}

/// Elements of a tensor of `shape`, checked: no negative dimension, and the element count (and
/// its size in bytes) fits the address space. `cls`, `what` and `doc` name the tensor in errors.
inline size_t element_count(const std::string& cls, const char* what, const char* doc,
                            const std::vector<int64_t>& shape, size_t elem_size) {
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument(subject(cls, what, doc) + " gets a negative dimension: " + shape_text(shape));
  }
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) / elem_size;
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (n > limit / static_cast<uint64_t>(d))
      throw std::invalid_argument(subject(cls, what, doc) + " has shape " + shape_text(shape) +
                                  ": its element count overflows (more bytes than memory can address)");
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<size_t>(n);
}

/// An ONNX Runtime tensor over caller memory (not copied). ONNX Runtime does not write input tensors.
inline Ort::Value tensor(const Ort::MemoryInfo& memory, const void* data, size_t count, size_t elem_size,
                         const std::vector<int64_t>& shape, ONNXTensorElementDataType type) {
  static unsigned char empty[16];
  void* p = const_cast<void*>(count != 0 ? data : static_cast<const void*>(empty));
  return Ort::Value::CreateTensor(memory.GetConst(), p, count * elem_size, shape.data(), shape.size(), type);
}

/// The ONNX shape of a tensor: complex tensors get a trailing (re, im) dimension of 2.
inline std::vector<int64_t> onnx_shape(std::vector<int64_t> shape, bool pairs) {
  if (pairs) shape.push_back(2);
  return shape;
}

/// Throws std::invalid_argument unless a caller's buffer has the element count of its shape.
/// `what` is "input x" or "output buffer y", `doc` the documented shape ("float32[b, 8]").
inline void check_size(const std::string& cls, const char* what, const char* doc, const std::vector<int64_t>& shape,
                       size_t count, size_t size, const void* data) {
  if (size != count)
    throw std::invalid_argument(cls + ": " + what + " has " + std::to_string(size) + " elements, but its shape " +
                                doc + " is " + shape_text(shape) + " (" + std::to_string(count) + " elements)");
  if (data == nullptr && count != 0) throw std::invalid_argument(cls + ": " + what + " is a null pointer");
}

/// An input tensor over the caller's buffer, its size checked against `shape` (the C++ shape).
inline Ort::Value input_tensor(const Ort::MemoryInfo& memory, const std::string& cls, const char* what,
                               const char* doc, const void* data, size_t size, const std::vector<int64_t>& shape,
                               size_t elem_size, bool pairs, ONNXTensorElementDataType type) {
  size_t count = element_count(cls, what, doc, shape, elem_size);
  check_size(cls, what, doc, shape, count, size, data);
  return tensor(memory, data, count, elem_size, onnx_shape(shape, pairs), type);
}

/// The C++ shape of a result ONNX Runtime allocated (without the (re, im) dimension of a complex one).
inline std::vector<int64_t> result_shape(const Ort::Value& value, bool pairs) {
  std::vector<int64_t> shape = value.GetTensorTypeAndShapeInfo().GetShape();
  if (pairs && !shape.empty()) shape.pop_back();
  return shape;
}

/// The ONNX element type's name as jaxconv writes dtypes (float32, int64, ...).
inline std::string dtype_name(ONNXTensorElementDataType type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return "string";
    default: return "element type " + std::to_string(static_cast<int>(type));
  }
}

/// One input or output as the generated library expects it.
struct TensorSpec {
  const char* name;
  ONNXTensorElementDataType type;
  const int64_t* dims;  ///< -1 for a symbolic dimension
  size_t rank;
  const char* doc;  ///< "float32[b, 8]" (a complex tensor: its (re, im) layout "float32[4, 2]")
};

namespace detail {

inline std::string model_dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + (dims[i] < 0 ? std::string("?") : std::to_string(dims[i]));
  return s + "]";
}

inline void check_one(const std::string& what, const char* kind, const TensorSpec& spec, const std::string& name,
                      const Ort::TypeInfo& info) {
  const std::string head = what + ": its " + kind + " " + name;
  if (name != spec.name)
    throw std::runtime_error(what + ": its " + kind + " " + spec.name + " is named " + name + " in the model");
  if (info.GetONNXType() != ONNX_TYPE_TENSOR)
    throw std::runtime_error(head + " is not a tensor (" + spec.doc + " expected)");
  Ort::ConstTensorTypeAndShapeInfo t = info.GetTensorTypeAndShapeInfo();
  std::vector<int64_t> dims = t.GetShape();
  std::string got = dtype_name(t.GetElementType()) + model_dims_text(dims);
  bool ok = t.GetElementType() == spec.type && dims.size() == spec.rank;
  for (size_t k = 0; ok && k < spec.rank; ++k) ok = spec.dims[k] < 0 || dims[k] < 0 || spec.dims[k] == dims[k];
  if (!ok) throw std::runtime_error(head + " is " + got + ", this library expects " + spec.doc);
}

}  // namespace detail

/// Checks the loaded model's inputs and outputs (count, names, element types, ranks, fixed sizes)
/// against the library's; throws one std::runtime_error naming the first difference.
inline void check_model(const Ort::Session& session, const std::string& what, const TensorSpec* inputs,
                        size_t num_inputs, const TensorSpec* outputs, size_t num_outputs) {
  Ort::AllocatorWithDefaultOptions alloc;
  const std::string hint = " (a different model?)";
  if (session.GetInputCount() != num_inputs || session.GetOutputCount() != num_outputs)
    throw std::runtime_error(what + " has " + std::to_string(session.GetInputCount()) + " inputs and " +
                             std::to_string(session.GetOutputCount()) + " outputs, this library expects " +
                             std::to_string(num_inputs) + " and " + std::to_string(num_outputs) + hint);
  try {
    for (size_t i = 0; i < num_inputs; ++i)
      detail::check_one(what, "input", inputs[i], session.GetInputNameAllocated(i, alloc).get(),
                        session.GetInputTypeInfo(i));
    for (size_t i = 0; i < num_outputs; ++i)
      detail::check_one(what, "output", outputs[i], session.GetOutputNameAllocated(i, alloc).get(),
                        session.GetOutputTypeInfo(i));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(e.what() + hint);
  }
}

/// Session options: thread pools, spinning (between runs too, or during each run only, stopped when it
/// returns), and execution providers in order of preference
/// ("cuda", "tensorrt"; "cpu" always comes last). Throws std::runtime_error naming a provider that
/// this ONNX Runtime build does not have.
inline Ort::SessionOptions session_options(const std::string& who, int intra_op_threads, int inter_op_threads,
                                           bool allow_spinning, bool spin_during_run,
                                           const std::vector<std::string>& providers,
                                           int device_id) {
  Ort::SessionOptions options;
  if (intra_op_threads > 0) options.SetIntraOpNumThreads(intra_op_threads);
  if (inter_op_threads > 0) options.SetInterOpNumThreads(inter_op_threads);
  options.SetGraphOptimizationLevel(GraphOptimizationLevel::ORT_ENABLE_ALL);
  const bool during_run = spin_during_run && !allow_spinning && intra_op_threads != 1;
  options.AddConfigEntry("session.intra_op.allow_spinning", allow_spinning || during_run ? "1" : "0");
  if (during_run) options.AddConfigEntry("session.force_spinning_stop", "1");
  options.AddConfigEntry("session.inter_op.allow_spinning", allow_spinning ? "1" : "0");
  const std::unordered_map<std::string, std::string> ort_names = {
      {"cpu", "CPUExecutionProvider"}, {"cuda", "CUDAExecutionProvider"}, {"tensorrt", "TensorrtExecutionProvider"}};
  std::vector<std::string> available = Ort::GetAvailableProviders();
  std::string have;
  for (const std::string& a : available) have += (have.empty() ? "" : ", ") + a;
  const std::string device = std::to_string(device_id);
  for (const std::string& p : providers) {
    auto known = ort_names.find(p);
    if (known == ort_names.end())
      throw std::runtime_error(who + ": unknown execution provider '" + p + "' (use cpu, cuda or tensorrt)");
    bool found = false;
    for (const std::string& a : available) found = found || a == known->second;
    if (!found)
      throw std::runtime_error(who + ": execution provider " + p + " (" + known->second +
                               ") is not in this ONNX Runtime build (it has: " + have + ")");
    const char* keys[] = {"device_id"};
    const char* values[] = {device.c_str()};
    const OrtApi& api = Ort::GetApi();
    if (p == "cuda") {
      OrtCUDAProviderOptionsV2* cuda = nullptr;
      Ort::ThrowOnError(api.CreateCUDAProviderOptions(&cuda));
      std::unique_ptr<OrtCUDAProviderOptionsV2, decltype(api.ReleaseCUDAProviderOptions)> owned(
          cuda, api.ReleaseCUDAProviderOptions);
      Ort::ThrowOnError(api.UpdateCUDAProviderOptions(cuda, keys, values, 1));
      options.AppendExecutionProvider_CUDA_V2(*cuda);
    } else if (p == "tensorrt") {
      OrtTensorRTProviderOptionsV2* trt = nullptr;
      Ort::ThrowOnError(api.CreateTensorRTProviderOptions(&trt));
      std::unique_ptr<OrtTensorRTProviderOptionsV2, decltype(api.ReleaseTensorRTProviderOptions)> owned(
          trt, api.ReleaseTensorRTProviderOptions);
      Ort::ThrowOnError(api.UpdateTensorRTProviderOptions(trt, keys, values, 1));
      options.AppendExecutionProvider_TensorRT_V2(*trt);
    }
  }
  return options;
}

}  // namespace jaxconv_ort
