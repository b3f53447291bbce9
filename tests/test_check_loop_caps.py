"""Edge values run through while loops whose trip count depends on the inputs, in capped copies.

The check used to skip edge values for such a loop (NaN in its condition may keep it running), so an
ONNX model that maps NaN to 0 after ``while sum(|c|) < 100`` passed. Now jax.jit's reference runs a
copy of the program whose such loops stop after ``loop_caps.LOOP_CAP`` trips, and the artifact a copy
whose Loops fail on trip ``LOOP_CAP + 1``: a run that hits the cap says so (jax.jit's: the edge set is
left out with a note; the artifact's alone: a mismatch).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from jax import lax
from onnx import helper
from onnx_corruption import nan_to_zero, wrap_output

import jaxconv
from jaxconv import edge_loops, loop_caps, verify
from jaxconv.errors import MismatchError


def until_big(x):
    """Ends on every input: NaN or inf make the sum fail ``< 100`` at once."""
    return lax.while_loop(lambda c: jnp.abs(c).sum() < 100.0, lambda c: c * 2.0 + 1.0, x)


def nan_forever(x):
    """Never ends on NaN: ``not (NaN >= 100)`` holds forever."""
    return lax.while_loop(lambda c: ~(jnp.abs(c).sum() >= 100.0), lambda c: c * 2.0 + 1.0, x)


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(loop_caps, "LOOP_CAP", 2000)
    return 2000


def _save(model, path):
    onnx.save(model, path)
    return path


def _loops_on_nan(path):
    """The model with its Loop's conditions (the first, and the body's) or-ed with IsNaN(sum(carry)): the
    same on numbers, never ending where a carry holds NaN (jax.jit's loop does not start there)."""
    model = onnx.load(path)
    nodes = list(model.graph.node)
    (k,) = [i for i, n in enumerate(nodes) if n.op_type == "Loop"]
    loop = nodes[k]
    first = [helper.make_node("ReduceSum", [loop.input[2]], ["first_sum"], keepdims=0),
             helper.make_node("IsNaN", ["first_sum"], ["first_nan"]),
             helper.make_node("Or", [loop.input[1], "first_nan"], ["first_cond"])]
    loop.input[1] = "first_cond"
    body = loop.attribute[0].g
    cond, carry = body.output[0].name, body.output[1].name
    body.output[0].name = "forever_cond"
    body.node.extend([helper.make_node("ReduceSum", [carry], ["forever_sum"], keepdims=0),
                      helper.make_node("IsNaN", ["forever_sum"], ["forever_nan"]),
                      helper.make_node("Or", [cond, "forever_nan"], ["forever_cond"])])
    del model.graph.node[:]  # (extend copies the nodes: the Loop is edited before)
    model.graph.node.extend(nodes[:k] + first + nodes[k:])
    return _save(model, path.replace(".onnx", ".forever.onnx"))


def test_the_loop_is_data_dependent():
    spec, flat = [jax.ShapeDtypeStruct((8,), np.float32)], [np.zeros(8, np.float32)]
    assert edge_loops.data_dependent_loops(until_big, spec, flat)
    assert edge_loops.data_dependent_loops(nan_forever, spec, flat)


def test_a_nan_bug_after_a_data_dependent_loop_is_caught_on_edge_values(tmp_path, small_cap):
    path = str(tmp_path / "m.onnx")
    jaxconv.to_onnx(until_big, "f32[b,8]", path=path)  # the faithful model passes, edge values included
    good = jaxconv.check(path, until_big, "f32[b,8]")
    assert good.ok and any(r.inputs == "edge" for r in good.rows), good.table()
    assert not any("skipped" in n for n in good.notes), good.notes
    report = jaxconv.check(wrap_output(path, nan_to_zero), until_big, "f32[b,8]")
    assert not report.ok and {r.inputs for r in report.rows if not r.ok} == {"edge"}, report.table()
    assert any("NaN positions differ" in r.note for r in report.rows if not r.ok), report.table()


def test_a_loop_that_never_ends_on_nan_does_not_hang_the_check(tmp_path, small_cap):
    path = str(tmp_path / "m.onnx")
    jaxconv.to_onnx(nan_forever, "f32[8]", path=path, check=False)
    start = time.monotonic()
    report = jaxconv.check(path, nan_forever, "f32[8]")
    assert time.monotonic() - start < 120
    assert report.ok and [r.inputs for r in report.rows] == ["random"], report.table()
    (note,) = [n for n in report.notes if "skipped" in n]
    assert f"jax.jit's while loop was still running after {small_cap} trips" in note, note
    assert "test_check_loop_caps.py" in note, note


def test_an_artifact_whose_loop_never_ends_where_jax_jit_s_does_is_a_mismatch(tmp_path, small_cap):
    path = str(tmp_path / "m.onnx")
    jaxconv.to_onnx(until_big, "f32[8]", path=path, check=False)
    bad = _loops_on_nan(path)
    report = jaxconv.check(bad, until_big, "f32[8]")
    assert not report.ok, report.table()
    wrong = [r for r in report.rows if not r.ok]
    assert {r.inputs for r in wrong} == {"edge"}, report.table()
    assert all(f"was still running after {small_cap} trips" in r.note for r in wrong), report.table()
    with pytest.raises(MismatchError, match="WRONG"):
        verify.raise_on_mismatch(report)


def test_the_capped_copy_computes_what_jax_jit_does():
    spec = [jax.ShapeDtypeStruct((8,), np.float32)]
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    capped = loop_caps.capped_function(until_big, spec, [x], cap=50)
    np.testing.assert_array_equal(np.asarray(jax.jit(capped)(x)), np.asarray(jax.jit(until_big)(x)))
    forever = loop_caps.capped_function(nan_forever, spec, [x], cap=50)
    with loop_caps.quiet_cap_hits(), pytest.raises(Exception) as e:
        jax.block_until_ready(jax.jit(forever)(np.full(8, np.nan, np.float32)))
    assert loop_caps.is_cap_hit(e.value), e.value


def _grow(c):
    return lax.while_loop(lambda v: jnp.abs(v).sum() < 50.0, lambda v: v * 1.5 + 0.25, c)


@jax.custom_jvp
def _grow_custom(x):
    return _grow(x)


_grow_custom.defjvp(lambda p, t: (_grow_custom(p[0]), t[0]))

PLACES = {
    "vmap": lambda x: jax.vmap(_grow)(x),  # a batched predicate: each row stops on its own
    "scan": lambda x: lax.scan(lambda c, r: (c + _grow(r).sum(), _grow(r)), 0.0, x),
    "cond": lambda x: lax.cond(x.sum() > 0, lambda: _grow(x), lambda: -_grow(-x)),
    "custom_jvp": lambda x: _grow_custom(x) * 2,
    "jit": lambda x: jax.jit(_grow)(x) + 1,
    "while": lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, _grow(c[1])), (0, x))[1],
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_the_capped_copy_is_bit_exact_wherever_the_loop_sits(place):
    fn = PLACES[place]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    capped = loop_caps.capped_function(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x], cap=1000)
    assert capped is not None
    got, want = jax.tree_util.tree_leaves(jax.jit(capped)(x)), jax.tree_util.tree_leaves(jax.jit(fn)(x))
    assert all(np.array_equal(np.asarray(g), np.asarray(w)) for g, w in zip(got, want)), (got, want)


