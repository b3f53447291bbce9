"""Helpers of the C++ tests (test_cpp*.py): ONNX Runtime for builds, CMake builds, example runs."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GET_ORT = os.path.join(ROOT, "scripts", "get_onnxruntime.sh")
MLP_FILE = os.path.join(ROOT, "examples", "mlp.py")
MLP_SPECS = ['{"w1": "f32[8,16]", "b1": "f32[16]", "w2": "f32[16,5]", "b2": "f32[5]"}', "f32[b,8]"]
MLP_INPUT_NAMES = ["params_b1", "params_b2", "params_w1", "params_w2", "x"]
HAVE_TOOLCHAIN = bool(shutil.which("cmake") and shutil.which("g++"))
# The generated code must compile without warnings (ONNX Runtime's own headers are -isystem).
STRICT_FLAGS = "-Wall -Wextra -Wshadow -Werror"


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def ort_root_path() -> str:
    """ONNX Runtime headers + library, prepared (and cached in .deps/) by scripts/get_onnxruntime.sh."""
    if not HAVE_TOOLCHAIN:
        pytest.skip("cmake and g++ are needed to build the generated C++ projects")
    r = run(["bash", GET_ORT], env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, f"get_onnxruntime.sh failed: {r.stderr}"
    root = r.stdout.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(root, "include", "onnxruntime_cxx_api.h"))
    assert os.path.exists(os.path.join(root, "lib", "libonnxruntime.so.1"))
    return root


def cli(*argv: str) -> tuple[int, str]:
    """``jaxconv ARGV`` in this process: (exit code, stdout)."""
    from jaxconv.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def build(project: str, ort_root: str, *extra: str) -> str:
    """Configure and build a generated project (warnings are errors); returns the build folder."""
    b = os.path.join(project, "build")
    r = run(["cmake", "-S", project, "-B", b, f"-DONNXRUNTIME_ROOT={ort_root}", "-DCMAKE_BUILD_TYPE=Release",
             f"-DCMAKE_CXX_FLAGS={STRICT_FLAGS}", *extra])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(["cmake", "--build", b, "-j2"])
    assert r.returncode == 0, r.stdout + r.stderr
    return b


def install_relocated(build_dir: str, staging: str, prefix: str) -> None:
    """``cmake --install`` a built project into ``staging``, then move it to ``prefix`` (relocatable)."""
    r = run(["cmake", "--install", build_dir, "--prefix", staging])
    assert r.returncode == 0, r.stderr
    os.rename(staging, prefix)


def build_consumer(folder: str, prefix: str, cmake_lists: str, app: str) -> str:
    """Write and build a consumer (CMakeLists.txt, app.cc) of the package installed at ``prefix``; returns
    the path of its ``app`` executable."""
    os.mkdir(folder)
    with open(os.path.join(folder, "CMakeLists.txt"), "w") as f:
        f.write(cmake_lists)
    with open(os.path.join(folder, "app.cc"), "w") as f:
        f.write(app)
    b = os.path.join(folder, "build")
    r = run(["cmake", "-S", folder, "-B", b, f"-DCMAKE_PREFIX_PATH={prefix}"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(["cmake", "--build", b])
    assert r.returncode == 0, r.stdout + r.stderr
    return os.path.join(b, "app")


@contextlib.contextmanager
def moved_away(path: str):
    """``path`` renamed for the block (nothing can read from it there), then put back."""
    os.rename(path, path + ".away")
    try:
        yield
    finally:
        os.rename(path + ".away", path)


def save_inputs(folder: str, names: list[str], arrays: list[np.ndarray]) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for n, a in zip(names, arrays):
        paths.append(os.path.join(folder, n + ".npy"))
        np.save(paths[-1], a)
    return paths


def run_example(exe: str, out: str, files: list[str], *extra: str,
                cwd: str | None = None) -> subprocess.CompletedProcess:
    return run([exe, *extra, "--out", out, *files], cwd=cwd)


def assert_clean_failure(r: subprocess.CompletedProcess, *needles: str) -> None:
    """Non-zero exit (not a signal), exactly one line on stderr containing every needle."""
    assert r.returncode > 0, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def mlp_inputs(b: int, seed: int) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((8, 16)).astype(np.float32),
              "b1": rng.standard_normal(16).astype(np.float32),
              "w2": rng.standard_normal((16, 5)).astype(np.float32),
              "b2": rng.standard_normal(5).astype(np.float32)}
    return params, rng.standard_normal((b, 8)).astype(np.float32)


def mlp_flat(params: dict, x: np.ndarray) -> list[np.ndarray]:
    return [params["b1"], params["b2"], params["w1"], params["w2"], x]


def mlp_function():
    sys.path.insert(0, os.path.dirname(MLP_FILE))
    try:
        from mlp import mlp
    finally:
        sys.path.remove(os.path.dirname(MLP_FILE))
    return mlp


def mlp_reference(params: dict, x: np.ndarray) -> np.ndarray:
    import jax

    return np.asarray(jax.jit(mlp_function())(params, x))


# How the C++ test programs fill their buffers (element i), and the same values in numpy.
FILL_CPP = r"""
template <typename F>
std::vector<float> fill(size_t n, F f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f(static_cast<int>(i));
  return v;
}
std::vector<float> b1 = fill(16, [](int i) { return 0.1f * static_cast<float>(i % 3) - 0.1f; });
std::vector<float> b2 = fill(5, [](int i) { return 0.05f * static_cast<float>(i); });
std::vector<float> w1 = fill(8 * 16, [](int i) { return 0.05f * static_cast<float>((i * 37) % 11) - 0.25f; });
std::vector<float> w2 = fill(16 * 5, [](int i) { return 0.03f * static_cast<float>((i * 13) % 7) - 0.1f; });
std::vector<float> xs = fill(2 * 8, [](int i) { return 0.25f * static_cast<float>(i % 7) - 0.5f; });
"""


def filled_mlp_reference() -> np.ndarray:
    """jax.jit of the MLP on the FILL_CPP buffers (b = 2)."""
    i = {n: np.arange(n) for n in (16, 5, 128, 80)}
    params = {"b1": (0.1 * (i[16] % 3) - 0.1).astype(np.float32), "b2": (0.05 * i[5]).astype(np.float32),
              "w1": (0.05 * ((i[128] * 37) % 11) - 0.25).astype(np.float32).reshape(8, 16),
              "w2": (0.03 * ((i[80] * 13) % 7) - 0.1).astype(np.float32).reshape(16, 5)}
    x = (0.25 * (np.arange(16) % 7) - 0.5).astype(np.float32).reshape(2, 8)
    return mlp_reference(params, x)
