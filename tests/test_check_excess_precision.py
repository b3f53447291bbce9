"""The check on bfloat16 programs, whose arithmetic jax.jit computes in float32 without rounding between ops.

XLA on the CPU computes a bfloat16 op in float32 and hands a convert to float32 that value before its
rounding (excess precision), so ``jnp.exp(x.astype(bfloat16)).astype(float32)`` differs from the
program, and from JAX run op by op, by bfloat16's rounding. These programs failed the default check on
random inputs ("written but is WRONG") while the ONNX rounded as the program says; the check then made an
element ``ok (op by op)`` when it had JAX's op-by-op value. The ONNX now computes what jax.jit computes
(``onnx/xla_bfloat16.py``) and passes as ``ok``; the op-by-op rule stays for what it does not follow, and
anything else stays a mismatch. References are JAX's own runs, never the code under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from judging_support import judge_one_set

import jaxconv
from jaxconv.check_context import check_options
from jaxconv.compare import MISMATCH
from jaxconv.excess_precision import VERDICT, as_excess_precision, narrow_arithmetic

BF16 = jnp.bfloat16
_rng = np.random.default_rng(3)
W = _rng.standard_normal((8, 5)).astype(np.float32)


def exp_bf16(x):
    return jnp.exp(x.astype(BF16)).astype(jnp.float32)


def dense_bf16(x):
    """A bfloat16 dense layer (Flax's ``dtype=jnp.bfloat16`` with float32 params) cast back to float32."""
    return jnp.tanh(x.astype(BF16) @ W.astype(BF16) + 1.0).astype(jnp.float32)


def softmax_bf16(x):
    return jax.nn.softmax(x.astype(BF16), axis=-1).astype(jnp.float32)


def dot_bf16(x, w):
    return (x.astype(BF16) @ w.astype(BF16)).astype(jnp.float32)


CASES = [(exp_bf16, [(4, 8)]), (dense_bf16, [(4, 8)]), (softmax_bf16, [(4, 8)]), (dot_bf16, [(4, 8), (8, 3)])]


def _specs(shapes):
    return [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]


@pytest.mark.parametrize("fn, shapes", CASES, ids=[c[0].__name__ for c in CASES])
def test_bf16_program_passes_the_default_and_strict_check(fn, shapes):
    args = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes]
    jit = np.asarray(jax.jit(fn)(*args))
    with jax.disable_jit():
        eager = np.asarray(fn(*map(jnp.asarray, args)))
    from jaxconv.onnx.xla_bfloat16 import dots_reach_converts_unrounded

    if fn is dot_bf16 and not dots_reach_converts_unrounded():
        np.testing.assert_array_equal(jit, eager)  # this XLA (jax 0.11's) rounds a dot as the program says
    else:  # the premise: jax.jit is not the program's rounding, far beyond float32's tolerance
        assert np.max(np.abs(jit - eager) / np.abs(eager)) > 1e-3
    reports: list = []
    with check_options(strict=True):
        jaxconv.to_onnx(fn, *_specs(shapes), report_to=reports)
    random_rows = [row for report in reports for row in report.rows if row.inputs == "random"]
    assert random_rows and all(row.ok for row in random_rows)
    # the ONNX now takes the float32 value a convert reads in jax.jit (onnx/xla_bfloat16.py): no excuse needed
    assert all(row.verdict == "ok" for row in random_rows)


def test_an_element_off_the_op_by_op_value_stays_a_mismatch(tmp_path):
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    with jax.disable_jit():
        eager = np.asarray(exp_bf16(jnp.asarray(x)))
    wrong = eager.copy()
    wrong[2, 3] *= 1 + 2.0 ** -7  # one bfloat16 step off the program's value
    (row,), _, _ = judge_one_set(exp_bf16, [x], "random", tmp_path, actual=[wrong])
    assert row.verdict == "mismatch" and not row.ok
    (row,), _, _ = judge_one_set(exp_bf16, [x], "random", tmp_path, actual=[eager])
    assert row.verdict == VERDICT and row.ok


def test_float32_program_gets_no_such_excuse():
    x = np.random.default_rng(2).standard_normal(6).astype(np.float32)
    fn = lambda v: jnp.exp(v) * 3.0  # noqa: E731
    expected = np.asarray(jax.jit(fn)(x))
    actual = (expected * (1 + 1e-3)).astype(np.float32)
    from jaxconv.compare import judge
    row, cls = judge("output_0", expected, actual, inputs="random")
    assert row.verdict == "mismatch"
    spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    # even an op-by-op run that agreed with the artifact would not excuse a float32 program
    (out,) = as_excess_precision([row], [cls], fn, spec, [x], [actual], lambda: [actual])
    assert out.verdict == "mismatch" and (cls == MISMATCH).any()


def test_narrow_arithmetic_reads_the_program():
    spec = [jax.ShapeDtypeStruct((4, 8), jnp.float32)]
    x = [np.zeros((4, 8), np.float32)]
    assert narrow_arithmetic(exp_bf16, spec, x) == ["bfloat16"]
    assert narrow_arithmetic(lambda v: jnp.exp(v.astype(jnp.float16)).astype(jnp.float32), spec, x) == ["float16"]
    assert narrow_arithmetic(lambda v: jnp.exp(v), spec, x) == []
    # a bare round trip keeps its rounding in jax.jit: nothing to excuse
    assert narrow_arithmetic(lambda v: v.astype(BF16).astype(jnp.float32), spec, x) == []

