"""jaxconv to-cpp: a namespaced MLP library builds warning-free, matches jax.jit, installs and is found."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from cpp_support import (
    FILL_CPP,
    MLP_FILE,
    MLP_INPUT_NAMES,
    MLP_SPECS,
    assert_clean_failure,
    build,
    build_consumer,
    cli,
    filled_mlp_reference,
    install_relocated,
    mlp_flat,
    mlp_inputs,
    mlp_reference,
    moved_away,
    ort_root_path,
    run,
    run_example,
    save_inputs,
)


@pytest.fixture(scope="module")
def ort_root() -> str:
    return ort_root_path()


@pytest.fixture(scope="module")
def mlp_project(ort_root: str, tmp_path_factory) -> tuple[str, str, str]:
    """examples/mlp.py through the CLI as demo::Mlp with the C API, built once: (project, build, stdout)."""
    project = str(tmp_path_factory.mktemp("cpp") / "mlp")
    code, out = cli("to-cpp", MLP_FILE, "--specs", *MLP_SPECS, "-o", project, "--name", "demo::Mlp",
                    "--c-api")
    assert code == 0
    return project, build(project, ort_root), out


def test_to_cpp_prints_the_check_table_and_names_files_after_the_model(mlp_project):
    project, _, out = mlp_project
    assert "max abs err" in out and "output_0" in out  # the same table as to-onnx
    names = sorted(os.listdir(project))
    for f in ("Mlp.h", "Mlp.cc", "Mlp_c.h", "Mlp_c.cc", "MlpConfig.cmake", "Mlp.pc", "model.onnx"):
        assert f in names
    assert "model.h" not in names and "model.cc" not in names


@pytest.mark.parametrize("b", [3, 1])
def test_mlp_example_matches_jax(mlp_project, tmp_path, b):
    _, build_dir, _ = mlp_project
    params, x = mlp_inputs(b, seed=b)
    files = save_inputs(str(tmp_path / "in"), MLP_INPUT_NAMES, mlp_flat(params, x))
    r = run_example(os.path.join(build_dir, "Mlp_example"), str(tmp_path / "out"), files, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    assert got.dtype == np.float32 and got.shape == (b, 5)
    np.testing.assert_allclose(got, mlp_reference(params, x), rtol=1e-5, atol=1e-5)


def test_mlp_header_declares_typed_api(mlp_project):
    project, _, _ = mlp_project
    header = open(os.path.join(project, "Mlp.h")).read()
    assert "namespace demo {" in header and "class DEMO_MLP_API Mlp {" in header
    assert "In<float> params_w1," in header and "int64_t b) const;" in header
    assert "Tensor<float> output_0;" in header and "Out<float> output_0;" in header
    assert "static constexpr std::array<int64_t, 2> output_0_dims = {{-1, 5}};" in header
    assert "Thread safety:" in header
    assert "#include <onnxruntime" not in header
    assert "@" not in header.replace('"', "")  # no template placeholder left


API_CHECK = r"""
#include "Mlp.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
""" + FILL_CPP + r"""
using demo::Mlp;
static_assert(Mlp::num_inputs == 5 && Mlp::num_outputs == 1, "counts");
static_assert(Mlp::output_0_dims[0] == -1 && Mlp::output_0_dims[1] == 5, "constexpr output shape");

template <typename F>
void expect_error(const char* label, F f) {
  try {
    f();
    std::printf("%s: no error\n", label);
  } catch (const std::invalid_argument& e) {
    std::printf("%s: invalid_argument: %s\n", label, e.what());
  } catch (const std::runtime_error& e) {
    std::printf("%s: runtime_error: %s\n", label, e.what());
  }
}

void print(const char* label, const float* v, size_t n) {
  std::printf("%s:", label);
  for (size_t i = 0; i < n; ++i) std::printf(" %.9g", v[i]);
  std::printf("\n");
}

