"""jaxconv.onnx.rewrites.layout: a Transpose moves through a Reshape that splits or merges axes (group
norm's channels split into groups), and a permutation of axes that are only summed is dropped; so a
GroupNorm CNN written in NHWC keeps NCHW between its convolutions. ONNX Runtime's outputs within
tolerance of jax.jit's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import _regroup
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert

_RNG = np.random.default_rng(5)
_WS = [(_RNG.standard_normal((3, 3, c, 16)) / 9).astype(np.float32) for c in (8, 16, 16)]
_GAMMA = (1 + _RNG.standard_normal(16) / 10).astype(np.float32)
_BETA = (_RNG.standard_normal(16) / 10).astype(np.float32)


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def group_norm(x, groups=4, eps=1e-5):
    """Flax's GroupNorm: statistics over the spatial axes and each group's channels."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = jnp.maximum((g * g).mean(axis=(1, 2, 4), keepdims=True) - mean * mean, 0.0)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(n, h, w, c)
    return y * _GAMMA + _BETA


def group_norm_two_pass(x, groups=4, eps=1e-5):
    """Haiku's GroupNorm: the mean, then the mean square of the differences from it."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=(1, 2, 4), keepdims=True)
    return ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(n, h, w, c) * _GAMMA + _BETA


def group_norm_cnn(x):
    for w in _WS:
        x = jax.nn.silu(group_norm(_conv(x, w)))
    return x


def group_norm_two_pass_cnn(x):
    """As a U-Net's blocks: each norm between two convolutions."""
    x = _conv(x, _WS[0])
    for w in _WS[1:]:
        x = _conv(jax.nn.silu(group_norm_two_pass(x)), w)
    return x


def _image(seed: int, batch: int = 2) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((batch, 12, 10, 8)).astype(np.float32)
    x[0, 1, 2, :3] = [np.nan, np.inf, -np.inf]
    x[-1, 0, 0, 0] = -0.0
    return x


def flax_group_norm_cnn(x, groups: int = 4):
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(3):
                x = nn.swish(nn.GroupNorm(num_groups=groups)(nn.Conv(16, (3, 3))(x)))
            return x

    net = Net()
    params = net.init(jax.random.PRNGKey(0), x)
    return lambda x: net.apply(params, x)


def _specs(x, symbolic: bool):
    batch = jax.export.symbolic_shape("b")[0] if symbolic else x.shape[0]
    return [jax.ShapeDtypeStruct((batch, *x.shape[1:]), x.dtype)]


def transposed_elements(fn, x, symbolic: bool = False) -> int:
    """How many elements the Transposes of ``fn``'s ONNX move at the batch of ``x``."""
    import onnx

    import jaxconv

    model = onnx.shape_inference.infer_shapes(jaxconv.to_onnx(fn, *_specs(x, symbolic), check=False))
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else x.shape[0] for d in v.type.tensor_type.shape.dim]
            for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    return sum(int(np.prod(dims[n.input[0]])) for n in model.graph.node if n.op_type == "Transpose")


_CASES = {"by hand": lambda x: group_norm_cnn, "two pass": lambda x: group_norm_two_pass_cnn, "flax": flax_group_norm_cnn,
          # one group: the channels gain a size-1 axis, a Transpose that moves it is a Reshape (transposes)
          "flax, one group": lambda x: flax_group_norm_cnn(x, 1)}


@pytest.mark.parametrize("batch,symbolic", [(2, False), (1, False), (3, True)], ids=["b2", "b1", "symbolic"])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_group_norm_cnn_keeps_nchw(case, batch, symbolic):
    x = _image(0, batch)
    fn = _CASES[case](x)
    moved = transposed_elements(fn, x, symbolic)
    # the input's and the output's, and a layer's statistics ([n, c] each, mean and scale)
    assert moved <= x.size + x.size * 2 + 2 * batch * 16 * 3, moved
    _, (got,) = _convert(fn, x, specs=_specs(x, symbolic))
    assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-4, 1e-4)


def test_without_the_moves_each_layer_transposes_its_activations(monkeypatch):
    monkeypatch.setattr(_regroup, "regrouped", lambda *a: None)
    x = _image(0)
    assert transposed_elements(group_norm_cnn, x) > 4 * x.size


_W = (_RNG.standard_normal((32, 64)) / 6).astype(np.float32)


def column_sum(x):
    """A long sum over rows (a graph's node features pooled): the lowering transposes the rows last and sums them
    in blocks; column_sums then sums them where they lie."""
    return jnp.sum(jax.nn.relu(x @ _W), axis=0)


