"""Loop rewrites (jaxconv.onnx.rewrites.loops / lstm): each fires where it should and keeps
jax.jit's numbers, NaN and inf inputs included."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from conformance.nets import lstm_cell
from jaxconv.onnx.rewrites import loops
from jaxconv.runtimes.onnxrt import OnnxRunner


def _same(got, want, rtol=1e-5, atol=1e-6):
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _ops(graph: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in graph.node]


def _lstm(hidden: int = 8, n_in: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    wx = rng.standard_normal((n_in, 4 * hidden)).astype(np.float32) / 3
    wh = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32) / 3
    b = rng.standard_normal(4 * hidden).astype(np.float32) / 10

    def fn(xs):
        zeros = jnp.zeros((xs.shape[1], hidden))
        (h, _), hs = jax.lax.scan(lstm_cell(wx, wh, b), (zeros, zeros), xs)
        return hs, h

    return fn


def test_lstm_from_zero_state_leaves_only_the_guard_around_the_op():
    fn = _lstm()
    xs = np.random.default_rng(1).standard_normal((7, 3, 6)).astype(np.float32) * 2
    model = jaxconv.to_onnx(fn, f"f32[{xs.shape[0]},{xs.shape[1]},{xs.shape[2]}]", check=False)
    # the zero initial state is the LSTM op's default; its broadcast only feeds the exact Loop
    assert _ops(model.graph) == ["ReduceSumSquare", "Less", "If"]
    branch = model.graph.node[-1]
    graphs = {a.name: a.g for a in branch.attribute}
    lstm = next(n for n in graphs["then_branch"].node if n.op_type == "LSTM")
    assert len([i for i in lstm.input if i]) == 4  # X, W, R, B: no initial_h / initial_c
    assert len(branch.output) == 2  # the final c and the counter are not returned
    runner = OnnxRunner(model.SerializeToString())
    for g, w in zip(runner.run([xs]), jax.jit(fn)(xs)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-6)
    odd = xs.copy()
    odd[2, 1, 0], odd[4, 0, 3], odd[5, 2, 1] = np.nan, np.inf, -np.inf
    for g, w in zip(runner.run([odd]), jax.jit(fn)(odd)):  # the exact Loop
        _same(g, w)


def test_lstm_with_given_state_checks_the_state_too():
    rng = np.random.default_rng(2)
    hidden, n_in = 8, 6
    wx = rng.standard_normal((n_in, 4 * hidden)).astype(np.float32) / 3
    wh = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32) / 3

    def fn(xs, h0, c0):
        return jax.lax.scan(lstm_cell(wx, wh), (h0, c0), xs)

    model = jaxconv.to_onnx(fn, "f32[5,3,6]", "f32[3,8]", "f32[3,8]", check=False)
    assert _ops(model.graph).count("ReduceSumSquare") == 3 and "If" in _ops(model.graph)
    runner = OnnxRunner(model.SerializeToString())
    xs = rng.standard_normal((5, 3, n_in)).astype(np.float32)
    h0, c0 = (rng.standard_normal((3, hidden)).astype(np.float32) for _ in range(2))
    for g, w in zip(runner.run([xs, h0, c0]), jax.tree_util.tree_leaves(jax.jit(fn)(xs, h0, c0))):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-6)
    c0[1, 2] = np.inf  # only the state is not finite: the exact Loop runs
    for g, w in zip(runner.run([xs, h0, c0]), jax.tree_util.tree_leaves(jax.jit(fn)(xs, h0, c0))):
        _same(g, w)


def _loop_bodies(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    return [a.g for n in graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body"]


def test_outer_transposes_and_broadcasts_leave_the_loop():
    rng = np.random.default_rng(3)

    def fn(x, w, s, n):
        def body(i, y):
            return jnp.tanh(y @ w.T) + jnp.broadcast_to(jnp.exp(s), y.shape)  # w.T, exp, broadcast: invariant
        return jax.lax.fori_loop(0, n, body, x)

    x, w = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    s = rng.standard_normal(4).astype(np.float32)
    model = jaxconv.to_onnx(fn, "f32[2,4]", "f32[4,4]", "f32[4]", "i32[]", check=False)
    (body,) = _loop_bodies(model.graph)
    assert not {"Transpose", "Exp", "Expand"} & set(_ops(body)), _ops(body)
    assert {"Transpose", "Exp"} <= set(_ops(model.graph))
    runner = OnnxRunner(model.SerializeToString())
    s_odd = s.copy()
    s_odd[1], s_odd[2] = np.nan, np.inf
    for args in ((x, w, s, np.int32(5)), (x, w, s_odd, np.int32(3)), (x, w, s, np.int32(0))):
        (got,) = runner.run([np.asarray(a) for a in args])
        _same(got, jax.jit(fn)(*args))


def test_invariants_of_an_inner_loop_climb_out_of_both_loops():
    rng = np.random.default_rng(4)

    def fn(x, s, n):
        def outer(i, y):
            def inner(j, z):
                return jnp.sin(z) + jnp.exp(s) * 3.0  # reads only the main graph's s
            return jax.lax.fori_loop(0, n, inner, y) * 0.5
        return jax.lax.fori_loop(0, n, outer, x)

    x, s = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    model = jaxconv.to_onnx(fn, "f32[2,4]", "f32[4]", "i32[]", check=False)
    (outer,) = _loop_bodies(model.graph)
    (inner,) = _loop_bodies(outer)
    assert "Exp" in _ops(model.graph) and "Exp" not in _ops(outer) + _ops(inner)
    runner = OnnxRunner(model.SerializeToString())
    s_odd = s.copy()
    s_odd[0] = -np.inf
    for args in ((x, s, np.int32(3)), (x, s_odd, np.int32(2)), (x, s, np.int32(0))):
        (got,) = runner.run([np.asarray(a) for a in args])
        _same(got, jax.jit(fn)(*args))


def _loop_ops(graph: onnx.GraphProto) -> dict[str, list[str]]:
    """op type of each Loop/Scan in ``graph`` -> its body's op types."""
    return {n.op_type: _ops(next(a.g for a in n.attribute if a.name == "body"))
            for n in graph.node if n.op_type in ("Loop", "Scan")}


