"""The default check fails deliberately corrupted ONNX models, each with a message naming what differs.

Each model is converted without the check, edited with the onnx package (a weight element changed,
a Relu dropped, NaN turned into 0, -0.0 turned into +0.0, an integer off by one, an output dropped or
two swapped, a symbolic dimension fixed to one size), then checked against the original function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_corruption import const, nan_to_zero

import jaxconv
from jaxconv import known_differences, verify
from jaxconv.errors import ArtifactError, MismatchError

_W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def dense_relu(x):
    return jax.nn.relu(x @ _W)


def negate(x):
    return -x, x * 2.0


def int_affine(x):
    return x * 3 + 1


def nan_to_big(x):
    return jnp.tanh(x) * 2.0


def _convert(tmp_path, fn, spec, name="m.onnx"):
    path = str(tmp_path / name)
    jaxconv.to_onnx(fn, *(spec if isinstance(spec, tuple) else (spec,)), path=path, check=False)
    return path


def _edit(path, change):
    model = onnx.load(path)
    change(model.graph)
    out = path.replace(".onnx", ".bad.onnx")
    onnx.save(model, out)
    return out


def _wrap_output(graph, index, make):
    """Route graph output ``index`` through ``make(tmp_name, out_name) -> nodes``."""
    out = graph.output[index].name
    tmp = out + "_before"
    for node in graph.node:
        node.output[:] = [tmp if o == out else o for o in node.output]
        node.input[:] = [tmp if i == out else i for i in node.input]
    graph.node.extend(make(tmp, out))


def _fails(path, fn, spec, *words):
    """The check's report fails and its error names every word."""
    report = jaxconv.check(path, fn, spec)
    assert not report.ok, report.table()
    with pytest.raises(MismatchError) as e:
        verify.raise_on_mismatch(report)
    text = str(e.value)
    assert "WRONG" in text and all(w in text for w in words), text
    return report


def test_reference_artifacts_pass(tmp_path):
    """The unedited models pass: the failures below are the edits'. dense_relu's second edge set has
    +-FLT_MAX in one row: jax.jit's float32 dot overflows to NaN where float64 is 1.78e38 and ONNX
    Runtime's to -inf (relu: 0), which the check cannot decide."""
    for fn, spec in ((dense_relu, "f32[b,8]"), (negate, "f32[b,8]"), (int_affine, "i32[4,3]"), (nan_to_big, "f32[6]")):
        path = _convert(tmp_path, fn, spec, f"{fn.__name__}.onnx")
        report = jaxconv.check(path, fn, spec)
        assert report.ok, report.table()
        assert all(r.inputs == "edge" and r.note.startswith(known_differences.JIT_OVERFLOW_NOTE) for r in report.undecided), report.table()
        assert bool(report.undecided) == (fn is dense_relu), report.table()


def test_one_weight_element_changed(tmp_path):
    def change(graph):
        for init in graph.initializer:
            w = numpy_helper.to_array(init)
            if w.shape == (8, 8):
                w = w.copy()
                w[3, 5] *= np.float32(1 + 2 ** -10)  # 8192 float32 ulps, 1e-3 relative
                init.CopyFrom(numpy_helper.from_array(w, init.name))
                return
        raise AssertionError("no 8x8 weight")

    path = _edit(_convert(tmp_path, dense_relu, "f32[b,8]"), change)
    _fails(path, dense_relu, "f32[b,8]", "output_0", "random inputs")


def test_relu_dropped(tmp_path):
    def change(graph):
        relu = [n for n in graph.node if n.op_type in ("Relu", "Max")]
        assert relu, [n.op_type for n in graph.node]
        relu[0].op_type = "Identity"
        relu[0].input[:] = relu[0].input[:1]

    path = _edit(_convert(tmp_path, dense_relu, "f32[b,8]"), change)
    _fails(path, dense_relu, "f32[b,8]", "output_0")


