"""masked_softmax: a Softmax behind an attention mask computed on its input raised to ``max - 64`` where
lower, those outputs zeroed, so that ONNX Runtime's exp makes no subnormals (on an Intel CPU each one a
microcode assist: a causal [2, 4, 64, 64] Softmax 6x slower). The kept outputs keep their bits; masked
places give jax.jit's exact zero; rows of NaN, +inf, -inf or all masked stay what they were."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import masked_softmax
from lowering_check import convert_and_run, without_rule

_plain = without_rule(masked_softmax)
_T = 16
_CAUSAL = np.tril(np.ones((_T, _T), bool))
_LOWEST = np.finfo(np.float32).min


def _scores(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((2, 3, _T, _T)) * 4).astype(np.float32)


def _edge_rows(s: np.ndarray) -> np.ndarray:
    """Rows with NaN first and in the middle, +inf, -inf places, a spread beyond exp's range, all masked."""
    s = s.copy()
    s[0, 0, 5, 0] = np.nan
    s[0, 0, 9, 4] = np.nan
    s[0, 1, 7, 3] = np.inf
    s[0, 1, 8, :4] = -np.inf
    s[0, 2, 12, :6] = [0, -70, -90, -200, 30, -1e30]  # kept places far below the max: x - m < -64
    s[1, 0, 10, :] = -np.inf
    return s


# (name, fn of scores; the mask is a constant, an input, or an additive bias)
FORMS = {
    "additive_bias": lambda s: jax.nn.softmax(s + jnp.where(_CAUSAL, 0.0, _LOWEST), axis=-1),
    "where_lowest": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, _LOWEST), axis=-1),
    "where_minus_inf": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, -jnp.inf), axis=-1),
    "where_1e9": lambda s: jax.nn.softmax(jnp.where(_CAUSAL, s, -1e9), axis=-1),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_masked_softmax_keeps_the_bits_and_gives_jits_zeros(monkeypatch, form):
    fn = FORMS[form]
    for s in (_scores(), _edge_rows(_scores(1))):
        ops, (got,) = convert_and_run(fn, s)
        plain_ops, (before,) = _plain(monkeypatch, fn, s)
        assert ops["Max"] == 1 and ops["Softmax"] == 1 and plain_ops.get("Max", 0) == 0, (ops, plain_ops)
        want = np.asarray(jax.jit(fn)(s))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        kept = np.broadcast_to(_CAUSAL, s.shape) & ~np.isnan(want)
        with np.errstate(invalid="ignore"):
            far = (s - np.nanmax(np.where(_CAUSAL, s, -np.inf), -1, keepdims=True)) < masked_softmax.FLOOR
        same = kept & ~far
        np.testing.assert_array_equal(got[same].view(np.uint32), before[same].view(np.uint32))
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6, atol=1e-27)
        assert (got[want == 0] == 0).all()  # jax.jit's zeros (every masked place of a row with a kept key)
        masked = ~np.broadcast_to(_CAUSAL, s.shape)
        assert (want[masked & np.isfinite(s).any(-1, keepdims=True) & ~np.isnan(want)] == 0).sum() > 300


def test_a_row_masked_everywhere_is_uniform_as_in_jit(monkeypatch):
    mask = np.zeros((_T, _T), bool)
    mask[1:] = _CAUSAL[1:]  # row 0 has no key to attend to

    def fn(s):
        return jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)

    s = _scores(2)
    _, (got,) = convert_and_run(fn, s)
    want = np.asarray(jax.jit(fn)(s))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    np.testing.assert_allclose(got[:, :, 0], 1 / _T, rtol=1e-6)


def test_a_mask_given_as_an_input_stays():
    """How much of a mask computed from the inputs is filled is not known: the rule costs where little is."""
    def fn(s, keep):
        return jax.nn.softmax(jnp.where(keep, s, -1e9), axis=-1)

    keep = np.random.default_rng(4).random((2, 1, _T, _T)) < 0.5
    ops, (got,) = convert_and_run(fn, _scores(3), keep)
    assert ops["Softmax"] == 1 and ops.get("Max", 0) == 0, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(_scores(3), keep)), rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", ["no_mask", "mask_of_ones", "small_bias"])
