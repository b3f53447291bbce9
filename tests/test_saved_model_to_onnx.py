"""``jaxconv saved-model-to-onnx``: jax2tf and mixed TF + JAX SavedModels to ONNX, against TF and jax.jit."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from cli_support import run_cli

pytestmark = pytest.mark.tf
tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")
ort = pytest.importorskip("onnxruntime")

from jax.experimental import jax2tf  # noqa: E402

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
B = np.array([0.5, -0.25, 1.0], np.float32)
V = np.linspace(-1, 1, 4).astype(np.float32)


def dense(params, x):
    return {"y": jnp.tanh(x @ params["w"]) + params["b"], "s": jnp.sum(x, axis=1)}


def scaled(params, zz, aa):
    return zz * params["b"][0] + aa


def _f1(x, v):
    return jnp.tanh(x * v) + jnp.sin(x)


def _f2(x):
    return jnp.cumsum(x, axis=1) * 0.5


def mixed_reference(x, n):
    """What the mixed SavedModel computes, in JAX alone."""
    y = jnp.log(1.0 + jnp.abs(x)) * 2.0 - 1.0
    z = _f1(y, V)
    z = lax.cond(jnp.sum(z) > 0, _f2, lambda a: -a, z)
    w = lax.fori_loop(0, jnp.maximum(n, 0), lambda i, a: _f2(a), z)
    return {"out": jax.nn.relu(w) + 1.0, "aux": jnp.mean(z, axis=1)}


def _save(module, path, signatures):
    tf.saved_model.save(module, str(path), signatures=signatures)
    return str(path)


@pytest.fixture(scope="module")
def jax2tf_model(tmp_path_factory):
    """Variables, two signatures: ``serving_default`` with a symbolic batch, ``other`` with static shapes."""
    m = tf.Module()
    m.params = {"w": tf.Variable(W), "b": tf.Variable(B)}
    poly = jax2tf.convert(dense, polymorphic_shapes=[None, "(b, 4)"])
    static = jax2tf.convert(scaled)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")], autograph=False)
    def serve(x):
        return poly(m.params, x)

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32, name="zz"),
                                  tf.TensorSpec([2], tf.float32, name="aa")], autograph=False)
    def other(zz, aa):
        return {"out": static(m.params, zz, aa)}

    return _save(m, tmp_path_factory.mktemp("jax2tf") / "sm", {"serving_default": serve, "other": other})


@pytest.fixture(scope="module")
def converted_jax2tf(jax2tf_model, tmp_path_factory):
    import onnx

    out = tmp_path_factory.mktemp("out")
    code = _cli_module(["saved-model-to-onnx", jax2tf_model, "-o", str(out / "m.onnx")])
    return code, out, {s: onnx.load(str(out / f"m_{s}.onnx")) for s in ("serving_default", "other")
                       if (out / f"m_{s}.onnx").exists()}


def _cli_module(args):
    from jaxconv.cli import main

    return main(args)


def _io(model):
    def dims(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    return [(v.name, dims(v)) for v in model.graph.input], [(v.name, dims(v)) for v in model.graph.output]


def _run(model, feed):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed)))


def test_one_model_per_signature_named_and_ordered_as_the_signature(converted_jax2tf):
    code, out, models = converted_jax2tf
    assert code == 0
    assert sorted(os.listdir(out)) == ["m_other.onnx", "m_serving_default.onnx"]  # no staging files left
    assert _io(models["serving_default"]) == ([("x", ["b", 4])], [("s", ["b"]), ("y", ["b", 3])])
    # the served function takes (zz, aa): its order, not TF's sorted one
    assert _io(models["other"]) == ([("zz", [2]), ("aa", [2])], [("out", [2])])


def test_variables_become_initializers_and_outputs_match_jax_and_tf(converted_jax2tf, jax2tf_model):
    from onnx import numpy_helper

    _, _, models = converted_jax2tf
    weights = [numpy_helper.to_array(t) for t in models["serving_default"].graph.initializer]
    assert any(w.shape == W.shape and np.array_equal(w, W) for w in weights)
    loaded = tf.saved_model.load(jax2tf_model)
    params = {"w": W, "b": B}
    for batch in (3, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        got = _run(models["serving_default"], {"x": x})
        want = jax.jit(dense)(params, x)
        from_tf = loaded.signatures["serving_default"](x=tf.constant(x))
        for k in ("y", "s"):
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[k], from_tf[k].numpy(), rtol=1e-5, atol=1e-6)
    zz, aa = np.array([1.5, -2.0], np.float32), np.array([0.25, 4.0], np.float32)
    got = _run(models["other"], {"zz": zz, "aa": aa})["out"]
    np.testing.assert_allclose(got, jax.jit(scaled)(params, zz, aa), rtol=1e-6)


def test_to_saved_model_output_converts_with_jaxconv_names(tmp_path, capsys):
    import onnx

    from jaxconv import api

    def fn(params, x):
        h = jnp.maximum(x @ params["w1"], 0.0)
        return h @ params["w2"], jnp.max(h, axis=-1)

    specs = ('{"w1": "f32[6,5]", "w2": "f32[5,2]"}', "f32[b,6]")
    api.to_saved_model(fn, *specs, path=str(tmp_path / "sm"))
    code, out, err = run_cli(["saved-model-to-onnx", str(tmp_path / "sm"), "--signature", "serving_default",
                              "-o", str(tmp_path / "m.onnx")], capsys)
    assert code == 0, err
    assert "against TensorFlow" in out and "MISMATCH" not in out
    model = onnx.load(str(tmp_path / "m.onnx"))
    inputs, outputs = _io(model)
    assert inputs == [("params_w1", [6, 5]), ("params_w2", [5, 2]), ("x", ["b", 6])]
    assert [n for n, _ in outputs] == ["output_0", "output_1"]
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((6, 5)).astype(np.float32),
              "w2": rng.standard_normal((5, 2)).astype(np.float32)}
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got = _run(model, {"params_w1": params["w1"], "params_w2": params["w2"], "x": x})
    want = jax.jit(fn)(params, x)
    np.testing.assert_allclose(got["output_0"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["output_1"], want[1], rtol=1e-5, atol=1e-6)


def test_dimension_expression_names_the_input_and_sizes_the_check(tmp_path, capsys):
    """A ``2*b`` dimension: the check must feed even sizes, or TensorFlow refuses the inputs."""
    import onnx

    from jaxconv import api

    def fn(x):
        return jnp.reshape(x, (-1, 2, 3)).sum(axis=1)

    api.to_saved_model(fn, "f32[2*b,3]", path=str(tmp_path / "sm"))
    args = ["saved-model-to-onnx", str(tmp_path / "sm"), "-o", str(tmp_path / "m.onnx")]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    model = onnx.load(str(tmp_path / "m_serving_default.onnx"))
    assert _io(model)[0] == [("x", ["2*b", 3])]
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(model, {"x": x})["output_0"], jax.jit(fn)(x), rtol=1e-6)


@pytest.fixture(scope="module")
def mixed_model(tmp_path_factory):
    """TF ops around three XlaCallModule ops: in the main graph, in a tf.cond branch, in a while_loop body."""
    m = tf.Module()
    m.v = tf.Variable(V)
    f1 = jax2tf.convert(_f1, polymorphic_shapes=["(b, 4)", "(4,)"], with_gradient=False)
    f2 = jax2tf.convert(_f2, polymorphic_shapes=["(b, 4)"], with_gradient=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([], tf.int32, name="n")], autograph=False)
    def serve(x, n):
        y = tf.math.log(1.0 + tf.abs(x)) * 2.0 - 1.0
        z = f1(y, m.v)
        z = tf.cond(tf.reduce_sum(z) > 0, lambda: f2(z), lambda: -z)
        _, w = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, f2(a)), [tf.constant(0), z])
        return {"out": tf.nn.relu(w) + 1.0, "aux": tf.reduce_mean(z, axis=1)}

    return _save(m, tmp_path_factory.mktemp("mixed") / "sm", {"serving_default": serve})


def test_mixed_tf_and_jax_with_cond_and_loop(mixed_model, tmp_path, capsys):
    import onnx

    code, out, err = run_cli(["saved-model-to-onnx", mixed_model, "-o", str(tmp_path / "m.onnx")], capsys)
    assert code == 0, err
    assert "3 XlaCallModule lowered" in out
    assert "edge values skipped: the model has a while loop" in out
    model = onnx.load(str(tmp_path / "m_serving_default.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert {"If", "Loop"} <= ops and "XlaCallModule" not in ops
    loaded = tf.saved_model.load(mixed_model)
    for batch, n in ((2, 0), (5, 3)):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        for sign in (1.0, -1.0):
            got = _run(model, {"x": sign * x, "n": np.array(n, np.int32)})
            want = jax.jit(mixed_reference)(sign * x, n)
            from_tf = loaded.signatures["serving_default"](x=tf.constant(sign * x), n=tf.constant(n))
            for k in ("out", "aux"):
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(got[k], from_tf[k].numpy(), rtol=1e-5, atol=1e-5)


def test_top_k_that_tf_cannot_run_is_converted_with_no_check(tmp_path, capsys):
    m = tf.Module()
    m.f = tf.function(jax2tf.convert(lambda x: lax.top_k(x, 2)[0], polymorphic_shapes=["(b, 5)"]),
                      input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")], autograph=False)
    path = _save(m, tmp_path / "sm", {"serving_default": m.f.get_concrete_function()})
    out_file = tmp_path / "out" / "k.onnx"
    args = ["saved-model-to-onnx", path, "--signature", "serving_default", "-o", str(out_file)]
    code, _, err = run_cli(args, capsys)
    assert code == 8
    assert len(err.strip().splitlines()) == 1
    assert "TensorFlow cannot run signature 'serving_default'" in err and "--no-check" in err
    assert "jaxconv's lowering does not need TensorFlow's XLA and converted it" in err
    assert not out_file.exists()
    code, _, err = run_cli(args + ["--no-check"], capsys)
    assert code == 0, err
    import onnx

    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    got = _run(onnx.load(str(out_file)), {"x": x})["output_0"]
    np.testing.assert_array_equal(got, jax.jit(lambda x: lax.top_k(x, 2)[0])(x))


def test_every_unsupported_op_in_one_message(tmp_path, capsys):
    m = tf.Module()
    g = jax2tf.convert(lambda x: x + lax.rng_bit_generator(x.astype(jnp.uint32), (4,), dtype=jnp.uint32)[1],
                       with_gradient=False)

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32, name="x")], autograph=False)
    def serve(x):
        return {"y": g(tf.math.log1p(x))}

    path = _save(m, tmp_path / "sm", {"serving_default": serve})
    code, _, err = run_cli(["saved-model-to-onnx", path, "-o", str(tmp_path / "m.onnx")], capsys)
    assert code == 6
    assert len(err.strip().splitlines()) == 1
    assert "stablehlo.rng_bit_generator" in err and "Log1p" in err
    assert not any(p.suffix == ".onnx" for p in tmp_path.iterdir())


@pytest.mark.parametrize("case", ["missing", "file", "not_saved_model", "unknown_signature", "output_folder",
                                  "opset", "output_in_saved_model"])
def test_bad_inputs_one_line_and_nothing_written(case, jax2tf_model, tmp_path, capsys):
    target = str(tmp_path / "o" / "m.onnx")
    (tmp_path / "o").mkdir()
    args = {
        "missing": [str(tmp_path / "nope"), "-o", target],
        "file": [str(_file(tmp_path)), "-o", target],
        "not_saved_model": [str(tmp_path / "o"), "-o", str(tmp_path / "m.onnx")],
        "unknown_signature": [jax2tf_model, "--signature", "predict", "-o", target],
        "output_folder": [jax2tf_model, "--signature", "other", "-o", str(tmp_path / "o")],
        "opset": [jax2tf_model, "--opset", "17", "-o", target],
        "output_in_saved_model": [jax2tf_model, "--signature", "other", "-o",
                                  os.path.join(jax2tf_model, "saved_model.pb")],
    }[case]
    expected = {"missing": (2, "not found"), "file": (2, "is a file"),
                "not_saved_model": (8, "no saved_model.pb"),
                "unknown_signature": (2, "signatures: other, serving_default"),
                "output_folder": (2, "is a folder"),
                "opset": (2, "--opset 17 is out of range"),
                "output_in_saved_model": (2, "is a file of the SavedModel")}[case]
    code, _, err = run_cli(["saved-model-to-onnx", *args], capsys)
    assert (code, len(err.strip().splitlines())) == (expected[0], 1), err
    assert expected[1] in err
    assert os.listdir(tmp_path / "o") == [] and not (tmp_path / "m.onnx").exists()


def _file(tmp_path):
    path = tmp_path / "model.pb"
    path.write_bytes(b"not a folder")
    return path


def test_a_difference_from_tf_is_a_mismatch_naming_tensorflow(converted_jax2tf, jax2tf_model):
    from jaxconv.errors import MismatchError
    from jaxconv.tf import saved_model_check as checking

    _, out, models = converted_jax2tf
    path = str(out / "m_other.onnx")
    runner = checking.SignatureRunner(tf.saved_model.load(jax2tf_model), jax2tf_model, "other", ["zz", "aa"],
                                      ["out"])
    refs = checking.tf_references(runner, checking.model_signature(models["other"]))
    report = checking.check_against_tf(path, path, ["out"], refs)
    assert report.ok and "against TensorFlow" in report.table()
    for r in refs:
        r.outputs = [o + 1.0 for o in r.outputs]
    report = checking.check_against_tf(path, path, ["out"], refs)
    assert not report.ok
    with pytest.raises(MismatchError, match="differs from TensorFlow on random inputs") as e:
        checking.raise_on_mismatch(report)
    assert e.value.exit_code == 9
