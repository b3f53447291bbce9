"""The SavedModel -> ONNX check runs the same edge sets as ``check``, through the same loops.

It used to run only the first edge set and to skip edge values for every ONNX ``Loop`` whose trip
count input is not a constant, which is every ``while`` jaxconv lowers (``M`` omitted): an ONNX model
wrong on -inf in column 0 of a [64, 4] input (the first set holds none there), or wrong on NaN after
a ``fori_loop``, passed. Each model here is converted without the check, corrupted as
``tests/test_check_catches_corruption.py`` does, and checked against TensorFlow as
``saved_model_to_onnx`` checks it. A difference on edge values only is an ``edge`` row against
TensorFlow's XLA (a warning, an error with ``--strict``).
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax import lax

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")
onnx = pytest.importorskip("onnx")


from onnx_corruption import minus_inf_to_nan, nan_to_zero, wrap_output  # noqa: E402

from jaxconv import api  # noqa: E402
from jaxconv.errors import MismatchError  # noqa: E402
from jaxconv.known_differences import EDGE  # noqa: E402
from jaxconv.tf import saved_model_check as checking  # noqa: E402
from jaxconv.tf.saved_model_to_onnx import saved_model_to_onnx  # noqa: E402


def column_0(x):
    return x[:, 0] + 1.0


def fori_jnp_bound(x):
    return lax.fori_loop(0, jnp.int32(3), lambda i, c: c * 0.5 + jnp.tanh(x), x)


def at_most_50(x):
    return lax.while_loop(lambda c: (c[0] < 50) & (c[1].sum() < 100.0), lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]


def until_big(x):
    return lax.while_loop(lambda c: jnp.abs(c).sum() < 100.0, lambda c: c * 2.0 + 1.0, x)


def _onnx(tmp_path, fn, spec):
    """``fn`` as a SavedModel, and the ONNX saved-model-to-onnx makes of it (unchecked)."""
    sm = str(tmp_path / "sm")
    api.to_saved_model(fn, spec, path=sm, check=False)
    out = str(tmp_path / "m.onnx")
    saved_model_to_onnx(sm, out, signature="serving_default", check=False)
    return sm, out


def _check(sm, path):
    """``path`` checked against the SavedModel's serving_default signature, as saved_model_to_onnx does."""
    model = onnx.load(path)
    inputs, outputs = [v.name for v in model.graph.input], [v.name for v in model.graph.output]
    runner = checking.SignatureRunner(tf.saved_model.load(sm), sm, "serving_default", inputs, outputs)
    refs = checking.tf_references(runner, checking.model_signature(model), loops=checking.open_loop(model))
    return checking.check_against_tf(path, path, outputs, refs)


def _edge_rows(report):
    return [(r.inputs, r.verdict) for r in report.rows if r.inputs == "edge"]


def _differs_on_edge_values(report):
    """The check names the difference: an ``edge`` row, an error with --strict."""
    assert report.ok and report.edge_differences, report.table()
    assert "differs from TensorFlow on edge values" in (report.warning() or ""), report.warning()
    with pytest.raises(MismatchError, match="differs from TensorFlow on edge values"):
        checking.raise_on_mismatch(report, strict=True)


def test_a_bug_only_the_second_edge_set_shows_is_caught(tmp_path):
    sm, path = _onnx(tmp_path, column_0, "f32[64,4]")
    good = _check(sm, path)
    assert good.ok and not good.edge_differences and _edge_rows(good) == [("edge", "ok")] * 2, good.table()
    report = _check(sm, wrap_output(path, minus_inf_to_nan))
    assert _edge_rows(report) == [("edge", "ok"), ("edge", EDGE)], report.table()
    assert "TensorFlow -inf / artifact NaN x1" in report.table(), report.table()
    _differs_on_edge_values(report)


@pytest.mark.parametrize("fn", [fori_jnp_bound, at_most_50], ids=lambda f: f.__name__)
def test_a_nan_bug_after_a_bounded_loop_is_caught(tmp_path, fn):
    sm, path = _onnx(tmp_path, fn, "f32[8]")
    assert any(n.op_type == "Loop" and not n.input[0] for n in onnx.load(path).graph.node)  # M omitted
    good = _check(sm, path)
    assert good.ok and _edge_rows(good) and not good.edge_differences, good.table()
    assert not any("edge values skipped" in n for n in good.notes), good.notes
    report = _check(sm, wrap_output(path, nan_to_zero))
    assert {r.inputs for r in report.edge_differences} == {"edge"}, report.table()
    assert "NaN positions differ" in report.edge_differences[0].note
    _differs_on_edge_values(report)


def test_a_loop_whose_trip_count_reads_the_inputs_skips_edge_values_naming_it(tmp_path):
    sm, path = _onnx(tmp_path, until_big, "f32[8]")
    model = onnx.load(path)
    loops = checking.open_loop(model)
    assert loops and all("Loop" in name for name in loops), loops
    report = _check(sm, path)
    assert report.ok and _edge_rows(report) == [], report.table()
    (note,) = [n for n in report.notes if n.startswith("edge values skipped")]
    assert "trip count depends on the inputs" in note and loops[0] in note, note
