"""masked_softmax's readers that zero the masked places again (keras' ``where(mask, p, 0)`` after its softmax):
the product by the mask goes from the fast branch (the readers zero those places anyway), or, where the scores
cannot reach that branch with a NaN, the reader moves into the compared branch. Outputs bit for bit those of the
graph without the fold, on edge rows too, and jax.jit's numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

import jaxconv
from jaxconv.onnx.rewrites import _rezeroing, masked_softmax
from jaxconv.runtimes.onnxrt import OnnxRunner

_T = 16
_CAUSAL = np.tril(np.ones((_T, _T), bool))
_LOWEST = np.finfo(np.float32).min
_RAISED = float(np.exp(np.float64(masked_softmax.FLOOR))) * (1 + 1e-6)  # exp(-64) over a sum of at least 1


def _scores(seed: int) -> np.ndarray:
    s = (np.random.default_rng(seed).standard_normal((2, 3, _T, _T)) * 4).astype(np.float32)
    s[0, 0, 12, :4] = [20.0, -50.0, -60.0, -100.0]  # kept places far below the row's max
    return s


def _edge_rows(s: np.ndarray) -> np.ndarray:
    s = s.copy()
    s[0, 0, 5, 0] = np.nan  # first: ReduceMax returns it
    s[0, 0, 9, 4] = np.nan  # in the middle: ReduceMax skips it, the row's lo stays finite
    s[0, 1, 7, 3] = np.inf
    s[0, 1, 8, :4] = -np.inf
    return s


def _convert(fn, *inputs, fold: bool = True, monkeypatch=None):
    if not fold:
        monkeypatch.setattr(_rezeroing, "fold", lambda *args, **kwargs: None)
    model = jaxconv.to_onnx(fn, *inputs, check=False)
    if not fold:
        monkeypatch.undo()
    return model


def _branch(model, name: str):
    for node in model.graph.node:
        for a in node.attribute:
            if a.name in ("then_branch", "else_branch") and a.g.name == name:
                return a.g
    return None


def _ops(graph) -> list[str]:
    return [n.op_type for n in graph.node]


def _top_readers(model, op: str) -> list[str]:
    """The op types reading an If's output in the top-level graph."""
    outs = {o for n in model.graph.node if n.op_type == "If" for o in n.output}
    return [n.op_type for n in model.graph.node if n.op_type == op and any(i in outs for i in n.input)]


def _same_bits(monkeypatch, fn, *inputs):
    """The folded model, its outputs, and the unfolded model's outputs (asserted bit for bit equal)."""
    model = _convert(fn, *inputs)
    onnx.checker.check_model(model)  # a branch reads only values made before its If
    got = OnnxRunner(model.SerializeToString()).run(list(inputs))
    before = OnnxRunner(_convert(fn, *inputs, fold=False, monkeypatch=monkeypatch).SerializeToString()) \
        .run(list(inputs))
    for a, b in zip(got, before):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    return model, got


_KERAS = {  # keras' attention: the mask's fill before the softmax, the masked places zeroed again after it
    "where_keep": lambda s, keep: jnp.where(keep, jax.nn.softmax(jnp.where(keep, s, -1e9), axis=-1), 0.0),
    "where_drop": lambda s, keep: jnp.where(~keep, 0.0, jax.nn.softmax(jnp.where(keep, s, _LOWEST), axis=-1)),
}


@pytest.mark.parametrize("form", sorted(_KERAS))
def test_a_padding_mask_zeroed_again_drops_the_product_by_the_mask(monkeypatch, form):
    """``causal & padding`` with the padding an input, zeroed again after the Softmax. The mask's fill puts the
    scores behind mask_min's If, whose test (their sum of squares) joins the row test: the fast branch never
    sees a NaN, its product by the mask gives the reader's zeros, and the reader (a Where, ORT's slow kernel)
    moves into the compared branch. A NaN in the middle of a row (which the row test alone lets through) takes
    that branch, which zeroes its masked places, as jax.jit does."""
    def fn(s, padding):
        return _KERAS[form](s, _CAUSAL & padding[:, None, None, :])

    padding = np.ones((2, _T), bool)
    padding[0, -3:] = False
    for s in (_scores(1), _edge_rows(_scores(2))):
        for first_padded in (False, True):
            padding[1, 0] = not first_padded  # then the first query of the second example keeps no key
            model, (got,) = _same_bits(monkeypatch, fn, s, padding)
            fast, compared = _branch(model, "masked_softmax_by_mask"), _branch(model, "masked_softmax_compared")
            assert fast is not None and _ops(fast) == ["Mul"], _ops(fast) if fast else None
            assert _ops(compared)[-1] == "Where" and _top_readers(model, "Where") == []
            tests = [n for n in model.graph.node if n.op_type == "And" and n.output[0].endswith("_finite_test")]
            assert len(tests) == 1  # the row test and mask_min's
            want = np.asarray(jax.jit(fn)(s, padding))
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want)
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=_RAISED)
            kept = np.broadcast_to(_CAUSAL & padding[:, None, None, :], s.shape)
            assert (got[~kept] == 0).all() and not np.signbit(got[~kept]).any()


