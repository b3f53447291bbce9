"""jaxconv.onnx.rewrites.layer_norm: a two-pass layer norm over the last axis as ONNX LayerNormalization;
jax.jit's numbers kept within the converter's tolerance (rows with NaN, infinities, -0.0, a big mean),
and the forms it must not take left as written."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import layer_norm
from lowering_check import assert_same_floats, op_counts, without_rule
from lowering_check import convert_and_run as _convert

D = 16
_RNG = np.random.default_rng(7)
_G = (1 + 0.1 * _RNG.standard_normal(D)).astype(np.float32)
_B = (0.1 * _RNG.standard_normal(D)).astype(np.float32)
_W = (_RNG.standard_normal((D, D)) / 4).astype(np.float32)


def _rows(offset: bool = True, finite: bool = False) -> np.ndarray:
    """Rows of signed zeros, a NaN and infinities (unless ``finite``), a big mean (``offset``), a constant."""
    x = np.random.default_rng(8).standard_normal((3, 8, D)).astype(np.float32)
    x[0, 1] = -0.0
    x[0, 2] = 0.0
    if not finite:
        x[0, 3, 4] = np.nan
        x[0, 4, 5] = np.inf
        x[0, 5, 6] = -np.inf
    if offset:
        x[1] += 1000.0  # a mean far from zero over a spread of one
    x[2, 0] = 3.0  # a constant row: variance 0, output b
    return x


def _ln(x, g=_G, b=_B, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    y = (x - mu) / jnp.sqrt(var + eps)
    if g is not None:
        y = y * g
    return y + b if b is not None else y


def _assert_close(got: np.ndarray, want, x: np.ndarray, g, b) -> None:
    """jax.jit's numbers within float32 tolerance, except the row with a big mean, where both lose digits
    to rounding: there the artifact is at most as far from the float64 result as jax.jit is (the check's
    float64 license allows twice as far)."""
    want = np.asarray(want)
    assert_same_floats(np.delete(got, 1, 0), np.delete(want, 1, 0), 1e-4, 2e-5)
    x64 = x[1].astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    truth = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    truth = truth * (1.0 if g is None else g) + (0.0 if b is None else b)
    assert np.abs(got[1] - truth).max() <= max(np.abs(want[1] - truth).max(), 1e-6)


_plain = without_rule(layer_norm)


def _overflowing(x: np.ndarray) -> list[np.ndarray]:
    """``x`` with rows whose squares overflow (jax.jit's variance inf: the row is the offset), whose sum
    overflows (jax.jit's mean inf: NaN), and with a NaN and infinities."""
    squares, sums = x.copy(), x.copy()
    squares[1, 0] *= 1e20
    squares[1, 2, 3] = 3e19
    sums[1, 0, :4] = [3e38, 3.4e38, 1.5e38, 2e38]
    return [squares, sums, _rows(offset=False)]


def _assert_exact_where_squares_overflow(monkeypatch, fn) -> None:
    """Where a square or a row's sum could overflow, or an input is not finite, the guard runs the written-out
    nodes: bit for bit the graph without the rule, and jax.jit's NaN and offset rows."""
    for x in _overflowing(_rows(offset=False, finite=True)):
        _, (got,) = _convert(fn, x)
        _, (plain,) = _plain(monkeypatch, fn, x)
        np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))
        assert_same_floats(got, np.asarray(jax.jit(fn)(x)), 1e-4, 2e-5)


def op_counts_of(fn, *inputs):
    """Op types of ``fn``'s ONNX, the If branches' nodes included."""
    return _convert(fn, *inputs, bodies=True)[0]


@pytest.mark.parametrize("affine", ["g,b", "g", "b", "none"])
def test_layer_norm_becomes_one_op(monkeypatch, affine):
    g = _G if "g" in affine else None
    b = _B if "b" in affine else None
    fn = lambda x: _ln(x, g, b)  # noqa: E731
    x = _rows(finite=True)
    ops, (got,) = _convert(fn, x, bodies=True)
    # behind the guard of squares that overflow: the op, and the written-out nodes in the other branch
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1 and ops["ReduceSumSquare"] == 1, ops
    assert ops["Sqrt"] == 1, ops
    _assert_close(got, np.asarray(jax.jit(fn)(x)), x, g, b)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert plain_ops["LayerNormalization"] == 0 and plain_ops["If"] == 0, plain_ops
    _assert_exact_where_squares_overflow(monkeypatch, fn)


