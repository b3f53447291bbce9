"""Trace errors from symbolic sizes name the --constraint that settles them.

A model that slices a fixed buffer to the sequence length (a causal mask of 128 positions, as
Hugging Face's Flax GPT-2 and Llama do) gets ``min(128, s)`` in its shapes, which jax.export cannot
broadcast against ``s``; with ``s <= 128`` it can. A Python comparison of a symbolic size is
inconclusive until a constraint decides it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import JaxconvWarning, TraceError

CAUSAL = np.tril(np.ones((128, 128), bool))


def masked_scores(x):
    s = x.shape[1]
    mask = jnp.asarray(CAUSAL)[:s, :s]
    return jnp.where(mask[None], x[:, None, :], 0.0)


def first_ten(x):
    return x[:10] if x.shape[0] >= 10 else x


def test_a_buffer_sliced_to_the_sequence_assumes_its_bound():
    """min(128, s) broadcast against s traces only where s <= 128 (JAX itself fails beyond): the
    conversion assumes it, says so, and the default check runs within it."""
    with pytest.warns(JaxconvWarning, match=r'assumed s <= 128: .*min\(128, s\).*constraints=\["s <= 128"\]'):
        model = jaxconv.to_onnx(masked_scores, "f32[b,s]")
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "s"
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(masked_scores)(x)))
    with pytest.raises((TypeError, ValueError)):  # the premise: beyond the bound JAX fails too
        jax.jit(masked_scores)(np.zeros((1, 130), np.float32))


def test_a_stated_bound_gives_no_warning(recwarn):
    jaxconv.to_onnx(masked_scores, "f32[b,s]", constraints=["s <= 128"])
    assert not [w for w in recwarn if "assumed" in str(w.message)]


def test_a_stated_bound_beyond_the_buffer_stays_an_error(recwarn):
    """With s >= 200 the slice is the whole buffer, [128, 128] against s: no bound to assume."""
    with pytest.raises(TraceError, match="Incompatible shapes for broadcasting"):
        jaxconv.to_onnx(masked_scores, "f32[b,s]", constraints=["s >= 200"])
    assert not [w for w in recwarn if "assumed" in str(w.message)]


def test_an_inconclusive_comparison_names_a_constraint():
    with pytest.raises(TraceError) as e:
        jaxconv.to_onnx(first_ten, "f32[s]")
    assert "is inconclusive" in str(e.value) and 'a --constraint that decides it, e.g. "s >= 10"' in str(e.value)
    model = jaxconv.to_onnx(first_ten, "f32[s]", constraints=["s >= 10"])
    assert len(model.graph.output) == 1


def test_other_trace_errors_get_no_constraint_hint():
    def broken(x):
        return x @ jnp.ones((3, 3))

    with pytest.raises(TraceError) as e:
        jaxconv.to_onnx(broken, "f32[2,4]")
    assert "--constraint" not in str(e.value)


def test_the_cli_warns_of_the_assumed_bound(tmp_path, capsys):
    from cli_support import run_cli

    src = tmp_path / "model.py"
    src.write_text("import jax.numpy as jnp\nimport numpy as np\n\nCAUSAL = np.tril(np.ones((128, 128), bool))\n\n\n"
                   "def f(x):\n    s = x.shape[1]\n    return jnp.where(jnp.asarray(CAUSAL)[:s, :s][None], x[:, None, :], 0.0)\n")
    out = tmp_path / "m.onnx"
    code, _, err = run_cli(["to-onnx", f"{src}:f", "--specs", "f32[b,s]", "-o", str(out)], capsys)
    assert code == 0 and out.exists(), err
    assert 'jaxconv: warning: assumed s <= 128' in err and '--constraint "s <= 128"' in err
    out.unlink()
    code, _, err = run_cli(["to-onnx", f"{src}:f", "--specs", "f32[b,s]", "--constraint", "s <= 128", "-o", str(out)],
                           capsys)
    assert code == 0 and out.exists() and "assumed" not in err, err


TABLE = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)


def with_positions(x):
    """keras-hub's PositionEmbedding: the first s rows of a 64-row table, by lax.dynamic_slice."""
    rows = jax.lax.dynamic_slice(jnp.asarray(TABLE), (0, 0), (x.shape[1], 8))
    return x + rows[None]


def test_a_bound_a_jax_shape_rule_needs_is_assumed():
    with pytest.warns(JaxconvWarning, match=r"assumed s <= 64: JAX's shape rule for dynamic_slice needs it"):
        model = jaxconv.to_onnx(with_positions, "f32[b,s,8]")  # the default check runs within the bound
    x = np.random.default_rng(2).standard_normal((3, 9, 8)).astype(np.float32)
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.asarray(jax.jit(with_positions)(x)))
    with pytest.raises(TypeError, match="slice_sizes must be less than or equal"):  # the premise: beyond it JAX fails
        jax.jit(with_positions)(np.zeros((1, 65, 8), np.float32))


def test_an_inconclusive_comparison_behind_a_library_first_line_is_found():
    from jaxconv.program import _trace_message

    class Wrapped(Exception):
        pass

    e = Wrapped("Exception encountered when calling Layer.call().\n\n\x1b[1mSymbolic dimension comparison 's' >= "
                "'10' is inconclusive.\nThis error arises for comparison operations")
    text = _trace_message("f", e, None)
    assert text.splitlines()[0].startswith("tracing f failed: Wrapped: Exception encountered")
    assert 'e.g. "s >= 10"' in text


def first_three_plus(x, y):
    return x[:, :3] + y


def cumsum_after_three(x):
    return jnp.cumsum(x[:, 3:], axis=1)


def test_a_min_that_must_be_the_number_assumes_the_other_way():
    """x[:, :3] has min(s, 3) columns; added to y's 3 it must be 3: s >= 3 (s <= 3 would be wrong)."""
    y = np.ones((2, 3), np.float32)
    with pytest.warns(JaxconvWarning, match=r"assumed s >= 3: .*min\(s, 3\), which is 3 only there"):
        model = jaxconv.to_onnx(first_three_plus, "f32[b,s]", "f32[b,3]")
    x = np.random.default_rng(3).standard_normal((2, 9)).astype(np.float32)
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(got[0], np.asarray(jax.jit(first_three_plus)(x, y)))


def test_a_min_in_a_shape_rule_comparison_is_not_read_as_a_broadcast(recwarn):
    """cumsum(x[:, 3:]) compares s - min(s, 3) >= 1 in reduce_window's rule: that is assumed (s >= 4),
    never s <= 3, which would make every column vanish."""
    try:
        jaxconv.to_onnx(cumsum_after_three, "f32[b,s]")
    except jaxconv.JaxconvError:
        pass  # the scan over a window of s - min(s, 3) is refused; what matters is what was assumed
    said = [str(w.message) for w in recwarn if "assumed" in str(w.message)]
    assert said and all("s <= 3" not in m for m in said), said
    assert "- min(s, 3) + s >= 1" in said[0]
