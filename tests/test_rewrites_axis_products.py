"""jaxconv.onnx.rewrites.axis_products: a product by a constant matrix on one axis of a tensor (a bilinear
resize's weights) computed on that axis without Transposes, and ``layout`` moving Transposes through it, so a
resize between NHWC convolutions runs in NCHW. ONNX Runtime's outputs within tolerance of jax.jit's."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_rewrites_layout_groups import _specs, transposed_elements

from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import axis_products, layout
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(11)
_K1 = (_RNG.standard_normal((3, 3, 8, 16)) / 6).astype(np.float32)
_K2 = (_RNG.standard_normal((3, 3, 16, 8)) / 6).astype(np.float32)
_M = (_RNG.standard_normal((10, 7)) / 3).astype(np.float32)


def _conv(x, k):
    return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _resized(scale: float, method: str, antialias: bool = True):
    def fn(x):
        y = jax.nn.relu(_conv(x, _K1))
        n, h, w, c = y.shape
        y = jax.image.resize(y, (n, int(h * scale), int(w * scale), c), method, antialias=antialias)
        return jax.nn.relu(_conv(y, _K2))
    return fn


def _image(batch: int) -> np.ndarray:
    x = np.random.default_rng(batch).standard_normal((batch, 12, 10, 8)).astype(np.float32)
    x[0, 1, 2, :3] = [np.nan, np.inf, -np.inf]
    x[-1, 0, 0, 0] = -0.0
    return x


_RESIZES = {"bilinear up": (2.0, "bilinear"), "bilinear down, antialiased": (0.5, "bilinear"),
            "cubic up": (1.5, "cubic"), "lanczos3 down": (0.5, "lanczos3")}


@pytest.mark.parametrize("batch,symbolic", [(2, False), (1, False), (3, True)], ids=["b2", "b1", "symbolic"])
@pytest.mark.parametrize("case", sorted(_RESIZES))
def test_a_resize_between_convs_runs_in_nchw(case, batch, symbolic):
    """Only the model's input and output are transposed (the resize's einsum laid its image out three times)."""
    x = _image(batch)
    fn = _resized(*_RESIZES[case])
    y_size = np.asarray(jax.eval_shape(fn, x).shape).prod()
    assert transposed_elements(fn, x, symbolic) == x.size + y_size
    _, (got,) = _convert(fn, x, specs=_specs(x, symbolic))
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-4, 1e-4)


def test_without_the_layout_move_the_resize_keeps_nhwc(monkeypatch):
    monkeypatch.setattr(layout, "_through_axis_product", lambda *a: False)
    x = _image(2)
    fn = _resized(2.0, "bilinear")
    assert transposed_elements(fn, x) > 3 * x.size


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_a_resize_alone_takes_no_transpose(symbolic):
    fn = lambda x: jax.image.resize(x, (x.shape[0], 24, 15, x.shape[3]), "bilinear")  # noqa: E731
    x = _image(2)
    ops, (got,) = _convert(fn, x, specs=_specs(x, symbolic))
    assert ops["Transpose"] == 0 and ops["MatMul"] == 2, ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)


def test_without_the_rule_a_reordered_result_takes_two_transposes():
    """``nhwc,hk->nwkc``: the einsum's layout of the operand and of the result, where the rule leaves one
    Transpose of the result (the layout move alone cannot take the operand's: no inverse follows)."""
    fn = lambda x: jnp.einsum("nhwc,hk->nwkc", x, _M)  # noqa: E731
    x = np.random.default_rng(3).standard_normal((2, 10, 10, 10)).astype(np.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(axis_products, "rewrite", lambda graph: 0)
        ops, _ = _convert(fn, x)
    assert ops["Transpose"] == 2, ops


_EINSUMS = ["nhwc,hk->nkwc", "nhwc,wk->nhkc", "nhwc,ck->nhwk", "nhwc,hk->nwkc", "nhwc,wk->knhc"]


@pytest.mark.parametrize("spec", _EINSUMS)
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_an_einsum_with_a_constant_matrix_on_one_axis(spec, symbolic):
    """Each axis of a 4-D tensor mapped by a constant matrix, the result in the source's order or another:
    one Transpose at most (of the result, where its order differs), jax.jit's numbers."""
    sizes = {"n": 2, "h": 10, "w": 10, "c": 10}
    x = np.random.default_rng(3).standard_normal([sizes[a] for a in "nhwc"]).astype(np.float32)
    fn = lambda x: jnp.einsum(spec, x, _M)  # noqa: E731
    ops, (got,) = _convert(fn, x, specs=_specs(x, symbolic))
    out = spec.split("->")[1]
    in_order = "".join(a if a in "nhwc" else "k" for a in out) == spec[:4].replace(spec[5], "k")
    assert ops["Transpose"] == (0 if in_order else 1), ops
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)


def test_a_product_over_two_axes_is_no_axis_product():
    """``nhwc,hwk->nkc`` contracts two axes: left to the other rules, with jax.jit's numbers."""
    m2 = (_RNG.standard_normal((12, 10, 5)) / 10).astype(np.float32)
    fn = lambda x: jnp.einsum("nhwc,hwk->nkc", x, m2)  # noqa: E731
    x = _image(2)
    assert_same_floats(_convert(fn, x)[1][0], np.asarray(jax.jit(fn)(x)), 1e-5, 1e-5)


def _sizes(dims):
    return [dp.Size(d) if isinstance(d, int) else dp.Size(1, (d,)) for d in dims]


def test_merged_and_split_labels_match_numpy():
    """``_merged`` and ``_split`` name the axes a row-major Reshape merges or splits back: checked by
    reshaping an array whose entries say their source index (every way of merging a [2, 1, 3, 4, 5] array's
    adjacent axes), and refused where an axis would be cut."""
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 1, 3, 4, 5)
    dims = list(x.shape)
    checked = 0
    for cuts in itertools.product([False, True], repeat=4):
        groups, current = [], [0]
        for k, cut in enumerate(cuts, start=1):
            if cut:
                groups.append(current)
                current = []
            current.append(k)
        groups.append(current)
        into = [int(np.prod([dims[k] for k in g])) for g in groups]
        labels = axis_products._merged(_sizes(dims), list(range(5)), _sizes(into))
        assert labels is not None
        merged = x.reshape(into)
        for j, held in enumerate(labels):  # each merged axis walks the source axes it holds, row-major
            assert int(np.prod([dims[k] for k in held])) == into[j]
        assert [k for held in labels for k in held] == list(range(5))
        assert axis_products._split([k for held in labels for k in held], _sizes(dims), _sizes(dims)) \
            == [[k] for k in range(5)]
        np.testing.assert_array_equal(merged.reshape(dims), x)
        checked += 1
    assert checked == 16
    assert axis_products._merged(_sizes([6, 4]), [0, 1], _sizes([2, 12])) is None  # splits the 6
    assert axis_products._split([0, 1], _sizes([6, 4]), _sizes([4, 6])) is None
    assert axis_products._merged(_sizes(["b", 4, 5]), [0, 1, 2], [dp.Size(4, ("b",)), dp.Size(5)]) == [[0, 1], [2]]