int main(int argc, char** argv) {
  (void)argc;
  Mlp model(argv[1]);
  Mlp::Outputs out = model.run(b1, b2, w1, w2, xs, 2);
  std::printf("shape: %lld %lld\n", (long long)out.output_0.shape[0], (long long)out.output_0.shape[1]);
  print("vectors", out.output_0.data.data(), out.output_0.data.size());

  Mlp::Inputs in;
  in.params_b1 = b1;
  in.params_b2 = {b2.data(), b2.size()};
  in.params_w1 = w1;
  in.params_w2 = w2;
  in.x = {xs.data(), xs.size()};
  in.b = 2;
  std::vector<float> mine(10, -99.0f);
  Mlp::Buffers buffers;
  buffers.output_0 = {mine.data(), mine.size()};
  model.run(in, buffers);
  print("buffers", mine.data(), mine.size());
  int mismatches = 0;  // one object, four threads running it at once, each into its own buffer
  std::vector<int> per_thread(4, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      std::vector<float> result(10);
      Mlp::Buffers own;
      own.output_0 = result;
      for (int k = 0; k < 200; ++k) {
        model.run(in, own);
        for (size_t j = 0; j < 10; ++j) per_thread[static_cast<size_t>(t)] += result[j] != mine[j];
      }
    });
  for (std::thread& th : pool) th.join();
  for (int m : per_thread) mismatches += m;
  std::printf("threads: %d mismatches\n", mismatches);
  std::array<int64_t, 2> s = Mlp::output_0_shape(7);
  std::printf("output_0_shape(7): %lld %lld %s %s\n", (long long)s[0], (long long)s[1], Mlp::output_names[0],
              Mlp::output_shape_text[0]);
#if __cplusplus >= 202002L
  std::span<const float> span_x(xs);
  in.x = span_x;
  in.params_w1 = std::span<float>(w1);  // a span of mutable floats converts too
  std::vector<float> via_span(10);
  buffers.output_0 = std::span<float>(via_span);
  model.run(in, buffers);
  print("span", via_span.data(), via_span.size());
