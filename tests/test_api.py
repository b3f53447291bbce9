"""The Python API on several functions, and load() of a .jaxexport in a fresh process."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import UsageError


def dict_outputs(x, y):
    return {"sum": x + y, "prod": x * y, "nested": (jnp.max(x), y.astype(jnp.int32))}


def half(x):
    return jnp.tanh(x) * 2


def ints(a, b):
    return a * b + a // 3, jnp.sum(a)


@pytest.mark.parametrize("fn,specs", [
    (dict_outputs, ("f32[3,4]", "f32[3,4]")),
    (half, ("f16[8]",)),
    (ints, ("i32[5]", "i32[5]")),
    (half, (jax.ShapeDtypeStruct((2, 3), jnp.float32),)),
])
def test_to_onnx_and_to_stablehlo_check_against_jax(fn, specs, tmp_path):
    reports = []
    model = jaxconv.to_onnx(fn, *specs, path=str(tmp_path / "m.onnx"), report_to=reports)
    assert (tmp_path / "m.onnx").exists()
    assert reports and reports[0].ok
    assert [o.name for o in model.graph.output] == [f"output_{i}" for i in range(len(model.graph.output))]
    exported = jaxconv.to_stablehlo(fn, *specs, path=str(tmp_path / "m"), report_to=reports)
    assert len(exported.out_avals) == len(model.graph.output)
    assert reports[-1].ok


def test_output_paths_are_recorded(tmp_path):
    import json

    model = jaxconv.to_onnx(dict_outputs, "f32[2]", "f32[2]")
    meta = {p.key: p.value for p in model.metadata_props}
    paths = [o["path"] for o in json.loads(meta["jaxconv.signature"])["outputs"]]
    assert paths == ["result['nested'][0]", "result['nested'][1]", "result['prod']", "result['sum']"]


def test_check_returns_a_report(tmp_path):
    path = str(tmp_path / "h.onnx")
    jaxconv.to_onnx(half, "f32[b,3]", path=path, check=False)
    report = jaxconv.check(path, half, "f32[b,3]")
    assert report.ok
    assert {r.shape for r in report.rows} == {(1, 3), (2, 3), (5, 3)}  # symbolic sizes 2, 5 and 1


def test_load_requires_a_jaxexport(tmp_path):
    with pytest.raises(UsageError, match="takes a .jaxexport"):
        jaxconv.load(str(tmp_path / "m.onnx"))


def test_load_runs_in_a_fresh_process_without_the_source(tmp_path):
    src = tmp_path / "usermodel.py"
    src.write_text("import jax.numpy as jnp\ndef f(params, x):\n    return jnp.tanh(x @ params['w']) + params['b']\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import usermodel
    finally:
        sys.path.remove(str(tmp_path))
    jaxconv.to_stablehlo(usermodel.f, '{"w": "f32[4,3]", "b": "f32[3]"}', "f32[b,4]", path=str(tmp_path / "saved"))
    os.remove(src)  # the function's source is gone: the new process cannot trace it again
    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((4, 3), np.float32), rng.standard_normal(3, np.float32), rng.standard_normal((6, 4), np.float32)
    np.savez(tmp_path / "in.npz", w=w, b=b, x=x)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np, jaxconv
        fn = jaxconv.load({str(tmp_path / 'saved.jaxexport')!r})
        d = np.load({str(tmp_path / 'in.npz')!r})
        out = fn({{"w": d["w"], "b": d["b"]}}, d["x"])
        np.save({str(tmp_path / 'out.npy')!r}, np.asarray(out))
        assert "usermodel" not in sys.modules
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    expected = np.tanh(x @ w) + b
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-5, atol=1e-6)


def test_float64_artifact_loads_with_x64_in_a_fresh_process(tmp_path):
    jaxconv.to_stablehlo(lambda x: x * 2.0 + 1e-12, "f64[3]", path=str(tmp_path / "wide"))
    script = textwrap.dedent(f"""
        import numpy as np, jaxconv
        fn = jaxconv.load({str(tmp_path / 'wide.jaxexport')!r})
        out = np.asarray(fn(np.array([1.0, 2.0, 3.0])))
        assert out.dtype == np.float64, out.dtype
        np.testing.assert_array_equal(out, np.array([1.0, 2.0, 3.0]) * 2.0 + 1e-12)  # 1e-12 survives only in f64
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_symbolic_sizes_respect_constraints(tmp_path):
    def last_two(x):
        return x * 2

    reports = []
    jaxconv.to_onnx(last_two, "f32[b,3]", constraints=["b >= 4"], report_to=reports)
    assert {r.shape for r in reports[0].rows} == {(4, 3), (7, 3)}
    from jaxconv.check_inputs import make_inputs
    from jaxconv.program import trace

    program = trace(last_two, ["f32[b,3]"], constraints=["b >= 4"])
    assert make_inputs(program.signature, size=2, constraints=program.constraints)[0].shape == (4, 3)
    assert make_inputs(program.signature, size=5, constraints=program.constraints)[0].shape == (7, 3)


def test_custom_pytree_classes_are_saved_flat(tmp_path):
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(4, 2, 8, 2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)

    def predict(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    reports = []
    jaxconv.to_stablehlo(predict, specs, "f32[b,4]", path=str(tmp_path / "eqx"), report_to=reports)
    assert reports[0].ok
    fn = jaxconv.load(str(tmp_path / "eqx.jaxexport"))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (out,) = fn(*jax.tree_util.tree_leaves(params), x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(predict(params, x)), rtol=1e-6)


def test_float64_conversion_scopes_x64_and_leaves_the_global_flag_alone():
    before = jax.config.jax_enable_x64
    reports = []
    model = jaxconv.to_onnx(lambda x: x * 2.0 + 1e-12, "f64[3]", report_to=reports)
    assert jax.config.jax_enable_x64 == before
    assert model.graph.input[0].type.tensor_type.elem_type == 11  # DOUBLE
    assert {str(r.dtype) for r in reports[0].rows} == {"float64"}  # jax.jit's reference ran in float64 too


def test_float64_leaves_of_a_spec_pytree_are_kept():
    from jaxconv.program import trace

    program = trace(lambda p: p["w"] * 2, [{"w": jax.ShapeDtypeStruct((3,), np.float64)}])
    assert program.x64 and [str(a.dtype) for a in program.exported.in_avals] == ["float64"]
