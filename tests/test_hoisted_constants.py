"""Closed-over weights hoisted out of jax.export's module (``trace(..., hoist_constants=True)``).

The ONNX target binds them as initializers from the caller's own buffers: the graph and its
numbers must be those of the embedded-constant path, and the module must not copy the weights.
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from jaxconv.onnx import convert
from jaxconv.program import HOIST_BYTES, trace
from jaxconv.runtimes.onnxrt import OnnxRunner

_RNG = np.random.default_rng(0)
_W1 = _RNG.standard_normal((128, 256), dtype=np.float32) / 16  # 128 KiB: hoisted
_W2 = jnp.asarray(_RNG.standard_normal((256, 64), dtype=np.float32) / 16)  # a jax array, 64 KiB: hoisted
_B = _RNG.standard_normal(64).astype(np.float32)  # small: stays in the module
_IDX = np.arange(256 * 256, dtype=np.int32).reshape(256, 256) % 7  # int32, 256 KiB: hoisted


def _fn(inputs, unused):
    del unused
    h = jnp.tanh(inputs["x"] @ _W1)
    h = h + jnp.take(_IDX, 3, axis=0).astype(jnp.float32)[None, :] * 1e-3
    return {"y": h @ _W2 + _B, "s": jnp.sum(h, axis=-1)}


_SPECS = [{"x": jax.ShapeDtypeStruct((3, 128), jnp.float32)}, jax.ShapeDtypeStruct((2,), jnp.float32)]


def _digest(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    ops = [n.op_type for n in model.graph.node]
    inits = sorted(hashlib.sha1(onnx.numpy_helper.to_array(t).tobytes()).hexdigest() + str(list(t.dims))
                   for t in model.graph.initializer)
    return ops, inits


def test_hoisted_constants_are_the_callers_buffers_and_stay_out_of_the_module():
    program = trace(_fn, _SPECS, hoist_constants=True)
    assert len(program.constants) == 3 and all(c.nbytes >= HOIST_BYTES for c in program.constants)
    assert any(np.shares_memory(c, _W1) for c in program.constants)
    assert any(np.shares_memory(c, _IDX) for c in program.constants)
    embedded = trace(_fn, _SPECS)
    weights = _W1.nbytes + _W2.nbytes + _IDX.nbytes
    assert len(embedded.exported.mlir_module_serialized) > weights
    assert len(program.exported.mlir_module_serialized) < weights / 20
    assert program.signature == embedded.signature
    assert program.kept_inputs == embedded.kept_inputs == (0,)  # the unused input is dropped


def test_hoisted_program_lowers_to_the_same_onnx_and_numbers():
    hoisted = convert.program_to_onnx(trace(_fn, _SPECS, hoist_constants=True))
    embedded = convert.program_to_onnx(trace(_fn, _SPECS))
    assert _digest(hoisted) == _digest(embedded)
    assert [i.name for i in hoisted.graph.input] == [i.name for i in embedded.graph.input]
    x = _RNG.standard_normal((3, 128), dtype=np.float32)
    unused = np.zeros(2, np.float32)
    got = OnnxRunner(hoisted.SerializeToString()).run([x, unused])
    want = OnnxRunner(embedded.SerializeToString()).run([x, unused])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    ref = jax.jit(_fn)({"x": x}, unused)
    np.testing.assert_allclose(got[0], np.asarray(ref["s"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], np.asarray(ref["y"]), rtol=1e-5, atol=1e-5)


def test_hoisting_keeps_symbolic_dimensions():
    def fn(x):
        return jnp.tanh(x @ _W1) @ np.asarray(_W2)

    program = trace(fn, ["f32[b,128]"], hoist_constants=True)
    assert len(program.constants) == 2
    model = convert.program_to_onnx(program)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "b"
    runner = OnnxRunner(model.SerializeToString())
    for b in (1, 5):
        x = _RNG.standard_normal((b, 128), dtype=np.float32)
        np.testing.assert_allclose(runner.run([x])[0], np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)


def test_api_to_onnx_hoists_and_checks(tmp_path):
    import jaxconv

    reports: list = []
    model = jaxconv.to_onnx(_fn, *_SPECS, path=str(tmp_path / "m.onnx"), report_to=reports)
    assert reports and all(r.ok for r in reports)
    assert _digest(model) == _digest(convert.program_to_onnx(trace(_fn, _SPECS)))


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.bool_])
def test_hoisted_constants_of_other_dtypes(dtype):
    table = (np.arange(512 * 256) % 5).reshape(512, 256).astype(dtype)  # >= 128 KiB for 1-byte types

    def fn(i):
        return jnp.take(table, i, axis=0)

    program = trace(fn, ["i32[4]"], hoist_constants=True)
    assert len(program.constants) == 1
    model = convert.program_to_onnx(program)
    i = np.array([0, 3, 511, 7], np.int32)
    got = OnnxRunner(model.SerializeToString()).run([i])[0]
    np.testing.assert_array_equal(got, table[i])


def test_hoisted_float64_constants_under_x64():
    w = np.linspace(-1, 1, 128 * 128, dtype=np.float64).reshape(128, 128)  # 128 KiB

    def fn(x):
        return jnp.sin(x @ w)

    program = trace(fn, ["f64[2,128]"], hoist_constants=True)
    assert program.x64 and len(program.constants) == 1 and program.constants[0].dtype == np.float64
    model = convert.program_to_onnx(program)
    assert _digest(model) == _digest(convert.program_to_onnx(trace(fn, ["f64[2,128]"])))
    x = np.linspace(0, 1, 256, dtype=np.float64).reshape(2, 128)
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_allclose(OnnxRunner(model.SerializeToString()).run([x])[0], want, rtol=1e-12, atol=1e-12)


def test_a_jitted_function_is_hoisted_too():
    jitted = jax.jit(lambda x: jnp.tanh(x @ _W1) @ _W2)
    program = trace(jitted, ["f32[3,128]"], hoist_constants=True)
    assert len(program.constants) == 2
    model = convert.program_to_onnx(program)
    x = _RNG.standard_normal((3, 128), dtype=np.float32)
    np.testing.assert_allclose(OnnxRunner(model.SerializeToString()).run([x])[0], np.asarray(jitted(x)),
                               rtol=1e-5, atol=1e-5)
