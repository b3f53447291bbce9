"""jaxconv.onnx.rewrites.gather_fill: jnp.take's NaN fill for out-of-range indices read from an extra row of
a constant table; ONNX Runtime's outputs bit for bit the Where form's and jax.jit's, with indices below,
at and past both ends, and NaN/+-inf/-0.0 in the table."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import gather_fill
from lowering_check import convert_and_run as _convert
from lowering_check import without_rule

VOCAB, WIDTH = 50, 6


def _table() -> np.ndarray:
    t = np.random.default_rng(7).standard_normal((VOCAB, WIDTH)).astype(np.float32)
    t[3, 1], t[4, 2], t[5, 0], t[6, :] = np.nan, np.inf, -np.inf, -0.0
    return t


def _ids(dtype) -> np.ndarray:
    ids = np.random.default_rng(8).integers(0, VOCAB, (3, 9)).astype(dtype)
    ids[0, :8] = [-1, -VOCAB, -VOCAB - 1, VOCAB - 1, VOCAB, VOCAB + 7, 6, 0]
    return ids


_plain = without_rule(gather_fill)


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint32)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8])
def test_fill_row_replaces_the_where(monkeypatch, dtype):
    table = _table()
    fn = lambda ids: jnp.take(table, ids.astype(np.int32), axis=0)  # noqa: E731
    ids = _ids(np.int32)
    if dtype == np.uint8:  # indices computed in the graph (a Cast), past the end only
        ids = np.abs(ids).astype(np.uint8)
    want = np.asarray(jax.jit(fn)(ids))
    ops, (got,) = _convert(fn, ids)
    plain_ops, (plain,) = _plain(monkeypatch, fn, ids)
    # the index test and both Wheres of the fill go: one Clip(w, -1, n) reads the fill row for every index out
    # of range (the wrap of negative ids keeps its Where)
    assert ops["Where"] == plain_ops["Where"] - 1 and ops["Gather"] == 1, (ops, plain_ops)
    assert ops["Clip"] == 1 and not ops["Equal"] and not ops["Xor"] and not ops["Not"], ops
    np.testing.assert_array_equal(_bits(got), _bits(plain))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert np.isnan(got[0, 4]).all() and np.isnan(got[0, 5]).all()
    assert np.signbit(got[0, 6]).all()


def test_rows_read_only_once_are_extended():
    """The lookup's result goes to the Gather: no Where over [batch, length, width] is left."""
    table = _table()
    ids = _ids(np.int32)
    model = __import__("jaxconv").to_onnx(lambda i: jnp.take(table, i, axis=0) * 2.0,
                                           jax.ShapeDtypeStruct(ids.shape, ids.dtype), check=False)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    wheres = [n for n in model.graph.node if n.op_type == "Where"]
    assert wheres and all(len(shapes.get(n.output[0], [0, 0])) == 2 for n in wheres), shapes
    tables = [i for i in model.graph.initializer if list(i.dims) == [VOCAB + 1, WIDTH]]
    assert len(tables) == 1 and not [i for i in model.graph.initializer if list(i.dims) == [VOCAB, WIDTH]]


def test_a_table_read_twice_stays():
    """Two lookups in one table: no second, extended copy of it; the Wheres stay."""
    table = _table()

    def fn(ids):
        return jnp.take(table, ids, axis=0), jnp.take(table, ids[:, ::-1] + 3, axis=0)

    ids = _ids(np.int32)
    _, got = _convert(fn, ids)
    for g, w in zip(got, jax.jit(fn)(ids)):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    model = __import__("jaxconv").to_onnx(fn, jax.ShapeDtypeStruct(ids.shape, ids.dtype), check=False)
    assert not [i for i in model.graph.initializer if list(i.dims) == [VOCAB + 1, WIDTH]]
    assert sum(n.op_type == "Where" for n in model.graph.node) >= 2