def test_an_additive_mask_under_its_own_test_moves_the_reader_into_the_compared_branch(monkeypatch):
    """Hugging Face's additive bias of a padding input, then keras' zeroing: the If tests the scores' sum of
    squares, which a NaN fails, so on the fast branch the product's zeros are the reader's and the reader moves
    into the compared branch; NaN, infinite and unattended rows take that branch, bit for bit as before."""
    def fn(s, padding):
        keep = _CAUSAL & padding[:, None, None, :]
        return jnp.where(keep, jax.nn.softmax(s + jnp.where(keep, 0.0, _LOWEST), axis=-1), 0.0)

    padding = np.ones((2, _T), bool)
    padding[0, -3:] = False
    for s in (_scores(3), _edge_rows(_scores(4))):
        for first_padded in (False, True):
            padding[1, 0] = not first_padded
            model, (got,) = _same_bits(monkeypatch, fn, s, padding)
            compared = _branch(model, "masked_softmax_compared")
            assert compared is not None and _ops(compared)[-1] == "Where" and _top_readers(model, "Where") == []
            want = np.asarray(jax.jit(fn)(s, padding))
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            ok = ~np.isnan(want)
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=_RAISED)


def test_a_constant_window_zeroed_again_drops_the_product(monkeypatch):
    """A sliding window (Gemma 2's local layers, keras-hub Mixtral's) as constants: compared place by place; the
    zeroing Where, a constant window's, moves into the compared branch behind mask_min's test as well."""
    window = _CAUSAL & ~np.tril(np.ones((_T, _T), bool), -4)

    def fn(s):
        return jnp.where(window, jax.nn.softmax(jnp.where(window, s, -1e9), axis=-1), 0.0)

    for s in (_scores(5), _edge_rows(_scores(6))):
        model, (got,) = _same_bits(monkeypatch, fn, s)
        assert _ops(_branch(model, "masked_softmax_by_mask")) == ["Mul"]
        assert _ops(_branch(model, "masked_softmax_compared"))[-1] == "Where"
        want = np.asarray(jax.jit(fn)(s))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=_RAISED)


def test_a_reader_that_keeps_a_masked_place_keeps_the_product(monkeypatch):
    """Zeroing by the causal triangle alone after a mask that also drops padded keys: the padded places would
    keep the raised exp(-64) without the product, so the fast branch keeps it."""
    def fn(s, padding):
        keep = _CAUSAL & padding[:, None, None, :]
        return jnp.where(_CAUSAL, jax.nn.softmax(jnp.where(keep, s, -1e9), axis=-1), 0.0)

    padding = np.ones((2, _T), bool)
    padding[0, -3:] = False
    s = _scores(7)
    model, (got,) = _same_bits(monkeypatch, fn, s, padding)
    assert "Mul" in _ops(_branch(model, "masked_softmax_by_mask"))
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s, padding)), rtol=1e-6, atol=_RAISED)
    assert (got[0, :, :, -3:] == 0).all()


@pytest.mark.parametrize("diagonal", [0, 1])
def test_a_triangle_zeroed_again_as_trilu_drops_the_product(monkeypatch, diagonal):
    """keras' causal decoders (OPT, GPT-2 with a mask of ones): the mask and the zeroing after the softmax are
    one constant triangle, which ``tri_masks`` writes as a Trilu with its diagonal an input. The Trilu reads
    the Softmax's output; the fast branch multiplies by nothing (found on keras-hub OPT, whose Trilu carried
    ``k`` and was not read before)."""
    tri = np.tril(np.ones((_T, _T), bool), diagonal)

    def fn(s):
        return jnp.where(tri, jax.nn.softmax(jnp.where(tri, s, -1e9), axis=-1), 0.0)

    for s in (_scores(8), _edge_rows(_scores(9))):
        model, (got,) = _same_bits(monkeypatch, fn, s)
        assert _ops(_branch(model, "masked_softmax_by_mask")) == ["Softmax"]
        assert _top_readers(model, "Trilu") == ["Trilu"]
        want = np.asarray(jax.jit(fn)(s))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=_RAISED)
