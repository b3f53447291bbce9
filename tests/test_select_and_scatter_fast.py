"""Max (min) pooling's gradient, stablehlo.select_and_scatter, in its Where-free form
(onnx/ops/select_and_scatter_fast.py): bit for bit jax.jit's, ties (windows of equal zeros), -0.0 beside
+0.0, +-inf, NaN in the operand and NaN/inf in the cotangent included; an If runs the exact form for
the last two, and the form itself is checked without that guard on the inputs it is meant for."""

from __future__ import annotations

import collections

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import lax

import jaxconv
from jaxconv.onnx.ops import select_and_scatter_fast as fast
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits


def _pool_grad(pool):
    """(x, cotangent) -> the cotangent pulled back through ``pool``: a select_and_scatter."""
    def grad(x, g):
        return jax.vjp(pool, x)[1](g)[0]
    return grad


def _window(kind, dims, strides, padding="VALID"):
    init, op = (-jnp.inf, lax.max) if kind == "max" else (jnp.inf, lax.min)
    return lambda x: lax.reduce_window(x, init, op, dims, strides, padding)


_SAME_1 = ((0, 0), (1, 1), (1, 1), (0, 0))
# name: (pool, operand shape)
POOLS = {
    "flax_2x2_2": (lambda x: nn.max_pool(x, (2, 2), (2, 2)), (2, 8, 8, 3)),
    "flax_3x3_2_same": (lambda x: nn.max_pool(x, (3, 3), (2, 2), "SAME"), (2, 9, 9, 3)),
    "resnet_3x3_2_pad1": (_window("max", (1, 3, 3, 1), (1, 2, 2, 1), _SAME_1), (2, 8, 8, 3)),
    "overlap_3x3_1": (_window("max", (1, 3, 3, 1), (1, 1, 1, 1)), (2, 7, 7, 2)),
    "overlap_3x3_1_same": (_window("max", (1, 3, 3, 1), (1, 1, 1, 1), "SAME"), (1, 6, 6, 2)),
    "nchw_2x2_2": (_window("max", (1, 1, 2, 2), (1, 1, 2, 2)), (2, 3, 8, 8)),
    "nchw_3x3_2_same": (_window("max", (1, 1, 3, 3), (1, 1, 2, 2), "SAME"), (2, 3, 9, 9)),
    "odd_2x2_2": (_window("max", (1, 2, 2, 1), (1, 2, 2, 1)), (2, 9, 7, 2)),
    "1d_3_2": (_window("max", (1, 3, 1), (1, 2, 1)), (2, 11, 3)),
    "1d_2_2": (_window("max", (1, 2, 1), (1, 2, 1)), (2, 12, 3)),
    "3d_2x2x2_2": (_window("max", (1, 2, 2, 2, 1), (1, 2, 2, 2, 1)), (1, 4, 6, 4, 2)),
    "3d_3x3x3_2_same": (_window("max", (1, 3, 3, 3, 1), (1, 2, 2, 2, 1), "SAME"), (1, 5, 5, 5, 2)),
    "min_2x2_2": (_window("min", (1, 2, 2, 1), (1, 2, 2, 1)), (2, 8, 8, 3)),
    "min_3x3_2_same": (_window("min", (1, 3, 3, 1), (1, 2, 2, 1), "SAME"), (2, 9, 9, 3)),
}


def _shapes(pool, shape, dtype):
    x = jax.ShapeDtypeStruct(shape, dtype)
    return x, jax.eval_shape(pool, x)


def _operands(shape, dtype):
    """Fast-branch operands: relu'd (windows of equal zeros), signed zeros side by side, +-inf and -inf
    windows, huge values; exact-branch operands: a NaN."""
    rng = np.random.default_rng(5)
    relu = np.maximum(rng.standard_normal(shape), 0).astype(dtype)
    signed = np.where(rng.random(shape) < 0.5, -0.0, 0.0).astype(dtype)
    signed[..., ::3] = rng.standard_normal(signed[..., ::3].shape) < 0  # 1.0 beside zeros of either sign
    infs = rng.standard_normal(shape).astype(dtype)
    infs.flat[::7] = -np.inf
    infs.flat[3::11] = np.inf
    infs.flat[5::13] = np.finfo(dtype).max
    flat = np.full(shape, -np.inf, dtype)  # every window all -inf: padding must still never be picked
    flat.flat[::5] = -0.0
    nan = relu.copy()
    nan.flat[::9] = np.nan
    return {"relu": relu, "signed": signed, "infs": infs, "flat": flat, "nan": nan}


def _cotangents(shape, dtype):
    rng = np.random.default_rng(6)
    plain = rng.standard_normal(shape).astype(dtype)
    zeros = np.where(rng.random(shape) < 0.5, -0.0, 0.0).astype(dtype)
    inf, nan = plain.copy(), plain.copy()
    inf.flat[::4] = np.inf
    inf.flat[1::5] = -np.inf
    nan.flat[::3] = np.nan
    return {"plain": plain, "zeros": zeros, "inf": inf, "nan": nan}


