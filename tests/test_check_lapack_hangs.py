"""The check where jax.jit never returns: LAPACK's gesdd with vectors on a matrix holding an infinity and no NaN.

jax.jit's ``jnp.linalg.pinv`` (svd with vectors) of a 3x3 float32 matrix with one infinity runs on without
end, while a NaN gives all-NaN outputs at once. A program that clears NaN but keeps infinities hands such a
matrix to svd on the check's edge values; the check must end there. Each check runs in a subprocess with a
time limit, so a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv import lapack_hangs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _check_in_subprocess(body: str, timeout: int = 240) -> str:
    script = textwrap.dedent("""
        import warnings
        import jax, jax.numpy as jnp
        from jax import lax
        import jaxconv
        reports = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jaxconv.to_onnx(FN, "f32[3,3]", report_to=reports)
        for report in reports:
            print("NOTES", report.notes)
            print("LABELS", sorted({row.inputs for row in report.rows}))
            print("VERDICTS", sorted({row.verdict for row in report.rows}))
    """).replace("FN", body)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_premise_jax_jit_svd_of_a_nan_matrix_returns_nan():
    a = np.array([[np.nan, 1, 2], [3, 4, 5], [6, 7, 8]], np.float32)
    assert np.isnan(np.asarray(jax.jit(jnp.linalg.pinv)(a))).all()


def test_an_svd_fed_infinities_without_nan_on_edge_values_ends_and_passes():
    out = _check_in_subprocess("lambda x: jnp.linalg.pinv(jnp.where(jnp.isnan(x), 0.0, x))")
    assert lapack_hangs.NOTE in out
    assert "'edge'" in out  # the edge sets ran, against the guarded reference
    assert "mismatch" not in out.split("VERDICTS", 1)[1]


def test_an_svd_in_a_branch_skips_edge_values_with_the_reason():
    out = _check_in_subprocess("lambda x: lax.cond(x[0, 0] > 0, jnp.linalg.pinv, lambda a: a, x)")
    assert lapack_hangs.SKIP_NOTE in out
    assert "'edge'" not in out.split("LABELS", 1)[1].splitlines()[0]


def test_a_program_without_svd_vectors_of_3x3_or_more_is_not_guarded():
    x = np.ones((3, 3), np.float32)
    assert not lapack_hangs.hanging_ops(lambda a: jnp.linalg.svd(a, compute_uv=False), [x], [x])
    assert lapack_hangs.hanging_ops(jnp.linalg.pinv, [x], [x])
    for small in (np.ones((2, 5), np.float32), np.ones((1, 1), np.float32)):
        assert not lapack_hangs.hanging_ops(jnp.linalg.pinv, [small], [small])


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 2)])
def test_the_premise_small_matrices_with_an_infinity_return(shape):
    """jax.jit's svd with vectors returns on these (no guard needed), junk vectors or LAPACK's own."""
    a = np.ones(shape, np.float32)
    a[0, 0] = np.inf
    u, s, vt = jax.jit(lambda a: jnp.linalg.svd(a, full_matrices=False))(a)
    assert np.isnan(np.asarray(s)).all()


def test_the_guarded_program_gives_jax_jit_outputs_on_finite_and_nan_matrices():
    spec = jax.ShapeDtypeStruct((2, 3, 3), jnp.float32)
    a = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)
    a[1, 0, 0] = np.nan
    guarded = lapack_hangs.guarded_program(jnp.linalg.pinv, [spec], [a])
    got = np.asarray(jax.jit(guarded)(a)[0])
    np.testing.assert_array_equal(got, np.asarray(jax.jit(jnp.linalg.pinv)(a)))


@pytest.mark.parametrize("where", [(0, 0), (2, 1)])
def test_the_guarded_program_takes_an_infinite_matrix_as_nan(where):
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    a[where] = np.inf
    guarded = lapack_hangs.guarded_program(jnp.linalg.pinv, [a], [a])
    assert np.isnan(np.asarray(jax.jit(guarded)(a)[0])).all()
