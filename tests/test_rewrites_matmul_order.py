"""The MatMul operand-order rule (jaxconv.onnx.rewrites.matmul_order): attention's probs @ v keeps two
of the three Transposes the dot_general lowering gives it, with ONNX Runtime's numbers unchanged."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import matmul_order
from lowering_check import assert_same_floats
from lowering_check import convert_and_run as _convert


def _attention_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    probs = rng.random((2, 4, 16, 16)).astype(np.float32)  # b h q k
    v = rng.standard_normal((2, 16, 4, 8)).astype(np.float32)  # b k h d
    v[0, :, 1, :] = -0.0
    v[1, 3, 2, 5] = np.nan
    v[1, 4, 0, 1] = np.inf
    return probs, v


def _attend(probs, v):
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def test_attention_output_keeps_two_transposes_and_jit_numbers():
    probs, v = _attention_inputs()
    ops, (got,) = _convert(_attend, probs, v)
    assert ops["MatMul"] == 1 and ops["Transpose"] == 2, ops
    assert_same_floats(got, jax.jit(_attend)(probs, v), 2e-6, 1e-6)


def test_swap_gives_the_same_bits_as_the_unswapped_graph(monkeypatch):
    probs, v = _attention_inputs()
    ops, (swapped,) = _convert(_attend, probs, v)
    monkeypatch.setattr(matmul_order, "rewrite", lambda graph: 0)
    plain_ops, (plain,) = _convert(_attend, probs, v)
    assert plain_ops["Transpose"] == 3 and ops["Transpose"] == 2, (plain_ops, ops)
    np.testing.assert_array_equal(swapped.view(np.uint32), plain.view(np.uint32))


@pytest.mark.parametrize("equation", ["bqhd,bkhd->bhqk", "ij,jk->ik", "bij,bjk->bik"])
def test_matmuls_without_a_saving_are_left_alone(monkeypatch, equation):
    rng = np.random.default_rng(1)
    shapes = {"bqhd,bkhd->bhqk": ((2, 8, 4, 8), (2, 8, 4, 8)), "ij,jk->ik": ((5, 6), (6, 7)),
              "bij,bjk->bik": ((3, 5, 6), (3, 6, 7))}[equation]
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    fn = lambda a, b: jnp.einsum(equation, a, b)  # noqa: E731
    ops, (got,) = _convert(fn, a, b)
    monkeypatch.setattr(matmul_order, "rewrite", lambda graph: 0)
    plain_ops, _ = _convert(fn, a, b)
    assert ops == plain_ops
    assert_same_floats(got, jax.jit(fn)(a, b), 2e-6, 1e-5)