#endif

  expect_error("vector size", [&] { model.run(b1, b2, w1, w2, xs, 3); });
  expect_error("pointer count", [&] { model.run(b1, b2, w1, w2, {xs.data(), 15}, 2); });
  expect_error("buffer size", [&] {
    Mlp::Buffers small;
    small.output_0 = {mine.data(), 9};
    model.run(in, small);
  });
  expect_error("unset dimension", [&] {
    Mlp::Inputs no_b = in;
    no_b.b = -1;
    model.run(no_b);
  });
  expect_error("overflow", [&] { model.run(b1, b2, w1, w2, xs, 4 + (int64_t{1} << 60)); });
  expect_error("missing file", [&] { Mlp bad("/nonexistent/model.onnx"); });
  expect_error("other model", [&] { Mlp bad(argv[2]); });
  expect_error("provider", [&] {
    Mlp::Options options;
    options.execution_providers = {"cuda"};
    Mlp bad(argv[1], options);
  });
  Mlp::Options spinning;
  spinning.intra_op_threads = 2;
  spinning.allow_spinning = true;
  Mlp other(argv[1], spinning);
  print("options", other.run(b1, b2, w1, w2, xs, 2).output_0.data.data(), 10);
  return 0;
}
"""


def _other_model(path: str) -> None:
    """The MLP's input names with x as float32[?, 9]: a model this library was not generated for."""
    import onnx
    from onnx import TensorProto, helper

    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
           for n, s in zip(MLP_INPUT_NAMES, [[16], [5], [8, 16], [16, 5], ["b", 9]])]
    out = helper.make_tensor_value_info("output_0", TensorProto.FLOAT, ["b", 9])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["output_0"])], "other", ins, [out])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_mlp_library_api_from_cpp(mlp_project, tmp_path, std):
    """Every run overload, its size checks, the metadata, options and the load-time model check."""
    project, build_dir, _ = mlp_project
    src = tmp_path / "api_check.cc"
    src.write_text(API_CHECK)
    exe = str(tmp_path / "api_check")
    r = run(["g++", f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pthread", str(src), f"-I{project}",
             f"-L{build_dir}", "-lMlp", f"-Wl,-rpath,{build_dir}", "-o", exe])
    assert r.returncode == 0, r.stderr
    _other_model(str(tmp_path / "other.onnx"))
    r = run([exe, os.path.join(project, "model.onnx"), str(tmp_path / "other.onnx")])
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    want = filled_mlp_reference()
    assert lines["shape"] == "2 5"
    for label in ["vectors", "buffers", "options"] + (["span"] if std == "c++20" else []):
        np.testing.assert_allclose(np.array(lines[label].split(), np.float32).reshape(2, 5), want, rtol=1e-5,
                                   atol=1e-5, err_msg=label)
    assert lines["output_0_shape(7)"] == "7 5 output_0 [b, 5]"
    assert lines["threads"] == "0 mismatches"
    assert lines["vector size"] == ("invalid_argument: demo::Mlp: input x has 16 elements, but its shape "
                                    "float32[b, 8] is [3, 8] (24 elements)")
    assert lines["pointer count"].startswith("invalid_argument: demo::Mlp: input x has 15 elements")
    assert lines["buffer size"] == ("invalid_argument: demo::Mlp: output buffer output_0 has 9 elements, "
                                    "but its shape float32[b, 5] is [2, 5] (10 elements)")
    assert lines["unset dimension"] == ("invalid_argument: demo::Mlp: dimension b is -1, not a size "
                                        "(set Inputs::b)")
    assert lines["overflow"] == ("invalid_argument: demo::Mlp: input x float32[b, 8] has shape "
                                 "[1152921504606846980, 8]: its element count overflows (more bytes than "
                                 "memory can address)")
    assert lines["missing file"].startswith("runtime_error: demo::Mlp: cannot load /nonexistent/model.onnx:")
    assert lines["other model"] == (f"runtime_error: demo::Mlp: {tmp_path / 'other.onnx'}: its input x is "
                                    "float32[?, 9], this library expects float32[b, 8] (a different model?)")
    assert lines["provider"].startswith("runtime_error: demo::Mlp: execution provider cuda "
                                        "(CUDAExecutionProvider) is not in this ONNX Runtime build (it has: ")


C_CHECK = r"""
#include "Mlp_c.h"

#include <stdio.h>

int main(int argc, char** argv) {
  char err[256] = "";
  float b1[16], b2[5], w1[128], w2[80], x[16], out[10];
  for (int i = 0; i < 16; ++i) b1[i] = 0.1f * (float)(i % 3) - 0.1f;
  for (int i = 0; i < 5; ++i) b2[i] = 0.05f * (float)i;
  for (int i = 0; i < 128; ++i) w1[i] = 0.05f * (float)((i * 37) % 11) - 0.25f;
  for (int i = 0; i < 80; ++i) w2[i] = 0.03f * (float)((i * 13) % 7) - 0.1f;
  for (int i = 0; i < 16; ++i) x[i] = 0.25f * (float)(i % 7) - 0.5f;
  if (demo_Mlp_create("/nonexistent.onnx", 1, err, sizeof err) == NULL) printf("create error: %s\n", err);
  demo_Mlp_t* model = demo_Mlp_create(argc > 1 ? argv[1] : "", 1, err, sizeof err);
  if (model == NULL) {
    printf("failed: %s\n", err);
    return 1;
  }
  int64_t shape[2];
  demo_Mlp_output_0_shape(2, shape);
  printf("shape: %lld %lld\n", (long long)shape[0], (long long)shape[1]);
  int rc = demo_Mlp_run(model, b1, 16, b2, 5, w1, 128, w2, 80, x, 16, 2, out, 10, err, sizeof err);
  printf("rc: %d\nvalues:", rc);
  for (int i = 0; i < 10; ++i) printf(" %.9g", out[i]);
  rc = demo_Mlp_run(model, b1, 16, b2, 5, w1, 128, w2, 80, x, 16, 2, out, 9, err, sizeof err);
  printf("\nbad count: %d %s\n", rc, err);
  demo_Mlp_destroy(model);
  return 0;
}
"""


