"""jaxconv to-cpp --embed: the library carries the model; installed, it needs no model file anywhere."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from cpp_support import (
    ROOT,
    assert_clean_failure,
    build,
    build_consumer,
    cli,
    install_relocated,
    moved_away,
    ort_root_path,
    run,
    run_example,
    save_inputs,
)

CNN_FILE = os.path.join(ROOT, "examples", "cnn.py")
CNN_SPECS = ['{"conv1": "f32[3,3,1,8]", "conv2": "f32[3,3,8,16]", "dense": "f32[784,10]", "bias": "f32[10]"}',
             "f32[b,28,28,1]"]


@pytest.fixture(scope="module")
def ort_root() -> str:
    return ort_root_path()


def _mixed(x, idx, z):
    """Symbolic batch b, an int32 input, and an input of size 2*b."""
    import jax.numpy as jnp

    scaled = x * idx[:, None].astype(jnp.float32)
    return {"scaled": scaled, "index": idx * 3 - 1, "pairs": z.reshape(-1, 2).sum(axis=1) + x[:, 0]}


@pytest.fixture(scope="module")
def mixed_project(ort_root: str, tmp_path_factory) -> tuple[str, str]:
    """_mixed with --embed; model.onnx is deleted before building, so nothing can read it."""
    from jaxconv.cpp.project import write_project
    from jaxconv.program import trace

    program = trace(_mixed, ["f32[b,3]", "i32[b]", "f32[2*b]"], name="mixed")
    project = str(tmp_path_factory.mktemp("cpp") / "mixed")
    written = write_project(program, project, embed=True)
    assert os.path.join(project, "mixed_data.cc") in written
    os.remove(os.path.join(project, "model.onnx"))
    return project, build(project, ort_root)


def _mixed_arrays(b: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((b, 3)).astype(np.float32), rng.integers(-5, 6, b).astype(np.int32),
            rng.standard_normal(2 * b).astype(np.float32)]


def _assert_matches_jax(out_dir, arrays) -> None:
    import jax

    want = jax.tree_util.tree_leaves(jax.jit(_mixed)(*arrays))  # dict leaves: index, pairs, scaled
    for i, w in enumerate(want):
        got = np.load(os.path.join(out_dir, f"output_{i}.npy"))
        assert got.dtype == np.asarray(w).dtype and got.shape == np.asarray(w).shape
        if got.dtype.kind == "i":
            np.testing.assert_array_equal(got, w)
        else:
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)


def test_int32_symbolic_embedded_model_without_model_file(mixed_project, tmp_path):
    _, build_dir = mixed_project
    exe = os.path.join(build_dir, "mixed_example")
    arrays = _mixed_arrays(4)
    files = save_inputs(str(tmp_path / "in"), ["x", "idx", "z"], arrays)
    r = run_example(exe, str(tmp_path / "out"), files, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    _assert_matches_jax(str(tmp_path / "out"), arrays)

    np.save(files[1], arrays[1].astype(np.int64))
    assert_clean_failure(run_example(exe, str(tmp_path / "o2"), files), "input idx",
                         "dtype '<i8' (int64), expected '<i4' (int32)")
    np.save(files[1], arrays[1][:3])
    assert_clean_failure(run_example(exe, str(tmp_path / "o3"), files), "input idx", "gives b=3", "gives b=4")
    np.save(files[1], arrays[1])
    np.save(files[2], arrays[2][:7])
    assert_clean_failure(run_example(exe, str(tmp_path / "o4"), files), "input z", "2*b = 8")


DIM_OVERFLOW = r"""
#include "mixed.h"

#include <cstdio>
#include <stdexcept>
#include <vector>