def _scan_cell(reverse: bool = False):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 8)).astype(np.float32) / 3

    def fn(xs, h0):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            return h, (h, jnp.exp(h) - x)
        return jax.lax.scan(cell, h0, xs, reverse=reverse)

    return fn


def _check(fn, model, args):
    runner = OnnxRunner(model.SerializeToString())
    for g, w in zip(runner.run(args), jax.tree_util.tree_leaves(jax.jit(fn)(*args))):
        _same(g, w)


def _scan_args(seed: int, odd: bool = False):
    rng = np.random.default_rng(seed)
    xs, h0 = rng.standard_normal((6, 3, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    if odd:
        xs[1, 0, 2], xs[3, 2, 5], h0[0, 1] = np.nan, np.inf, -np.inf
    return [xs, h0]


def test_scan_with_outputs_becomes_a_scan_that_reads_rows():
    fn = _scan_cell()
    model = jaxconv.to_onnx(fn, "f32[6,3,8]", "f32[3,8]", check=False)
    loops = _loop_ops(model.graph)
    assert list(loops) == ["Scan"], loops
    # the rows of xs are scan inputs: no step slices, casts or counts
    assert not {"Slice", "Cast", "Clip", "Less"} & set(loops["Scan"]), loops
    for seed, odd in ((0, False), (1, True)):
        _check(fn, model, _scan_args(seed, odd))


def test_reverse_scan_becomes_a_scan_that_counts():
    fn = _scan_cell(reverse=True)
    model = jaxconv.to_onnx(fn, "f32[6,3,8]", "f32[3,8]", check=False)
    assert list(_loop_ops(model.graph)) == ["Scan"]
    for seed, odd in ((2, False), (3, True)):
        _check(fn, model, _scan_args(seed, odd))


def test_scan_over_a_length_alone_becomes_a_scan():
    def fn(x):
        return jax.lax.scan(lambda c, _: (jnp.sin(c) * 1.5, c * c), x, None, length=5)

    model = jaxconv.to_onnx(fn, "f32[4]", check=False)
    assert list(_loop_ops(model.graph)) == ["Scan"]
    x = np.array([0.5, -2.0, np.nan, np.inf], np.float32)
    _check(fn, model, [x])


def test_fori_loop_without_outputs_stays_a_loop():
    # no scan outputs: the Loop the SavedModel/TFLite translation reads
    def fn(x):
        return jax.lax.fori_loop(0, 4, lambda i, c: c * 2.0 + i.astype(jnp.float32), x)

    model = jaxconv.to_onnx(fn, "f32[3]", check=False)
    assert list(_loop_ops(model.graph)) == ["Loop"]
    _check(fn, model, [np.array([1.0, np.nan, -np.inf], np.float32)])


def _wide_scan(steps: int):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((64, 64)).astype(np.float32) / 8

    def fn(xs, h0):
        def cell(h, x):
            h = jnp.tanh(h @ w + x)
            h = jax.lax.cond(jnp.sum(h) > 0, lambda a: a * 0.5, lambda a: a - x, h)  # a branch reading x
            return h, h * 2.0
        return jax.lax.scan(cell, h0, xs)

    return fn, [f"f32[{steps},16,64]", "f32[16,64]"]


def _wide_args(steps: int, odd: bool):
    rng = np.random.default_rng(steps)
    xs = rng.standard_normal((steps, 16, 64)).astype(np.float32)
    h0 = rng.standard_normal((16, 64)).astype(np.float32)
    if odd:
        xs[0, 3, 4], xs[-1, 5, 6], h0[2, 2] = np.nan, np.inf, -np.inf
    return [xs, h0]


def test_few_steps_of_a_wide_state_are_unrolled():
    fn, specs = _wide_scan(3)  # 3 steps, 16 x 64 = 1024 carried elements: the measured rule unrolls
    model = jaxconv.to_onnx(fn, *specs, check=False)
    ops = _ops(model.graph)
    assert not {"Loop", "Scan"} & set(ops) and ops.count("MatMul") == 3 and ops.count("If") == 3, ops
    for odd in (False, True):
        _check(fn, model, _wide_args(3, odd))


def test_more_steps_or_a_narrow_state_stay_a_scan():
    fn, specs = _wide_scan(5)
    model = jaxconv.to_onnx(fn, *specs, check=False)
    assert list(_loop_ops(model.graph)) == ["Scan"]
    _check(fn, model, _wide_args(5, True))
    narrow = _scan_cell()  # 6 steps of 3 x 8
    assert list(_loop_ops(jaxconv.to_onnx(narrow, "f32[6,3,8]", "f32[3,8]", check=False).graph)) == ["Scan"]
    short = jaxconv.to_onnx(narrow, "f32[2,3,8]", "f32[3,8]", check=False)  # 2 steps, 24 elements
    assert list(_loop_ops(short.graph)) == ["Scan"]


@pytest.mark.parametrize("reverse", [False, True])
def test_lowered_scan_rows_are_loop_scan_outputs_then_scan_outputs(reverse, monkeypatch):
    # the lowering (ops/control.py) writes each stacked row as a Loop scan output, reading xs from
    # the outer scope; the Scan the rewrite makes of it reads xs's rows as a scan input
    def fn(xs, c0):
        def step(c, x):
            return c + x, (c * x, x > 0, (c * 2).astype(jnp.bfloat16))
        c, (a, b, h) = jax.lax.scan(step, c0, xs, reverse=reverse)
        return c, a, b, h.astype(jnp.float32)

    rng = np.random.default_rng(7)
    args = [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    args[0][1, 1] = np.nan
    scan_model = jaxconv.to_onnx(fn, "f32[5,3]", "f32[3]", check=False)
    monkeypatch.setattr(loops, "to_scan", lambda graph: 0)
    loop_model = jaxconv.to_onnx(fn, "f32[5,3]", "f32[3]", check=False)
    for model, kind, inputs in ((loop_model, "Loop", 2 + 2), (scan_model, "Scan", 1 + 1)):
        (body,) = [a.g for n in model.graph.node if n.op_type == kind
                   for a in n.attribute if a.name == "body"]
        assert not any(n.op_type in ("ScatterND", "ScatterElements") for n in body.node)
        assert len(body.input) == inputs  # Loop: iteration, cond, counter, c; Scan: c, a row of xs
        assert len(body.output) == (1 + 2 + 3 if kind == "Loop" else 1 + 3)  # (cond, counter,) c, 3 rows
        _check(fn, model, args)


@pytest.mark.parametrize("cell_name", ["LSTMCell", "OptimizedLSTMCell"])
def test_flax_lstm_cells_become_the_lstm_op(cell_name):
    # flax carries (c, h) and writes one Dense per gate (LSTMCell) or one fused Dense (Optimized)
    nn = pytest.importorskip("flax.linen")
    hidden, n_in, steps, batch = 8, 5, 6, 3
    cell = getattr(nn, cell_name)(features=hidden)
    params = cell.init(jax.random.PRNGKey(0), (jnp.zeros((batch, hidden)),) * 2, jnp.zeros((batch, n_in)))
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(8)  # non-zero biases: each lands in its ONNX slot
    params = jax.tree_util.tree_unflatten(tree, [rng.standard_normal(np.shape(x)).astype(np.float32) / 3
                                                 for x in leaves])

    def fn(xs, c0, h0):
        return jax.lax.scan(lambda carry, x: cell.apply(params, carry, x), (c0, h0), xs)

    model = jaxconv.to_onnx(fn, f"f32[{steps},{batch},{n_in}]", f"f32[{batch},{hidden}]",
                            f"f32[{batch},{hidden}]", check=False)
    branch = next(n for n in model.graph.node if n.op_type == "If")
    fast = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert [n.op_type for n in fast.node].count("LSTM") == 1
    runner = OnnxRunner(model.SerializeToString())
    for odd in (False, True):
        xs = rng.standard_normal((steps, batch, n_in)).astype(np.float32)
        c0, h0 = (rng.standard_normal((batch, hidden)).astype(np.float32) for _ in range(2))
        if odd:
            xs[2, 1, 0], h0[0, 0] = np.nan, np.inf
        want = jax.tree_util.tree_leaves(jax.jit(fn)(xs, c0, h0))
        for g, w in zip(runner.run([xs, c0, h0]), want):
            if odd:
                _same(g, w)
            else:
                np.testing.assert_allclose(g, np.asarray(w), rtol=2e-5, atol=2e-6)
