"""The C++ generator without CMake builds: names, templates, fixed files, complex tensors, cpp-runtime."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from cpp_support import HAVE_TOOLCHAIN, MLP_SPECS, cli, mlp_function, ort_root_path, run

TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "converter", "jaxconv",
                         "cpp", "templates")


def _trace_mlp():
    from jaxconv.program import trace

    return trace(mlp_function(), MLP_SPECS, name="mlp")


@pytest.mark.parametrize("name", ["my-model", "2fast", "class", "test", "x_example", "foo::", "::Mlp",
                                  "std::Mlp", "foo:bar", "a::class::B"])
def test_bad_name_is_a_usage_error(tmp_path, name):
    from jaxconv.cpp.project import write_project
    from jaxconv.errors import UsageError

    with pytest.raises(UsageError, match="--name"):
        write_project(_trace_mlp(), str(tmp_path / "p"), name=name, check=False)
    assert not os.path.exists(tmp_path / "p")


def test_namespaced_name_splits_into_namespaces_and_class():
    from jaxconv.cpp.model import build_model

    model = build_model(_trace_mlp(), name="foo::bar::Mlp")
    assert (model.namespaces, model.cls, model.qualified, model.macro, model.c_prefix) == (
        ("foo", "bar"), "Mlp", "foo::bar::Mlp", "FOO_BAR_MLP", "foo_bar_Mlp")


def test_two_models_share_a_folder_without_clashing(tmp_path):
    """Files are named after the model: two projects' sources and headers can sit side by side."""
    from jaxconv.cpp.model import build_model
    from jaxconv.cpp.project import project_texts
    from jaxconv.cpp.template import FIXED_FILES

    a = project_texts(build_model(_trace_mlp(), name="One"))
    b = project_texts(build_model(_trace_mlp(), name="two::Two"))
    shared = set(a) & set(b)
    assert shared == set(FIXED_FILES) | {"CMakeLists.txt", "README.md", "example.cc"}
    assert all(a[f] == b[f] for f in FIXED_FILES)  # the fixed support files are the same bytes


def test_templates_fill_every_placeholder_and_refuse_unknown_keys():
    from jaxconv.cpp import template
    from jaxconv.cpp.model import build_model
    from jaxconv.cpp.project import project_texts

    model = build_model(_trace_mlp(), name="foo::Mlp", embed=True, c_api=True)
    for name, text in project_texts(model).items():
        assert not re.search(r"@[A-Z][A-Z0-9_]*@", text), name
    with pytest.raises(KeyError, match="no placeholder for .'NOPE'"):
        template.render("package.pc.in", {"QUALIFIED": "a", "FUNCTION": "f", "CLS": "a", "NOPE": "x"})
    with pytest.raises(KeyError, match="no value for .'CLS'"):
        template.render("package.pc.in", {"QUALIFIED": "a", "FUNCTION": "f"})


def test_package_data_ships_every_template():
    """setup.cfg's package data covers each file under templates/, so a pip install has them."""
    import fnmatch

    from setuptools.config.setupcfg import read_configuration

    patterns = read_configuration(os.path.join(os.path.dirname(TEMPLATES), "..", "..", "..", "setup.cfg"))[
        "options"]["package_data"]["jaxconv.cpp"]
    for f in os.listdir(TEMPLATES):
        assert any(fnmatch.fnmatch(f"templates/{f}", p) for p in patterns), f
    assert "get_onnxruntime.sh" in patterns


def test_example_dtype_table_matches_the_generator():
    from jaxconv.cpp.types import CPP_TYPES

    text = open(os.path.join(TEMPLATES, "example_support.h")).read()
    for t in CPP_TYPES.values():
        assert f'{{"{t.descr}", "{t.dtype}"}}' in text, t.dtype


@pytest.fixture(scope="module")
def ort_root() -> str:
    return ort_root_path()


@pytest.mark.parametrize("header", ["jaxconv_dims.h", "jaxconv_ort.h", "npy.h", "example_support.h"])
def test_fixed_cpp_files_compile_with_warnings_as_errors(ort_root, tmp_path, header):
    src = tmp_path / "use.cc"
    src.write_text(f'#include "{header}"\n')
    r = run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wpedantic", "-Wshadow",
             "-Wconversion", "-Wsign-conversion", "-Werror", f"-I{TEMPLATES}", "-isystem",
             os.path.join(ort_root, "include"), str(src)])
    assert r.returncode == 0, r.stderr


def _complex_model(path: str) -> None:
    """z: complex64[3] and x: float32[b] in; y = 2*z (complex64[3]) and w = z as complex128[3] out, in
    jaxconv's (re, im) layout with the jaxconv.complex metadata, as the ONNX lowering writes them; and
    x_out = x, declared float32[n]: a shape the library can only learn from the run."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["two"],
                          value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
         helper.make_node("Mul", ["z", "two"], ["y"]),
         helper.make_node("Cast", ["z"], ["w"], to=TensorProto.DOUBLE),
         helper.make_node("Identity", ["x"], ["x_out"])],
        "cplx",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("w", TensorProto.DOUBLE, [3, 2]),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    helper.set_model_props(model, {"jaxconv.complex": json.dumps(
        {"inputs": {"z": "complex64"}, "outputs": {"y": "complex64", "w": "complex128"}})})
    onnx.save(model, path)


COMPLEX_CHECK = r"""
#include "Twice.h"