def test_residual_blocks_keep_numbers():
    """Two pre-norm residual blocks (the transformer's pattern): every norm becomes one op."""
    def fn(x):
        for _ in range(2):
            x = x + jax.nn.gelu(_ln(x) @ _W)
        return _ln(x, _G * 2, -_B)

    x = _rows()
    x[1] -= 1000.0
    ops, (got,) = _convert(fn, x, bodies=True)
    assert ops["LayerNormalization"] == 3 and ops["If"] == 3, ops
    assert_same_floats(got, jax.jit(fn)(x), 1e-4, 2e-5)


def test_symbolic_length():
    fn = lambda x: _ln(x)  # noqa: E731
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    model = jaxconv.to_onnx(fn, f"f32[2,t,{D}]", check=False)
    assert op_counts(model.graph)["LayerNormalization"] == 1
    runner = OnnxRunner(model.SerializeToString())
    for t in (1, 5):
        x = _RNG.standard_normal((2, t, D)).astype(np.float32)
        assert_same_floats(runner.run([x])[0], jax.jit(fn)(x), 1e-4, 2e-5)


def _flax_ln(x, g=_G, b=_B):
    """flax.linen.LayerNorm's arithmetic (use_fast_variance): mean(x**2) - mean(x)**2, rsqrt times scale."""
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.maximum(jnp.mean(x * x, axis=-1, keepdims=True) - mu * mu, 0.0)
    mul = jax.lax.rsqrt(var + 1e-6)
    if g is not None:
        mul = mul * g
    y = (x - mu) * mul
    return y + b if b is not None else y


@pytest.mark.parametrize("affine", ["g,b", "none"])
def test_fast_variance_form_becomes_one_op(monkeypatch, affine):
    """Flax's one-pass variance loses digits to cancellation where the mean is far from zero; ORT's op
    does not: within tolerance elsewhere, and no farther from the float64 result than jax.jit there."""
    g, b = (_G, _B) if affine == "g,b" else (None, None)
    fn = lambda x: _flax_ln(x, g, b)  # noqa: E731
    x = _rows(finite=True)
    ops, (got,) = _convert(fn, x)
    assert ops["If"] == 1 and ops["Relu"] == 0 and ops["Reciprocal"] == 0, ops  # (the exact nodes in a branch)
    assert op_counts_of(fn, x)["LayerNormalization"] == 1
    want = np.asarray(jax.jit(fn)(x))
    assert_same_floats(np.delete(got, 1, 0), np.delete(want, 1, 0), 1e-4, 2e-5)
    x64 = x[1].astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    truth = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-6)
    truth = truth * (1.0 if g is None else g) + (0.0 if b is None else b)
    assert np.abs(got[1] - truth).max() <= max(np.abs(want[1] - truth).max(), 1e-6)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert plain_ops["LayerNormalization"] == 0 and plain_ops["Relu"] == 1, plain_ops
    _assert_exact_where_squares_overflow(monkeypatch, fn)


def _written(form: str, d: int):
    """Layer norms as libraries and people write them: ``rsqrt`` times the centred x; Haiku's (``jnp.var``,
    ``inv = scale * rsqrt(var + eps)``, ``inv * (x - mean) + offset``); Equinox's (``jnp.var`` clamped at
    0, ``(x - mean) * rsqrt``, ``weight * out + bias``); a division by ``sqrt(jnp.var)``."""
    rng = np.random.default_rng(d)
    g = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    b = (0.1 * rng.standard_normal(d)).astype(np.float32)

    def fn(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        if form == "rsqrt":
            c = x - mean
            return c * jax.lax.rsqrt(jnp.mean(c * c, axis=-1, keepdims=True) + 1e-5) * g + b
        var = jnp.var(x, axis=-1, keepdims=True)
        if form == "haiku":
            return g * jax.lax.rsqrt(var + 1e-5) * (x - mean) + b
        if form == "equinox":
            return g * ((x - mean) * jax.lax.rsqrt(jnp.maximum(0.0, var) + 1e-5)) + b
        return (x - mean) / jnp.sqrt(var + 1e-5) * g + b

    return fn, g, b


@pytest.mark.parametrize("d", [16, 24, 4100])  # 4100: summed in blocks, the last padded
@pytest.mark.parametrize("form", ["rsqrt", "haiku", "equinox", "var_div"])
def test_written_forms_become_one_op(monkeypatch, form, d):
    fn, g, b = _written(form, d)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8, d)).astype(np.float32)
    x[0, 1] = -0.0
    x[1] += 1000.0  # a mean far from zero over a spread of one
    x[2, 0] = 3.0  # a constant row
    ops, (got,) = _convert(fn, x, bodies=True)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1, ops
    _assert_close(got, np.asarray(jax.jit(fn)(x)), x, g, b)
    plain_ops, _ = _plain(monkeypatch, fn, x)
    assert plain_ops["LayerNormalization"] == 0, plain_ops
    x[1] -= 1000.0
    squares, sums, special = x.copy(), x.copy(), x.copy()
    squares[1, 0] *= 1e20  # jax.jit's variance inf: the row is the offset
    sums[1, 0, :4] = [3e38, 3.4e38, 1.5e38, 2e38]  # jax.jit's mean inf: NaN
    special[0, 3, 4], special[0, 4, 5], special[0, 5, 6] = np.nan, np.inf, -np.inf
    for bad in (squares, sums, special):  # the guard runs the written-out nodes: jax.jit's rows
        _, (got,) = _convert(fn, bad)
        assert_same_floats(got, np.asarray(jax.jit(fn)(bad)), 1e-4, 2e-5)