def test_a_softmax_without_a_masks_fill_stays(case):
    bias = np.random.default_rng(5).standard_normal((_T, _T)).astype(np.float32)
    fns = {
        "no_mask": lambda s: jax.nn.softmax(s, axis=-1),
        "mask_of_ones": lambda s: jax.nn.softmax(jnp.where(np.ones((_T, _T), bool), s, _LOWEST), axis=-1),
        "small_bias": lambda s: jax.nn.softmax(s + bias, axis=-1),  # T5's position bias: no fill
    }
    ops, (got,) = convert_and_run(fns[case], _scores(6))
    assert ops["Softmax"] == 1 and ops.get("Max", 0) == 0, ops
    np.testing.assert_allclose(got, np.asarray(jax.jit(fns[case])(_scores(6))), rtol=1e-6, atol=1e-7)


def test_causal_attention_output_matches_jit_on_huge_values():
    """The zeroed places meet the values: a kept exp(-64)/sum times a huge value would not be jax.jit's 0."""
    def fn(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(jnp.where(_CAUSAL, s, _LOWEST), axis=-1), v)

    r = np.random.default_rng(7)
    q, k = (r.standard_normal((1, 2, _T, 8)).astype(np.float32) for _ in range(2))
    v = r.standard_normal((1, 2, _T, 8)).astype(np.float32)
    v[:, :, _T // 2:] = 3e38  # the later keys, masked for the first half of the queries
    ops, (got,) = convert_and_run(fn, q, k, v)
    assert ops["Max"] == 1, ops
    want = np.asarray(jax.jit(fn)(q, k, v))
    np.testing.assert_allclose(got[:, :, : _T // 2], want[:, :, : _T // 2], rtol=1e-5, atol=1e-6)


def _raised_like_jit(monkeypatch, fn, *inputs, kept):
    """The rule fired; ``kept`` places have the bits of the graph without it, and every output is jax.jit's
    (its zeros exactly)."""
    ops, (got,) = convert_and_run(fn, *inputs)
    plain_ops, (before,) = _plain(monkeypatch, fn, *inputs)
    assert ops["Max"] == 1 and plain_ops.get("Max", 0) == 0, (ops, plain_ops)
    want = np.asarray(jax.jit(fn)(*inputs))
    kept = np.broadcast_to(kept, got.shape)
    np.testing.assert_array_equal(got[kept].view(np.uint32), before[kept].view(np.uint32))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-27)
    assert (got[want == 0] == 0).all() and (want == 0).sum() > 100


def test_a_causal_mask_combined_with_a_padding_input_is_raised(monkeypatch):
    """``causal & padding`` with the padding an input (a decoder exported with its attention mask): the
    causal places are filled whatever the padding, so the rule fires; the padded keys are raised too."""
    def fn(s, padding):
        return jax.nn.softmax(jnp.where(_CAUSAL & padding[:, None, None, :], s, -1e9), axis=-1)

    padding = np.ones((2, _T), bool)
    padding[0, -3:] = False
    padding[1, 0] = False  # the first query of the second example attends to nothing: uniform, as in jax.jit
    kept = _CAUSAL & padding[:, None, None, :]
    _raised_like_jit(monkeypatch, fn, _scores(8), padding, kept=kept)


def test_a_causal_mask_taken_as_the_min_with_a_padding_input_is_raised(monkeypatch):
    """keras-hub's form: ``min(causal, padding)`` of 0/1 integers, then ``where(mask > 0, s, fill)``."""
    def fn(s, padding):
        mask = jnp.minimum(jnp.asarray(_CAUSAL, jnp.int32), padding[:, None, None, :])
        return jax.nn.softmax(jnp.where(mask > 0, s, _LOWEST), axis=-1)

    padding = np.ones((2, _T), np.int32)
    padding[1, -5:] = 0
    _raised_like_jit(monkeypatch, fn, _scores(9), padding, kept=_CAUSAL & (padding[:, None, None, :] > 0))


def test_a_constant_padding_mask_is_raised():
    """A constant that fills 3 of 16 keys: the subnormals cost on an Intel CPU whatever their share."""
    padding = np.arange(_T) < _T - 3

    def fn(s):
        return jax.nn.softmax(jnp.where(padding, s, -1e9), axis=-1)

    ops, (got,) = convert_and_run(fn, _scores(6))
    assert ops["Max"] == 1, ops
    want = np.asarray(jax.jit(fn)(_scores(6)))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert (got[..., ~padding] == 0).all()


def test_shifted_window_mask_built_by_scatters_is_raised(monkeypatch):
    """Swin's shifted-window mask: region ids written by ``.at[].set`` into zeros (ScatterND in ONNX), cut into
    windows, compared pairwise, -100 where the regions differ, added to each window's scores."""
    size, window, shift = 8, 4, 2

    def fn(s):  # s: [windows, heads, 16, 16]
        regions = jnp.zeros((size, size), jnp.int32)
        bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
        for k, (hs, ws) in enumerate((h, w) for h in bounds for w in bounds):
            regions = regions.at[hs, ws].set(k)
        ids = regions.reshape(size // window, window, size // window, window).transpose(0, 2, 1, 3)
        ids = ids.reshape(-1, window * window)
        mask = jnp.where(ids[:, :, None] == ids[:, None, :], 0.0, -100.0)
        return jax.nn.softmax(s + mask[:, None], axis=-1)

    s = (np.random.default_rng(10).standard_normal((4, 2, 16, 16)) * 3).astype(np.float32)
    regions = np.zeros((size, size), np.int32)
    for k, (hs, ws) in enumerate((h, w) for h in (slice(0, -4), slice(-4, -2), slice(-2, None))
                                 for w in (slice(0, -4), slice(-4, -2), slice(-2, None))):
        regions[hs, ws] = k
    ids = regions.reshape(2, 4, 2, 4).transpose(0, 2, 1, 3).reshape(-1, 16)
    kept = (ids[:, :, None] == ids[:, None, :])[:, None]
    _raised_like_jit(monkeypatch, fn, s, kept=kept)


def test_a_local_mask_beside_a_looked_up_bias_is_raised(monkeypatch):
    """LongT5's form: a position bias looked up from the inputs (jnp.take's NaN row for ids out of range, so
    not a constant) plus a local window's fill, padded with the fill for keys past the end."""
    table = np.random.default_rng(11).standard_normal((9, 3)).astype(np.float32)
    near = np.abs(np.arange(_T)[:, None] - np.arange(_T - 4)[None, :]) <= 2

    def fn(s, buckets):  # s: [2, 3, T, T]; buckets: [T, T - 4] ids into the table
        bias = jnp.moveaxis(jnp.take(table, buckets, axis=0), -1, 0)  # [3, T, T - 4]
        local = jnp.pad(bias + jnp.where(near, 0.0, -1e10), ((0, 0), (0, 0), (0, 4)), constant_values=-1e10)
        return jax.nn.softmax(s + local, axis=-1)

    buckets = np.random.default_rng(12).integers(0, 9, (_T, _T - 4)).astype(np.int32)
    kept = np.pad(near, ((0, 0), (0, 4)))
    _raised_like_jit(monkeypatch, fn, _scores(13), buckets, kept=kept)


# The zeros read from the mask: where a test shows every masked place is raised and compared as zero, an If
# multiplies by the mask's kept places instead of comparing the input with max - 64 again.

_BY_MASK = "masked_softmax_by_mask"
_RAISED = float(np.exp(np.float64(masked_softmax.FLOOR))) * (1 + 1e-6)  # exp(-64) over a sum of at least 1


def _by_mask_ifs(fn, *inputs):
    """(how many Ifs multiply by the mask, the ONNX Runtime outputs) of ``fn`` converted unchecked."""
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = jaxconv.to_onnx(fn, *inputs, check=False)
    ifs = sum(1 for n in model.graph.node if n.op_type == "If"
              and any(a.g.name == _BY_MASK for a in n.attribute if a.name in ("then_branch", "else_branch")))
    return ifs, OnnxRunner(model.SerializeToString()).run(list(inputs))


def _compared(monkeypatch, fn, *inputs):
    """The outputs with the zeros compared (the rule without the mask's If)."""
    with monkeypatch.context() as patch:
        patch.setattr(masked_softmax, "_known_mask", lambda *args: None)
        return _by_mask_ifs(fn, *inputs)


def _far_scores(seed: int) -> np.ndarray:
    """Finite scores with kept places far below their row's max: 64 to 87 below, and beyond exp's range."""
    s = _scores(seed)
    s[0, 0, 12, :4] = [20.0, -50.0, -60.0, -100.0]  # the max 20: -70, -80 and -120 below it
    s[1, 2, 15, :3] = [0.0, 30.0, -40.0]
    return s


@pytest.mark.parametrize("form", sorted(FORMS))
def test_zeros_by_mask_keep_the_compared_bits_but_far_below_the_max(monkeypatch, form):
    """Every masked place is 0 and every kept place has the compared form's bits, except the kept places
    more than 64 below their row's max: exp(-64) / sum there (at most 1.6e-28), jax.jit's between 0 and
    that. So the mask's If ran its product (the compared form gives 0 there)."""
    fn, s = FORMS[form], _far_scores(20)
    ifs, (got,) = _by_mask_ifs(fn, s)
    plain_ifs, (compared,) = _compared(monkeypatch, fn, s)
    assert ifs == 1 and plain_ifs == 0
    want = np.asarray(jax.jit(fn)(s))
    row_max = np.max(np.where(_CAUSAL, s, -np.inf), -1, keepdims=True)
    far = np.broadcast_to(_CAUSAL, s.shape) & (s - row_max < masked_softmax.FLOOR)
    assert far.sum() == 4
    np.testing.assert_array_equal(got[~far].view(np.uint32), compared[~far].view(np.uint32))
    assert (got[~np.broadcast_to(_CAUSAL, s.shape)] == 0).all()
    assert (compared[far] == 0).all() and (got[far] > 0).all() and (got[far] <= _RAISED).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=_RAISED)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_edge_rows_take_the_compared_zeros(monkeypatch, form):
    """NaN, infinite and all-filled rows fail the test (a row's ``lo`` at -inf, or the scores' sum of
    squares NaN or inf): the outputs are the compared form's, bit for bit."""
    fn, s = FORMS[form], _edge_rows(_far_scores(21))
    ifs, (got,) = _by_mask_ifs(fn, s)
    _, (compared,) = _compared(monkeypatch, fn, s)
    assert ifs == 1
    np.testing.assert_array_equal(got.view(np.uint32), compared.view(np.uint32))


def test_additive_mask_beyond_its_bound_takes_the_compared_zeros(monkeypatch):
    """An additive -1e4 mask bounds the scores at 1250 (an eighth of the fill): scores of 2000 run the
    comparison, whose masked places (2000 - 1e4 against a row max near 0) jax.jit also gives."""
    fill = np.float32(-1e4)

    def fn(s):
        return jax.nn.softmax(s + jnp.where(_CAUSAL, 0.0, fill), axis=-1)

    s = _far_scores(22)
    s[0, 1, 2, 9] = 2000.0  # masked (column 9 after row 2): 2000 - 1e4 = -8000, far below the row's max
    ifs, (got,) = _by_mask_ifs(fn, s)
    _, (compared,) = _compared(monkeypatch, fn, s)
    assert ifs == 1
    np.testing.assert_array_equal(got.view(np.uint32), compared.view(np.uint32))
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s)), rtol=1e-6, atol=_RAISED)


