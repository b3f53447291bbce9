"""Small inputs of a binary op meet different edge values at the same place: a Max that drops NaN
(``fmax``) checked against ``jnp.maximum`` used to pass, because two small inputs held the same edge
values element for element (max(NaN, NaN) is NaN either way)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.check_inputs import edge_sets
from jaxconv.program import trace


@pytest.mark.parametrize("n", [3, 10, 30])
def test_a_nan_dropping_max_is_caught(tmp_path, n):
    path = str(tmp_path / "fmax.onnx")
    spec = f"f32[{n}]"
    jaxconv.to_onnx(jnp.fmax, spec, spec, path=path, check=False)
    report = jaxconv.check(path, jnp.maximum, spec, spec)
    assert not report.ok, report.table()
    assert {r.inputs for r in report.rows if not r.ok} == {"edge"}, report.table()


def test_a_nan_keeping_max_passes(tmp_path):
    path = str(tmp_path / "max.onnx")
    jaxconv.to_onnx(jnp.maximum, "f32[10]", "f32[10]", path=path, check=False)
    assert jaxconv.check(path, jnp.maximum, "f32[10]", "f32[10]").ok


def test_two_small_inputs_meet_nan_against_a_number_and_a_number_against_nan():
    program = trace(jnp.maximum, ["f32[10]", "f32[10]"])
    sets = edge_sets(program.signature, {}, 0)
    pairs = [(a, b) for s in sets for a, b in zip(*(np.asarray(x).ravel() for x in s.arrays))]
    assert any(np.isnan(a) and not np.isnan(b) for a, b in pairs)
    assert any(np.isnan(b) and not np.isnan(a) for a, b in pairs)
    assert any(np.isinf(a) and np.isfinite(b) for a, b in pairs)