def test_post_norm_residual_is_a_sum_ort_does_not_fuse(tmp_path):
    """Add -> norm (BERT's post-norm residual) would become ORT's slow SkipLayerNormalization; as Sum it
    stays an addition and the op (operands bounded by tanh, so the norm runs without its guard)."""
    import onnxruntime as ort

    import jaxconv
    from jaxconv.runtimes.onnxrt import session_options

    fn = lambda x, y: _flax_ln(jnp.tanh(x) + jnp.tanh(y))  # noqa: E731
    x, y = _rows(offset=False), _rows(offset=False)[::-1].copy()
    ops, (got,) = _convert(fn, x, y)
    assert ops["Sum"] == 1 and ops["Add"] == 0 and ops["LayerNormalization"] == 1, ops
    assert_same_floats(got, jax.jit(fn)(x, y), 1e-4, 2e-5)
    spec = f"f32[3,8,{D}]"
    model = jaxconv.to_onnx(fn, spec, spec, check=False)
    opts = session_options(1)
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    import onnx

    optimized = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert "SkipLayerNormalization" not in optimized and "LayerNormalization" in optimized, optimized


def test_ort_sum_of_two_is_its_add():
    """The Sum that replaces the residual Add adds the same way, bit for bit (NaN, infinities, zeros)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    vals = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, -1.0, 1e-8],
                    np.float32)
    a, b = (g.ravel() for g in np.meshgrid(vals, vals))
    a = np.concatenate([a, np.random.default_rng(0).standard_normal(4096).astype(np.float32)])
    b = np.concatenate([b, np.random.default_rng(1).standard_normal(4096).astype(np.float32)])
    outs = []
    for op in ("Add", "Sum"):
        graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None]) for n in "ab"],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {"a": a, "b": b})[0])
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_middle_axis_norm_stays():
    def fn(x):
        mu = jnp.mean(x, axis=1, keepdims=True)
        return (x - mu) / jnp.sqrt(jnp.mean(jnp.square(x - mu), axis=1, keepdims=True) + 1e-5)

    x = _rows(offset=False)
    ops, (got,) = _convert(fn, x)
    assert ops["LayerNormalization"] == 0, ops
    assert_same_floats(got, jax.jit(fn)(x), 1e-4, 2e-5)


def test_shared_mean_stays():
    """A mean that is also an output keeps its nodes (a separate jnp.mean of the output is another node)."""
    def fn(x):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        return (x - mu) / jnp.sqrt(jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True) + 1e-5), mu

    x = _rows(offset=False)
    ops, outs = _convert(fn, x)
    assert ops["LayerNormalization"] == 0, ops
    for got, want in zip(outs, jax.jit(fn)(x)):
        assert_same_floats(got, want, 1e-4, 2e-5)


def test_separate_mean_output():
    fn = lambda x: (_ln(x), jnp.mean(x, axis=-1, keepdims=True))  # noqa: E731
    x = _rows(offset=False)
    ops, outs = _convert(fn, x, bodies=True)
    assert ops["LayerNormalization"] == 1, ops
    for got, want in zip(outs, jax.jit(fn)(x)):
        assert_same_floats(got, want, 1e-4, 2e-5)


def test_float64_stays():
    fn = lambda x: _ln(x, _G.astype(np.float64), _B.astype(np.float64))  # noqa: E731
    x = _rows().astype(np.float64)
    with jax.enable_x64(True):
        ops, (got,) = _convert(fn, x)
        want = np.asarray(jax.jit(fn)(x))
    assert ops["LayerNormalization"] == 0, ops
    assert_same_floats(got, want, 1e-9, 1e-12)


def test_needs_opset_17():
    from onnx import TensorProto, helper
    from onnx_ir import from_proto

    assert layer_norm.MIN_OPSET == 17
    g = helper.make_graph([helper.make_node("Sqrt", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    assert layer_norm.rewrite(from_proto(g), 16) == 0


@pytest.mark.parametrize("lead", ["3,8", "b,8", "b,s"])
def test_flax_nnx_layer_norm_becomes_one_op(lead):
    """flax.nnx.LayerNorm puts the reduced axis back with a reshape (a Reshape, not an Unsqueeze; with two
    symbolic sizes its target is computed at run time), which the keepdims rule takes too: the norm is one
    op whatever the leading sizes."""
    import flax.nnx as nnx

    norm = nnx.LayerNorm(D, rngs=nnx.Rngs(0))

    def fn(x):
        return norm(x) @ _W

    x = _rows(offset=False)
    ops, (got,) = _convert(fn, x, specs=[f"f32[{lead},{D}]"], bodies=True)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1, ops
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_same_floats(got, want, 1e-4, 2e-5)


_TABLE = (np.random.default_rng(9).standard_normal((40, D)) * 0.5).astype(np.float32)


def _token_encoder(ids):
    """A Flax BERT-style block on token ids: a lookup (NaN for an id out of range), a norm, an attention-like
    mix, and post-norms of the residual sums."""
    x = _flax_ln(jnp.take(_TABLE, ids, axis=0))
    scores = jax.nn.softmax(jnp.einsum("btd,bsd->bts", x @ _W, x), axis=-1)
    y = _flax_ln(x + jnp.einsum("bts,bsd->btd", scores, x) @ _W)
    return _flax_ln(y + jax.nn.gelu(y @ _W) @ _W, -_G, _B)


def test_norms_of_token_lookups_run_unguarded(monkeypatch):
    """Every value after a lookup of token ids in a constant table is bounded (``_bounds``), so no row's squares
    come near overflowing: the norms are the bare op, no If, and the post-norm residual Adds are Sums. jax.jit's
    numbers, as the guarded graph's, ids out of range (NaN rows) included. (Not bit for bit the guarded graph's:
    ORT's optimizer fuses other nodes around a bare op than around an If.)"""
    from jaxconv.onnx.rewrites import _norm_guard

    ids = np.random.default_rng(10).integers(0, 40, (2, 8)).astype(np.int32)
    for bad in (False, True):
        ids[1, 3] = 55 if bad else 3
        ops, (got,) = _convert(_token_encoder, ids, bodies=True)
        assert ops["LayerNormalization"] == 3 and ops["If"] == 0 and ops["Sum"] >= 2, ops
        with monkeypatch.context() as patch:
            patch.setattr(_norm_guard, "unguarded", lambda *a: False)
            guarded_ops, (guarded,) = _convert(_token_encoder, ids)
        assert guarded_ops["If"] == 3, guarded_ops
        want = np.asarray(jax.jit(_token_encoder)(ids))
        assert np.isnan(want[1]).all() == bad and np.isnan(got[1]).all() == bad
        assert_same_floats(got, want, 1e-4, 1e-5)
        assert_same_floats(guarded, want, 1e-4, 1e-5)


