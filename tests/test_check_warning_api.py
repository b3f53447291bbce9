"""An undecided check reaches a Python caller as a warning (``CheckWarning``), and the CLI says it once.

The Python API passed undecided artifacts in silence: only ``report_to`` showed the verdict, while the
CLI printed ``jaxconv: warning: ... the check cannot decide ...``. ``jnp.linalg.det`` of a 4x4 matrix is
undecided on edge values (an LU pivot on NaN is the BLAS's choice).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxconv
from cli_support import run_cli
from jaxconv.check_context import check_options
from jaxconv.errors import CheckWarning, JaxconvWarning, MismatchError

SPEC = jax.ShapeDtypeStruct((4, 4), jnp.float32)


def test_the_python_api_warns_of_an_undecided_output():
    with pytest.warns(CheckWarning, match="cannot decide 1 output check") as said:
        jaxconv.to_onnx(jnp.linalg.det, SPEC)
    assert issubclass(said[0].category, JaxconvWarning)
    assert "--strict makes this an error" in str(said[0].message)


def test_a_decided_check_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckWarning)
        jaxconv.to_onnx(jnp.tanh, jax.ShapeDtypeStruct((3,), jnp.float32))


def test_strict_raises_instead():
    with check_options(strict=True), pytest.raises(MismatchError):
        jaxconv.to_onnx(jnp.linalg.det, SPEC)


def test_the_cli_says_it_once(tmp_path, capsys, user_file):
    path = user_file("import jax.numpy as jnp\ndef det(a):\n    return jnp.linalg.det(a)\n", "det.py")
    code, _, err = run_cli(["to-onnx", path, "--specs", "f32[4,4]", "-o", str(tmp_path / "d.onnx")], capsys)
    assert code == 0, err
    assert err.count("cannot decide") == 1, err