def test_c_api_from_c(mlp_project, tmp_path):
    """--c-api: a C program (gcc, C11) creates, sizes, runs and frees the model; errors are return codes."""
    project, build_dir, _ = mlp_project
    src = tmp_path / "c_check.c"
    src.write_text(C_CHECK)
    exe = str(tmp_path / "c_check")
    r = run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(src), f"-I{project}", f"-L{build_dir}",
             "-lMlp", f"-Wl,-rpath,{build_dir}", "-o", exe])
    assert r.returncode == 0, r.stderr
    r = run([exe, os.path.join(project, "model.onnx")])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    assert lines["create error"].startswith("demo::Mlp: cannot load /nonexistent.onnx:")
    assert lines["shape"] == "2 5" and lines["rc"] == "0"
    np.testing.assert_allclose(np.array(lines["values"].split(), np.float32).reshape(2, 5),
                               filled_mlp_reference(), rtol=1e-5, atol=1e-5)
    assert lines["bad count"] == ("1 demo::Mlp: output buffer output_0 has 9 elements, but its shape "
                                  "float32[b, 5] is [2, 5] (10 elements)")


CONSUMER_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
find_package(Mlp 1.0 REQUIRED)
add_executable(app app.cc)
target_link_libraries(app PRIVATE Mlp::Mlp)
target_compile_definitions(app PRIVATE "MODEL_FILE=\\"${Mlp_MODEL_FILE}\\"")
"""

CONSUMER_APP = r"""
#include <Mlp.h>