def test_additive_mask_with_a_row_masked_everywhere_keeps_the_comparison():
    """Such a row is spread over its places by jax.jit; no product by the mask could give that."""
    mask = _CAUSAL.copy()
    mask[3] = False

    def fn(s):
        return jax.nn.softmax(s + jnp.where(mask, 0.0, _LOWEST), axis=-1)

    s = _scores(23)
    ifs, (got,) = _by_mask_ifs(fn, s)
    assert ifs == 0
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s)), rtol=1e-6, atol=0)


def test_dot_product_attention_zeros_by_mask_behind_the_min(monkeypatch):
    """jax.nn.dot_product_attention's causal fill behind mask_min's If (its exact branch a Trilu): the
    mask is read from the Min's bound; a NaN query gives its rows NaN, the others jax.jit's numbers."""
    rng = np.random.default_rng(24)
    q, k, v = (rng.standard_normal((2, 64, 4, 8)).astype(np.float32) for _ in range(3))
    fn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    ifs, (got,) = _by_mask_ifs(fn, q, k, v)
    _, (compared,) = _compared(monkeypatch, fn, q, k, v)
    assert ifs == 1
    np.testing.assert_array_equal(got.view(np.uint32), compared.view(np.uint32))
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(q, k, v)), rtol=1e-5, atol=1e-6)
    q[1, 2, 3, 5] = np.nan
    _, (got,) = _by_mask_ifs(fn, q, k, v)
    assert np.isnan(got[1, 2, 3]).all() and np.isfinite(got[0]).all()
    np.testing.assert_allclose(got[0], np.asarray(jax.jit(fn)(q, k, v))[0], rtol=1e-5, atol=1e-6)


