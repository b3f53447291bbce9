"""Failures on either TFLite route name the ops and the JAX source lines (``file.py:LINE``).

The tf-ops route's TF ops come from the translator's code, so the converter's own locations point
there; the route reads the ONNX node (and the StableHLO op and source line the lowering recorded)
back from each TF op's name scope.
"""

from __future__ import annotations

import inspect
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv import api
from jaxconv.errors import ArtifactError, UnsupportedError
from jaxconv.program import trace

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")

S = jax.ShapeDtypeStruct
HERE = os.path.relpath(__file__)


def _line(fn, text: str) -> str:
    """``tests/test_x.py:LINE`` of the line of ``fn`` containing ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return f"{HERE}:{start + next(i for i, ln in enumerate(lines) if text in ln)}"


def adds_in_a_loop(x):
    y = jnp.sin(x)
    return lax.fori_loop(0, 3, lambda i, c: c + 1.5, y)  # the loop's add


def complex_abs(re, im):
    return jnp.abs(lax.complex(re, im) * (1 + 2j))  # the complex multiply


def f64_sum(a, b):
    return a + b * 2.0  # f64 arithmetic


def empty_exp(x):
    return jnp.exp(x) + 1.0  # on zero rows


def _rejection(op: str, element: str) -> str:
    """The converter's text for a TF op with no builtin, as TF 2.21 prints it."""
    return (
        "Could not translate MLIR to FlatBuffer./somewhere/translator.py:40:1: error: "
        f"'{op}' op is neither a custom op nor a flex op\n"
        f'/somewhere/translator.py:40:1: note: see current operation: %3 = "{op}"(%1, %2) {{device = ""}} : '
        f"(tensor<?x5x{element}>, tensor<?x5x{element}>) -> tensor<?x5x{element}>\n"
        "/somewhere/translator.py:40:1: note: Error code: ERROR_NEEDS_FLEX_OPS\n"
        "<unknown>:0: error: failed while converting: 'main': \n"
    )


def test_tf_ops_converter_error_names_the_source_line_inside_a_loop():
    from jaxconv.tf.onnx_to_tf import for_program
    from jaxconv.tf.tflite import tf_ops_error

    model, _, concrete = for_program(trace(adds_in_a_loop, [S((2, 5), np.float32)]))
    err = tf_ops_error(_rejection("tf.AddV2", "f32"), allow_flex=False, model=model, concrete=concrete)
    assert isinstance(err, UnsupportedError)
    assert f"tf.AddV2 x1 at {_line(adds_in_a_loop, 'the loop')} (stablehlo.add)" in str(err)
    assert "translator.py" not in str(err)
    err = tf_ops_error(_rejection("tf.Sin", "f32"), allow_flex=False, model=model, concrete=concrete)
    assert f"tf.Sin x1 at {_line(adds_in_a_loop, 'jnp.sin')} (stablehlo.sine)" in str(err)


def test_tf_ops_converter_error_names_an_unusual_element_type():
    from jaxconv.tf.onnx_to_tf import for_program
    from jaxconv.tf.tflite import tf_ops_error

    model, _, concrete = for_program(trace(adds_in_a_loop, [S((2, 5), np.float32)]))
    err = tf_ops_error(_rejection("tf.AddV2", "f16"), allow_flex=False, model=model, concrete=concrete)
    assert str(err).startswith("TFLite cannot convert (tf-ops route): tf.AddV2 on float16 x1;")  # no f16 adds


def cube_root(x):
    return jnp.cbrt(x) * 2  # the cube root


def test_float64_made_by_the_lowering_names_the_op_and_line():
    from jaxconv.tf import tflite

    with pytest.raises(UnsupportedError) as info:
        tflite.convert(trace(cube_root, [S((5,), np.float32)]), route="tf-ops")
    message = str(info.value)
    assert f"float64 in {_line(cube_root, 'cube root')} (stablehlo.cbrt)" in message
    assert "the ONNX lowering widens these" in message and "compute in float32" not in message


def test_complex_multiply_converts_in_float32_and_matches_jax():
    """The lowering's float64 FMAs of a complex product run as float32 with exact error terms."""
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf import tflite

    data = tflite.convert(trace(complex_abs, [S((5,), np.float32)] * 2), route="tf-ops")
    re, im = np.random.default_rng(0).normal(size=(2, 5)).astype(np.float32)
    (got,) = TFLiteRunner(data).run([re, im])
    np.testing.assert_allclose(got, np.asarray(jax.jit(complex_abs)(re, im)), rtol=2e-7, atol=0)


