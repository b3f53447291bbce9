"""Float divisions by a constant or a broadcast, computed as XLA computes them: a product by the reciprocal.

XLA's algebraic simplifier turns ``a / c`` and ``a / broadcast(b)`` into ``a * (1 / c)`` and
``a * broadcast(1 / b)``, one ulp from IEEE division in a fifth to a third of the elements. Where a
comparison or a cast to an integer follows, that ulp is a different answer: ``(x / x.max(-1,
keepdims=True) * 255).astype(uint8)`` gave 254 in jax.jit and 255 in the ONNX, and the default check
failed such programs on random inputs. Every comparison here is with jax.jit, bit for bit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner

RNG = np.random.default_rng(0)


def _run(fn, *args, x64=False):
    specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
    model = jaxconv.to_onnx(fn, *specs, check=False)
    got = OnnxRunner(model.SerializeToString()).run([np.asarray(a) for a in args])
    with jax.enable_x64(x64):
        want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return got, want, model


def _positive(*shape, dtype=np.float32):
    return np.asarray(np.abs(RNG.standard_normal(shape)) + 0.5, dtype)


CASES = {
    "by a constant": (lambda a: a / 3.0, [(64, 256)]),
    "by a broadcast row": (lambda a, b: a / b[:, None], [(64, 256), (64,)]),
    "by a broadcast max": (lambda a: a / a.max(-1, keepdims=True), [(64, 256)]),
    "by a scalar input": (lambda a, s: a / s, [(64, 256), ()]),
    "by a constant array": (lambda a: a / (np.arange(256, dtype=np.float32) + 1), [(64, 256)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_quotients_are_jax_jits_bit_for_bit(name):
    fn, shapes = CASES[name]
    args = [_positive(*s) for s in shapes]
    got, want, _ = _run(fn, *args)
    ieee = args[0] / (args[1][:, None] if name == "by a broadcast row" else args[1] if len(args) > 1 else
                      args[0].max(-1, keepdims=True) if name == "by a broadcast max" else
                      np.float32(3.0) if name == "by a constant" else np.arange(256, dtype=np.float32) + 1)
    assert np.mean(want[0] != ieee) > 0.1  # the premise: jax.jit is not IEEE division here
    np.testing.assert_array_equal(got[0], want[0])


def test_float64_quotients_too():
    a, b = _positive(32, 16, dtype=np.float64), _positive(32, dtype=np.float64)
    got, want, _ = _run(lambda a, b: a / b[:, None], a, b, x64=True)
    np.testing.assert_array_equal(got[0], want[0])


def test_a_quotient_of_one_shape_stays_ieee_division():
    a, b = _positive(64, 256), _positive(64, 256)
    got, want, model = _run(lambda a, b: a / b, a, b)
    np.testing.assert_array_equal(want[0], a / b)  # the premise: XLA divides here
    np.testing.assert_array_equal(got[0], want[0])
    assert "Div" in {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("fn", [
    lambda x: (x / x.max(-1, keepdims=True) * 255).astype(jnp.uint8),
    lambda x: (x / x.max(-1, keepdims=True)) == 1.0,
    lambda x, s: jnp.clip(jnp.round(x / s), -128, 127).astype(jnp.int8),
], ids=["normalise to uint8", "equal to the max", "quantize by a scale"])
def test_casts_and_comparisons_after_a_division_pass_the_default_check(fn):
    specs = [jax.ShapeDtypeStruct((16, 24), jnp.float32)]
    if fn.__code__.co_argcount == 2:
        specs.append(jax.ShapeDtypeStruct((), jnp.float32))
    jaxconv.to_onnx(fn, *specs)


def test_a_root_divisor_keeps_ieee_division_for_the_norm_fusion():
    """An RMS norm's ``x / sqrt(mean(x^2) + eps)``: XLA uses its own rsqrt there, which neither form
    matches; the Div stays, as ONNX Runtime's SimplifiedLayerNormalization fusion reads it."""
    _, _, model = _run(lambda x: x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6), _positive(4, 32))
    assert "Div" in {n.op_type for n in model.graph.node}
    assert "Reciprocal" not in {n.op_type for n in model.graph.node}


def test_zero_signs_and_flushed_reciprocals():
    """``x / -inf`` is -0 for a positive x (ONNX Runtime's Where would have made it +0); ``x / FLT_MAX`` is 0
    in jax.jit, whose reciprocal 2.9e-39 is subnormal and flushed."""
    x = np.array([[3.0, -2.0, 0.0, -0.0, np.inf, 1e-3]], np.float32).repeat(4, axis=0)
    b = np.array([-np.inf, np.finfo(np.float32).max, -0.0, 2.0], np.float32)
    got, want, _ = _run(lambda x, b: x / b[:, None], x, b)
    assert (want[0][1, :2] == 0).all()  # the premise: jax.jit flushed 1 / FLT_MAX
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    np.testing.assert_array_equal(got[0][~np.isnan(want[0])], want[0][~np.isnan(want[0])])
    numbers = ~np.isnan(want[0])
    np.testing.assert_array_equal(np.signbit(got[0][numbers]), np.signbit(want[0][numbers]))