#include <complex>
#include <cstdio>
#include <stdexcept>
#include <vector>

int main(int argc, char** argv) {
  (void)argc;
  cplx::Twice model(argv[1]);
  std::vector<std::complex<float>> z = {{1.0f, 2.0f}, {3.0f, -1.0f}, {0.5f, 0.25f}};
  std::vector<float> x = {7.0f, 8.0f, 9.0f};
  cplx::Twice::Outputs out = model.run(z, x, 3);
  for (std::complex<float> v : out.y.data) std::printf("%g %g ", v.real(), v.imag());
  std::printf("| %zu %lld %g", out.y.shape.size(), (long long)out.x_out.shape[0], out.x_out.data[2]);
  std::vector<std::complex<double>> w(3);
  cplx::Twice::Inputs in;
  in.z = z;
  in.x = x;
  in.b = 3;
  std::vector<std::complex<float>> y(3);
  std::vector<float> x_out(3);
  cplx::Twice::Buffers buffers;
  buffers.y = y;
  buffers.w = w;
  buffers.x_out = x_out;
  model.run(in, buffers);
  std::printf(" |");
  for (std::complex<double> v : w) std::printf(" %g %g", v.real(), v.imag());
  std::printf(" | %g |", x_out[1]);
  buffers.x_out = {x_out.data(), 2};
  try {
    model.run(in, buffers);
  } catch (const std::invalid_argument& e) {
    std::printf(" %s", e.what());
  }
  std::printf("\n");
  return 0;
}
"""


def test_complex_tensors_are_std_complex_buffers(ort_root, tmp_path):
    """A model whose jaxconv.complex metadata lists complex tensors: std::complex<float>/<double> buffers."""
    from jaxconv.cpp.project import write_project_for_onnx

    _complex_model(str(tmp_path / "cplx.onnx"))
    project = tmp_path / "proj"
    write_project_for_onnx(str(tmp_path / "cplx.onnx"), str(project), function="cplx", name="cplx::Twice",
                           c_api=True)
    header = (project / "Twice.h").read_text()
    assert "#include <complex>" in header
    assert "In<std::complex<float>> z;" in header and "Out<std::complex<double>> w;" in header
    (tmp_path / "check.cc").write_text(COMPLEX_CHECK)
    include = os.path.join(ort_root, "include")
    for generated in ("example.cc", "Twice_c.cc"):  # the example and the C API of a model without dimensions
        r = run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wshadow", "-Werror",
                 f"-I{project}", str(project / generated)])
        assert r.returncode == 0, r.stderr
    exe = str(tmp_path / "check")
    r = run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", str(tmp_path / "check.cc"),
             str(project / "Twice.cc"), f"-I{project}", "-isystem", include, f"-L{ort_root}/lib",
             "-lonnxruntime", f"-Wl,-rpath,{ort_root}/lib", "-o", exe])
    assert r.returncode == 0, r.stderr
    r = run([exe, str(project / "model.onnx")])
    assert r.returncode == 0, r.stderr
    y_text, rank, w_text, x_out, error = r.stdout.split("|")
    z = np.array([1 + 2j, 3 - 1j, 0.5 + 0.25j], np.complex64)
    y = np.array(y_text.split(), np.float32)
    np.testing.assert_array_equal(y[0::2] + 1j * y[1::2], 2 * z)
    assert rank.split() == ["1", "3", "9"]  # y's C++ shape is [3], not the (re, im) layout [3, 2]
    w = np.array(w_text.split(), np.float64)
    np.testing.assert_array_equal(w[0::2] + 1j * w[1::2], z.astype(np.complex128))
    assert x_out.strip() == "8"  # an output whose shape is known only after the run, into a caller buffer
    assert error.strip() == ("cplx::Twice: output buffer x_out has 2 elements, but its shape float32[n] "
                             "is [3] (3 elements)")


def test_model_without_inputs_compiles_warning_free(ort_root, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from jaxconv.cpp.project import write_project_for_onnx

    value = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
    graph = helper.make_graph([helper.make_node("Constant", [], ["out"], value=value)], "k", [],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(tmp_path / "k.onnx"))
    project = tmp_path / "k"
    write_project_for_onnx(str(tmp_path / "k.onnx"), str(project), function="konst", embed=True, c_api=True)
    assert "  Outputs run() const;" in (project / "konst.h").read_text()
    for source in ("konst.cc", "example.cc", "konst_c.cc"):
        r = run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wshadow", "-Werror",
                 f"-I{project}", "-isystem", os.path.join(ort_root, "include"), str(project / source)])
        assert r.returncode == 0, r.stderr


def test_complex_metadata_must_match_the_layout(tmp_path):
    import onnx

    from jaxconv.cpp.project import write_project_for_onnx
    from jaxconv.errors import UnsupportedError

    _complex_model(str(tmp_path / "cplx.onnx"))
    model = onnx.load(str(tmp_path / "cplx.onnx"))
    model.metadata_props[0].value = json.dumps({"inputs": {"x": "complex64"}, "outputs": {}})
    onnx.save(model, str(tmp_path / "bad.onnx"))
    expected = r"input x is listed as complex64 .* but is float32\[b\] \(expected float32\[\.\.\., 2\]\)"
    with pytest.raises(UnsupportedError, match=expected):
        write_project_for_onnx(str(tmp_path / "bad.onnx"), str(tmp_path / "p"), function="cplx")
    assert not os.path.exists(tmp_path / "p")


@pytest.mark.skipif(not HAVE_TOOLCHAIN, reason="bash tools of get_onnxruntime.sh")
def test_cpp_runtime_prepares_headers_and_library_from_the_wheel(ort_root, tmp_path, capsys):
    """jaxconv cpp-runtime DEST: the installed wheel's library plus headers, laid out as a release archive."""
    dest = tmp_path / "ort"
    code, out = cli("cpp-runtime", str(dest), "--headers", os.path.join(ort_root, "include"))
    assert code == 0
    assert out.strip().splitlines()[-1] == str(dest)
    assert (dest / "include" / "onnxruntime_cxx_api.h").is_file()
    import onnxruntime

    version = onnxruntime.__version__
    assert os.path.realpath(dest / "lib" / "libonnxruntime.so").endswith(f"libonnxruntime.so.{version}")
    assert (dest / "VERSION").read_text().splitlines()[0] == version

    code, _ = cli("cpp-runtime", str(tmp_path / "other"), "--headers", str(tmp_path))
    assert code == 2
    assert "--headers" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_unsupported_dtype_is_named():
    from jaxconv.cpp.model import model_from_signature
    from jaxconv.errors import UnsupportedError
    from jaxconv.signature import Signature, TensorInfo

    sig = Signature((TensorInfo("x", "float8_e4m3fn", (4,), "x"),),
                    (TensorInfo("output_0", "float32", (4,), "r"),))
    with pytest.raises(UnsupportedError, match="input x has dtype float8_e4m3fn, which the C.. API does not"):
        model_from_signature(sig, "f")


