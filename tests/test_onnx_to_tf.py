"""The tf-ops translator: jaxconv's ONNX as plain TF ops, compared with jax.jit in TF and in LiteRT.

Each function exercises one op family in a dtype TFLite has no kernel for; the TF function runs in
TensorFlow (fast), and a few go through TFLite's converter with builtin ops only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from jaxconv.errors import UnsupportedError
from jaxconv.program import trace

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")


def _inputs(specs, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for spec in specs:
        dtype = np.dtype(ml_dtypes.bfloat16) if spec.dtype == jnp.bfloat16 else np.dtype(spec.dtype)
        if dtype == np.bool_:
            out.append(rng.random(spec.shape) > 0.5)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max, spec.shape, dtype=dtype, endpoint=True))
        else:
            out.append(rng.normal(size=spec.shape).astype(dtype) * 3)
    return out


def _tf_outputs(fn, specs, args):
    from jaxconv.tf.onnx_to_tf import for_program

    model, function, concrete = for_program(trace(fn, specs))
    with jax.default_device(jax.devices("cpu")[0]):
        got = function(*args)
    return [got[f"output_{i}"].numpy() for i in range(len(got))], concrete


def _reference(fn, args):
    wide = any(np.asarray(a).dtype.itemsize == 8 for a in args)
    with jax.enable_x64(wide):
        return [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def _assert_same(fn, args, got, exact=True):
    """``exact``: True (bit for bit), False (rtol = atol = 1e-6) or ``BackwardStable(n)``."""
    want = _reference(fn, args)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        if isinstance(exact, BackwardStable):
            continue
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=1e-6, atol=1e-6)
    if isinstance(exact, BackwardStable):
        exact.check(_reference(fn, [np.asarray(a, np.float64) for a in args]), want, got)


class BackwardStable:
    """A float32 factorization judged against its float64 result: a backward stable one is exact for a
    matrix within about ``n * eps * |A|`` of A, so its eigenvalues (Weyl) and its product ``V diag(w) Vᵀ``
    lie within ``n * eps`` times the largest magnitude of the outputs (|A|'s spectral norm for eigh's
    eigenvalues) of float64's, for jax.jit's LAPACK and for the ONNX's Jacobi sweeps alike. Two such
    results may then differ by twice that: which float32 rounding each makes depends on the CPU."""

    def __init__(self, n: int):
        self.n = n

    def check(self, wide, want, got):
        scale = max(float(np.abs(t).max()) for t in wide)
        bound = self.n * float(np.finfo(np.float32).eps) * scale
        for t, w, g in zip(wide, want, got):
            for name, x in (("jax.jit", w), ("the translation", g)):
                err = float(np.abs(x.astype(np.float64) - t).max())
                assert err <= bound, f"{name} is {err:.3g} off float64, beyond n * eps * |A| = {bound:.3g}"


S = jax.ShapeDtypeStruct
CASES = {
    # integer arithmetic that wraps in its own width (TFLite computes it in int32/int64)
    "i8_wrap": (lambda a, b: (a * b + a, a - b, -a), [S((3, 4), np.int8)] * 2, True),
    "u8_div_rem": (
        lambda a, b: (a // jnp.maximum(b, 1), a % jnp.maximum(b, 1)),
        [S((9,), np.uint8)] * 2,
        True,
    ),
    "i32_div_rem": (lambda a, b: (lax.div(a, b | 1), lax.rem(a, b | 1)), [S((9,), np.int32)] * 2, True),
    "u32_threefry_mix": (lambda a, b: ((a * b) ^ (a >> 7)) + (b << 13), [S((8,), np.uint32)] * 2, True),
    # bitwise ops TFLite has no kernel for, on every integer width
    "bitwise_i32": (lambda a, b: (a & b, a | b, ~a, a ^ b), [S((16,), np.int32)] * 2, True),
    "bitwise_u16": (lambda a, b: (a & b, a | b, ~a), [S((16,), np.uint16)] * 2, True),
    "bitwise_i64": (lambda a, b: (a & b, a | b, ~a), [S((16,), np.int64)] * 2, True),
    "shifts_u32": (
        lambda a, b: (a << (b % 40), a >> (b % 40), lax.shift_right_logical(a, b % 33)),
        [S((16,), np.uint32)] * 2,
        True,
    ),
    # narrow floats: computed in float32, rounded back after every op as XLA does
    "bf16_math": (
        lambda a, b: (a * b + a, jnp.tanh(a) / (jnp.abs(b) + 1)),
        [S((3, 5), jnp.bfloat16)] * 2,
        True,
    ),
    "f16_reduce": (lambda a: (jnp.max(a, axis=0), jnp.sum(a, axis=1)), [S((4, 6), np.float16)], False),
    # structure: sorting, gathers, scatters, loops, convolution, pooling, padding
    "sort_argsort": (lambda a: (jnp.sort(a, axis=-1), jnp.argsort(a, axis=0)), [S((4, 5), np.float32)], True),
    "gather_scatter": (
        lambda a, i: (a[i % 6], a.at[i % 6].add(1.0), jnp.take_along_axis(a, (i[:6, None] % 4), 1)),
        [S((6, 4), np.float32), S((8,), np.int32)],
        True,
    ),
    "fori_loop": (lambda a: lax.fori_loop(0, 4, lambda k, c: c * 2 + k, a), [S((3,), np.int16)], True),
    "conv_pool_pad": (
        lambda x, w: (
            lax.conv(x, w, (1, 1), "SAME"),
            lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
            jnp.pad(x, ((0, 0), (0, 0), (1, 2), (2, 0)), mode="edge"),
        ),
        [S((1, 2, 6, 6), np.float32), S((3, 2, 3, 3), np.float32)],
        False,
    ),
    "scatter_reductions": (
        lambda x, i, u: (x.at[i % 4].max(u), x.at[i % 4].min(u), x.at[i % 4].multiply(u)),
        [S((4, 3), np.float32), S((5,), np.int32), S((5, 3), np.float32)],
        True,
    ),
    # eigh's Jacobi loop (ScatterElements); vectors have their own signs, so a product that ignores them
    "eigh": (lambda a: (lambda w, v: (w, (v * w) @ v.T))(*jnp.linalg.eigh(a + a.T)), [S((4, 4), np.float32)],
             BackwardStable(4)),
    "fmod_floor_divide": (
        lambda x, y: (lax.rem(x, y), jnp.floor_divide(x, y)),
        [S((20,), np.float32)] * 2,
        True,
    ),
    "i64_div_rem": (lambda a, b: (lax.div(a, b | 1), lax.rem(a, b | 1)), [S((64,), np.int64)] * 2, True),
    "u32_div_rem": (lambda a, b: (lax.div(a, b | 1), lax.rem(a, b | 1)), [S((64,), np.uint32)] * 2, True),
    "bitcast_threefry": (
        lambda x, k: (
            lax.bitcast_convert_type(x, jnp.uint32),
            x + jax.random.uniform(jax.random.wrap_key_data(k), x.shape),
        ),
        [S((6,), np.float32), S((2,), np.uint32)],
        True,
    ),
    "conv_transpose": (
        lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
        [S((1, 4, 4, 3), np.float32), S((3, 3, 3, 2), np.float32)],
        False,
    ),
    "loop_swapping_carries": (
        lambda x, r: lax.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 1, c[2], c[1], c[3] * 2 + c[1][0]), (0, r[:2], r[2:], x)
        )[3],
        [S((3,), np.float32), S((4,), np.float32)],
        True,
    ),
    "trig": (
        lambda a: (jnp.sin(a), jnp.cos(a), jnp.arctan(a), jnp.tan(a * 0.3)),
        [S((7,), np.float32)],
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_translation_matches_jax(name):
    fn, specs, exact = CASES[name]
    args = _inputs(specs)
    got, _ = _tf_outputs(fn, specs, args)
    _assert_same(fn, args, got, exact)


def _tflite_outputs(concrete, names, args):
    from jaxconv.runtimes.tflite import TFLiteRunner
    from jaxconv.tf.saved_model import quiet_stderr

    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # builtin ops only: no flex
    with quiet_stderr():
        data = converter.convert()
    runner = TFLiteRunner(data)
    order = [runner.input_names.index(n) for n in names]
    outs = runner.run([args[order.index(i)] for i in range(len(args))])
    return outs


@pytest.mark.parametrize(
    "name",
    [
        "u32_threefry_mix",
        "bitwise_i32",
        "bf16_math",
        "sort_argsort",
        "fori_loop",
        "scatter_reductions",
        "i64_div_rem",
        "bitcast_threefry",
        "loop_swapping_carries",
    ],
)
def test_builtin_only_tflite_matches_jax(name):
    fn, specs, exact = CASES[name]
    args = _inputs(specs, seed=1)
    _, concrete = _tf_outputs(fn, specs, args)
    program = trace(fn, specs)
    names = [t.name for t in program.signature.inputs]
    got = _tflite_outputs(concrete, names, args)
    _assert_same(
        fn, args, [np.asarray(g).reshape(np.shape(w)) for g, w in zip(got, _reference(fn, args))], exact
    )


def test_every_emitted_onnx_op_has_a_translation():
    """The op table covers the ONNX op types the lowering writes most (a missing one is named)."""
    from jaxconv.tf.onnx_to_tf import HANDLERS

    needed = {
        "Add",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "Cast",
        "Concat",
        "Conv",
        "CumSum",
        "Equal",
        "Expand",
        "Gather",
        "GatherElements",
        "GatherND",
        "If",
        "Loop",
        "MatMul",
        "MaxPool",
        "Mod",
        "Pad",
        "ReduceMax",
        "ReduceSum",
        "Reshape",
        "ScatterElements",
        "ScatterND",
        "Slice",
        "TopK",
        "Transpose",
        "Where",
    }
    assert needed <= set(HANDLERS)


def test_untranslatable_node_names_op_and_source():
    import onnx
    from onnx import helper

    from jaxconv.tf.onnx_to_tf import Untranslatable, serving_function

    node = helper.make_node("Hardmax", ["x"], ["y"])
    node.metadata_props.add(key="stablehlo.op", value="stablehlo.custom")
    node.metadata_props.add(key="source", value="model.py:7")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    with pytest.raises(
        Untranslatable, match=r"no TF translation of ONNX Hardmax \(stablehlo\.custom at model\.py:7\)"
    ):
        serving_function(tf, helper.make_model(graph), [tf.TensorSpec([2], tf.float32, name="x")])
    assert issubclass(Untranslatable, UnsupportedError)


def test_nan_survives_exp_tanh_logistic_in_tflite():
    """TFLite's exp gives 0 and its logistic 1 for NaN; the tf-ops route keeps XLA's NaN."""

    def fn(x):
        return jnp.exp(x), jnp.tanh(x), jax.nn.sigmoid(x), jnp.isinf(x)

    specs = [S((4,), np.float32)]
    x = np.array([np.nan, 1.0, -np.inf, np.inf], np.float32)
    got, concrete = _tf_outputs(fn, specs, [x])
    _assert_same(fn, [x], got, exact=False)
    names = [t.name for t in trace(fn, specs).signature.inputs]
    lite = _tflite_outputs(concrete, names, [x])
    _assert_same(fn, [x], [np.asarray(g) for g in lite], exact=False)
