"""einsum_order on the products of a weight's gradient, which contract a batch and a sequence: ``xᵀ @ dy``
with ``x`` of ``[b, t, f]``, and a head-split weight's ``[f, h, d]`` gradient, which jax computes as
``[h, d, f]`` and transposes. The operand already in ``[(b t), f]`` order is merged and swapped (ORT's
product reads it transposed, in place), and the result comes out in the weight's layout: no Transpose of
a whole tensor is left. The numbers are jax.jit's within float32 rounding (ORT's product sums the same
terms with another blocking when an operand is read transposed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import einsum_order
from lowering_check import assert_same_floats, convert_and_run, without_rule

_plain = without_rule(einsum_order)
_RNG = np.random.default_rng(0)


def _dense_grad(w, x):
    return jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)))(w, x)


def _heads_grad(w, x):
    """Flax's DenseGeneral to heads: kernel [f, h, d]."""
    return jax.grad(lambda w, x: jnp.sum(jnp.tanh(jnp.einsum("btf,fhd->bthd", x, w))))(w, x)


def _out_grad(w, a):
    """The attention's output projection from heads: kernel [h, d, f]."""
    return jax.grad(lambda w, a: jnp.sum(jnp.tanh(jnp.einsum("bthd,hdf->btf", a, w))))(w, a)


def _whole_transposes(model) -> int:
    """Transposes other than a swap of the last two axes that feeds a MatMul (ORT reads that one in place)."""
    readers = {i: n.op_type for n in model.graph.node for i in n.input}
    count = 0
    for n in model.graph.node:
        if n.op_type != "Transpose":
            continue
        perm = list(next(a.ints for a in n.attribute if a.name == "perm"))
        swap = perm == list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2]
        count += not (swap and readers.get(n.output[0]) == "MatMul")
    return count


@pytest.mark.parametrize("fn, shapes", [
    (_dense_grad, ((64, 128), (8, 32, 64))),
    (_heads_grad, ((64, 4, 16), (8, 32, 64))),
    (_out_grad, ((4, 16, 64), (8, 32, 4, 16))),
])
def test_weight_gradients_leave_no_whole_transpose_and_match_jax(monkeypatch, fn, shapes):
    w, x = (_RNG.standard_normal(s).astype(np.float32) * 0.2 for s in shapes)
    x[0, 0] = -0.0
    ops, got = convert_and_run(fn, w, x)
    plain_ops, plain = _plain(monkeypatch, fn, w, x)
    assert ops["Transpose"] <= plain_ops["Transpose"], (plain_ops, ops)
    import jaxconv

    assert _whole_transposes(jaxconv.to_onnx(fn, w, x, check=False)) == 0
    want = jax.jit(fn)(w, x)
    assert_same_floats(got[0], want, 2e-5, 2e-5)
    assert_same_floats(plain[0], want, 2e-5, 2e-5)


def test_without_the_rule_the_gradients_transpose_whole_tensors(monkeypatch):
    """(What the rule saves: the lowering transposes an operand and the result.)"""
    w, x = (_RNG.standard_normal(s).astype(np.float32) for s in ((64, 4, 16), (8, 32, 64)))
    monkeypatch.setattr(einsum_order, "rewrite", lambda graph: 0)
    import jaxconv

    assert _whole_transposes(jaxconv.to_onnx(_heads_grad, w, x, check=False)) >= 1


@pytest.mark.parametrize("fn, weight, spec, rest", [
    (_dense_grad, (64, 128), "f32[b,s,64]", (64,)),
    (_heads_grad, (64, 4, 16), "f32[b,s,64]", (64,)),
    (_out_grad, (4, 16, 64), "f32[b,s,4,16]", (4, 16)),
])
def test_weight_gradients_of_a_symbolic_batch_and_length(fn, weight, spec, rest):
    """The merged groups take their sizes from the sources' shapes at run time: one model, any batch and length."""
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    w = _RNG.standard_normal(weight).astype(np.float32) * 0.2
    model = jaxconv.to_onnx(fn, f"f32[{','.join(map(str, weight))}]", spec)
    assert _whole_transposes(model) == 0
    runner = OnnxRunner(model.SerializeToString())
    for b, s in ((1, 5), (3, 32), (8, 1)):
        x = _RNG.standard_normal((b, s, *rest)).astype(np.float32)
        (got,) = runner.run([w, x])
        assert_same_floats(got, jax.jit(fn)(w, x), 2e-5, 2e-5)
