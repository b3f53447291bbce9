"""Edge values run through while loops whose trip count does not depend on the inputs.

The check used to skip edge values for every ``while`` in the traced program, so an ONNX model that
maps NaN to 0 after a ``fori_loop`` with a jnp bound passed. Now a loop whose condition reads the
inputs' values (through its carries too) runs them in capped copies (``loop_caps``), or skips them
with a note naming where it is when the artifact has no such copy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from onnx_corruption import nan_to_zero, wrap_output

import jaxconv
from jaxconv import edge_loops


def jnp_bound(x):
    return lax.fori_loop(0, jnp.int32(3), lambda i, c: c * 0.5 + jnp.tanh(x), x)


def literal_counter(x):
    return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]


def nested_in_jit_and_cond(x):
    y = jax.jit(jnp_bound)(x)
    return lax.cond(x[0] > 0, lambda: y, lambda: -y)


def input_bound(x, n):
    return lax.fori_loop(0, n, lambda i, c: c * 2.0, x)


def carry_from_input(x):
    return lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] + jnp.abs(c[1]).sum() + 1.0, c[1]), (x[0, 0], x))[1]


def loop_in_scan_body(x):
    def step(c, row):
        return c, lax.while_loop(lambda v: v.sum() < 3.0, lambda v: v + 1.0, row)
    return lax.scan(step, 0.0, x)[1]


def _flat(*shapes_dtypes):
    return [np.zeros(s, d) for s, d in shapes_dtypes]


def test_loops_with_constant_trip_counts_are_not_data_dependent():
    x = _flat(((6,), np.float32))
    for fn in (jnp_bound, literal_counter, nested_in_jit_and_cond):
        assert "while" in str(jax.make_jaxpr(fn)(*x)), fn.__name__  # a real while, not a scan
        assert edge_loops.data_dependent_loops(fn, [jax.ShapeDtypeStruct((6,), np.float32)], x) == [], fn.__name__


def test_loops_whose_condition_reads_the_inputs_are_found_with_their_line():
    spec = jax.ShapeDtypeStruct((3, 4), np.float32)
    cases = [(input_bound, [jax.ShapeDtypeStruct((4,), np.float32), jax.ShapeDtypeStruct((), np.int32)],
              _flat(((4,), np.float32), ((), np.int32))),
             (carry_from_input, [spec], _flat(((3, 4), np.float32))),
             (loop_in_scan_body, [spec], _flat(((3, 4), np.float32)))]
    for fn, specs, flat in cases:
        found = edge_loops.data_dependent_loops(fn, specs, flat)
        assert found and all("test_check_loop_edge_values.py" in f for f in found), (fn.__name__, found)
        assert edge_loops.has_while_loop(fn, specs, flat) is True


def test_a_nan_bug_after_a_fori_loop_is_caught(tmp_path):
    path = str(tmp_path / "loop.onnx")
    jaxconv.to_onnx(jnp_bound, "f32[b,8]", path=path)  # the faithful model passes with edge values
    good = jaxconv.check(path, jnp_bound, "f32[b,8]")
    assert good.ok and any(r.inputs == "edge" for r in good.rows), good.table()
    assert not any("edge values skipped" in n for n in good.notes), good.table()
    report = jaxconv.check(wrap_output(path, nan_to_zero), jnp_bound, "f32[b,8]")
    assert not report.ok, report.table()
    assert {r.inputs for r in report.rows if not r.ok} == {"edge"}, report.table()
    assert any("NaN positions differ" in r.note for r in report.rows if not r.ok), report.table()


def test_a_data_dependent_loop_runs_edge_values_in_capped_copies(tmp_path):
    """Once skipped with a note; now run in copies whose loops stop after a cap (tests/test_check_loop_caps.py).
    The scalar n is -100, INT32_MAX and INT32_MIN in the three edge sets: 2**31 - 1 trips reach the cap."""
    path = str(tmp_path / "n.onnx")
    jaxconv.to_onnx(input_bound, "f32[4]", "i32[]", path=path, check=False)
    report = jaxconv.check(path, input_bound, "f32[4]", "i32[]")
    assert report.ok and [r.inputs for r in report.rows] == ["random"] + ["edge"] * 2, report.table()
    (note,) = report.notes
    assert note.startswith("an edge set skipped: jax.jit's while loop was still running after 100000 trips"), note
    assert "test_check_loop_edge_values.py" in note, note


def test_a_data_dependent_loop_skips_edge_values_on_a_target_without_a_capped_copy():
    """A jax.export artifact has no capped copy: the note names the loop, as before."""
    from jaxconv.program import trace
    from jaxconv.verify import check_runner

    class Runner:
        kind = "jaxexport"

        def run(self, flat):
            return [np.asarray(jax.jit(input_bound)(*flat))]

    program = trace(input_bound, ["f32[4]", "i32[]"])
    report = check_runner(Runner(), "n.jaxexport", program.fn, program.arg_specs, program.signature)
    assert report.ok and [r.inputs for r in report.rows] == ["random"], report.table()
    (note,) = [n for n in report.notes if n.startswith("edge values skipped")]
    assert "while loop whose trip count depends on the inputs" in note and "test_check_loop_edge_values.py" in note, note
    assert "no capped copy of a jaxexport artifact" in note, note


def at_most(limit):
    def fn(x):
        return lax.while_loop(lambda c: (c[0] < limit) & (c[1].sum() < 100.0),
                              lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]
    return fn


def test_a_loop_with_an_iteration_limit_runs_edge_values_unless_the_limit_is_huge(tmp_path):
    """``counter < 50 and not converged``: at most 50 trips whatever the inputs; with 10**9 the loop could
    run that long on NaN (NaN < 100 is false, so this one would not, but the check cannot tell)."""
    spec, flat = [jax.ShapeDtypeStruct((6,), np.float32)], _flat(((6,), np.float32))
    assert edge_loops.data_dependent_loops(at_most(50), spec, flat) == []
    assert edge_loops.data_dependent_loops(at_most(edge_loops.MAX_EDGE_TRIPS + 1), spec, flat)
    assert edge_loops.data_dependent_loops(at_most(10 ** 9), spec, flat)
    path = str(tmp_path / "limit.onnx")
    jaxconv.to_onnx(at_most(50), "f32[6]", path=path)
    report = jaxconv.check(wrap_output(path, nan_to_zero), at_most(50), "f32[6]")
    assert not report.ok and {r.inputs for r in report.rows if not r.ok} == {"edge"}, report.table()
