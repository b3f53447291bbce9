"""jaxconv to-cpp: the generated CMake projects build against ONNX Runtime and match jax.jit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GET_ORT = os.path.join(ROOT, "scripts", "get_onnxruntime.sh")
MLP_FILE = os.path.join(ROOT, "examples", "mlp.py")
CNN_FILE = os.path.join(ROOT, "examples", "cnn.py")
MLP_SPECS = ['{"w1": "f32[8,16]", "b1": "f32[16]", "w2": "f32[16,5]", "b2": "f32[5]"}', "f32[b,8]"]
CNN_SPECS = ['{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}',
             "f32[b,28,28,1]"]
HAVE_TOOLCHAIN = bool(shutil.which("cmake") and shutil.which("g++"))


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="session")
def ort_root() -> str:
    """ONNX Runtime headers + library, prepared (and cached in .deps/) by scripts/get_onnxruntime.sh."""
    if not HAVE_TOOLCHAIN:
        pytest.skip("cmake and g++ are needed to build the generated C++ projects")
    r = _run(["bash", GET_ORT], env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, f"get_onnxruntime.sh failed: {r.stderr}"
    root = r.stdout.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(root, "include", "onnxruntime_cxx_api.h"))
    assert os.path.exists(os.path.join(root, "lib", "libonnxruntime.so.1"))
    return root


def _cli(*argv: str) -> int:
    from jaxconv.cli import main

    return main(list(argv))


def _build(project: str, ort_root: str) -> str:
    build = os.path.join(project, "build")
    r = _run(["cmake", "-S", project, "-B", build, f"-DONNXRUNTIME_ROOT={ort_root}", "-DCMAKE_BUILD_TYPE=Release"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(["cmake", "--build", build, "-j2"])
    assert r.returncode == 0, r.stdout + r.stderr
    return build


def _save_inputs(folder: str, names: list[str], arrays: list[np.ndarray]) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for n, a in zip(names, arrays):
        paths.append(os.path.join(folder, n + ".npy"))
        np.save(paths[-1], a)
    return paths


def _run_example(exe: str, out: str, files: list[str], *extra: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return _run([exe, *extra, "--out", out, *files], cwd=cwd)


def _assert_clean_failure(r: subprocess.CompletedProcess, *needles: str) -> None:
    """Non-zero exit (not a signal), exactly one line on stderr containing every needle."""
    assert r.returncode > 0, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def _mlp_inputs(b: int, seed: int) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((8, 16)).astype(np.float32), "b1": rng.standard_normal(16).astype(np.float32),
              "w2": rng.standard_normal((16, 5)).astype(np.float32), "b2": rng.standard_normal(5).astype(np.float32)}
    return params, rng.standard_normal((b, 8)).astype(np.float32)


MLP_INPUT_NAMES = ["params_b1", "params_b2", "params_w1", "params_w2", "x"]


def _mlp_flat(params: dict, x: np.ndarray) -> list[np.ndarray]:
    return [params["b1"], params["b2"], params["w1"], params["w2"], x]


@pytest.fixture(scope="module")
def mlp_project(ort_root: str, tmp_path_factory) -> tuple[str, str]:
    """examples/mlp.py through the CLI (model.onnx beside the library), built once."""
    project = str(tmp_path_factory.mktemp("cpp") / "mlp")
    assert _cli("to-cpp", MLP_FILE, "--specs", *MLP_SPECS, "-o", project) == 0
    return project, _build(project, ort_root)


def _mlp_reference(params: dict, x: np.ndarray) -> np.ndarray:
    import jax

    sys.path.insert(0, os.path.dirname(MLP_FILE))
    try:
        from mlp import mlp
    finally:
        sys.path.remove(os.path.dirname(MLP_FILE))
    return np.asarray(jax.jit(mlp)(params, x))


@pytest.mark.parametrize("b", [3, 1])
def test_mlp_example_matches_jax(mlp_project, tmp_path, b):
    project, build = mlp_project
    params, x = _mlp_inputs(b, seed=b)
    files = _save_inputs(str(tmp_path / "in"), MLP_INPUT_NAMES, _mlp_flat(params, x))
    r = _run_example(os.path.join(build, "mlp_example"), str(tmp_path / "out"), files)
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    want = _mlp_reference(params, x)
    assert got.dtype == np.float32 and got.shape == (b, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mlp_header_declares_typed_api(mlp_project):
    project, _ = mlp_project
    header = open(os.path.join(project, "model.h")).read()
    assert "class MLP_API mlp {" in header
    assert "const std::vector<float>& params_w1" in header and "const float* x" in header
    assert "int64_t b) const;" in header
    assert "Tensor<float> output_0;" in header
    assert "#include <onnxruntime" not in header


API_CHECK = r"""
#include "model.h"
#include <cstdio>
#include <stdexcept>
int main() {
  mlp model(MODEL_PATH, 1);
  std::vector<float> b1(16, 0.5f), b2(5, -0.25f), w1(8 * 16, 0.125f), w2(16 * 5, 0.0625f), x(2 * 8, 1.0f);
  mlp::Outputs out = model.run(b1, b2, w1, w2, x, 2);
  std::printf("%zu %lld %lld", out.output_0.data.size(), (long long)out.output_0.shape[0], (long long)out.output_0.shape[1]);
  for (float v : out.output_0.data) std::printf(" %.8g", v);
  std::printf("\n");
  try {
    model.run(b1, b2, w1, w2, x, 3);
  } catch (const std::invalid_argument& e) {
    std::printf("%s\n", e.what());
  }
  try {
    mlp bad("/nonexistent/model.onnx");
  } catch (const std::runtime_error& e) {
    std::printf("%s\n", e.what());
  }
  return 0;
}
"""


def test_mlp_library_api_from_cpp(mlp_project, tmp_path):
    """The typed API used directly: vector sizes are checked, load errors are exceptions."""
    project, build = mlp_project
    src = tmp_path / "api_check.cc"
    src.write_text(API_CHECK)
    exe = str(tmp_path / "api_check")
    r = _run(["g++", "-std=c++17", str(src), f"-I{project}", f"-L{build}", "-lmlp", f"-Wl,-rpath,{build}",
              f'-DMODEL_PATH="{project}/model.onnx"', "-o", exe])
    assert r.returncode == 0, r.stderr
    r = _run([exe])
    assert r.returncode == 0, r.stderr
    first, size_error, load_error = r.stdout.strip().splitlines()
    fields = first.split()
    assert fields[:3] == ["10", "2", "5"]
    params = {"b1": np.full(16, 0.5, np.float32), "b2": np.full(5, -0.25, np.float32),
              "w1": np.full((8, 16), 0.125, np.float32), "w2": np.full((16, 5), 0.0625, np.float32)}
    want = _mlp_reference(params, np.ones((2, 8), np.float32))
    np.testing.assert_allclose(np.array(fields[3:], np.float32).reshape(2, 5), want, rtol=1e-5, atol=1e-5)
    assert size_error == "mlp: input x has 16 elements, but its shape float32[b, 8] is [3, 8] (24 elements)"
    assert load_error.startswith("mlp: cannot load /nonexistent/model.onnx:")


@pytest.mark.parametrize("case", ["dtype", "shape", "rank", "batch", "count", "missing", "not_npy", "no_out"])
def test_mlp_example_rejects_bad_input(mlp_project, tmp_path, case):
    _, build = mlp_project
    params, x = _mlp_inputs(2, seed=0)
    flat = _mlp_flat(params, x)
    files = _save_inputs(str(tmp_path / "in"), MLP_INPUT_NAMES, flat)
    exe = os.path.join(build, "mlp_example")
    out = str(tmp_path / "out")
    if case == "dtype":
        np.save(files[4], x.astype(np.float64))
        _assert_clean_failure(_run_example(exe, out, files), "input x", "dtype '<f8' (float64), expected '<f4' (float32)")
    elif case == "shape":
        np.save(files[4], np.zeros((2, 9), np.float32))
        _assert_clean_failure(_run_example(exe, out, files), "input x", "shape (2, 9), expected (b, 8)")
    elif case == "rank":
        np.save(files[2], np.zeros(128, np.float32))
        _assert_clean_failure(_run_example(exe, out, files), "input params_w1", "shape (128,) has 1 dimensions, expected 2")
    elif case == "batch":
        r = _run_example(exe, out, files, "--dim", "b=5")
        _assert_clean_failure(r, "input x", "gives b=2", "--dim gives b=5")
    elif case == "count":
        r = _run_example(exe, out, files[:4])
        _assert_clean_failure(r, "expected 5 input .npy files (params_b1, params_b2, params_w1, params_w2, x), got 4")
        assert r.returncode == 2
    elif case == "missing":
        _assert_clean_failure(_run_example(exe, out, files[:4] + [str(tmp_path / "nope.npy")]),
                              "input x: cannot open", "nope.npy")
    elif case == "not_npy":
        (tmp_path / "x.txt").write_text("1 2 3\n")
        _assert_clean_failure(_run_example(exe, out, files[:4] + [str(tmp_path / "x.txt")]), "is not a .npy file")
    elif case == "no_out":
        r = _run([exe, *files])
        _assert_clean_failure(r, "missing --out DIR")
        assert r.returncode == 2
    assert not os.path.exists(out)


def test_cmake_without_onnxruntime_root_says_so(mlp_project, tmp_path):
    project, _ = mlp_project
    env = {k: v for k, v in os.environ.items() if k != "ONNXRUNTIME_ROOT"}
    r = _run(["cmake", "-S", project, "-B", str(tmp_path / "b1")], env=env)
    assert r.returncode != 0 and "ONNXRUNTIME_ROOT is not set" in r.stderr
    r = _run(["cmake", "-S", project, "-B", str(tmp_path / "b2"), f"-DONNXRUNTIME_ROOT={tmp_path}"], env=env)
    assert r.returncode != 0 and "has no include/onnxruntime_cxx_api.h" in r.stderr


def _mixed(x, idx, z):
    """Symbolic batch b, an int32 input, and an input of size 2*b."""
    import jax.numpy as jnp

    scaled = x * idx[:, None].astype(jnp.float32)
    return {"scaled": scaled, "index": idx * 3 - 1, "pairs": z.reshape(-1, 2).sum(axis=1) + x[:, 0]}


def test_int32_symbolic_embedded_model_without_model_file(ort_root, tmp_path):
    """--embed: the library carries the model; model.onnx is deleted before building and running."""
    import jax

    from jaxconv.cpp.project import write_project
    from jaxconv.program import trace

    program = trace(_mixed, ["f32[b,3]", "i32[b]", "f32[2*b]"], name="mixed")
    project = str(tmp_path / "mixed")
    written = write_project(program, project, embed=True)
    assert os.path.join(project, "model_data.cc") in written
    os.remove(os.path.join(project, "model.onnx"))
    build = _build(project, ort_root)
    exe = os.path.join(build, "mixed_example")

    rng = np.random.default_rng(1)
    b = 4
    arrays = [rng.standard_normal((b, 3)).astype(np.float32), rng.integers(-5, 6, b).astype(np.int32),
              rng.standard_normal(2 * b).astype(np.float32)]
    files = _save_inputs(str(tmp_path / "in"), ["x", "idx", "z"], arrays)
    r = _run_example(exe, str(tmp_path / "out"), files, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    want = jax.tree_util.tree_leaves(jax.jit(_mixed)(*arrays))  # dict leaves: index, pairs, scaled
    assert [o.name for o in program.signature.outputs] == ["output_0", "output_1", "output_2"]
    for i, w in enumerate(want):
        got = np.load(tmp_path / "out" / f"output_{i}.npy")
        assert got.dtype == np.asarray(w).dtype and got.shape == np.asarray(w).shape
        if got.dtype.kind == "i":
            np.testing.assert_array_equal(got, w)
        else:
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)

    np.save(files[1], arrays[1].astype(np.int64))
    _assert_clean_failure(_run_example(exe, str(tmp_path / "o2"), files), "input idx",
                          "dtype '<i8' (int64), expected '<i4' (int32)")
    np.save(files[1], arrays[1][:3])
    _assert_clean_failure(_run_example(exe, str(tmp_path / "o3"), files), "input idx", "gives b=3", "gives b=4")
    np.save(files[1], arrays[1])
    np.save(files[2], arrays[2][:7])
    _assert_clean_failure(_run_example(exe, str(tmp_path / "o4"), files), "input z", "2*b = 8")


def _convolution_lowered() -> bool:
    from jaxconv.onnx.registry import all_lowerings

    return "stablehlo.convolution" in all_lowerings()


@pytest.mark.slow
def test_cnn_example_matches_jax(ort_root, tmp_path):
    if not _convolution_lowered():
        pytest.skip("the ONNX lowering has no stablehlo.convolution yet")
    import jax

    project = str(tmp_path / "cnn")
    assert _cli("to-cpp", CNN_FILE, "--specs", *CNN_SPECS, "-o", project, "--name", "SmallCnn") == 0
    build = _build(project, ort_root)
    rng = np.random.default_rng(2)
    params = {"bias": rng.standard_normal(10), "conv1": rng.standard_normal((3, 3, 1, 8)),
              "conv2": rng.standard_normal((3, 3, 8, 16)) * 0.3, "dense": rng.standard_normal((784, 10)) * 0.1}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x = rng.standard_normal((2, 28, 28, 1)).astype(np.float32)
    files = _save_inputs(str(tmp_path / "in"), ["params_bias", "params_conv1", "params_conv2", "params_dense", "x"],
                         [params["bias"], params["conv1"], params["conv2"], params["dense"], x])
    r = _run_example(os.path.join(build, "SmallCnn_example"), str(tmp_path / "out"), files)
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, os.path.dirname(CNN_FILE))
    try:
        from cnn import cnn
    finally:
        sys.path.remove(os.path.dirname(CNN_FILE))
    want = np.asarray(jax.jit(cnn)(params, x))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output_0.npy"), want, rtol=1e-4, atol=1e-4)


# --- generation errors (no C++ build needed) ---

def _trace_mlp():
    from jaxconv.program import trace

    sys.path.insert(0, os.path.dirname(MLP_FILE))
    try:
        from mlp import mlp
    finally:
        sys.path.remove(os.path.dirname(MLP_FILE))
    return trace(mlp, MLP_SPECS, name="mlp")


@pytest.mark.parametrize("name", ["my-model", "2fast", "class", "test", "x_example"])
def test_bad_name_is_a_usage_error(tmp_path, name):
    from jaxconv.cpp.project import write_project
    from jaxconv.errors import UsageError

    with pytest.raises(UsageError, match="--name"):
        write_project(_trace_mlp(), str(tmp_path / "p"), name=name)
    assert not os.path.exists(tmp_path / "p")


def test_unsupported_dtype_writes_nothing_and_keeps_old_folder(tmp_path, capsys):
    out = tmp_path / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    src = tmp_path / "cplx.py"
    src.write_text("def cplx(z):\n    return z * 2\n")
    rc = _cli("to-cpp", str(src), "--specs", "c64[4]", "-o", str(out))
    err = capsys.readouterr().err.strip()
    assert rc == 6, err
    assert f"{out} not written: input z has dtype complex64, which the C++ API does not support" in err
    assert len(err.splitlines()) == 1
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
    assert cpp_expr("floordiv(b + 1, 2)", {"b": "b"}) == "jc_floordiv((b + int64_t{1}), int64_t{2})"
    assert cpp_expr(7, {}) == "7"
    with pytest.raises(UnsupportedError, match="cannot be written in C"):
        cpp_expr("b ** 2", {"b": "b"})