def test_a_batched_loop_that_never_ends_on_one_row_hits_the_cap():
    x = np.ones((3, 4), np.float32)
    x[1, 2] = np.nan
    fn = jax.vmap(nan_forever)
    capped = loop_caps.capped_function(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype)], [x], cap=100)
    with loop_caps.quiet_cap_hits(), pytest.raises(Exception) as e:
        jax.block_until_ready(jax.jit(capped)(x))
    assert loop_caps.is_cap_hit(e.value)
    np.testing.assert_array_equal(jax.jit(capped)(np.ones((3, 4), np.float32)), jax.jit(fn)(np.ones((3, 4), np.float32)))


def counted_and_until_big(x):
    """A loop of 3000 trips whatever the inputs beside one whose trip count reads them."""
    return lax.fori_loop(0, jnp.int32(3000), lambda i, c: c * 0.999, until_big(x))


def test_a_loop_with_a_constant_trip_count_past_the_cap_is_not_stopped(tmp_path, small_cap):
    """Only the loops whose trip count reads the inputs are capped, on both sides: the artifact's
    3000-trip Loop must not fail at the cap of 2000 where jax.jit's copy runs its loop to the end."""
    path = str(tmp_path / "m.onnx")
    jaxconv.to_onnx(counted_and_until_big, "f32[8]", path=path, check=False)
    loops = [n for n in onnx.load(path).graph.node if n.op_type == "Loop"]
    assert len(loops) == 2 and not any(n.input[0] for n in loops)  # both without M
    report = jaxconv.check(path, counted_and_until_big, "f32[8]")
    assert report.ok and any(r.inputs == "edge" for r in report.rows), report.table()
    assert not report.notes, report.notes


def test_a_capped_run_does_not_print_onnx_runtime_errors(tmp_path, small_cap, capfd):
    """The capped copy stops its Loop by failing a Gather on purpose; ONNX Runtime's own error lines
    for that run are not the user's concern (the report says what happened)."""
    path = str(tmp_path / "m.onnx")
    jaxconv.to_onnx(until_big, "f32[8]", path=path, check=False)
    capfd.readouterr()
    report = jaxconv.check(_loops_on_nan(path), until_big, "f32[8]")
    assert not report.ok
    assert "onnxruntime" not in capfd.readouterr().err