def _model(fn, specs, check=True):
    return jaxconv.to_onnx(fn, *specs, check=check)


def _check(fn, specs, dtype, pool_shape):
    model = _model(fn, specs)
    runner = OnnxRunner(model.SerializeToString())
    for xname, x in _operands(specs[0].shape, dtype).items():
        for gname, g in _cotangents(pool_shape, dtype).items():
            want = np.asarray(jax.jit(fn)(x, g))
            got = runner.run([x, g])
            _same_bits(got, want, xname, gname)
    return model


def _same_bits(got, want, xname, gname):
    try:
        assert_same_bits(got, [want])
    except AssertionError as e:
        raise AssertionError(f"operand {xname}, cotangent {gname}: {e}") from None


def _subgraph_ops(model):
    """Op types of each If's (then, else) branch."""
    found = []
    for node in model.graph.node:
        if node.op_type == "If":
            branches = {a.name: collections.Counter(n.op_type for n in a.g.node) for a in node.attribute}
            found.append((branches["then_branch"], branches["else_branch"]))
    return found


@pytest.mark.parametrize("name", sorted(POOLS))
def test_guarded_form_matches_jax(name):
    pool, shape = POOLS[name]
    fn = _pool_grad(pool)
    x, y = _shapes(pool, shape, np.float32)
    model = _check(fn, [x, y], np.float32, y.shape)
    top = collections.Counter(n.op_type for n in model.graph.node)
    assert top["Where"] == 0 and top["If"] == 1, top
    (exact, quick), = _subgraph_ops(model)
    assert exact["Where"] > 0 and quick["Where"] == 0 and quick["If"] == 0, (exact, quick)


@pytest.mark.parametrize("name", sorted(POOLS))
def test_fast_form_alone_matches_jax(name, monkeypatch):
    """Without the guard, on NaN-free operands and finite cotangents (those the guard lets through)."""
    monkeypatch.setattr(fast, "guarded",
                        lambda ctx, op, inputs, exact, scatter: fast.fast(ctx, op, inputs, scatter))
    pool, shape = POOLS[name]
    fn = _pool_grad(pool)
    x, y = _shapes(pool, shape, np.float32)
    model = _model(fn, [x, y], check=False)  # its check feeds NaN
    assert not any(n.op_type in ("Where", "If") for n in model.graph.node)
    runner = OnnxRunner(model.SerializeToString())
    for xname, xv in _operands(shape, np.float32).items():
        for gname, g in _cotangents(y.shape, np.float32).items():
            if xname == "nan" or gname in ("nan", "inf"):
                continue
            _same_bits(runner.run([xv, g]), np.asarray(jax.jit(fn)(xv, g)), xname, gname)


@pytest.mark.parametrize("name", ["flax_2x2_2", "nchw_2x2_2", "1d_2_2", "3d_2x2x2_2"])
def test_tiling_windows_are_put_back_by_concats(name):
    """Windows that tile the operand: their grids concatenated in place, no Pad."""
    pool, shape = POOLS[name]
    x, y = _shapes(pool, shape, np.float32)
    (_, quick), = _subgraph_ops(_model(_pool_grad(pool), [x, y]))
    assert quick["Pad"] == 0 and quick["Concat"] > 0 and quick["Max"] == 1, quick


@pytest.mark.parametrize("name", ["odd_2x2_2", "flax_3x3_2_same", "overlap_3x3_1", "resnet_3x3_2_pad1"])
def test_overlapping_windows_are_summed_per_phase(name):
    """One Pad per window offset on a phase grid (a stride's fraction of the operand), no dilating Pad."""
    pool, shape = POOLS[name]
    x, y = _shapes(pool, shape, np.float32)
    (_, quick), = _subgraph_ops(_model(_pool_grad(pool), [x, y]))
    windows = 9 if "3x3" in name else 4
    assert quick["Pad"] <= windows and quick["Max"] == 1, quick


@pytest.mark.parametrize("name", ["flax_2x2_2", "resnet_3x3_2_pad1", "overlap_3x3_1"])
def test_float64(name, x64):
    pool, shape = POOLS[name]
    fn = _pool_grad(pool)
    x, y = _shapes(pool, shape, np.float64)
    _check(fn, [x, y], np.float64, y.shape)


@pytest.mark.parametrize("name", ["flax_2x2_2", "resnet_3x3_2_pad1"])
def test_float16(name):
    pool, shape = POOLS[name]
    fn = _pool_grad(pool)
    x, y = _shapes(pool, shape, np.float16)
    _check(fn, [x, y], np.float16, y.shape)


def test_overlapping_picks_add_in_source_order():
    """An element several windows pick receives their cotangents in the source's row-major order."""
    pool = _window("max", (1, 3), (1, 1))
    fn = _pool_grad(pool)
    x = np.zeros((1, 12), np.float32)
    x[0, 5] = 1.0
    g = np.zeros((1, 10), np.float32)
    g[0, 3:6] = [1.0, 3e-8, 3e-8]  # (1 + 3e-8) + 3e-8 == 1, 1 + (3e-8 + 3e-8) != 1
    model = _model(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(g.shape, g.dtype)])
    got = OnnxRunner(model.SerializeToString()).run([x, g])
    assert_same_bits(got, [np.asarray(jax.jit(fn)(x, g))])
    assert got[0][0, 5] == 1.0


