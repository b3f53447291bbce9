"""`jaxconv to-onnx model.mlir|model.mlirbc [--entry FUNC]`: StableHLO modules from any frontend."""

from __future__ import annotations

import os
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxconv.cli import main
from jaxconv.runtimes.onnxrt import OnnxRunner
from lowering_check import record_ops

RNG = np.random.default_rng(0)


def model_fn(x, y):
    """Loops, sorting, a composite and a helper function: what real modules hold."""
    acc = lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.sin(x), jnp.zeros_like(x))
    values, indices = lax.top_k(y, 2)
    return jnp.sort(x) + acc, values, indices, jnp.arcsinh(y)


X = RNG.normal(size=(5,)).astype(np.float32)
Y = RNG.normal(size=(2, 6)).astype(np.float32)
SPECS = (jax.ShapeDtypeStruct(X.shape, X.dtype), jax.ShapeDtypeStruct(Y.shape, Y.dtype))


def _exported(fn=model_fn, specs=SPECS):
    return jax.export.export(jax.jit(fn))(*specs)


def _write(path, data) -> str:
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        f.write(data)
    return str(path)


def _convert(capsys, *argv) -> tuple[int, str, str]:
    code = main(["to-onnx", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_matches(onnx_path, fn, *args):
    runner = OnnxRunner(onnx_path)
    got = runner.run(list(args))
    expected = [np.asarray(e) for e in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    return runner


@pytest.mark.parametrize("form", ["text", "bytecode"])
def test_module_converts_and_matches_jax(tmp_path, capsys, form):
    exp = _exported()
    record_ops(SimpleNamespace(exported=exp))  # for the lowering coverage check
    if form == "text":
        src = _write(tmp_path / "model.mlir", exp.mlir_module())
    else:
        src = _write(tmp_path / "model.mlirbc", exp.mlir_module_serialized)
    out = tmp_path / "model.onnx"
    code, stdout, err = _convert(capsys, src, "-o", out)
    assert code == 0, err
    assert f"wrote {out}" in stdout
    runner = _assert_matches(str(out), model_fn, X, Y)
    assert runner.input_names == ["x", "y"]  # argument names survive from the module's locations


def test_entry_picks_a_private_function(tmp_path, capsys):
    def fn(x):
        return jnp.argsort(x) * 2

    exp = _exported(fn, SPECS[:1])
    assert "func.func private @argsort" in exp.mlir_module()
    src = _write(tmp_path / "m.mlir", exp.mlir_module())
    out = tmp_path / "argsort.onnx"
    code, _, err = _convert(capsys, src, "--entry", "argsort", "-o", out)
    assert code == 0, err
    _assert_matches(str(out), jnp.argsort, X)


def test_missing_entry_lists_the_functions(tmp_path, capsys):
    exp = _exported(lambda x: jnp.argsort(x) * 2, SPECS[:1])
    src = _write(tmp_path / "m.mlirbc", exp.mlir_module_serialized)
    out = tmp_path / "m.onnx"
    code, _, err = _convert(capsys, src, "--entry", "nope", "-o", out)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "no function 'nope'" in lines[0] and "main" in lines[0] and "argsort" in lines[0]
    assert not out.exists()


def test_unsupported_ops_listed_with_count_and_location(tmp_path, capsys):
    src = _write(tmp_path / "custom.mlir", """
module {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":12:3)
    %1 = stablehlo.custom_call @my_kernel(%0) : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":14:3)
    %2 = stablehlo.sine %1 : tensor<4xf32>
    return %2 : tensor<4xf32>
  }
}
""")
    out = tmp_path / "custom.onnx"
    code, _, err = _convert(capsys, src, "-o", out)
    assert code == 6
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "stablehlo.custom_call @my_kernel x2" in lines[0]
    assert "model.py:12" in lines[0] and "model.py:14" in lines[0]
    assert not out.exists() and os.listdir(tmp_path) == ["custom.mlir"]


def test_unsupported_op_from_jax_names_the_source_line(tmp_path, capsys):
    spec = jax.ShapeDtypeStruct((5,), jnp.complex64)
    exp = _exported(lambda x: jax.lax.reduce_window(x, 1 + 0j, jax.lax.mul, (2,), (1,), "VALID"), [spec])
    src = _write(tmp_path / "window.mlirbc", exp.mlir_module_serialized)
    code, _, err = _convert(capsys, src, "-o", tmp_path / "window.onnx")
    assert code == 6
    line, = err.strip().splitlines()
    assert "stablehlo.reduce_window x1" in line
    assert f"{os.path.basename(__file__)}:" in line


def test_symbolic_dims_become_dim_params(tmp_path, capsys):
    b = jax.export.symbolic_shape("b")[0]
    fn = lambda x: lax.fori_loop(0, 2, lambda i, c: jnp.sort(c, axis=0) * 2.0, x)  # noqa: E731
    exp = _exported(fn, (jax.ShapeDtypeStruct((b, 3), jnp.float32),))
    src = _write(tmp_path / "dyn.mlir", exp.mlir_module())
    out = tmp_path / "dyn.onnx"
    code, _, err = _convert(capsys, src, "-o", out)
    assert code == 0, err
    for n in (1, 4):
        _assert_matches(str(out), fn, RNG.normal(size=(n, 3)).astype(np.float32))


def test_unreadable_module(tmp_path, capsys):
    src = _write(tmp_path / "bad.mlir", "module { this is not mlir }")
    code, _, err = _convert(capsys, src, "-o", tmp_path / "bad.onnx")
    assert code == 8
    assert len(err.strip().splitlines()) == 1 and "not a readable StableHLO module" in err


def _unloadable_model():
    """A model onnx.checker passes and ONNX Runtime cannot load: its CPU Erf has no float64 kernel."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [4])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4])
    table = onnx.numpy_helper.from_array(np.full(256, 0.5), "table")  # external data when large
    graph = helper.make_graph([helper.make_node("Erf", ["x"], ["y"])], "g", [x], [y], initializer=[table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("large", [False, True], ids=["one-file", "external-data"])
def test_a_module_whose_onnx_does_not_load_writes_nothing(tmp_path, capsys, monkeypatch, large):
    from jaxconv.onnx import convert

    monkeypatch.setattr(convert, "stablehlo_file_to_onnx", lambda *a: _unloadable_model())
    if large:  # the weights-beside-the-model path stages both files the same way
        monkeypatch.setattr(convert, "is_large", lambda *a, **k: True)
    src = _write(tmp_path / "model.mlir", _exported().mlir_module())
    out = tmp_path / "model.onnx"
    code, stdout, err = _convert(capsys, src, "-o", out)
    assert code == 8, err
    assert err.count("\n") == 1 and f"ONNX Runtime cannot load {out}" in err, err
    assert "Erf" in err
    assert sorted(os.listdir(tmp_path)) == ["model.mlir"]  # no model, no data, no staging left

    code, stdout, err = _convert(capsys, src, "-o", out, "--no-check")  # asked for: written unloaded
    assert code == 0, err
    assert "loads in ONNX Runtime" not in stdout and out.exists()
    assert (tmp_path / "model.onnx.data").exists() == large


def test_a_module_says_its_onnx_loads(tmp_path, capsys):
    src = _write(tmp_path / "model.mlir", _exported().mlir_module())
    code, stdout, err = _convert(capsys, src, "-o", tmp_path / "model.onnx")
    assert code == 0, err
    assert "loads in ONNX Runtime; no JAX function to check against" in stdout
