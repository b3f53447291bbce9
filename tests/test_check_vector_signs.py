"""The check on programs computing eigenvectors or singular vectors, whose signs are LAPACK's choice.

jax.jit's ``eigh`` and ``svd`` return each vector with the sign LAPACK's arithmetic gives it; the ONNX
lowering writes a canonical sign instead (each eigenvector, each singular pair by its column of U,
flipped so that its entry of largest magnitude, the first on ties, is positive). The artifacts here are
built without a converter: jax.jit's own vectors with their signs made canonical by the numpy code
below, or values put wrong on purpose. Such outputs are ``ok (vector signs)``; a wrong value, a vector
of the other sign than both jax.jit's and the canonical one, a program without such an op, an output
wrong elsewhere, and an op inside a loop stay mismatches.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.judging import judge_set
from jaxconv.signature import Signature, input_infos, output_infos
from jaxconv.vector_signs import VERDICT, canonical_program, vector_ops
from jaxconv.verify import CheckReport


class _Artifact:
    """Stands for an artifact: returns the outputs it was given."""

    def __init__(self, outputs, kind="onnx"):
        self.outputs, self.kind = outputs, kind

    def run(self, flat):
        return self.outputs


def _judge(fn, inputs, actual, kind="onnx", label="random"):
    """(rows, jax.jit's outputs) of one input set judged, the artifact's outputs being ``actual``
    (a function of jax.jit's outputs)."""
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    out = jax.eval_shape(fn, *specs)
    sig = Signature(input_infos(specs, [f"x{i}" for i in range(len(specs))]),
                    output_infos(jax.tree_util.tree_leaves(out), jax.tree_util.tree_structure(out)))
    expected = [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]
    got = [np.asarray(a) for a in actual(expected)]
    rows = judge_set(_Artifact(got, kind), fn, specs, sig, list(inputs), expected, got, None, None, label)
    return rows, expected


def _signs(columns):
    """Per column (axis -2 holds its entries): -1 where its first entry of largest magnitude is negative."""
    idx = np.argmax(np.abs(columns), axis=-2)[..., None, :]
    return np.where(np.take_along_axis(columns, idx, axis=-2) < 0, -1, 1).astype(columns.dtype)


def canonical_columns(v):
    return v * _signs(v)


def canonical_pairs(u, vt):
    k = min(u.shape[-2], vt.shape[-1])
    s = _signs(u[..., :k])
    return u * s, vt * np.swapaxes(s, -1, -2)


def _matrix(seed, shape, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _flipped_columns(v):
    """How many of jax.jit's vectors are not of the canonical sign."""
    return int((_signs(v) < 0).sum())


def svd_reduced(a):
    return jnp.linalg.svd(a, full_matrices=False)


def first_eigenvector_scaled(a):
    return jnp.linalg.eigh(a)[1][:, 0] * 3 + 1


@pytest.mark.parametrize("shape", [(8, 8), (2, 5, 5)])
def test_eigh_with_canonical_signs_is_ok(shape):
    x = _matrix(0, shape)
    rows, (w, v) = _judge(jnp.linalg.eigh, [x], lambda e: [e[0], canonical_columns(e[1])])
    assert _flipped_columns(v) > 0  # the premise: jax.jit's signs are not all canonical
    assert rows[0].verdict == "ok"
    assert rows[1].verdict == VERDICT and rows[1].ok
    assert "unique only up to sign (eigh)" in rows[1].note
    table = CheckReport("m.onnx", "onnx", rows).table()
    assert "ok (vector signs)" in table and "MISMATCH" not in table


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_reduced_svd_with_canonical_signs_is_ok(shape):
    x = _matrix(1, shape)

    def canonical(e):
        u, vt = canonical_pairs(e[0], e[2])
        return [u, e[1], vt]

    rows, (u, _, _) = _judge(svd_reduced, [x], canonical)
    assert _flipped_columns(u) > 0
    assert [r.verdict for r in rows] == [VERDICT, "ok", VERDICT]
    assert "(svd)" in rows[0].note


def test_vectors_used_downstream_are_judged_with_canonical_signs():
    x = _matrix(3, (6, 6))
    v = np.asarray(jax.jit(jnp.linalg.eigh)(x)[1])
    assert _signs(v)[0, 0] < 0  # jax.jit's first eigenvector is not of the canonical sign
    want = canonical_columns(v)[:, 0] * np.float32(3) + np.float32(1)
    (row,), (jit_out,) = _judge(first_eigenvector_scaled, [x], lambda e: [want])
    assert np.abs(jit_out - want).max() > 0.1
    assert row.verdict == VERDICT and row.ok


def _with_jvp(f):
    g = jax.custom_jvp(f)
    g.defjvp(lambda primals, tangents: (g(*primals), tangents[0]))
    return g


def _with_vjp(f):
    g = jax.custom_vjp(f)
    g.defvjp(lambda a: (g(a), None), lambda _, t: (t,))
    return g


@pytest.mark.parametrize("wrap", [jax.jit, jax.checkpoint, _with_jvp, _with_vjp],
                         ids=["jit", "checkpoint", "custom_jvp", "custom_vjp"])
def test_calls_are_followed_into(wrap):
    x = _matrix(3, (6, 6))
    inner = wrap(lambda a: jnp.linalg.eigh(a)[1])
    fn = lambda a: inner(a) * 2.0  # noqa: E731
    rows, _ = _judge(fn, [x], lambda e: [canonical_columns(e[0] / 2) * 2])
    assert rows[0].verdict == VERDICT


def test_eigh_in_float64():
    with jax.enable_x64(True):
        x = _matrix(0, (8, 8), np.float64)
        rows, (w, v) = _judge(jnp.linalg.eigh, [x], lambda e: [e[0], canonical_columns(e[1])])
    assert _flipped_columns(v) > 0
    assert rows[1].verdict == VERDICT


def test_a_wrong_value_stays_a_mismatch_though_float64_has_other_signs():
    """float32 and float64 LAPACK give some vectors opposite signs here: judged against the plain float64
    result, every element of the output was "within float64 accuracy", a wrong one included."""
    x = _matrix(5, (8, 8))
    v32 = np.asarray(jax.jit(jnp.linalg.eigh)(x)[1])
    with jax.enable_x64(True):
        v64 = np.asarray(jax.jit(jnp.linalg.eigh)(x.astype(np.float64))[1])
    assert (np.sum(v32 * v64, axis=0) < 0).any()  # the premise: float64's signs differ

    def wrong(e):
        v = canonical_columns(e[1])
        v[2, 1] += 0.05
        return [e[0], v]

    rows, _ = _judge(jnp.linalg.eigh, [x], wrong)
    assert rows[1].verdict == "mismatch" and not rows[1].ok
    assert "1 of 64 elements differ" in rows[1].note and "at [2, 1]" in rows[1].note
    rows, _ = _judge(jnp.linalg.eigh, [x], lambda e: [e[0], canonical_columns(e[1])])
    assert rows[1].verdict == VERDICT


def test_a_vector_of_the_other_sign_than_both_stays_a_mismatch():
    x = _matrix(0, (8, 8))
    v = np.asarray(jax.jit(jnp.linalg.eigh)(x)[1])
    column = int(np.flatnonzero(_signs(v)[0] > 0)[0])  # jax.jit's sign is the canonical one there

    def flipped(e):
        out = canonical_columns(e[1])
        out[:, column] *= -1
        return [e[0], out]

    rows, _ = _judge(jnp.linalg.eigh, [x], flipped)
    assert rows[1].verdict == "mismatch"
    assert "differ from jax.jit with LAPACK's and with canonical vector signs (eigh)" in rows[1].note


def test_a_program_without_vectors_gets_no_such_excuse():
    x = _matrix(0, (5, 5))
    fn = lambda a: a @ a.T  # noqa: E731

    def flipped(e):
        out = e[0].copy()
        out[:, 1] *= -1
        return [out]

    rows, _ = _judge(fn, [x], flipped)
    assert rows[0].verdict == "mismatch"
    rows, _ = _judge(lambda a: jnp.linalg.svd(a, compute_uv=False), [x], lambda e: [e[0] * 1.01])
    assert rows[0].verdict == "mismatch"


def test_an_output_wrong_elsewhere_stays_a_mismatch():
    x = _matrix(0, (8, 8))
    rows, _ = _judge(jnp.linalg.eigh, [x], lambda e: [e[0] + 0.01, canonical_columns(e[1])])
    assert rows[0].verdict == "mismatch" and rows[1].verdict == VERDICT
    fn = lambda a: (jnp.linalg.eigh(a)[1], jnp.tanh(a))  # noqa: E731
    rows, _ = _judge(fn, [x], lambda e: [canonical_columns(e[0]), e[1] * 1.01])
    assert rows[0].verdict == VERDICT and rows[1].verdict == "mismatch"


def test_an_eigh_inside_a_loop_gets_no_such_reference():
    x = _matrix(0, (8, 8))

    def looped(a):
        return jax.lax.scan(lambda c, m: (c, jnp.linalg.eigh(m)[1]), 0.0, a[None])[1][0]

    spec = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    assert vector_ops(looped, spec, [x]) == ["eigh"] and canonical_program(looped, spec, [x]) is None
    rows, _ = _judge(looped, [x], lambda e: [canonical_columns(e[0])])
    assert rows[0].verdict == "mismatch"


def test_a_target_on_xla_kernels_keeps_its_rows():
    x = _matrix(0, (8, 8))
    rows, _ = _judge(jnp.linalg.eigh, [x], lambda e: [e[0], canonical_columns(e[1])], kind="saved-model")
    assert rows[1].verdict == "mismatch"


def test_the_program_reads_as_expected():
    """On jax 0.10.2 ``eigh`` and ``svd`` are primitives inside a jit call; svd without vectors has none."""
    spec = [jax.ShapeDtypeStruct((4, 4), np.float32)]
    x = [np.eye(4, dtype=np.float32)]
    assert "eigh[" in str(jax.make_jaxpr(jnp.linalg.eigh)(x[0]))
    assert vector_ops(jnp.linalg.eigh, spec, x) == ["eigh"]
    assert vector_ops(jnp.linalg.eigvalsh, spec, x) == ["eigh"]
    assert vector_ops(svd_reduced, spec, x) == ["svd"]
    assert vector_ops(lambda a: jnp.linalg.svd(a, compute_uv=False), spec, x) == []
    c = [np.eye(4, dtype=np.complex64)]
    assert vector_ops(jnp.linalg.eigh, [jax.ShapeDtypeStruct((4, 4), np.complex64)], c) == []


def test_ties_take_the_first_entry():
    from jaxconv.vector_signs import canonical_eigenvectors, canonical_singular_vectors

    v = jnp.array([[0.5, -0.5, 0.0], [-0.5, 0.5, 0.0], [0.0, 0.0, -1.0]], jnp.float32)
    want = [[0.5, 0.5, 0.0], [-0.5, -0.5, 0.0], [0.0, 0.0, 1.0]]
    np.testing.assert_array_equal(canonical_eigenvectors(v), want)
    u, vt = canonical_singular_vectors(v[:, :2], jnp.array([[1.0, 2.0], [3.0, 4.0]], jnp.float32))
    np.testing.assert_array_equal(u, [[0.5, 0.5], [-0.5, -0.5], [0.0, 0.0]])
    np.testing.assert_array_equal(vt, [[1.0, 2.0], [-3.0, -4.0]])
