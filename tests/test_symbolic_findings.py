"""Symbolic sizes in real models (zoo2/h1): the bound a position table needs, strict constraints, the
check's sizes under constraints it cannot read as bounds, a wrapped trace error, folding's numpy warnings.

- A Flax linen position table of 128 rows sliced to ``s`` and added to ``f32[2,s,128]`` holds
  ``min(128, s)`` where 128 is also the feature size: the bound is read from the axis, ``s <= 128``.
- ``s > 64``, the constraint a symbolic comparison's hint names, is a constraint jaxconv takes
  (as ``s >= 65``), and the hint's suggestion converts.
- ``floordiv(s, 8) >= 1``: the check runs on sizes that meet it (s=2 made a correct model WRONG).
- Keras wraps a layer's error after the line "Exception encountered when calling X.call()."; the
  TraceError keeps the real cause on its one line.
- Folding a masked log of 0 warns nothing, in a lowering (``LoweringContext.fold``) or in the clean-up's
  constant folding (T5's relative-position buckets).
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.errors import JaxconvWarning, SpecError, TraceError, UsageError
from jaxconv.program import trace
from keras_support import jax_keras

POS = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)


def _run(model, **feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def with_learned_positions(x):
    """Flax linen: a learned (max_len=128, features=128) position table sliced to the sequence."""
    return x + jnp.asarray(POS)[: x.shape[1]]


def test_a_position_table_as_wide_as_the_features_assumes_its_bound():
    with pytest.warns(JaxconvWarning, match=r'assumed s <= 128: .*min\(128, s\).*constraints=\["s <= 128"\]'):
        model = jaxconv.to_onnx(with_learned_positions, "f32[2,s,128]")
    assert model.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "s"
    rng = np.random.default_rng(1)
    for s in (1, 7, 64, 128):
        x = rng.standard_normal((2, s, 128)).astype(np.float32)
        (got,) = _run(model, x=x)
        np.testing.assert_allclose(got, np.asarray(jax.jit(with_learned_positions)(x)), rtol=1e-6, atol=1e-6)
    with pytest.raises((TypeError, ValueError)):  # the premise: beyond the table JAX fails too
        jax.jit(with_learned_positions)(np.zeros((2, 129, 128), np.float32))


def columns_up_to_the_rows(x):
    """``x[:, :s]`` against ``x`` itself: min(128, s) stands where 128 does, so it must be 128 (s >= 128)."""
    return x[:, : x.shape[0]] + x


def test_a_min_on_the_axis_of_the_number_assumes_the_other_way():
    with pytest.warns(JaxconvWarning, match=r"assumed s >= 128: .*min\(128, s\), which is 128 only there"):
        model = jaxconv.to_onnx(columns_up_to_the_rows, "f32[s,128]")
    rng = np.random.default_rng(2)
    for s in (128, 130):
        x = rng.standard_normal((s, 128)).astype(np.float32)
        (got,) = _run(model, x=x)
        np.testing.assert_array_equal(got, np.asarray(jax.jit(columns_up_to_the_rows)(x)))
    with pytest.raises((TypeError, ValueError)):  # the premise: below 128 JAX fails
        jax.jit(columns_up_to_the_rows)(np.zeros((5, 128), np.float32))


def test_a_min_facing_both_the_size_and_the_number_assumes_nothing():
    from jaxconv.symbolic_bounds import implied

    mixed = ValueError("Incompatible shapes for broadcasting: shapes=[(2, s, 128), (min(128, s), 128), (128, 128)]")
    assert implied(mixed) is None
    assert implied(ValueError("Incompatible shapes for broadcasting: shapes=[(2, 1, s), (min(128, s), 128)]")) is None
    aligned = implied(ValueError("add got incompatible shapes for broadcasting: (2, s, 128), (1, min(128, s), 128)."))
    assert aligned is not None and aligned.constraint == "s <= 128"
    columns = implied(ValueError("Incompatible shapes for broadcasting: shapes=[(2, s, 128), (1, min(128, s))]"))
    assert columns is not None and columns.constraint == "s >= 128"


def more_than_64(x):
    return x * 2 if x.shape[1] > 64 else x


def some_blocks(x):
    return x * 2 if x.shape[1] // 8 > 0 else x


def _suggested(fn):
    with pytest.raises(TraceError) as e:
        jaxconv.to_onnx(fn, "f32[2,s]")
    found = re.search(r'a --constraint that decides it, e\.g\. "([^"]+)"', str(e.value))
    assert found, str(e.value)
    return found.group(1)


@pytest.mark.parametrize("fn", [more_than_64, some_blocks], ids=["s>64", "floordiv"])
def test_the_hint_names_a_constraint_that_converts(fn):
    suggested = _suggested(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", JaxconvWarning)  # the check passes, nothing assumed
        model = jaxconv.to_onnx(fn, "f32[2,s]", constraints=[suggested])
    x = np.random.default_rng(3).standard_normal((2, 70)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x=x)[0], np.asarray(jax.jit(fn)(x)))


def test_an_unequal_comparison_names_a_constraint_that_parses():
    from jaxconv.symbolic_bounds import hint

    said = hint("Symbolic dimension comparison 's' != '64' is inconclusive.")
    assert 'e.g. "s >= 65"' in said, said


@pytest.mark.parametrize("fn, constraint, s", [(more_than_64, "s > 64", 65), (more_than_64, "64 < s", 65),
                                               (some_blocks, "floordiv(s, 8) > 0", 8),
                                               (lambda x: x[:, :3] if x.shape[1] < 9 else x, "s < 9", 8)])
def test_strict_constraints_are_accepted(fn, constraint, s):
    program = trace(fn, ["f32[2,s]"], constraints=[constraint])
    assert all(">" not in c.replace(">=", "") and "<" not in c.replace("<=", "") for c in program.constraints)
    model = jaxconv.to_onnx(fn, "f32[2,s]", constraints=[constraint])
    x = np.random.default_rng(4).standard_normal((2, s)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x=x)[0], np.asarray(jax.jit(fn)(x)))


def test_a_strict_cli_constraint_is_accepted(tmp_path, capsys):
    from cli_support import run_cli

    src = tmp_path / "model.py"
    src.write_text("def f(x):\n    return x * 2 if x.shape[1] > 64 else x\n")
    out = tmp_path / "m.onnx"
    code, _, err = run_cli(["to-onnx", f"{src}:f", "--specs", "f32[2,s]", "--constraint", "s > 64", "-o", str(out)],
                           capsys)
    assert code == 0 and out.exists(), err


@pytest.mark.parametrize("constraint", ["s != 3", "s > 3 > 2", "s >> 3", "s", "s >"])
def test_a_constraint_without_one_comparison_is_one_line(constraint):
    with pytest.raises(SpecError) as e:
        jaxconv.to_onnx(lambda x: x, "f32[s]", constraints=[constraint])
    text = str(e.value)
    assert "\n" not in text and f"bad --constraint {constraint!r}" in text
    assert "'==', '>=', '<=', '>' or '<'" in text


def test_the_check_keeps_to_a_constraint_it_cannot_read_as_a_bound():
    """floordiv(s, 8) >= 1 holds from s = 8 on; at s = 2 jax.jit takes the other branch."""
    from jaxconv.check_inputs import DEFAULT_SIZES, size_sets

    constraints = ["floordiv(s, 8) >= 1"]
    model = jaxconv.to_onnx(some_blocks, "f32[2,s]", constraints=constraints)  # was: MismatchError (WRONG)
    x = np.random.default_rng(5).standard_normal((2, 12)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x=x)[0], np.asarray(jax.jit(some_blocks)(x)))
    program = trace(some_blocks, ["f32[2,s]"], constraints=constraints)
    sizes = size_sets(program.signature, DEFAULT_SIZES, program.constraints)
    assert len(sizes) >= 2 and all(s["s"] // 8 >= 1 for s in sizes), sizes
    assert len({s["s"] for s in sizes}) == len(sizes)


def test_the_check_keeps_to_constraints_between_two_sizes():
    from jaxconv.check_inputs import DEFAULT_SIZES, size_sets

    def f(x, y):
        return x[:, : y.shape[1]] * 2 if x.shape[1] > y.shape[1] else x

    program = trace(f, ["f32[2,s]", "f32[2,t]"], constraints=["s >= t + 1"])
    sizes = size_sets(program.signature, DEFAULT_SIZES, program.constraints)
    assert sizes and all(s["s"] >= s["t"] + 1 for s in sizes), sizes
    jaxconv.to_onnx(f, "f32[2,s]", "f32[2,t]", constraints=["s >= t + 1"])


def test_no_size_meeting_the_constraints_is_said_not_checked():
    constraints = ["floordiv(s, 5000) >= 1"]
    with pytest.raises(UsageError) as e:
        jaxconv.to_onnx(some_blocks, "f32[2,s]", constraints=constraints)
    text = str(e.value)
    assert "\n" not in text and "'floordiv(s, 5000) >= 1'" in text and "s = 2" in text, text
    from jaxconv.verify import check_options

    with check_options(sizes=(5000,)):  # sizes that meet it: checked there
        jaxconv.to_onnx(some_blocks, "f32[2,s]", constraints=constraints)
    jaxconv.to_onnx(some_blocks, "f32[2,s]", constraints=constraints, check=False)


def test_a_wrapped_first_line_keeps_the_real_cause():
    from jaxconv.program import _trace_message

    class Wrapped(ValueError):
        pass

    e = Wrapped("Exception encountered when calling RelPos.call().\n\n\x1b[1mIn arange with non-constant arguments "
                "all of start, stop, and step must be either dimension expressions or integers: start=s, stop=- s, "
                "step=-1.0\x1b[0m\n\nArguments received by RelPos.call():\n  • x=jnp.ndarray(shape=(2, s))")
    text = _trace_message("f", e, None)
    assert "\n" not in text and "\x1b" not in text
    assert text.startswith("tracing f failed: Wrapped: Exception encountered when calling RelPos.call(): In arange "
                           "with non-constant arguments"), text
    assert "Arguments received" not in text
    plain = _trace_message("f", ValueError("Incompatible shapes for broadcasting\nsecond line of detail"), None)
    assert plain == "tracing f failed: ValueError: Incompatible shapes for broadcasting"


def test_a_keras_layer_error_keeps_the_real_cause():
    keras = jax_keras()

    class RelPos(keras.layers.Layer):  # like keras-hub's XLNet ContentAndQueryEmbedding
        def call(self, x):
            n = x.shape[1]
            return x[:, :, None] * keras.ops.arange(n, -n, -1.0, dtype="float32")[None, None, :]

    layer = RelPos()
    with pytest.raises(TraceError) as e:
        jaxconv.to_onnx(lambda x: layer(x), "f32[2,s]")
    text = str(e.value)
    assert "\n" not in text
    assert "Exception encountered when calling RelPos.call(): In arange with non-constant arguments" in text, text


def relative_buckets(x):
    """T5: the log of |i - j|, which is 0 on the diagonal (masked by the where)."""
    rel = jnp.abs(jnp.arange(8)[:, None] - jnp.arange(8)[None, :]).astype(jnp.float32)
    return x + jnp.where(rel < 2, rel, jnp.log(rel))


TABLE = np.random.default_rng(7).standard_normal((16, 4)).astype(np.float32)
DISTANCES = np.array([0.0, 4.0], np.float32)


def row_at_a_log_bucket(x):
    """Rows of a table at a bucket computed from a masked log of 0: the lowering folds the start itself."""
    d = jnp.asarray(DISTANCES)
    bucket = jnp.where(d > 0, jnp.log(d) * 4, 0.0).astype(jnp.int32).sum()
    return x + jax.lax.dynamic_slice(jnp.asarray(TABLE), (bucket, 0), (2, 4))


def _converted_without_runtime_warnings(fn, spec):
    """``fn``'s ONNX (checked), asserting that converting it raised no RuntimeWarning."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = jaxconv.to_onnx(fn, spec)
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in seen]
    return model


def test_a_lowering_folding_a_masked_log_of_zero_warns_nothing():
    model = _converted_without_runtime_warnings(row_at_a_log_bucket, "f32[2,4]")
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(model, x=x)[0], np.asarray(jax.jit(row_at_a_log_bucket)(x)))


def test_folding_a_masked_log_of_zero_warns_nothing():
    model = _converted_without_runtime_warnings(relative_buckets, "f32[8,8]")
    x = np.random.default_rng(6).standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(model, x=x)[0], np.asarray(jax.jit(relative_buckets)(x)), rtol=1e-6, atol=1e-6)