def test_other_selectors_keep_the_exact_form():
    """A GT selector (the last max) and a nonzero or -0.0 init are not the fast form's."""
    def gt_scatter(x, g):
        return lax_select_and_scatter_add(x, g, lax.gt_p)

    rng = np.random.default_rng(1)
    x = np.maximum(rng.standard_normal((2, 6, 6, 2)), 0).astype(np.float32)
    g = rng.standard_normal((2, 3, 3, 2)).astype(np.float32)
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(g.shape, g.dtype)]
    model = _model(gt_scatter, specs)
    assert not any(n.op_type == "If" for n in model.graph.node)
    got = OnnxRunner(model.SerializeToString()).run([x, g])
    assert_same_bits(got, [np.asarray(jax.jit(gt_scatter)(x, g))])


@pytest.mark.parametrize("init", [1.5, -0.0, 0.0])
def test_init_values(init):
    """A nonzero init takes the fast form too (init + source on the pick, init elsewhere); -0.0 does not:
    off the pick ``-0.0 + (+0.0)`` would be +0.0."""
    from jax._src.lax.windowed_reductions import _select_and_scatter

    def scatter(x, g):
        window, strides = (1, 3, 3, 1), (1, 2, 2, 1)
        return _select_and_scatter(x, lax.ge, window, strides, _SAME_1, g, np.float32(init), lax.add)

    x = _operands((2, 8, 8, 3), np.float32)["signed"]
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((2, 4, 4, 3), np.float32)]
    model = _model(scatter, specs)
    assert any(n.op_type == "If" for n in model.graph.node) == (init != 0 or not np.signbit(init))
    runner = OnnxRunner(model.SerializeToString())
    for gname, g in _cotangents((2, 4, 4, 3), np.float32).items():
        _same_bits(runner.run([x, g]), np.asarray(jax.jit(scatter)(x, g)), "signed", gname)


def lax_select_and_scatter_add(x, g, select_prim):
    from jax._src.lax.windowed_reductions import _select_and_scatter_add

    return _select_and_scatter_add(g, x, select_prim, (1, 2, 2, 1), (1, 2, 2, 1), ((0, 0),) * 4)


def test_training_step_cnn():
    """A Flax CNN's loss gradient (conv, relu, max pool): the gradient through the pool."""
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.max_pool(nn.relu(nn.Conv(4, (3, 3))(x)), (2, 2), (2, 2))
            return nn.Dense(3)(x.reshape(x.shape[0], -1))

    m = CNN()
    params = m.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))

    def grad(x):
        return jax.grad(lambda p: m.apply(p, x).sum())(params)["params"]["Conv_0"]["kernel"]

    x = np.random.default_rng(2).standard_normal((2, 8, 8, 1)).astype(np.float32)
    model = _model(grad, [jax.ShapeDtypeStruct(x.shape, x.dtype)])
    assert any(n.op_type == "If" for n in model.graph.node)
    got = OnnxRunner(model.SerializeToString()).run([x])
    np.testing.assert_allclose(got[0], np.asarray(jax.jit(grad)(x)), rtol=1e-5, atol=1e-6)


def test_onnx_model_checks():
    pool, shape = POOLS["resnet_3x3_2_pad1"]
    model = _model(_pool_grad(pool), list(_shapes(pool, shape, np.float32)))
    onnx.checker.check_model(model, full_check=True)


@pytest.mark.parametrize("name", ["flax_2x2_2", "resnet_3x3_2_pad1", "nchw_3x3_2_same"])
@pytest.mark.parametrize("dynamic", ["b", "b, c"])
def test_symbolic_batch_and_channels(name, dynamic):
    """Batch (and channels) symbolic: the phase form still, its Reshape reading the sizes it lacks."""
    from jax import export

    pool, shape = POOLS[name]
    dims = export.symbolic_shape(dynamic)
    channel_axis = 1 if name.startswith("nchw") else 3
    sym = list(shape)
    sym[0] = dims[0]
    if len(dims) > 1:
        sym[channel_axis] = dims[1]
    x = jax.ShapeDtypeStruct(tuple(sym), np.float32)
    y = jax.eval_shape(pool, x)
    fn = _pool_grad(pool)
    model = _model(fn, [x, y], check=False)
    (_, quick), = _subgraph_ops(model)
    assert quick["Where"] == 0 and quick["Concat"] > 0 and quick["Pad"] <= 9, quick
    runner = OnnxRunner(model.SerializeToString())
    xs = _operands(shape, np.float32)
    concrete = jax.eval_shape(pool, jax.ShapeDtypeStruct(shape, np.float32)).shape
    for xname in ("relu", "infs", "nan"):
        for gname, g in _cotangents(concrete, np.float32).items():
            _same_bits(runner.run([xs[xname], g]), np.asarray(jax.jit(fn)(xs[xname], g)), xname, gname)
