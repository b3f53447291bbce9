"""Integer division and remainder on the tf-ops route: exact on every width, with XLA's edge answers.

TFLite has no 64-bit division; ``jaxconv.tf.onnx_to_tf.intdiv`` builds it from builtins. These
tests run the builtin-only TFLite model on edge values (INT_MIN, INT_MAX, -1, 0, 1, 2**53 +- 1, ...)
and random 64-bit pairs, and compare every element with jax.jit's ``lax.div``/``lax.rem`` (XLA).
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from jax import lax

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")


def _edges(dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    values = {0, 1, 2, 3, 7, info.max, info.max - 1, info.max // 2, info.max // 2 + 1, info.max // 3}
    if info.min < 0:
        values |= {-1, -2, -3, -7, info.min, info.min + 1, info.min // 2, info.min // 3}
    if info.bits == 64:
        for big in (2**53 - 1, 2**53, 2**53 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**62, 2**62 + 1, 3**39):
            values.add(big)
            if info.min < 0:
                values.add(-big)
        if info.min == 0:
            values |= {2**63 - 1, 2**63, 2**63 + 1, 2**64 - 3}
    return np.array(sorted(values), dtype=dtype)


def _pairs(dtype: np.dtype, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, then random pairs of every bit length (small divisors too)."""
    edges = _edges(dtype)
    a, b = (np.array(v, dtype=dtype) for v in zip(*itertools.product(edges, edges)))
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    n = 3000
    ra = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    rb = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    shift = rng.integers(0, info.bits, n).astype(dtype)
    rb = np.where(np.arange(n) % 2 == 0, rb >> shift, rb).astype(dtype)  # divisors of every magnitude
    return np.concatenate([a, ra]), np.concatenate([b, rb])


def _xla(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with jax.enable_x64(True), jax.default_device(jax.devices("cpu")[0]):
        q, r = jax.jit(lambda x, y: (lax.div(x, y), lax.rem(x, y)))(a, b)
        return np.asarray(q), np.asarray(r)


def _tflite(fn, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.saved_model import quiet_stderr

    spec = [tf.TensorSpec([None], tf.as_dtype(a.dtype), name=n) for n in ("a", "b")]
    concrete = tf.function(fn, input_signature=spec, autograph=False).get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # builtin ops only
    with quiet_stderr():
        data = converter.convert()
    runner = TFLiteRunner(data)
    feeds = {"a": a, "b": b}
    return [np.asarray(o) for o in runner.run([feeds[n] for n in runner.input_names])]


@pytest.mark.parametrize("name", ["int64", "uint64", "uint32", "int32", "uint8", "int16"])
def test_division_is_exact_in_tflite(name):
    from jaxconv.tf.onnx_to_tf import intdiv
    from jaxconv.tf.onnx_to_tf.values import WORK

    dtype = np.dtype(name)
    a, b = _pairs(dtype)
    want_q, want_r = _xla(a, b)
    work = tf.as_dtype(WORK[name])
    own = tf.int64 if name == "uint64" else tf.as_dtype(dtype)  # TFLite casts no uint64: feed the bits

    def fn(x, y):
        x, y = tf.cast(x, work), tf.cast(y, work)
        q, r = intdiv.divide(tf, x, y, name), intdiv.remainder(tf, x, y, name)
        return {"output_0": tf.cast(q, own), "output_1": tf.cast(r, own)}

    bits = np.dtype(own.as_numpy_dtype)
    got_q, got_r = (g.view(dtype) for g in _tflite(fn, a.view(bits), b.view(bits)))
    for got, want, what in ((got_q, want_q, "quotient"), (got_r, want_r, "remainder")):
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{name} {what} differs at {bad.size} of {a.size}: " + ", ".join(
            f"{a[i]} / {b[i]}: {got[i]} (XLA {want[i]})" for i in bad[:4]
        )


def test_edge_values_cover_the_named_cases():
    a, b = _pairs(np.dtype("int64"))
    pairs = set(zip(a.tolist(), b.tolist()))
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    for want in ((lo, -1), (lo, 1), (hi, 0), (lo, 0), (hi, -1), (2**53 + 1, 3), (-(2**53) - 1, 2), (hi, lo)):
        assert want in pairs


@pytest.mark.parametrize("name", ["int64", "uint64"])
def test_route_divides_edge_values_like_jax(name):
    """The whole tf-ops route (ONNX lowering with its guards, translation, converter) on edge values."""
    from jaxconv import api
    from jaxconv.runtimes.tflite import TFLiteRunner

    dtype = np.dtype(name)
    edges = _edges(dtype)
    a, b = (np.array(v, dtype=dtype) for v in zip(*itertools.product(edges, edges)))
    spec = jax.ShapeDtypeStruct(a.shape, dtype)
    with jax.enable_x64(True):
        data = api.to_tflite(
            lambda x, y: (lax.div(x, y), lax.rem(x, y)), spec, spec, route="tf-ops", check=False
        )
    got = TFLiteRunner(data).run([a, b])
    want = _xla(a, b)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
