"""Symbolic dimensions: the ONNX model keeps them as dim_params (the comparisons at several sizes are rows in
conformance/cases/op_dynamic_shapes.py)."""

from __future__ import annotations

import jax
import pytest

from conformance.cases.op_dynamic_shapes import SIZES, B, T, arr, spec  # noqa: F401  (shared with the rows)
from lowering_check import assert_onnx_matches_jax


def check_sizes(fn, make_args, specs, sizes=SIZES, **kw):
    """Run at every size of the symbolic dim: ``make_args(n)`` builds the flat inputs for size n."""
    first, *rest = [make_args(n) for n in sizes]
    model = assert_onnx_matches_jax(fn, *first, specs=specs, inputs_for_run=rest, **kw)
    return model


def input_dims(model, k=0):
    return [d.dim_param or d.dim_value for d in model.graph.input[k].type.tensor_type.shape.dim]


def test_flatten_and_reshape_with_batch():
    def f(x):
        return x.reshape(x.shape[0], -1), x.reshape(-1), x.reshape(x.shape[0] * 2, 6) * x.shape[0]

    model = check_sizes(f, lambda n: [arr(n, 3, 4)], [spec(B, 3, 4)])
    assert input_dims(model) == ["b", 3, 4]


def test_two_symbolic_dims_and_output_names():
    def f(x):
        return x.reshape(x.shape[0] * x.shape[1], 2), x.sum(1)

    first = [arr(2, 3, 2)]
    model = assert_onnx_matches_jax(f, *first, specs=[spec(B, T, 2)],
                                    inputs_for_run=[[arr(1, 5, 2)], [arr(4, 1, 2)]])
    assert input_dims(model) == ["b", "t", 2]


def test_cumulative_max_over_a_symbolic_axis_is_refused_by_name():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="dynamic_reduce_window"):
        check_sizes(lambda x: jax.lax.cummax(x, axis=1), lambda n: [arr(2, n, seed=n)], [spec(2, T)])
