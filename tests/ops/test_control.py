"""stablehlo.while / case / if lowered to ONNX Loop / If: graph structure and hand-written modules (the
comparisons of JAX programs are rows in conformance/cases/op_control.py)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import assert_onnx_matches_jax, onnx_op_types

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def test_fori_loop():
    model = assert_onnx_matches_jax(lambda x: lax.fori_loop(0, 5, lambda i, c: c * 2 + i, x), _f32(3))
    assert "Loop" in onnx_op_types(model)


def _loop_bodies(model, op_types=("Loop",)):
    return [a.g for n in model.graph.node if n.op_type in op_types for a in n.attribute if a.name == "body"]


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_stacked_outputs_become_loop_scan_outputs(reverse):
    def f(xs, c0):
        def step(c, x):
            return c + x, (c * x, x > 0, (c * 2).astype(jnp.bfloat16))
        c, (a, b, h) = lax.scan(step, c0, xs, reverse=reverse)
        return c, a, b, h.astype(jnp.float32)

    model = assert_onnx_matches_jax(f, _f32(5, 3), _f32(3))
    body, = _loop_bodies(model, ("Loop", "Scan"))
    # Rows are scan outputs: no iteration rewrites (copies) a whole stacked buffer, and xs is
    # not carried. A fixed-length scan becomes an ONNX Scan that reads rows of xs as a scan input.
    assert not any(n.op_type in ("ScatterND", "ScatterElements") for n in body.node)
    assert "Scan" in onnx_op_types(model)
    assert len(body.input) == 1 + 1  # carry c, the row of xs
    assert len(body.output) == 1 + 3  # carry c, three stacked rows


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
    run = _runner_for(mlir)
    for i, expected in ((0, x + x), (1, x * x), (2, x), (3, x), (-1, x), (1 << 30, x)):
        np.testing.assert_array_equal(run(np.int32(i), x)[0], expected)


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
    run = _runner_for(mlir)
    for p in (True, False):
        expected = jax.jit(lambda p, x: lax.cond(p, lambda: (x + x, jnp.int32(7)), lambda: (-x, jnp.int32(-1))))(p, x)
        got = run(np.array(p), x)
        np.testing.assert_array_equal(got[0], np.asarray(expected[0]))
        np.testing.assert_array_equal(got[1], np.asarray(expected[1]))


def _runner_for(mlir_text: str):
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
    run = _runner_for(mlir)
    assert "If" not in onnx_op_types(run.model)
    np.testing.assert_array_equal(run(x)[0], -(x * x))