#include <cstdio>
#include <vector>
""" + FILL_CPP + r"""
int main() {
  demo::Mlp model(MODEL_FILE);
  demo::Mlp::Outputs out = model.run(b1, b2, w1, w2, xs, 2);
  for (float v : out.output_0.data) std::printf("%.9g ", v);
  std::printf("\n");
  return 0;
}
"""


def test_installed_package_is_found_and_self_contained(mlp_project, ort_root, tmp_path):
    """cmake --install, moved elsewhere: find_package(Mlp) and pkg-config build consumers that run from
    another folder; the installed example finds share/Mlp/model.onnx while the generated project is gone."""
    project, build_dir, _ = mlp_project
    prefix = tmp_path / "moved" / "prefix"
    prefix.parent.mkdir()
    install_relocated(build_dir, str(tmp_path / "first"), str(prefix))
    for f in ("include/Mlp.h", "include/Mlp_c.h", "lib/libMlp.so", "lib/libonnxruntime.so.1",
              "share/Mlp/model.onnx", "lib/cmake/Mlp/MlpConfig.cmake", "lib/cmake/Mlp/MlpConfigVersion.cmake",
              "lib/pkgconfig/Mlp.pc", "bin/Mlp_example"):
        assert (prefix / f).exists(), f
    app = build_consumer(str(tmp_path / "consumer"), str(prefix), CONSUMER_CMAKE, CONSUMER_APP)
    want = filled_mlp_reference()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with moved_away(project):  # neither the generated project nor its build tree is there
        r = run([app], cwd=str(elsewhere))
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(np.array(r.stdout.split(), np.float32).reshape(2, 5), want, rtol=1e-5,
                                   atol=1e-5)

        params, x = mlp_inputs(2, seed=5)
        files = save_inputs(str(elsewhere / "in"), MLP_INPUT_NAMES, mlp_flat(params, x))
        r = run_example(str(prefix / "bin" / "Mlp_example"), str(elsewhere / "out"), files,
                        cwd=str(elsewhere))
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(np.load(elsewhere / "out" / "output_0.npy"), mlp_reference(params, x),
                                   rtol=1e-5, atol=1e-5)

        if shutil.which("pkg-config"):
            env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
            flags = run(["pkg-config", "--cflags", "--libs", "Mlp"], env=env)
            assert flags.returncode == 0, flags.stderr
            (elsewhere / "app.cc").write_text(CONSUMER_APP)
            exe = str(elsewhere / "app_pc")
            model_file = f'-DMODEL_FILE="{prefix}/share/Mlp/model.onnx"'
            r = run(["g++", "-std=c++17", str(elsewhere / "app.cc"), model_file, *flags.stdout.split(),
                     "-o", exe])
            assert r.returncode == 0, r.stderr
            r = run([exe], cwd=str(tmp_path))
            assert r.returncode == 0, r.stderr
            np.testing.assert_allclose(np.array(r.stdout.split(), np.float32).reshape(2, 5), want, rtol=1e-5,
                                       atol=1e-5)


@pytest.mark.parametrize("case", ["dtype", "shape", "rank", "batch", "count", "missing", "not_npy", "no_out"])
def test_mlp_example_rejects_bad_input(mlp_project, tmp_path, case):
    _, build_dir, _ = mlp_project
    params, x = mlp_inputs(2, seed=0)
    flat = mlp_flat(params, x)
    files = save_inputs(str(tmp_path / "in"), MLP_INPUT_NAMES, flat)
    exe = os.path.join(build_dir, "Mlp_example")
    out = str(tmp_path / "out")
    if case == "dtype":
        np.save(files[4], x.astype(np.float64))
        assert_clean_failure(run_example(exe, out, files), "input x",
                             "dtype '<f8' (float64), expected '<f4' (float32)")
    elif case == "shape":
        np.save(files[4], np.zeros((2, 9), np.float32))
        assert_clean_failure(run_example(exe, out, files), "input x", "shape (2, 9), expected (b, 8)")
    elif case == "rank":
        np.save(files[2], np.zeros(128, np.float32))
        assert_clean_failure(run_example(exe, out, files), "input params_w1",
                             "shape (128,) has 1 dimensions, expected 2")
    elif case == "batch":
        r = run_example(exe, out, files, "--dim", "b=5")
        assert_clean_failure(r, "input x", "gives b=2", "--dim gives b=5")
    elif case == "count":
        r = run_example(exe, out, files[:4])
        assert_clean_failure(r, "expected 5 input .npy files (params_b1, params_b2, params_w1, params_w2, "
                                "x), got 4")
        assert r.returncode == 2
    elif case == "missing":
        assert_clean_failure(run_example(exe, out, files[:4] + [str(tmp_path / "nope.npy")]),
                             "input x: cannot open", "nope.npy")
    elif case == "not_npy":
        (tmp_path / "x.txt").write_text("1 2 3\n")
        assert_clean_failure(run_example(exe, out, files[:4] + [str(tmp_path / "x.txt")]),
                             "is not a .npy file")
    elif case == "no_out":
        r = run([exe, *files])
        assert_clean_failure(r, "missing --out DIR")
        assert r.returncode == 2
    assert not os.path.exists(out)


def test_cmake_without_onnxruntime_root_says_so(mlp_project, tmp_path):
    project, _, _ = mlp_project
    env = {k: v for k, v in os.environ.items() if k != "ONNXRUNTIME_ROOT"}
    r = run(["cmake", "-S", project, "-B", str(tmp_path / "b1")], env=env)
    assert r.returncode != 0 and "ONNXRUNTIME_ROOT is not set" in r.stderr
    r = run(["cmake", "-S", project, "-B", str(tmp_path / "b2"), f"-DONNXRUNTIME_ROOT={tmp_path}"], env=env)
    assert r.returncode != 0 and "has no include/onnxruntime_cxx_api.h" in r.stderr