def test_float64_program_names_inputs_and_lines():
    from jaxconv.tf import tflite

    with jax.enable_x64(True):
        program = trace(f64_sum, [S((3,), np.float64)] * 2)
        with pytest.raises(UnsupportedError, match="TFLite has no float64 kernels") as info:
            tflite.convert(program, route="tf-ops")
    line = _line(f64_sum, "f64 arithmetic")
    assert f"float64 in a, b, output_0; {line} (stablehlo." in str(info.value)
    assert "compute in float32" in str(info.value)


def test_zero_size_run_failure_names_ops_and_lines_on_both_routes():
    with pytest.raises(ArtifactError) as info:
        api.to_tflite(empty_exp, S((0, 3), np.float32))
    message = str(info.value)
    line = _line(empty_exp, "on zero rows")
    size = "Invalid tensor size."
    both = f"{size}; the tf-ops route: LiteRT failed while running the TFLite model: {size}"
    assert message.startswith("LiteRT failed while running the TFLite model: " + both)  # xla, then tf-ops
    assert message.endswith(
        f"(LiteRT rejects zero-size tensors: input x float32[0, 3]; stablehlo.exponential "
        f"x1 at {line}; stablehlo.broadcast_in_dim x1 at {line}; stablehlo.add x1 at {line})"
    )


def test_zero_size_run_failure_names_ops_with_route_forced():
    with pytest.raises(
        ArtifactError, match=r"stablehlo\.exponential x1 at .*test_tflite_route_errors\.py:\d+"
    ):
        api.to_tflite(empty_exp, S((0, 3), np.float32), route="tf-ops")


def test_converter_operand_types_are_read_through_shapes():
    from jaxconv.tf.tflite_errors import op_label

    assert op_label("'tfl.mul' op failed", '%2 = "tfl.mul"(%0, %1) : (tensor<?x5xui32>, tensor<5xui32>)') == (
        "tfl.mul on uint32"
    )
    assert op_label("'tfl.add' op failed", '%2 = "tfl.add"(%0, %1) : (tensor<f64>, tensor<f64>)') == (
        "tfl.add on float64"
    )


def strided_conv(w, x):
    dn = ("NWC", "WIO", "NWC")
    return lax.conv_general_dilated(x[..., None], w, (2,), "SAME", dimension_numbers=dn)  # symbolic padding


def test_symbolic_padding_converts_and_matches_jax():
    """A strided SAME convolution over a symbolic length: its pads are computed by the model."""
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf import tflite

    data = tflite.convert(trace(strided_conv, [S((5, 1, 3), np.float32), "f32[2,t]"]), route="tf-ops")
    rng = np.random.default_rng(1)
    w, x = rng.normal(size=(5, 1, 3)).astype(np.float32), rng.normal(size=(2, 11)).astype(np.float32)
    (got,) = TFLiteRunner(data).run([w, x])
    np.testing.assert_allclose(got, np.asarray(jax.jit(strided_conv)(w, x)), rtol=1e-5, atol=1e-5)


def spectrum(x):
    return jnp.abs(jnp.fft.rfft(x))  # a long FFT


def test_untranslatable_node_names_the_op():
    from jaxconv.tf import tflite

    with pytest.raises(UnsupportedError, match=r"no TF translation of ONNX DFT \(stablehlo\.fft"):
        tflite.convert(trace(spectrum, [S((2, 4096), np.float32)]), route="tf-ops")


def eigenvalues(a):
    return jnp.abs(jnp.linalg.eigvals(a))  # a LAPACK call inside JAX's private function (geev: no ONNX lowering)


def test_xla_route_names_the_line_calling_into_a_private_function():
    from jaxconv.tf import tflite

    with pytest.raises(UnsupportedError) as info:
        tflite.convert(trace(eigenvalues, [S((4, 4), np.float32)]), route="xla")
    assert f"stablehlo.custom_call @lapack_sgeev_ffi x1 at {_line(eigenvalues, 'LAPACK call')};" in str(
        info.value
    )


def test_tf_ops_route_names_the_line_of_what_the_onnx_lowering_refuses():
    from jaxconv.tf import tflite

    with pytest.raises(UnsupportedError) as info:
        tflite.convert(trace(eigenvalues, [S((4, 4), np.float32)]), route="tf-ops")
    assert str(info.value).endswith(
        f"(stablehlo.custom_call @lapack_sgeev_ffi at {_line(eigenvalues, 'LAPACK call')})"
    )