def test_a_long_column_sum_is_left_to_column_sums():
    x = np.random.default_rng(1).standard_normal((1024, 32)).astype(np.float32)
    ops, (got,) = _convert(column_sum, x)
    assert ops["Transpose"] == 0, ops
    assert_same_floats(got, np.asarray(jax.jit(column_sum)(x)), 1e-4, 1e-4)


def test_regrouped_matches_numpy():
    """The Reshape-first form of ``Reshape(Transpose(x, perm), z_shape)`` for Reshapes that split an axis or
    merge adjacent ones gives the same array wherever it is found, and is found where the merged axes keep
    their order (every permutation of a [2, 3, 4, 5] array, each split and merge of adjacent axes)."""
    import itertools

    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    found_count = refused = 0
    for perm in itertools.permutations(range(4)):
        y = x.transpose(perm)
        shapes = [[*y.shape[:k], y.shape[k] * y.shape[k + 1], *y.shape[k + 2:]] for k in range(3)]  # merges
        shapes += [[*y.shape[:k], a, y.shape[k] // a, *y.shape[k + 1:]]
                   for k in range(4) for a in (2,) if y.shape[k] % 2 == 0 and y.shape[k] > 2]  # splits
        for z_shape in shapes:
            found = _regroup.regrouped(list(perm), list(y.shape), z_shape)
            merged = [k for k in range(3) if len(z_shape) == 3 and z_shape[k] == y.shape[k] * y.shape[k + 1]
                      and list(y.shape[:k]) == z_shape[:k]]
            if merged and perm[merged[0] + 1] != perm[merged[0]] + 1:
                assert found is None, (perm, z_shape)
                refused += 1
                continue
            assert found is not None, (perm, z_shape)
            x_shape, perm2 = found
            np.testing.assert_array_equal(x.reshape(x_shape).transpose(perm2), y.reshape(z_shape))
            found_count += 1
    assert found_count >= 24 and refused >= 24, (found_count, refused)  # both cases, for many permutations


_PW = [(_RNG.standard_normal((1, 1, 8 if i == 0 else 16, 16)) / 4).astype(np.float32) for i in range(3)]
_DW = [(_RNG.standard_normal((3, 3, 1, 16)) / 3).astype(np.float32) for _ in range(3)]


def channel_shuffle(x, groups=4):
    """ShuffleNet's: the channels as [groups, c / groups], transposed, merged back."""
    n, h, w, c = x.shape
    return x.reshape(n, h, w, groups, c // groups).transpose(0, 1, 2, 4, 3).reshape(n, h, w, c)


def shuffle_net(x):
    for pw, dw in zip(_PW, _DW):
        y = jax.nn.relu(_conv(x, pw))
        x = jax.nn.relu(jax.lax.conv_general_dilated(channel_shuffle(y), dw, (1, 1), "SAME", feature_group_count=16,
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC")))
    return x


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
def test_a_channel_shuffle_between_convs_takes_one_transpose(symbolic):
    """The conv's NCHW -> NHWC Transpose, the shuffle's and the next conv's NHWC -> NCHW become one."""
    x = _image(0)
    moved = transposed_elements(shuffle_net, x, symbolic)
    assert moved <= x.size + 2 * x.size + 3 * 2 * x.size, moved  # input, output, one [2, 16, 12, 10] a shuffle
    _, (got,) = _convert(shuffle_net, x, specs=_specs(x, symbolic))
    assert_same_floats(got, np.asarray(jax.jit(shuffle_net)(x)), 1e-5, 1e-5)


def test_lifted_matches_numpy():
    """``Transpose(Reshape(y), perm)`` as ``Reshape(Transpose(y, lifted))`` for every permutation of a merged
    [2, 3, 4, 5] array's three axes and of a split one's five, where ``lifted`` finds one."""
    import itertools

    y = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    found_count = 0
    for z_shape in ([2, 12, 5], [2, 3, 2, 2, 5]):
        z = y.reshape(z_shape)
        for perm in itertools.permutations(range(len(z_shape))):
            lifted = _regroup.lifted(list(perm), list(y.shape), z_shape)
            if lifted is not None:
                want = z.transpose(perm)
                np.testing.assert_array_equal(y.transpose(lifted).reshape(want.shape), want)
                found_count += 1
    assert found_count == 6 + 24  # every permutation of the merge; the split's that keep [2, 2] in order
