"""jaxconv.onnx.rewrites.one_hot_rows: ``jax.nn.one_hot(ids, V) @ table`` as a Gather of the table's rows;
ONNX Runtime's outputs bit for bit jax.jit's (indices out of range either way, -0.0 entries in the table)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx.rewrites import one_hot_rows
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import assert_same_bits, op_counts, without_rule
from lowering_check import convert_and_run as _convert

_plain = without_rule(one_hot_rows)
_V = 40


def _table(seed: int = 0) -> np.ndarray:
    table = np.random.default_rng(seed).standard_normal((_V, 6)).astype(np.float32)
    table[3, 0] = -0.0  # the products' sum starts at +0.0: -0.0 comes out +0.0
    table[:, 1] = -np.abs(table[:, 1])
    table[5, 1] = -0.0  # in a column of negative entries only too (-0.0 x 0 everywhere else)
    table[:, 2] = -np.abs(table[:, 2])  # an index out of range: the sum of -0.0s, +0.0
    return table


_TABLE = _table()


def embed(ids):
    return jax.nn.one_hot(ids, _V) @ _TABLE


def _ids(*shape: int) -> np.ndarray:
    ids = np.random.default_rng(sum(shape)).integers(-3, _V + 3, shape).astype(np.int32)
    flat = ids.reshape(-1)  # a view
    edge = [3, 5, -1, _V, np.iinfo(np.int32).max, np.iinfo(np.int32).min]
    flat[:min(6, flat.size)] = edge[:flat.size]
    return ids


@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_a_one_hot_product_is_a_gather(shape, monkeypatch):
    ids = _ids(*shape)
    ops, got = _convert(embed, ids)
    assert ops["Gather"] == 1 and ops["MatMul"] == 0, ops
    assert_same_bits(got, [np.asarray(jax.jit(embed)(ids))])
    plain_ops, plain = _plain(monkeypatch, embed, ids)
    assert plain_ops["MatMul"] == 1
    assert_same_bits(got, plain)


def test_a_symbolic_batch():
    model = jaxconv.to_onnx(embed, "i32[b,4]", check=False)
    assert op_counts(model.graph)["MatMul"] == 0
    for b in (2, 3):
        ids = _ids(b, 4)
        assert_same_bits(OnnxRunner(model.SerializeToString()).run([ids]), [np.asarray(jax.jit(embed)(ids))])


@pytest.mark.parametrize("case", ["inf in the table", "few classes", "one-hot read twice"])
def test_other_products_stay(case):
    table = _TABLE.copy()
    classes = _V
    if case == "inf in the table":
        table[7, 3] = np.inf  # 0 x inf is NaN in every other row's product
    if case == "few classes":
        classes, table = 8, table[:8]

    def fn(ids):
        hot = jax.nn.one_hot(ids, classes)
        out = hot @ table
        return (out, hot.sum(-1)) if case == "one-hot read twice" else out
    ids = _ids(9)
    ops, got = _convert(fn, ids)
    assert ops["MatMul"] == 1 and ops["Gather"] == 0, ops
    want = jax.jit(fn)(ids)
    assert_same_bits(got, list(want) if isinstance(want, tuple) else [want], nan_signs=False)