def test_nan_turned_into_zero(tmp_path):
    """NaN inputs are in the edge set: an artifact that maps NaN to 0 differs there only."""
    def change(graph):
        _wrap_output(graph, 0, nan_to_zero)

    path = _edit(_convert(tmp_path, nan_to_big, "f32[6]"), change)
    report = _fails(path, nan_to_big, "f32[6]", "edge inputs", "NaN positions differ")
    assert {r.inputs for r in report.rows if not r.ok} == {"edge"}


def scale(x):
    return x * 2.0


def test_nan_turned_into_zero_on_a_scalar_input(tmp_path):
    """A scalar input holds one edge value per edge set: 0.0, NaN and inf in turn (one set, 0.0, missed this)."""
    def change(graph):
        _wrap_output(graph, 0, nan_to_zero)

    path = _edit(_convert(tmp_path, scale, "f32[]"), change)
    report = _fails(path, scale, "f32[]", "edge inputs", "NaN positions differ")
    assert sum(not r.ok for r in report.rows) == 1


def test_negative_zero_turned_into_positive_zero(tmp_path):
    """-x on +0.0 is -0.0 (1 / -x is then -inf); an artifact that adds 0.0 answers +0.0."""
    def change(graph):
        _wrap_output(graph, 0, lambda tmp, out: [
            const(tmp + "_zero", np.float32(0)), helper.make_node("Add", [tmp, tmp + "_zero"], [out])])

    path = _edit(_convert(tmp_path, negate, "f32[b,8]"), change)
    report = _fails(path, negate, "f32[b,8]", "output_0", "edge inputs", "zero sign")
    assert [(r.name, r.inputs) for r in report.rows if not r.ok] == [("output_0", "edge")] * 2  # both edge sets


def test_int_output_off_by_one_in_one_element(tmp_path):
    bump = np.zeros((4, 3), np.int32)
    bump[2, 1] = 1

    def change(graph):
        _wrap_output(graph, 0, lambda tmp, out: [
            const(tmp + "_bump", bump), helper.make_node("Add", [tmp, tmp + "_bump"], [out])])

    path = _edit(_convert(tmp_path, int_affine, "i32[4,3]"), change)
    _fails(path, int_affine, "i32[4,3]", "output_0", "1 of 12 elements differ", "at [2, 1]")


def test_output_dropped(tmp_path):
    def change(graph):
        del graph.output[1]

    path = _edit(_convert(tmp_path, negate, "f32[b,8]"), change)
    with pytest.raises(ArtifactError, match="returned 1 outputs, jax.jit returns 2"):
        jaxconv.check(path, negate, "f32[b,8]")


def test_two_outputs_swapped(tmp_path):
    def change(graph):
        first, second = onnx.ValueInfoProto(), onnx.ValueInfoProto()
        first.CopyFrom(graph.output[0])
        second.CopyFrom(graph.output[1])
        graph.output[0].CopyFrom(second)
        graph.output[1].CopyFrom(first)

    path = _edit(_convert(tmp_path, negate, "f32[b,8]"), change)
    report = _fails(path, negate, "f32[b,8]", "random inputs")
    assert {r.name for r in report.rows if not r.ok} == {"output_0", "output_1"}


def test_symbolic_dimension_fixed_to_one_size(tmp_path):
    """A batch dimension fixed to 2 in the graph's inputs: the check runs other sizes and says it cannot."""
    def change(graph):
        for value in (*graph.input, *graph.output):
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_value = 2

    path = _edit(_convert(tmp_path, dense_relu, "f32[b,8]"), change)
    with pytest.raises(ArtifactError) as e:
        jaxconv.check(path, dense_relu, "f32[b,8]")
    assert "input 'x'" in str(e.value) and "float32[2,8], given float32[5,8]" in str(e.value)