int main() {
  mixed model;
  std::vector<float> x(3), z(2);
  std::vector<int32_t> idx(1);
  try {
    model.run(x, idx, z, int64_t{1} << 62);  // z is float32[2*b]: 2*b overflows int64_t
  } catch (const std::invalid_argument& e) {
    std::printf("%s\n", e.what());
  }
  mixed::Outputs out = model.run(x, idx, z, 1);
  std::printf("%zu %zu %zu\n", out.output_0.data.size(), out.output_1.data.size(), out.output_2.data.size());
  return 0;
}
"""


def test_dimension_expression_overflow_is_an_invalid_argument(mixed_project, tmp_path):
    project, build_dir = mixed_project
    (tmp_path / "check.cc").write_text(DIM_OVERFLOW)
    exe = str(tmp_path / "check")
    r = run(["g++", "-std=c++17", str(tmp_path / "check.cc"), f"-I{project}", f"-L{build_dir}", "-lmixed",
             f"-Wl,-rpath,{build_dir}", "-o", exe])
    assert r.returncode == 0, r.stderr
    r = run([exe])
    assert r.returncode == 0, r.stderr
    first, sizes = r.stdout.strip().splitlines()
    assert first == "mixed: dimensions b=4611686018427387904: a dimension overflows int64_t"
    assert sizes == "1 1 3"


CONSUMER_CMAKE = """cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
find_package(mixed REQUIRED)
add_executable(app app.cc)
target_link_libraries(app PRIVATE mixed::mixed)
if(NOT mixed_MODEL_FILE STREQUAL "")
  message(FATAL_ERROR "an embedded model has no model file, got ${mixed_MODEL_FILE}")
endif()
"""

CONSUMER_APP = r"""
#include <mixed.h>

#include <cstdio>
#include <vector>

int main() {
  mixed model;  // the model inside libmixed.so
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, z = {0.5f, 0.25f, -1, 2};
  std::vector<int32_t> idx = {2, -3};
  mixed::Outputs out = model.run(x, idx, z, 2);
  for (int32_t v : out.output_0.data) std::printf("%d ", v);
  for (float v : out.output_1.data) std::printf("%.9g ", v);
  for (float v : out.output_2.data) std::printf("%.9g ", v);
  std::printf("\n");
  return 0;
}
"""


def test_installed_embedded_package_runs_from_another_folder(mixed_project, tmp_path):
    """find_package(mixed) from a moved install; the consumer runs with the project and build tree away."""
    project, build_dir = mixed_project
    prefix = str(tmp_path / "prefix")
    install_relocated(build_dir, str(tmp_path / "first"), prefix)
    assert not os.path.exists(os.path.join(prefix, "share"))  # only the libraries and the header
    app = build_consumer(str(tmp_path / "consumer"), prefix, CONSUMER_CMAKE, CONSUMER_APP)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with moved_away(project):
        r = run([app], cwd=str(elsewhere))
    assert r.returncode == 0, r.stderr
    import jax

    arrays = [np.arange(1, 7, dtype=np.float32).reshape(2, 3), np.array([2, -3], np.int32),
              np.array([0.5, 0.25, -1, 2], np.float32)]
    leaves = jax.tree_util.tree_leaves(jax.jit(_mixed)(*arrays))
    want = np.concatenate([np.ravel(np.asarray(w, np.float64)) for w in leaves])
    np.testing.assert_allclose(np.array(r.stdout.split(), np.float64), want, rtol=1e-6)


@pytest.mark.slow
def test_cnn_example_matches_jax(ort_root, tmp_path):
    import jax

    project = str(tmp_path / "cnn")
    code, _ = cli("to-cpp", CNN_FILE, "--specs", *CNN_SPECS, "-o", project, "--name", "SmallCnn", "--embed")
    assert code == 0
    build_dir = build(project, ort_root)
    rng = np.random.default_rng(2)
    params = {"bias": rng.standard_normal(10), "conv1": rng.standard_normal((3, 3, 1, 8)),
              "conv2": rng.standard_normal((3, 3, 8, 16)) * 0.3,
              "dense": rng.standard_normal((784, 10)) * 0.1}
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x = rng.standard_normal((2, 28, 28, 1)).astype(np.float32)
    names = ["params_bias", "params_conv1", "params_conv2", "params_dense", "x"]
    files = save_inputs(str(tmp_path / "in"), names,
                        [params["bias"], params["conv1"], params["conv2"], params["dense"], x])
    r = run_example(os.path.join(build_dir, "SmallCnn_example"), str(tmp_path / "out"), files)
    assert r.returncode == 0, r.stderr
    sys.path.insert(0, os.path.dirname(CNN_FILE))
    try:
        from cnn import cnn
    finally:
        sys.path.remove(os.path.dirname(CNN_FILE))
    want = np.asarray(jax.jit(cnn)(params, x))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output_0.npy"), want, rtol=1e-4, atol=1e-4)