_GW = (1 + 0.1 * np.random.default_rng(9).standard_normal(4096)).astype(np.float32)
_BW = (0.1 * np.random.default_rng(10).standard_normal(4096)).astype(np.float32)


def _wide_rows() -> np.ndarray:
    x = np.random.default_rng(11).standard_normal((2, 3, 4096)).astype(np.float32)
    x[0, 0] = 0.1 + 1e-3 * x[0, 0]  # nearly constant: a sum's worst case
    x[0, 1] += 100.0  # a mean far from zero: jax.jit's one-pass variance cancels
    x[1, 0, :2] = [-0.0, 0.0]
    return x


@pytest.mark.parametrize("form", ["two pass", "flax"])
def test_a_wide_norm_summed_in_blocks_becomes_one_op(form):
    """At 4096 columns the lowering sums each row in blocks (XLA's order): the blocked means are the norm's
    means too, so the norm becomes the op (3.1x jax.jit -> 1.2x on [16, 64, 4096], one thread; the guard's
    ReduceSumSquare is a pass of its own). ORT's kernel is no farther from the float64 result than jax.jit."""
    fn = (lambda x: _ln(x, _GW, _BW)) if form == "two pass" else (lambda x: _flax_ln(x, _GW, _BW))
    x = _wide_rows()
    ops, (got,) = _convert(fn, x, bodies=True)
    assert ops["LayerNormalization"] == 1 and ops["If"] == 1, ops
    want = np.asarray(jax.jit(fn)(x))
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    truth = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + (1e-5 if form == "two pass" else 1e-6))
    truth = truth * _GW + _BW
    assert np.abs(got - truth).max() <= max(np.abs(want - truth).max(), 2e-5)
    assert_same_floats(got[1], want[1], 1e-4, 2e-5)