def test_check_sizes_and_edge_values_cover_every_float_input():
    """Each float input of the edge sets holds NaN, both infinities and both zeros (a large one also the
    largest finite value and a subnormal); each int input its MIN and MAX; a symbolic dimension takes
    two sizes or more."""
    import ml_dtypes

    from jaxconv.check_inputs import DEFAULT_SIZES, edge_sets, size_sets
    from jaxconv.signature import Signature, input_infos, output_infos

    specs = [jax.ShapeDtypeStruct((5, 8), np.float32), jax.ShapeDtypeStruct((5,), jnp.bfloat16),
             jax.ShapeDtypeStruct((3,), np.float16), jax.ShapeDtypeStruct((), np.float32),
             jax.ShapeDtypeStruct((), np.float32), jax.ShapeDtypeStruct((5, 2), np.int32)]
    out = jax.ShapeDtypeStruct((1,), np.float32)
    sig = Signature(input_infos(specs, list("abcdef")), output_infos([out], jax.tree_util.tree_structure(out)))
    sets = edge_sets(sig, {}, 0)
    assert {s.label for s in sets} == {"edge"}
    for k in range(5):
        f = np.concatenate([np.ravel(s.arrays[k]).astype(np.float64) for s in sets])
        assert np.isnan(f).any() and np.isinf(f).any(), (k, f)
        if k < 3:
            assert np.isposinf(f).any() and np.isneginf(f).any(), (k, f)
            assert ((f == 0) & np.signbit(f)).any() and ((f == 0) & ~np.signbit(f)).any(), (k, f)
    big = sets[0].arrays[0].astype(np.float64)
    fi = ml_dtypes.finfo(np.float32)
    assert (np.abs(big) == float(fi.max)).any() and ((big != 0) & (np.abs(big) < float(fi.tiny))).any()
    d = np.concatenate([np.ravel(s.arrays[5]) for s in sets])
    assert d.min() == np.iinfo(np.int32).min and d.max() == np.iinfo(np.int32).max
    sym = jax.export.symbolic_shape("b, 8")
    sig2 = Signature(input_infos([jax.ShapeDtypeStruct(sym, np.float32)], ["x"]),
                     output_infos([out], jax.tree_util.tree_structure(out)))
    assert len({s["b"] for s in size_sets(sig2, DEFAULT_SIZES, ())}) >= 2


def two_means(x, y):
    return jnp.sum(x) / x.shape[0] + jnp.sum(y) / y.shape[0]


def test_one_symbolic_dimension_read_for_another(tmp_path):
    """The artifact divides by c where jax.jit divides by b: every size set gave b and c the same size,
    so it passed; a set where they differ now fails it."""
    def change(graph):
        shapes = [n for n in graph.node if n.op_type == "Shape"]
        assert len(shapes) == 2 and shapes[0].input[0] != shapes[1].input[0]
        shapes[0].input[0] = shapes[1].input[0]

    path = _edit(_convert(tmp_path, two_means, ("f32[b]", "f32[c]")), change)
    report = jaxconv.check(path, two_means, "f32[b]", "f32[c]")
    assert not report.ok, report.table()
    assert [r.inputs for r in report.rows if not r.ok] == ["random"]


def test_a_cancellation_s_zero_sign_is_noted_not_a_mismatch(tmp_path):
    """spatial_mean/f64/signed-zero (fuzz seed 51): the mean of [1, 1, 1, 1.3e154, -1.3e154, -2.2e-308] is
    -0.0 in jax.jit and +0.0 in the artifact, each from its order of adding; one rounding step on the inputs
    moves jax.jit's result by 1e138, so the zero's sign is the order's, not the program's."""
    x = np.array([1.0, 1.0, 1.0, 1.3407807929942596e154, -1.3407807929942596e154, -2.2250738585072014e-308])
    x = x.reshape(1, 1, 3, 2)

    def mean(v):
        return jnp.mean(v, axis=(2, 3))

    with jax.enable_x64(True):
        path = _convert(tmp_path, mean, "f64[1,1,3,2]")
        report = jaxconv.check(path, mean, "f64[1,1,3,2]", inputs=[x])
        expected = np.asarray(jax.jit(mean)(x))
    assert expected[0, 0] == 0 and np.signbit(expected[0, 0])
    (given,) = [r for r in report.rows if r.inputs == "given"]
    assert given.ok and "zero signs differ where jax.jit moves" in given.note, report.table()
