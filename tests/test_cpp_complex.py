"""jaxconv to-cpp on a function with complex inputs and outputs: std::complex buffers end to end."""

from __future__ import annotations

import os

import numpy as np
import pytest

from cpp_support import build, ort_root_path, run_example, save_inputs


def _twice(z, x):
    return z * 2 + x, x + 1


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> str:
    from jaxconv.cpp.project import write_project
    from jaxconv.program import trace

    ort_root = ort_root_path()
    program = trace(_twice, ["c64[4]", "f32[4]"], name="twice")
    folder = str(tmp_path_factory.mktemp("cpp") / "twice")
    write_project(program, folder, name="cplx::Twice")
    return build(folder, ort_root)


def test_complex_function_through_the_example_matches_jax(project, tmp_path):
    """The example reads complex64 .npy files into std::complex<float> and writes them back."""
    import jax

    rng = np.random.default_rng(3)
    z = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
    x = rng.standard_normal(4).astype(np.float32)
    files = save_inputs(str(tmp_path / "in"), ["z", "x"], [z, x])
    r = run_example(os.path.join(project, "Twice_example"), str(tmp_path / "out"), files)
    assert r.returncode == 0, r.stderr
    want = jax.jit(_twice)(z, x)
    for i, w in enumerate(want):
        got = np.load(tmp_path / "out" / f"output_{i}.npy")
        assert got.dtype == np.asarray(w).dtype and got.shape == (4,)
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)
    header = open(os.path.join(os.path.dirname(project), "Twice.h")).read()
    assert "In<std::complex<float>> z;" in header and "Tensor<std::complex<float>> output_0;" in header
