"""The strided-slice rule (rewrites.strided_slices): ``x[..., ::2]`` and ``x[..., 1::2]`` (an interleaved
rotary embedding: RoFormer, GPT-J) as one Split of pairs, with the Unsqueezes and Reshapes around the
pair folded (rewrites.squeezes.reshape_chains); jax.jit's numbers bit for bit (NaN, ±inf, -0.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxconv.onnx.rewrites import strided_slices
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _rotate_pairs(x):
    return jnp.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)


def _heads(last: int = 8) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((2, 5, 3, last)).astype(np.float32)
    x[0, 0, 0, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    x[1, 4, 2, 3:] = [0.0, -0.0, np.nan, -np.inf, np.inf][: last - 3]
    return x


def test_rotate_pairs_is_one_split(monkeypatch):
    x = _heads()
    ops, (got,) = _convert(_rotate_pairs, x)
    assert ops["Slice"] == 0 and ops["Split"] == 1 and ops["Unsqueeze"] == 0, ops
    assert_same_floats(got, jax.jit(_rotate_pairs)(x), 0, 0)
    monkeypatch.setattr(strided_slices, "rewrite", lambda graph: 0)
    plain_ops, (plain,) = _convert(_rotate_pairs, x)
    assert plain_ops["Slice"] == 2, plain_ops
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))


def test_one_parity_or_an_odd_axis_stays():
    def fn(x, y):
        return x[..., ::2] * 2.0, y[..., 1::2] - y[..., ::2][..., :3]

    x, y = _heads(), _heads(7)
    ops, got = _convert(fn, x, y)
    assert ops["Split"] == 0 and ops["Slice"] >= 3, ops
    for g, w in zip(got, jax.jit(fn)(x, y)):
        assert_same_floats(g, w, 0, 0)


def test_rotate_pairs_over_symbolic_leading_axes_is_one_split(monkeypatch):
    """Exported for any batch (``f32[b,5,3,8]``): the leading sizes are read whole, so the pair is one Split,
    and the Squeezes and Unsqueezes around the negated half fold as in the static graph. With a symbolic
    sequence too, the pair is still one Split."""
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    for dims, shapes in (("b, 5, 3, 8", ((1, 5, 3, 8), (4, 5, 3, 8))), ("b, s, 3, 8", ((1, 1, 3, 8), (3, 7, 3, 8)))):
        specs = [jax.ShapeDtypeStruct(jax.export.symbolic_shape(dims), np.float32)]
        ops, _ = _convert(_rotate_pairs, _heads(), specs=specs)
        assert ops["Slice"] == 0 and ops["Split"] == 1, (dims, ops)
        if "s" not in dims:
            assert ops["Squeeze"] == ops["Unsqueeze"] == 0, ops
        runner = OnnxRunner(jaxconv.to_onnx(_rotate_pairs, *specs, check=False).SerializeToString())
        for shape in shapes:
            x = np.resize(_heads(), shape).astype(np.float32)
            x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
            (got,) = runner.run([x])
            assert_same_floats(got, jax.jit(_rotate_pairs)(x), 0, 0)
        with monkeypatch.context() as patch:
            patch.setattr(strided_slices, "rewrite", lambda graph: 0)
            plain_ops, _ = _convert(_rotate_pairs, _heads(), specs=specs)
        assert plain_ops["Slice"] == 2, plain_ops


def test_a_slice_that_cuts_a_symbolic_axis_stays():
    """``x[:2, :, ::2]`` and ``x[:2, :, 1::2]`` over a symbolic first axis: the pair reads part of that axis,
    known only at run time, so the Slices stay; the numbers are jax.jit's at sizes below and above 2."""
    def fn(x):
        return x[:2, :, ::2] - x[:2, :, 1::2]

    specs = [jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 5, 8"), np.float32)]
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    x = _heads().reshape(6, 5, 8)
    ops, _ = _convert(fn, x, specs=specs)
    assert ops["Split"] == 0, ops

    runner = OnnxRunner(jaxconv.to_onnx(fn, *specs, check=False).SerializeToString())
    for rows in (1, 6):
        (got,) = runner.run([x[:rows]])
        assert_same_floats(got, jax.jit(fn)(x[:rows]), 0, 0)