def test_bad_name_keeps_the_old_folder(tmp_path, capsys):
    from jaxconv.cli import main

    out = tmp_path / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    src = tmp_path / "f.py"
    src.write_text("def f(x):\n    return x * 2\n")
    rc = main(["to-cpp", str(src), "--specs", "f32[4]", "-o", str(out), "--name", "a::class"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "--name 'a::class'" in err
    assert sorted(os.listdir(out)) == ["keep.txt"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".jaxconv-")]


def test_output_path_is_a_file(tmp_path):
    from jaxconv.cpp.project import write_project
    from jaxconv.errors import UsageError

    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(UsageError, match="exists and is not a folder"):
        write_project(_trace_mlp(), str(target))


def test_symbolic_dimension_expressions_to_cpp():
    from jaxconv.cpp.dims import cpp_expr, symbols
    from jaxconv.errors import UnsupportedError

    assert symbols(["b", 3, "2*b + n"]) == ["b", "n"]
    assert cpp_expr("floordiv(b + 1, 2)", {"b": "b"}) == \
        "jaxconv_dims::floordiv(jaxconv_dims::add(b, int64_t{1}), int64_t{2})"
    assert cpp_expr(7, {}) == "7"
    with pytest.raises(UnsupportedError, match="cannot be written in C"):
        cpp_expr("b ** 2", {"b": "b"})




@pytest.mark.parametrize("width, threads", [(64, "1"), (1024, "0")])
def test_options_default_to_the_thread_count_the_model_records(tmp_path, width, threads):
    """A model of small products records one intra-op thread and its class defaults to it; one of big
    products (67 MFLOP each) records none, and its class takes ONNX Runtime's default (0: one per core),
    as jaxconv's own sessions do."""
    import jax.numpy as jnp

    from jaxconv.cpp.project import write_project
    from jaxconv.onnx import thread_count
    from jaxconv.program import trace

    w = np.full((width, width), 0.01, np.float32)
    program = trace(lambda x: jnp.tanh(x @ w) @ w, [f"f32[32,{width}]"], name="layers")
    write_project(program, str(tmp_path / "p"), check=False)
    header = (tmp_path / "p" / "layers.h").read_text()
    assert re.search(r"int intra_op_threads = (\d+);", header).group(1) == threads
    recorded = thread_count.recorded(str(tmp_path / "p" / "model.onnx"))
    assert str(recorded or 0) == threads
