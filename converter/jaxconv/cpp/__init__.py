"""C++ deployment: generated header/source/CMake project on ONNX Runtime."""
