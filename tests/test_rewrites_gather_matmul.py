"""jaxconv.onnx.rewrites.gather_matmul: ``table[idx] @ w`` as ``(table @ w)[idx]`` where the indices
outnumber the table's rows (a graph network's messages). The outputs bit for bit those without the rule,
NaN and infinities in rows no index reads left out, within tolerance of jax.jit."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest

from jaxconv.onnx.rewrites import gather_matmul
from lowering_check import assert_same_bits, assert_same_floats, convert_and_run, without_rule

_N, _K, _F = 30, 8, 5
_W = (np.random.default_rng(0).standard_normal((_K, _F)) * 0.5).astype(np.float32)
_plain = without_rule(gather_matmul)


def _messages(h, senders):
    return h[senders] @ _W


def _inputs(edges: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((_N, _K)).astype(np.float32)
    return h, rng.integers(-_N, _N, edges).astype(np.int32)


def _ops_and_outputs(monkeypatch, h, idx):
    ops, got = convert_and_run(_messages, h, idx)
    plain_ops, want = _plain(monkeypatch, _messages, h, idx)
    return ops, plain_ops, got, want


def test_gathered_rows_outnumbering_the_table_are_multiplied_once(monkeypatch):
    h, idx = _inputs(4 * _N)
    ops, plain_ops, got, want = _ops_and_outputs(monkeypatch, h, idx)
    assert plain_ops["MatMul"] == ops["MatMul"] == 1 and ops["Gather"] == plain_ops["Gather"]
    assert _product_rows(h, idx) == _N  # the product runs on the table
    assert_same_bits(got, want)
    assert_same_floats(got[0], jax.jit(_messages)(h, idx), rtol=1e-5, atol=1e-6)


def test_rows_no_index_reads_leave_no_trace(monkeypatch):
    h, idx = _inputs(4 * _N)
    idx = np.where(np.isin(idx % _N, [3, _N - 3]), 4, idx).astype(np.int32)  # rows 3 and 27 never read
    h[3], h[_N - 3] = np.nan, np.inf
    _, _, got, want = _ops_and_outputs(monkeypatch, h, idx)
    assert np.isfinite(got[0]).all()
    assert_same_bits(got, want)


@pytest.mark.parametrize("edges", [_N // 2, _N])
def test_a_gather_of_as_many_rows_or_fewer_keeps_its_order(monkeypatch, edges):
    h, idx = _inputs(edges)
    ops, plain_ops, got, want = _ops_and_outputs(monkeypatch, h, idx)
    assert _product_rows(h, idx) == edges
    assert_same_bits(got, want)


def _product_rows(h, idx) -> int:
    """The rows the converted model's MatMul multiplies (its first operand's leading dimension)."""
    import onnx
    import onnx.shape_inference

    import jaxconv

    model = jaxconv.to_onnx(_messages, jax.ShapeDtypeStruct(h.shape, h.dtype), jax.ShapeDtypeStruct(idx.shape, idx.dtype),
                            check=False)
    model = onnx.shape_inference.infer_shapes(model)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.value_info) + list(model.graph.input)}
    (matmul,) = [n for n in model.graph.node if n.op_type == "MatMul"]
    counts = collections.Counter(n.op_type for n in model.graph.node)
    assert counts["MatMul"] == 1
    return dims[matmul.input[0]][0]
