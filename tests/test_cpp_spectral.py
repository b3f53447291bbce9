"""to-cpp on spectral functions: rfft, irfft, fft2, a Fourier-neural-operator layer and an STFT magnitude
front end, built with CMake and run from C++ (the example on .npy files, and a program handing
std::complex<float> buffers to the class), compared with jax.jit."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conformance.cases.spectral import stft_magnitude
from cpp_support import STRICT_FLAGS, build, ort_root_path, run, run_example, save_inputs

TOL = {"rtol": 2e-5, "atol": 2e-5}


def spectra(x, spec, z):
    """Real to complex, complex to real, complex to complex."""
    return jnp.fft.rfft(x), jnp.fft.irfft(spec, n=32), jnp.fft.fft2(z)


def _fno_weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 4, 4)) + 1j * rng.standard_normal((8, 4, 4))
    return {"w": (w / 16).astype(np.complex64),
            "pointwise": (rng.standard_normal((4, 4)) / 4).astype(np.float32),
            "bias": (0.1 * rng.standard_normal(4)).astype(np.float32)}


FNO = _fno_weights()


def models(x, audio):
    """A 1-D Fourier layer (rfft over the grid, complex weights on 8 modes, irfft, pointwise path, GELU)
    on x [2, 32, 4], and log-magnitude STFT frames of audio [2, 512]."""
    spec = jnp.fft.rfft(x, axis=1)
    low = jnp.einsum("bmi,mio->bmo", spec[:, :8], FNO["w"])
    spec_out = jnp.zeros((x.shape[0], x.shape[1] // 2 + 1, 4), spec.dtype).at[:, :8].set(low)
    y = jnp.fft.irfft(spec_out, n=x.shape[1], axis=1)
    return jax.nn.gelu(y + x @ FNO["pointwise"] + FNO["bias"]), stft_magnitude(audio)


def _project(tmp_path_factory, fn, specs: list[str], name: str) -> tuple[str, str]:
    """(project folder, build folder) of ``fn`` written by write_project and built with CMake."""
    from jaxconv.cpp.project import write_project
    from jaxconv.program import trace

    ort_root = ort_root_path()
    folder = str(tmp_path_factory.mktemp("cpp") / name.split("::")[-1].lower())
    write_project(trace(fn, specs, name=fn.__name__), folder, name=name)
    return folder, build(folder, ort_root)


@pytest.fixture(scope="module")
def spectra_project(tmp_path_factory) -> tuple[str, str]:
    return _project(tmp_path_factory, spectra, ["f32[4,32]", "c64[4,17]", "c64[6,8]"], "spectral::Spectra")


@pytest.fixture(scope="module")
def models_project(tmp_path_factory) -> tuple[str, str]:
    return _project(tmp_path_factory, models, ["f32[2,32,4]", "f32[2,512]"], "spectral::Models")


def _cplx(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _run_and_compare(project: str, build_dir: str, cls: str, names: list[str], args: list[np.ndarray],
                     want, tmp_path) -> None:
    files = save_inputs(str(tmp_path / "in"), names, args)
    r = run_example(os.path.join(build_dir, f"{cls}_example"), str(tmp_path / "out"), files)
    assert r.returncode == 0, r.stderr
    for i, w in enumerate(want):
        w = np.asarray(w)
        got = np.load(tmp_path / "out" / f"output_{i}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape, (i, got.dtype, got.shape)
        np.testing.assert_allclose(got, w, **TOL)


def test_rfft_irfft_fft2_through_the_example_match_jax(spectra_project, tmp_path):
    """complex64 .npy files in and out: rfft's spectrum, irfft of a spectrum, fft2 of a complex grid."""
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((4, 32)).astype(np.float32), _cplx((4, 17), 6), _cplx((6, 8), 7)]
    _run_and_compare(*spectra_project, "Spectra", ["x", "spec", "z"], args, jax.jit(spectra)(*args), tmp_path)