_PADDED = {  # causal & padding from an input: a Where's fill, or Hugging Face's additive bias of it
    "where": lambda s, keep: jax.nn.softmax(jnp.where(keep, s, -1e9), axis=-1),
    "additive": lambda s, keep: jax.nn.softmax(s + jnp.where(keep, 0.0, _LOWEST), axis=-1),
}


@pytest.mark.parametrize("form", sorted(_PADDED))
def test_a_padding_mask_given_as_an_input_multiplies_by_it(monkeypatch, form):
    """``causal & padding`` with the padding an input: the kept places are a value of the graph, cast once (an
    additive mask's rows are not known, so its test also asks every row to keep a place); a query that attends
    to nothing (every key padded) fails the test and is spread as jax.jit spreads it."""
    def fn(s, padding):
        return _PADDED[form](s, _CAUSAL & padding[:, None, None, :])

    s = np.concatenate([_far_scores(25), _scores(26), _scores(27)], axis=1)
    padding = np.ones((2, _T), bool)
    padding[0, -3:] = False
    ifs, (got,) = _by_mask_ifs(fn, s, padding)
    _, (compared,) = _compared(monkeypatch, fn, s, padding)
    assert ifs == 1
    kept = np.broadcast_to(_CAUSAL & padding[:, None, None, :], s.shape)
    assert (got[~kept] == 0).all() and (compared[0, 0, 12, 1:4] == 0).all() and (got[0, 0, 12, 1:4] > 0).all()
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s, padding)), rtol=1e-6, atol=_RAISED)
    padding[1, 0] = False  # the first query of the second example: no key
    _, (got,) = _by_mask_ifs(fn, s, padding)
    _, (compared,) = _compared(monkeypatch, fn, s, padding)
    np.testing.assert_array_equal(got.view(np.uint32), compared.view(np.uint32))
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(s, padding)), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(got[1, :, 0], 1 / _T, rtol=1e-6)


