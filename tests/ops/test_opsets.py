"""A model carries the opset asked for and the IR version that came with it (narrow floats at the oldest
opsets are rows in conformance/cases/op_half_precision.py)."""

import jax.numpy as jnp
import numpy as np
import pytest

from lowering_check import assert_onnx_matches_jax


@pytest.mark.parametrize("opset", [18, 28])
def test_mlp_at_both_ends_of_the_opset_range(opset):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 3), np.float32)
    model = assert_onnx_matches_jax(lambda x, w: jnp.tanh(x @ w).max(axis=1), x, w, opset=opset)
    assert model.opset_import[0].version == opset


@pytest.mark.parametrize("opset,ir_version", [(18, 8), (21, 10), (23, 11), (24, 12), (25, 13), (26, 13), (28, 14)])
def test_ir_version_is_the_one_that_came_with_the_opset(opset, ir_version):
    model = assert_onnx_matches_jax(lambda x: jnp.tanh(x) * 2, np.linspace(-1, 1, 6, dtype=np.float32), opset=opset)
    assert model.ir_version == ir_version  # onnx's release table (onnx.helper.VERSION_TABLE), which ORT loads


def _sorted_lookup(a, v):
    """jnp.searchsorted compares floats in total order (NaN placed by sign), which reads their bits: opset 26."""
    return jnp.searchsorted(jnp.sort(a), v)


def test_the_default_opset_rises_to_what_a_construct_needs():
    import jax
    import onnxruntime as ort

    import jaxconv

    rng = np.random.default_rng(0)
    a, v = rng.standard_normal(10).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    from jaxconv.errors import JaxconvWarning

    with pytest.warns(JaxconvWarning, match=r"built for ONNX opset 26 rather than the default 21: .*TOTALORDER"):
        model = jaxconv.to_onnx(_sorted_lookup, a, v)  # the default check runs it in ONNX Runtime
    assert model.opset_import[0].version == 26
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "v": v})
    np.testing.assert_array_equal(got[0], np.asarray(jax.jit(_sorted_lookup)(a, v)))


def test_a_chosen_opset_is_kept_and_the_error_names_the_one_needed(monkeypatch):
    import jaxconv
    from jaxconv.errors import UnsupportedError

    a = np.zeros(10, np.float32)
    with pytest.raises(UnsupportedError, match=r"TOTALORDER.*needs ONNX opset >= 26.*use --opset 26"):
        jaxconv.to_onnx(_sorted_lookup, a, a[:4], opset=21)
    monkeypatch.setenv("JAXCONV_OPSET", "21")
    with pytest.raises(UnsupportedError, match=r"needs ONNX opset >= 26"):
        jaxconv.to_onnx(_sorted_lookup, a, a[:4])


def test_the_cli_says_which_opset_it_built(tmp_path, capsys):
    from cli_support import run_cli

    src = tmp_path / "lookup.py"
    src.write_text("import jax.numpy as jnp\n\n\ndef f(a, v):\n    return jnp.searchsorted(jnp.sort(a), v)\n")
    out = tmp_path / "m.onnx"
    code, stdout, err = run_cli(["to-onnx", f"{src}:f", "--specs", "f32[10]", "f32[4]", "-o", str(out)], capsys)
    assert code == 0 and out.exists(), err
    assert "(opset 26," in stdout
    assert "jaxconv: warning: built for ONNX opset 26 rather than the default 21" in err


def test_the_cli_leaves_a_library_warning_as_python_shows_it(tmp_path, capsys):
    from cli_support import run_cli

    src = tmp_path / "noisy.py"
    src.write_text("import warnings\n\nimport jax.numpy as jnp\n\n\ndef f(x):\n"
                   "    warnings.warn('a library speaking', UserWarning)\n"
                   "    return jnp.searchsorted(jnp.sort(x), x)\n")
    code, _, err = run_cli(["to-onnx", f"{src}:f", "--specs", "f32[6]", "-o", str(tmp_path / "m.onnx")], capsys)
    assert code == 0, err
    assert "jaxconv: warning: built for ONNX opset 26" in err
    assert "jaxconv: warning: a library speaking" not in err
