"""stablehlo.while / case / if lowered to ONNX Loop / If, compared with jax.jit."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, note_ops, onnx_op_types

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


# ---- while -------------------------------------------------------------------------------------
def test_fori_loop():
    model = assert_onnx_matches_jax(lambda x: lax.fori_loop(0, 5, lambda i, c: c * 2 + i, x), _f32(3))
    assert "Loop" in onnx_op_types(model)


def test_while_loop_data_dependent_stop():
    def f(x, limit):
        def body(c):
            v, n = c
            return v * 1.5 + 1.0, n + 1
        return lax.while_loop(lambda c: jnp.sum(c[0]) < limit, body, (x, jnp.int32(0)))

    x = np.abs(_f32(4))
    # Stops after a few steps, after many, and before the first iteration.
    assert_onnx_matches_jax(f, x, np.float32(50.0),
                            inputs_for_run=[[x, np.float32(1e6)], [x, np.float32(-1.0)]])


def test_scan_rnn_with_tanh_cell():
    def rnn(xs, h0, w, u, b):
        def cell(h, x):
            h = jnp.tanh(x @ w + h @ u + b)
            return h, h
        return lax.scan(cell, h0, xs)

    assert_onnx_matches_jax(rnn, _f32(7, 2, 3), np.zeros((2, 4), np.float32), _f32(3, 4), _f32(4, 4), _f32(4),
                            rtol=1e-5, atol=1e-5)


def _loop_bodies(model):
    return [a.g for n in model.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body"]


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_stacked_outputs_become_loop_scan_outputs(reverse):
    def f(xs, c0):
        def step(c, x):
            return c + x, (c * x, x > 0, (c * 2).astype(jnp.bfloat16))
        c, (a, b, h) = lax.scan(step, c0, xs, reverse=reverse)
        return c, a, b, h.astype(jnp.float32)

    model = assert_onnx_matches_jax(f, _f32(5, 3), _f32(3))
    body, = _loop_bodies(model)
    # Rows are Loop scan outputs: no iteration rewrites (copies) a whole stacked buffer, and xs
    # is read from the outer scope rather than carried.
    assert not any(n.op_type in ("ScatterND", "ScatterElements") for n in body.node)
    assert len(body.input) == 2 + 2  # iteration, cond, counter, carry c
    assert len(body.output) == 1 + 2 + 3


def test_stacked_buffer_that_is_also_read_stays_carried():
    def f(x):
        return lax.fori_loop(0, 4, lambda i, buf: buf.at[i].set(jnp.sum(buf) + x[i]), jnp.ones(4, x.dtype))

    assert_onnx_matches_jax(f, _f32(4))


def test_loop_with_dynamic_trip_count_writes_rows():
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, buf: buf.at[i].set(x[i] * 2.0), jnp.zeros_like(x))

    x = _f32(5)
    assert_onnx_matches_jax(f, x, np.int32(3), inputs_for_run=[[x, np.int32(0)], [x, np.int32(5)]])


def test_nested_loops_reading_outer_values():
    def f(x, scale):
        def outer(i, c):
            # The inner body reads `x` and `scale` from two scopes up.
            return lax.fori_loop(0, i + 1, lambda j, d: d + x * scale * j, c)
        return lax.fori_loop(0, 4, outer, jnp.zeros_like(x))

    assert_onnx_matches_jax(f, _f32(3), np.float32(0.5))


def test_loop_carries_of_many_dtypes():
    def f(x, flag, small, big):
        def body(c):
            i, v, b, s, u = c
            return i + 1, (v * 2).astype(jnp.bfloat16), b != (i % 2 == 0), s + small, u * big
        init = (0, x, flag, jnp.ones(2, jnp.int8), big)
        i, v, b, s, u = lax.while_loop(lambda c: c[0] < 6, body, init)
        return i, v.astype(jnp.float32), b, s, u

    x = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    # Non-scalar arrays: the runner's bf16 path reshapes 0-d inputs to [1].
    assert_onnx_matches_jax(f, x, np.array([True, False]), np.array([7, -3], np.int8), np.array([2**40 + 3, 5], np.uint64))


def test_loop_body_returning_carry_unchanged():
    def f(x, y):
        return lax.while_loop(lambda c: c[2] < 3, lambda c: (c[0], c[1] + c[0], c[2] + 1), (x, y, 0))

    assert_onnx_matches_jax(f, _f32(2), _f32(2))


def test_while_with_symbolic_batch():
    b = jax.export.symbolic_shape("b")[0]
    f = lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, x)  # noqa: E731
    assert_onnx_matches_jax(f, _f32(2, 3), specs=[jax.ShapeDtypeStruct((b, 3), jnp.float32)],
                            inputs_for_run=[[_f32(5, 3)]])


# ---- case / cond -------------------------------------------------------------------------------
def test_switch_three_branches_and_out_of_range_index():
    branches = [lambda v: v + 1.0, lambda v: v * 2.0, lambda v: jnp.sin(v) - 3.0]
    f = lambda x, i: lax.switch(i, branches, x)  # noqa: E731
    x = _f32(4)
    model = assert_onnx_matches_jax(f, x, np.int32(1), inputs_for_run=[[x, np.int32(k)] for k in (-5, -1, 0, 2, 3, 99)])
    assert "If" in onnx_op_types(model)


def test_case_index_outside_range_takes_last_branch():
    # lax.switch clamps the index itself; raw stablehlo.case must still send it to the last branch.
    mlir = """
    func.func public @main(%i: tensor<i32>, %x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "stablehlo.case"(%i) ({
        %a = stablehlo.add %x, %x : tensor<3xf32>
        stablehlo.return %a : tensor<3xf32>
      }, {
        %m = stablehlo.multiply %x, %x : tensor<3xf32>
        stablehlo.return %m : tensor<3xf32>
      }, {
        stablehlo.return %x : tensor<3xf32>
      }) : (tensor<i32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }
    """
    x = _f32(3)
    run = _runner_for(mlir, {"stablehlo.case"})
    for i, expected in ((0, x + x), (1, x * x), (2, x), (3, x), (-1, x), (1 << 30, x)):
        np.testing.assert_array_equal(run(np.int32(i), x)[0], expected)


def test_cond_with_several_results_and_passthrough_branch():
    def f(p, x, n):
        return lax.cond(p, lambda a, b: (a, b), lambda a, b: (a * 2.0, b + 1), x, n)

    x = _f32(3)
    assert_onnx_matches_jax(f, np.array(True), x, np.int64(4), inputs_for_run=[[np.array(False), x, np.int64(4)]])


def test_cond_inside_loop_and_loop_inside_cond():
    def f(x, p):
        def body(i, c):
            return lax.cond(i % 2 == 0, lambda v: v + i, lambda v: v * 0.5, c)
        looped = lambda v: lax.fori_loop(0, 5, body, v)  # noqa: E731
        return lax.cond(p, looped, lambda v: -v, x)

    x = _f32(3)
    assert_onnx_matches_jax(f, x, np.array(True), inputs_for_run=[[x, np.array(False)]])


def test_cond_branch_reading_bf16_and_bool():
    def f(p, x, m):
        y, k = lax.cond(p, lambda: (x * 2, m), lambda: (x, ~m))
        return y.astype(jnp.float32), k

    x = np.array([1.0, 2.5], ml_dtypes.bfloat16)
    m = np.array([True, False])
    assert_onnx_matches_jax(f, np.array(False), x, m, inputs_for_run=[[np.array(True), x, m]])


def test_stablehlo_if():
    # JAX emits case; other frontends emit stablehlo.if.
    mlir = """
    func.func public @main(%p: tensor<i1>, %x: tensor<2xf32>) -> (tensor<2xf32>, tensor<i32>) {
      %c = stablehlo.constant dense<7> : tensor<i32>
      %0:2 = "stablehlo.if"(%p) ({
        %a = stablehlo.add %x, %x : tensor<2xf32>
        stablehlo.return %a, %c : tensor<2xf32>, tensor<i32>
      }, {
        %n = stablehlo.negate %x : tensor<2xf32>
        %z = stablehlo.constant dense<-1> : tensor<i32>
        stablehlo.return %n, %z : tensor<2xf32>, tensor<i32>
      }) : (tensor<i1>) -> (tensor<2xf32>, tensor<i32>)
      return %0#0, %0#1 : tensor<2xf32>, tensor<i32>
    }
    """
    x = _f32(2)
    run = _runner_for(mlir, {"stablehlo.if"})
    for p in (True, False):
        expected = jax.jit(lambda p, x: lax.cond(p, lambda: (x + x, jnp.int32(7)), lambda: (-x, jnp.int32(-1))))(p, x)
        got = run(np.array(p), x)
        np.testing.assert_array_equal(got[0], np.asarray(expected[0]))
        np.testing.assert_array_equal(got[1], np.asarray(expected[1]))


def _runner_for(mlir_text: str, ops: set[str]):
    """Lower a hand-written module and return a function running it in ONNX Runtime."""
    import tempfile

    from jaxconv.onnx.convert import stablehlo_file_to_onnx, validate
    from jaxconv.runtimes.onnxrt import OnnxRunner

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.mlir")
        with open(path, "w") as f:
            f.write("module {\n" + mlir_text + "\n}\n")
        model = stablehlo_file_to_onnx(path)
    validate(model)
    note_ops(ops)
    runner = OnnxRunner(model.SerializeToString())
    run = lambda *args: runner.run([np.asarray(a) for a in args])  # noqa: E731
    run.model = model
    return run


def test_constant_case_index_inlines_the_branch():
    mlir = """
    func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %i = stablehlo.constant dense<5> : tensor<i32>
      %0 = "stablehlo.case"(%i) ({
        %a = stablehlo.add %x, %x : tensor<3xf32>
        stablehlo.return %a : tensor<3xf32>
      }, {
        %m = stablehlo.multiply %x, %x : tensor<3xf32>
        stablehlo.return %m : tensor<3xf32>
      }) : (tensor<i32>) -> tensor<3xf32>
      %p = stablehlo.constant dense<true> : tensor<i1>
      %1 = "stablehlo.if"(%p) ({
        %n = stablehlo.negate %0 : tensor<3xf32>
        stablehlo.return %n : tensor<3xf32>
      }, {
        stablehlo.return %0 : tensor<3xf32>
      }) : (tensor<i1>) -> tensor<3xf32>
      return %1 : tensor<3xf32>
    }
    """
    x = _f32(3)
    run = _runner_for(mlir, {"stablehlo.case", "stablehlo.if"})
    assert "If" not in onnx_op_types(run.model)
    np.testing.assert_array_equal(run(x)[0], -(x * x))


@pytest.mark.parametrize("opset", [18, 21])
def test_loop_at_older_opsets(opset):
    assert_onnx_matches_jax(lambda x: lax.fori_loop(0, 3, lambda i, c: c + jnp.cos(c), x), _f32(4), opset=opset)


def test_f16_floor_divide_loop_after_a_clip_converts():
    """The clean-up's rewrites once gave two folded constants the same name (an internal PassError)."""

    def f(x, y):
        return lax.fori_loop(0, 2, lambda i, c: jnp.floor_divide(c, y), jnp.clip(x, -jnp.inf, -1.0))

    x = np.array([1.0, -3.5, -0.0, 7.0, -1.25] * 4, np.float16).reshape(5, 4)
    y = np.array([1.0, 2.0, -0.5, 3.0] * 5, np.float16).reshape(5, 4)
    assert_onnx_matches_jax(f, x, y)