def test_scores_of_token_ids_multiply_by_the_mask_without_a_test():
    """Scores from looked-up rows are bounded whatever the ids (an id out of range gives jnp.take's NaN row,
    a NaN row in both forms): an additive mask's product needs no test and no If."""
    rng = np.random.default_rng(31)
    table, wq, wk = (rng.standard_normal(s).astype(np.float32) for s in ((20, 8), (8, 8), (8, 8)))

    def fn(ids):
        h = jnp.take(table, ids, axis=0)
        s = (h @ wq) @ jnp.swapaxes(h @ wk, -1, -2)
        return jax.nn.softmax(s + jnp.where(_CAUSAL, 0.0, _LOWEST), axis=-1)

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    ids = rng.integers(0, 22, (2, _T)).astype(np.int32)  # 20 and 21 out of range
    model = jaxconv.to_onnx(fn, ids, check=False)
    ops = [n.op_type for n in model.graph.node]
    assert "If" not in ops and "GreaterOrEqual" not in ops and ops.count("Softmax") == 1, ops
    (got,) = OnnxRunner(model.SerializeToString()).run([ids])
    want = np.asarray(jax.jit(fn)(ids))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=_RAISED)
    assert (got[~np.broadcast_to(_CAUSAL, got.shape) & ok] == 0).all() and np.isnan(want).any()


def test_scores_of_token_ids_over_any_length_test_only_their_rows():
    """The same over a symbolic length: the mask is built at run time, so the rows are tested (every row keeps
    a place), the scores not (no ReduceSumSquare)."""
    rng = np.random.default_rng(32)
    table, wq, wk = (rng.standard_normal(s).astype(np.float32) for s in ((20, 8), (8, 8), (8, 8)))

    def fn(ids):
        h = jnp.take(table, ids, axis=0)
        s = (h @ wq) @ jnp.swapaxes(h @ wk, -1, -2)
        t = ids.shape[1]
        return jax.nn.softmax(s + jnp.where(jnp.tril(jnp.ones((t, t), bool)), 0.0, _LOWEST), axis=-1)

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = jaxconv.to_onnx(fn, "i32[2,s]", check=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("If") == 1 and "ReduceSumSquare" not in ops, ops
    runner = OnnxRunner(model.SerializeToString())
    for t in (1, 5, 16):
        ids = rng.integers(0, 20, (2, t)).astype(np.int32)
        (got,) = runner.run([ids])
        # (the scores' products summed in another order: exp turns their last bits into 1e-5 of the value)
        np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(ids)), rtol=1e-4, atol=1e-7)
        assert (got[..., ~np.tril(np.ones((t, t), bool))] == 0).all()