def test_fno_layer_and_stft_magnitude_through_the_example_match_jax(models_project, tmp_path):
    rng = np.random.default_rng(8)
    args = [rng.standard_normal((2, 32, 4)).astype(np.float32),
            rng.standard_normal((2, 512)).astype(np.float32)]
    _run_and_compare(*models_project, "Models", ["x", "audio"], args, jax.jit(models)(*args), tmp_path)


APP = r"""
#include <Spectra.h>

#include <complex>
#include <cstdio>
#include <vector>

using spectral::Spectra;
using C = std::complex<float>;

int main(int argc, char** argv) {
  (void)argc;
  std::vector<float> x(4 * 32);
  std::vector<C> spec(4 * 17), z(6 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.125f * static_cast<float>(i % 9) - 0.5f;
  for (size_t i = 0; i < spec.size(); ++i)
    spec[i] = C(0.25f * static_cast<float>(i % 5) - 0.5f, 0.125f * static_cast<float>(i % 7) - 0.25f);
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = C(0.5f * static_cast<float>(i % 3), -0.25f * static_cast<float>(i % 4));
  Spectra model(argv[1]);
  Spectra::Outputs out = model.run(x, spec, z);
  std::vector<C> half(4 * 17), grid(6 * 8);
  std::vector<float> signal(4 * 32);
  Spectra::Inputs in;
  in.x = x;
  in.spec = spec;
  in.z = {z.data(), z.size()};
  Spectra::Buffers buffers;
  buffers.output_0 = half;
  buffers.output_1 = signal;
  buffers.output_2 = grid;
  model.run(in, buffers);
  std::printf("rfft shape: %lld %lld\n", static_cast<long long>(out.output_0.shape[0]),
              static_cast<long long>(out.output_0.shape[1]));
  std::printf("rfft:");
  for (C v : out.output_0.data) std::printf(" %.9g %.9g", v.real(), v.imag());
  std::printf("\nirfft:");
  for (float v : out.output_1.data) std::printf(" %.9g", v);
  std::printf("\nfft2:");
  for (C v : out.output_2.data) std::printf(" %.9g %.9g", v.real(), v.imag());
  const bool same = half == out.output_0.data && signal == out.output_1.data && grid == out.output_2.data;
  std::printf("\nbuffers equal: %d\n", static_cast<int>(same));
  return 0;
}
"""


def test_std_complex_buffers_in_and_out_of_the_class(spectra_project, tmp_path):
    """A C++ program passes std::vector<std::complex<float>> inputs and reads std::complex<float> results,
    returned and in caller-owned buffers; the numbers are jax.jit's on the same values."""
    project, build_dir = spectra_project
    src = tmp_path / "app.cc"
    src.write_text(APP)
    exe = str(tmp_path / "app")
    r = run(["g++", "-std=c++17", *STRICT_FLAGS.split(), str(src), f"-I{project}", f"-L{build_dir}",
             "-lSpectra", f"-Wl,-rpath,{build_dir}", "-o", exe])
    assert r.returncode == 0, r.stderr
    r = run([exe, os.path.join(project, "model.onnx")])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(line.split(":", 1) for line in r.stdout.strip().splitlines())
    i = np.arange(4 * 32)
    x = (0.125 * (i % 9) - 0.5).astype(np.float32).reshape(4, 32)
    i = np.arange(4 * 17)
    spec = ((0.25 * (i % 5) - 0.5) + 1j * (0.125 * (i % 7) - 0.25)).astype(np.complex64).reshape(4, 17)
    i = np.arange(6 * 8)
    z = (0.5 * (i % 3) - 0.25j * (i % 4)).astype(np.complex64).reshape(6, 8)
    want = jax.jit(spectra)(x, spec, z)
    assert lines["rfft shape"].split() == ["4", "17"] and lines["buffers equal"].strip() == "1"
    for key, w in zip(("rfft", "irfft", "fft2"), want):
        got = np.array(lines[key].split(), np.float32)
        w = np.asarray(w)
        if np.iscomplexobj(w):
            got = got[0::2] + 1j * got[1::2]
        np.testing.assert_allclose(got.reshape(w.shape), w, **TOL)