_W1, _B1 = (_RNG.standard_normal((12, 24)) / 4).astype(np.float32), (_RNG.standard_normal(24) / 4).astype(np.float32)
_W2, _B2 = (_RNG.standard_normal((24, 12)) / 4).astype(np.float32), (_RNG.standard_normal(12) / 4).astype(np.float32)


def token_mixing(x):
    """An MLP-Mixer block's token mixing: the tokens made the last axis, a Dense - GELU - Dense over them,
    swapped back, added to the input."""
    y = jnp.swapaxes(x, 1, 2)
    y = jax.nn.gelu(y @ _W1 + _B1) @ _W2 + _B2
    return x + jnp.swapaxes(y, 1, 2)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_token_mixing_takes_no_transpose(symbolic):
    """The products run over the tokens where they lie (the matrices on the left, their biases as columns)."""
    x = np.random.default_rng(4).standard_normal((3, 12, 16)).astype(np.float32)
    x[0, 1, :2] = [np.nan, np.inf]
    ops, (got,) = _convert(token_mixing, x, specs=_specs(x, symbolic))
    assert ops["Transpose"] == 0 and ops["MatMul"] == 2, ops
    assert_same_floats(got, np.asarray(jax.jit(token_mixing)(x)), 1e-5, 1e-5)


def test_a_trial_move_does_not_pay_by_reaching_the_output_past_a_product():
    """A symbolic-batch bidirectional LSTM over padded rows (its Loops' outputs of unknown sizes) ends in
    ``Dense(Concat(forward, backward))``: a move through the Concat, tried on a copy, reached the output through
    the Dense and was kept for a misjudged cost (one Transpose more than without the product's path)."""
    import flax.linen as nn

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, x, n):
            y = nn.Bidirectional(nn.RNN(nn.LSTMCell(16)), nn.RNN(nn.LSTMCell(16)))(x, seq_lengths=n)
            return nn.Dense(10)(y)

    x = np.random.default_rng(0).standard_normal((2, 12, 8)).astype(np.float32)
    n = np.array([12, 7], np.int32)
    params = Tagger().init(jax.random.PRNGKey(0), x, n)
    fn = lambda x, n: Tagger().apply(params, x, n)  # noqa: E731
    b = jax.export.symbolic_shape("b")[0]
    specs = [jax.ShapeDtypeStruct((b, 12, 8), np.float32), jax.ShapeDtypeStruct((b,), np.int32)]
    ops, (got,) = _convert(fn, x, n, specs=specs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(layout, "_axis_product_at", lambda node, value: None)
        plain, _ = _convert(fn, x, n, specs=specs)
    assert ops["Transpose"] <= plain["Transpose"], (ops, plain)
    assert_same_floats(got, np.asarray(jax.jit(fn)(x, n)), 1e-5, 1e-5)
