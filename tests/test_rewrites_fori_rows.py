"""A fori_loop that reads one row of its sequences and writes one row of its output each step, by index, along
any axis, is a Scan (keras-hub's RWKV7 runs its recurrence so: 5.3x jax.jit's time in ONNX Runtime as a Loop
that sliced six sequences and copied its output buffer every step, 2.0x as a Scan).

``loops.rewrite`` reads a carried index stepping with the Loop's counter as the counter, a row read at a
wrapped and clamped index along axis 1 as a row of the sequence transposed once, and a buffer whose every
row is written once as a scan output; a loop that breaks any of those premises stays a Loop, with jax's
numbers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lowering_check import convert_and_run

B, T, H = 2, 8, 3


def _row(x, i, axis=1):
    return lax.dynamic_index_in_dim(x, i, axis, keepdims=False)


def _recurrence(a, b, c):
    def body(i, carry):
        h, out = carry
        h = h * _row(a, i) + _row(b, i) * _row(c, i)
        return h, lax.dynamic_update_index_in_dim(out, jnp.tanh(h), i, 1)

    return lax.fori_loop(0, T, body, (jnp.zeros((B, H)), jnp.zeros((B, T, H))))[1]


def _inputs(edge: bool = False) -> list[np.ndarray]:
    xs = [np.random.default_rng(k).standard_normal((B, T, H)).astype(np.float32) for k in range(3)]
    if edge:
        xs[0][0, 2, 1], xs[1][1, 5, 0], xs[2][0, 7, 2] = np.nan, np.inf, -0.0
    return xs


def _matches(fn, xs, ops):
    want = np.asarray(jax.jit(fn)(*xs))
    got = ops[1][0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return ops[0]


def _stays_a_scatter(fn):
    a = _inputs()[0]
    ops = _matches(fn, [a], convert_and_run(fn, a, bodies=True))
    assert ops["ScatterND"] == 1, ops


@pytest.mark.parametrize("edge", [False, True], ids=["random", "edge"])
def test_rows_read_and_written_along_axis_1_make_a_scan(edge):
    xs = _inputs(edge)
    ops = _matches(_recurrence, xs, convert_and_run(_recurrence, *xs, bodies=True))
    assert ops["Scan"] == 1 and ops["Loop"] == 0, ops
    assert ops["ScatterND"] == 0 and ops["Slice"] == 0 and ops["Where"] == 0, ops


def test_two_buffers_and_axis_0_rows():
    def fn(a, b):
        def body(i, carry):
            h, out1, out2 = carry
            h = h + _row(a, i, 0) * _row(b, i)
            return h, lax.dynamic_update_index_in_dim(out1, h, i, 0), lax.dynamic_update_index_in_dim(out2, -h, i, 1)

        init = (jnp.zeros((B, H)), jnp.ones((T, B, H)), jnp.full((B, T, H), 2.0))
        _, out1, out2 = lax.fori_loop(0, T, body, init)
        return out1 + jnp.swapaxes(out2, 0, 1)

    a = np.random.default_rng(3).standard_normal((T, B, H)).astype(np.float32)
    b = _inputs()[1]
    ops = _matches(fn, [a, b], convert_and_run(fn, a, b, bodies=True))
    assert ops["Scan"] == 1 and ops["ScatterND"] == 0, ops


def test_a_buffer_with_a_row_left_unwritten_keeps_its_initial_row():
    def fn(a):
        def body(i, out):
            return lax.dynamic_update_index_in_dim(out, _row(a, i) * 2, i, 1)

        return lax.fori_loop(0, T - 1, body, jnp.full((B, T, H), 5.0))

    _stays_a_scatter(fn)


def test_a_buffer_the_body_reads_stays_carried():
    def fn(a):
        def body(i, out):
            prev = _row(out, jnp.maximum(i - 1, 0))
            return lax.dynamic_update_index_in_dim(out, prev + _row(a, i), i, 1)

        return lax.fori_loop(0, T, body, jnp.zeros((B, T, H)))

    _stays_a_scatter(fn)


def test_rows_written_in_reverse_stay_a_scatter():
    def fn(a):
        def body(i, out):
            return lax.dynamic_update_index_in_dim(out, _row(a, i), T - 1 - i, 1)

        return lax.fori_loop(0, T, body, jnp.zeros((B, T, H)))

    _stays_a_scatter(fn)


@pytest.mark.parametrize("start", [0, 2])
def test_a_carried_index_is_the_counter_only_when_it_starts_with_it(start):
    """fori_loop's index beside a second carried index j: read as the counter where it starts at 0."""
    def fn(a):
        def body(i, carry):
            j, h = carry
            return j + 1, h + _row(a, jnp.minimum(j, T - 1)) * (i + 1).astype(jnp.float32)

        return lax.fori_loop(0, T, body, (jnp.int32(start), jnp.zeros((B, H))))[1]

    a = _inputs()[0]
    ops = _matches(fn, [a], convert_and_run(fn, a, bodies=True))
    assert (ops["Scan"] == 1) == (start == 0), ops


def test_the_scan_keeps_a_symbolic_batch():
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(f"b, {T}, {H}"), np.float32)

    def fn(a, b, c):  # the output buffer's batch is the input's
        def body(i, carry):
            h, out = carry
            h = h * _row(a, i) + _row(b, i) * _row(c, i)
            return h, lax.dynamic_update_index_in_dim(out, h, i, 1)

        return lax.fori_loop(0, T, body, (jnp.zeros_like(a[:, 0]), jnp.zeros_like(a)))[1]

    xs = _inputs()
    run = functools.partial(convert_and_run, fn, bodies=True, specs=[spec] * 3)
    _matches(fn, xs, run(*xs))
    bigger = [np.concatenate([x, x]) for x in xs]
    _matches(fn, bigger, run(*bigger))
