"""jaxconv.onnx.rewrites.repeat_gathers: jnp.repeat's Expand as a Gather of the repeated axis; ONNX Runtime's
outputs bit for bit jax.jit's (copies of NaN, +-inf and -0.0 included)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import nearest_resize, repeat_gathers
from lowering_check import convert_and_run as _convert
from lowering_check import without_rule


def _input(shape: tuple[int, ...]) -> np.ndarray:
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[0], flat[5], flat[9], flat[-1] = np.nan, np.inf, -np.inf, -0.0
    return x


_plain = without_rule(repeat_gathers)


@pytest.fixture(autouse=True)
def _without_resizes(monkeypatch):
    """The repeats as this rule finds them: ``nearest_resize``, before it, would take the spatial ones."""
    monkeypatch.setattr(nearest_resize, "rewrite", lambda graph: 0)


CASES = {
    "upsample 2x nhwc": ((2, 5, 6, 16), lambda x: jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2), 2),
    "rows 3x": ((3, 7, 20), lambda x: jnp.repeat(x, 3, axis=1), 1),
    "leading 2x": ((4, 32), lambda x: jnp.repeat(x, 2, axis=0), 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_repeats_as_gathers(monkeypatch, name):
    shape, fn, repeats = CASES[name]
    x = _input(shape)
    ops, (got,) = _convert(fn, x)
    plain_ops, (plain,) = _plain(monkeypatch, fn, x)
    assert ops["Expand"] == 0 and ops["Gather"] == repeats and plain_ops["Expand"] == repeats, (ops, plain_ops)
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(fn(x)).view(np.uint32))


def test_short_runs_stay():
    """Repeating the last axis: runs of one element, the Expand stays."""
    fn = lambda x: jnp.repeat(x, 2, axis=-1)  # noqa: E731
    x = _input((3, 8, 5))
    ops, (got,) = _convert(fn, x)
    assert ops["Gather"] == 0, ops
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(fn(x)).view(np.uint32))
