"""Layer forms for the random programs: the small JAX forms that the remaining ONNX rewrites match.

``ops.forms`` draws the forms of the first rewrites (GELU, masked softmax, pooling, a batch norm after a
conv). ``layers`` draws one of ``FORMS``, each written as real code writes it, named after the rule it
reaches: a clamp by ``jnp.where`` (``clamps``); a weight's gradient and grouped-query attention's einsums
(``einsum_order``); ``einsum('bhqk,bkhd->bqhd')`` (``matmul_order``); one-hot rows times a table
(``one_hot_rows``); a graph network's ``nodes[senders] @ w`` (``gather_matmul``); an embedding looked up by
``jnp.take`` (``gather_fill``); repeated key/value heads (``kv_broadcast``); ``jnp.repeat`` of rows
(``repeat_gathers``) and of an image's axes (``nearest_resize``); a 1x1 convolution to few channels
(``pointwise_conv``); a masked or softmax-weighted mean over rows (``weighted_sums``); ``jax.image.resize``
(``axis_products``); a mean over an NHWC activation's spatial axes (``column_sums``) and a group norm's
statistics (``broadcast_spans``); Equinox's vmapped ``W @ x`` (``weight_first``); heads merged to be scaled
and split back (``reshape_scale``); q's scale after its head split (``product_scale``); a product with a mask
of ones (``unit_scale``); Llama's output heads merged into the output projection (``head_merge``); LSTM and
GRU cells in ``lax.scan`` (``lstm``, ``gru``: the cells of ``models.ModelBuilder.cell``), unrolled at trace
time (``unrolled_steps``); Equinox's vmapped cells in a scan (``loop_weight_first``); an attention block
between head Transposes (``attention``: the program is then converted at opset 23).

Sizes stay small (the random programs' ``MAX_ELEMENTS``); the rules that need large tensors are the model
kind ``wide``'s (``models.ModelBuilder.wide``). Weights are closed-over constants, as in real models: the
seeded ``_w`` of ``program.WEIGHTS``, a share of them with edge values (NaN, infinities, -0.0, subnormals,
huge values); data are fresh inputs (a clamp's, sometimes an existing value), so the input sets' edge values
reach every form. Mostly float32, the dtype the rules rewrite; sometimes another float, where they must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from conformance.fuzz.ops import Made
from conformance.fuzz.program import FLOATS

if TYPE_CHECKING:
    from conformance.fuzz.generate import Builder
    from conformance.fuzz.program import FuzzProgram

ATTENTION_OPSET = 23  # the Attention op (rewrites.attention.MIN_OPSET)
EDGE_WEIGHTS = 0.25  # the share of weights that hold edge values
# constants a clamp stops at: one number other than zero (the rule leaves a tie of +0 with -0 to the Where)
CLAMP_AT = ("1.0", "-1.0", "0.5", "-0.5", "2.0", "-2.5", "6.0", "100.0", "1e-3", "65504.0")


def _float(b: "Builder", f32: float = 0.8) -> str:
    """float32 with probability ``f32``, else another float the program may hold."""
    others = [d for d in b.dtypes if d in FLOATS and d != "float32"]
    return "float32" if b.rng.random() < f32 or not others else b.rng.choice(others)


def _w(b: "Builder", shape: tuple[int, ...], dtype: str, scale: float | None = None) -> str:
    """A closed-over weight ``_w(seed, shape, dtype, scale, edge)`` (``program.WEIGHTS``); ``EDGE_WEIGHTS`` of
    them hold a few edge values."""
    if scale is None:
        scale = 1.0 / max(shape[0] if len(shape) > 1 else 1, 1) ** 0.5
    edge = b.rng.choice([0.02, 0.1]) if b.rng.random() < EDGE_WEIGHTS else 0.0
    return f"_w({b.rng.randrange(1 << 30)}, {tuple(shape)}, {dtype!r}, {scale:.4g}, {edge:g})"


def _batch(b: "Builder") -> int:
    """A batch of 2 or 3 mostly: the lowering merges an axis of one away, and the rules then have no batch."""
    return b.rng.choice([1, 2, 2, 2, 3, 3])


def clamps(b: "Builder") -> Made:
    """``jnp.where(x > c, c, x)`` in its spellings (the comparison either way round, ``>=``), both sides
    (``where(x > hi, hi, where(x < lo, lo, x))``, or ``maximum`` inside), ``jax.nn.hard_tanh``."""
    dtype = _float(b)
    x = b.pick(kinds="f", min_rank=1) if b.rng.random() < 0.5 else None
    if x is None or b.type(x).dtype != dtype:
        x = b.fresh(tuple(b.rng.choice([2, 3, 4, 5]) for _ in range(b.rng.randint(1, 3))), dtype)
    r = b.rng.random()
    if r < 0.15:
        return "hard_tanh", (x,), "jax.nn.hard_tanh({0})"
    if r < 0.4:
        lo, hi = sorted(b.rng.sample(CLAMP_AT, 2), key=float)
        inner = b.rng.choice([f"jnp.where({{0}} < {lo}, {lo}, {{0}})", f"jnp.maximum({{0}}, {lo})",
                              f"jnp.where({lo} >= {{0}}, {lo}, {{0}})"])
        return "clamp_where2", (x,), f"jnp.where({{0}} > {hi}, {hi}, {inner})"
    c = b.rng.choice(CLAMP_AT)
    cond = b.rng.choice([f"{{0}} > {c}", f"{{0}} >= {c}", f"{{0}} < {c}", f"{{0}} <= {c}", f"{c} < {{0}}",
                         f"{c} > {{0}}"])
    return "clamp_where", (x,), f"jnp.where({cond}, {c}, {{0}})"


def einsum_order(b: "Builder") -> Made:
    """The einsums of a training step and of grouped-query attention: a dense weight's gradient
    ``einsum('bsf,bsg->fg', x, dy)``, a head-split kernel's (Flax's DenseGeneral, ``[f, h, k]``), by
    ``jax.vjp`` too, and GQA's ``'btkgh,bskh->bkgts'`` and ``'bkgts,bskh->btkgh'``."""
    dtype = _float(b)
    n, s = _batch(b), b.rng.choice([2, 3, 4, 5])
    f, g = b.rng.choice([2, 3, 4, 6]), b.rng.choice([2, 3, 4, 5])
    form = b.rng.choice(["dense", "dense", "heads", "heads_vjp", "gqa_scores", "gqa_values"])
    if form == "dense":
        x, dy = b.fresh((n, s, f), dtype), b.fresh((n, s, g), dtype)
        return "weight_grad", (x, dy), b.rng.choice(["jnp.einsum('bsf,bsg->fg', {0}, {1})",
                                                     "jnp.einsum('bsg,bsf->fg', {1}, {0})"])
    h, k = b.rng.choice([1, 2, 3]), b.rng.choice([2, 4])
    if form == "heads":
        x, dy = b.fresh((n, s, f), dtype), b.fresh((n, s, h, k), dtype)
        return "heads_grad", (x, dy), "jnp.einsum('bsf,bshk->fhk', {0}, {1})"
    if form == "heads_vjp":
        x, w, dy = b.fresh((n, s, f), dtype), b.fresh((f, h, k), dtype), b.fresh((n, s, h, k), dtype)
        return "heads_vjp", (x, w, dy), \
            "jax.vjp(lambda w: jnp.einsum('bsd,dhk->bshk', {0}, w), {1})[1]({2})[0]"
    kv, grp, t = b.rng.choice([1, 2]), b.rng.choice([2, 3]), b.rng.choice([1, 2, 3])
    if form == "gqa_scores":
        q, key = b.fresh((n, t, kv, grp, k), dtype), b.fresh((n, s, kv, k), dtype)
        return "gqa_scores", (q, key), "jnp.einsum('btkgh,bskh->bkgts', {0}, {1})"
    p, v = b.fresh((n, kv, grp, t, s), dtype), b.fresh((n, s, kv, k), dtype)
    return "gqa_values", (p, v), "jnp.einsum('bkgts,bskh->btkgh', {0}, {1})"


def _ids(b: "Builder", rows: int, dtype: str) -> int:
    """Ids into ``rows`` rows (in range, negative, past the end: the index role's values)."""
    shape = b.rng.choice([(b.rng.choice([3, 5, 8]),), (b.rng.choice([1, 2]), b.rng.choice([3, 4]))])
    return b.fresh(shape, dtype, role=f"index:{rows}")


def one_hot_rows(b: "Builder") -> Made:
    """``one_hot(ids, V) @ table`` (Haiku's ONE_HOT embedding lookup), V >= 16."""
    dtype, v, d = _float(b, 0.9), b.rng.choice([16, 20, 32]), b.rng.choice([2, 3, 4, 8])
    ids = _ids(b, v, b.rng.choice(["int32", "int32", "int32", "int8"]))  # the rule reads int32 or int64 ids
    table = _w(b, (v, d), dtype, 1.0)
    return "one_hot_rows", (ids,), f"jax.nn.one_hot({{0}}, {v}, dtype=jnp.{dtype}) @ {table}"


def gather_fill(b: "Builder") -> Made:
    """``jnp.take(table, ids, axis=0)`` (Flax's Embed): out-of-range ids read its fill (NaN, or one given)."""
    dtype, v, d = _float(b), b.rng.choice([3, 5, 10]), b.rng.choice([2, 3, 4, 8])
    ids = _ids(b, v, b.index_dtype())
    fill = b.rng.choice(["", "", ", fill_value=0.0", ", fill_value=-1.0"])
    return "embed_take", (ids,), f"jnp.take({_w(b, (v, d), dtype, 1.0)}, {{0}}, axis=0{fill})"


def gather_matmul(b: "Builder") -> Made:
    """A graph network's messages ``nodes[senders] @ w``: more ids than rows."""
    dtype, n, d = _float(b), b.rng.choice([2, 3]), b.rng.choice([2, 3, 4, 8])
    shape = b.rng.choice([(n + 2,), (2, n + 1), (6,)])
    ids = b.fresh(shape, b.rng.choice(["int32", "int8"]), role=f"index:{n}")
    nodes = b.fresh((n, d), dtype)
    return "gathered_product", (nodes, ids), f"{{0}}[{{1}}] @ {_w(b, (d, b.rng.choice([1, 2, 3])), dtype)}"


def kv_broadcast(b: "Builder") -> Made:
    """Grouped-query attention's key/value heads repeated for the query heads (``jnp.repeat``, or indexing by
    ``[0, 0, 1, 1]``) before the scores' or the values' product."""
    dtype, n = _float(b, 0.85), _batch(b)
    kv, g, t = b.rng.choice([1, 2]), b.rng.choice([2, 3]), b.rng.choice([1, 2, 3])
    s, dh = b.rng.choice([2, 3, 4]), b.rng.choice([2, 4])
    form = b.rng.choice(["kv_scores", "kv_values", "kv_index"])
    rep = f"jnp.repeat({{1}}, {g}, axis=1)" if form != "kv_index" else \
        "{1}[:, %s]" % [h for h in range(kv) for _ in range(g)]
    if form == "kv_values":
        p, v = b.fresh((n, kv * g, t, s), dtype), b.fresh((n, kv, s, dh), dtype)
        return form, (p, v), f"{{0}} @ {rep}"
    q, k = b.fresh((n, kv * g, t, dh), dtype), b.fresh((n, kv, s, dh), dtype)
    scale = b.rng.choice(["", f" * {dh ** -0.5:.6g}"])
    return form, (q, k), f"({{0}} @ jnp.swapaxes({rep}, -1, -2)){scale}"


def repeat_gathers(b: "Builder") -> Made:
    """``jnp.repeat`` of rows of 16 elements or more, of a dtype other than float32 (whose repeats
    ``nearest_resize`` takes)."""
    dtype = b.rng.choice([d for d in b.dtypes if d not in ("float32", "bool")])
    n = b.rng.choice([1, 2])
    shape = b.rng.choice([(n, b.rng.choice([2, 3]), 16), (b.rng.choice([2, 3]), 4, 5), (n, 2, 4, 4)])
    axis = b.rng.randrange(len(shape) - 1)
    return "repeat_rows", (b.fresh(shape, dtype),), f"jnp.repeat({{0}}, {b.rng.choice([2, 3])}, axis={axis})"


def nearest_resize(b: "Builder") -> Made:
    """Nearest-neighbour upsampling of NCHW by whole factors: two ``jnp.repeat``, or ``jax.image.resize``."""
    n, c, h = b.rng.choice([1, 2]), b.rng.choice([1, 2, 3]), b.rng.choice([2, 3])
    w, k = b.rng.choice([2, 3, 4]), b.rng.choice([2, 3])
    x = b.fresh((n, c, h, w), _float(b))
    if b.rng.random() < 0.5:
        return "upsample", (x,), f"jnp.repeat(jnp.repeat({{0}}, {k}, axis=2), {k}, axis=3)"
    return "upsample", (x,), f"jax.image.resize({{0}}, {(n, c, k * h, k * w)}, 'nearest')"


def pointwise_conv(b: "Builder") -> Made:
    """A 1x1 convolution of NCHW to fewer than 16 channels (a segmentation head), a bias and ReLU or not."""
    dtype, n, c, o = _float(b), b.rng.choice([1, 2]), b.rng.choice([2, 3, 4, 8]), b.rng.choice([1, 2, 3])
    x = b.fresh((n, c, b.rng.choice([2, 3, 5]), b.rng.choice([3, 4, 6])), dtype)
    expr = f"lax.conv_general_dilated({{0}}, {_w(b, (o, c, 1, 1), dtype, c ** -0.5)}, (1, 1), 'VALID')"
    if b.rng.random() < 0.5:
        expr = f"jax.nn.relu({expr} + {_w(b, (o, 1, 1), dtype, 0.1)})"
    return "pointwise_conv", (x,), expr


def axis_products(b: "Builder") -> Made:
    """``jax.image.resize`` by weight matrices (bilinear, cubic, lanczos; up or down; NHWC or NCHW)."""
    n, c = b.rng.choice([1, 2]), b.rng.choice([1, 2, 3])
    h, w = b.rng.choice([2, 3, 4, 6]), b.rng.choice([2, 3, 4, 6])
    size = (b.rng.choice([max(1, h // 2), 2 * h, h + 1]), b.rng.choice([max(1, w // 2), 2 * w, w + 3]))
    method = b.rng.choice(["bilinear", "linear", "cubic", "lanczos3"])
    if b.rng.random() < 0.5:
        x, out = b.fresh((n, h, w, c), _float(b)), (n, *size, c)
    else:
        x, out = b.fresh((n, c, h, w), _float(b)), (n, c, *size)
    return "resize", (x,), f"jax.image.resize({{0}}, {out}, {method!r})"


def column_sums(b: "Builder") -> Made:
    """A mean, sum or variance over an NHWC activation's spatial axes (36 to 96 rows)."""
    n, h, w, c = b.rng.choice([1, 2]), b.rng.choice([6, 8, 12]), b.rng.choice([6, 8]), b.rng.choice([2, 3, 4])
    keep = ", keepdims=True" if b.rng.random() < 0.3 else ""
    return "spatial_sum", (b.fresh((n, h, w, c), _float(b)),), \
        f"jnp.{b.rng.choice(['mean', 'sum', 'var'])}({{0}}, axis=(1, 2){keep})"


def broadcast_spans(b: "Builder") -> Made:
    """A group norm's statistics over NHWC (Flax's GroupNorm without its scale): the channels split into
    groups, each group's mean (and variance) over the spatial axes and its channels, broadcast back."""
    groups, per = b.rng.choice([2, 4]), b.rng.choice([1, 2, 2, 4])
    shape = (b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), 4, groups * per)
    x = b.fresh(shape, _float(b))
    if b.rng.random() < 0.5:
        stats = ("(g - g.mean(axis=(1, 2, 4), keepdims=True)) * "
                 "lax.rsqrt(g.var(axis=(1, 2, 4), keepdims=True) + 1e-5)")
    else:
        stats = "g - g.mean(axis=(1, 2, 4), keepdims=True)"
    grouped = shape[:3] + (groups, per)
    return "group_stats", (x,), f"(lambda g: {stats})({{0}}.reshape({grouped})).reshape({shape})"


def weight_first(b: "Builder") -> Made:
    """Equinox's Linear: ``W @ x`` for one example, vmapped over batch and sequence; a bias sometimes."""
    dtype, n, t, k, o = _float(b), b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), b.rng.choice([2, 3, 4]), \
        b.rng.choice([2, 3, 5])
    bias = f" + {_w(b, (o,), dtype, 0.1)}" if b.rng.random() < 0.5 else ""
    return "vmap_linear", (b.fresh((n, t, k), dtype),), \
        f"jax.vmap(jax.vmap(lambda v: {_w(b, (o, k), dtype)} @ v))({{0}}){bias}"


def matmul_order(b: "Builder") -> Made:
    """Attention's ``einsum('bhqk,bkhd->bqhd', probs, v)``, which jnp traces with v on the left."""
    dtype, n, h = _float(b), b.rng.choice([1, 2]), b.rng.choice([1, 2, 3])
    t, s, d = b.rng.choice([2, 3, 4]), b.rng.choice([2, 3, 5]), b.rng.choice([2, 4])
    return "einsum_values", (b.fresh((n, h, t, s), dtype), b.fresh((n, s, h, d), dtype)), \
        "jnp.einsum('bhqk,bkhd->bqhd', {0}, {1})"


def weighted_sums(b: "Builder") -> Made:
    """A sum over rows weighted one number a row: by weights, by a softmax (attention pooling), by a mask (a
    sentence encoder's masked mean)."""
    dtype, n, t, d = _float(b), b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), b.rng.choice([2, 4])
    x = b.fresh((n, t, d), dtype)
    r = b.rng.random()
    if r < 0.35:
        return "weighted_rows", (x, b.fresh((n, t), dtype)), "({0} * {1}[..., None]).sum(axis=-2)"
    if r < 0.7:
        return "weighted_rows", (x, b.fresh((n, t), dtype)), \
            "jnp.sum(jax.nn.softmax({1}, -1)[..., None] * {0}, axis=1)"
    return "weighted_rows", (x, b.fresh((n, t), "bool")), \
        (f"({{0}} * {{1}}[..., None].astype(jnp.{dtype})).sum(1) / "
         f"jnp.maximum({{1}}.sum(1, keepdims=True), 1).astype(jnp.{dtype})")


def reshape_scale(b: "Builder") -> Made:
    """Heads merged to be scaled (or shifted) per feature or per position, then split again."""
    dtype, n, t, h, d = _float(b), b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), b.rng.choice([2, 3]), \
        b.rng.choice([2, 4])
    w = _w(b, b.rng.choice([(h * d,), (t, 1)]), dtype, 1.0)
    op = b.rng.choice(["*", "+", "-"])
    return "merged_scale", (b.fresh((n, t, h, d), dtype),), \
        f"({{0}}.reshape({n}, {t}, {h * d}) {op} {w}).reshape({n}, {t}, {h}, {d})"


def product_scale(b: "Builder") -> Made:
    """q's scale after its projection is split into heads: ``(x @ W).reshape(b, t, h, dh) * c`` (float32: the
    rule moves float32 scales only), heads moved first or not."""
    n, t, h, d = b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), b.rng.choice([1, 2, 3]), b.rng.choice([2, 4])
    scale = b.rng.choice([f"{d ** -0.5:.6g}", "0.5", "-2.0", "1e-3"])
    heads = f"({{0}} @ {_w(b, (h * d, h * d), 'float32')}).reshape({n}, {t}, {h}, {d}) * {scale}"
    return "scaled_heads", (b.fresh((n, t, h * d), "float32"),), \
        heads if b.rng.random() < 0.5 else f"jnp.swapaxes({heads}, 1, 2)"


def head_merge(b: "Builder") -> Made:
    """keras-hub Llama's attention output [b, h, d, q]: transposed to [b, q, d, h], merged, projected."""
    dtype, n, h, d, t = _float(b), b.rng.choice([1, 2]), b.rng.choice([2, 3, 4]), b.rng.choice([2, 4]), \
        b.rng.choice([2, 3, 4])
    x = b.fresh((n, h, d, t), dtype)
    w = _w(b, (d * h, b.rng.choice([2, 4, 5])), dtype)
    return "heads_out", (x,), f"jnp.transpose({{0}}, (0, 3, 2, 1)).reshape({n}, {t}, {d * h}) @ {w}"


def unit_scale(b: "Builder") -> Made:
    """A row broadcast to the batch by a product with a mask of ones (a constant), read by two ops."""
    dtype, rows, width = _float(b), b.rng.choice([2, 3, 4]), b.rng.choice([3, 4])
    x, y, z = b.fresh((1, width), dtype), b.fresh((rows, width), dtype), b.fresh((rows, width), dtype)
    ones = f"np.ones({(rows, width)}, jnp.{dtype})"
    return "ones_mask", (x, y, z), f"(lambda m: (m - {{1}}) * (m + {{2}}))({{0}} * {ones})"


def _cell_scan(b: "Builder", unrolled: bool, kinds: tuple[str, ...]) -> Made:
    """A cell of ``models.ModelBuilder.cell`` (closed-over weights) in ``lax.scan`` over a time-major
    sequence, unrolled at trace time (five or more steps) or not."""
    from conformance.fuzz.models import ModelBuilder

    dtype = _float(b, 0.85)
    # sizes of one are rare: the cell rules find no products to fuse in them
    t, n = b.rng.choice([5, 6] if unrolled else [2, 3, 5]), b.rng.choice([1, 2, 3])
    d, h = b.rng.choice([1, 2, 3, 4, 4]), b.rng.choice([2, 3, 4])
    mb = ModelBuilder(b.rng, dtype)
    mb.weight_inputs = False  # a weight as an input would be mb's input, not this program's
    body, carry, op = mb.cell(b.rng.choice(kinds), d, h, n)
    unroll, form = (", unroll=True", "cell_unrolled") if unrolled else ("", "cell_scan")
    return f"{form}_{op}", (b.fresh((t, n, d), dtype),), \
        f"lax.scan({body}, {carry}, {{0}}{unroll}){b.rng.choice(['[1]', '[1]', '[1][-1]'])}"


def lstm(b: "Builder") -> Made:
    return _cell_scan(b, False, ("lstm_fused", "lstm_flax", "lstm_haiku"))


def gru(b: "Builder") -> Made:
    return _cell_scan(b, False, ("gru_fused", "gru_flax", "gru_haiku", "rnn_tanh"))


def unrolled_steps(b: "Builder") -> Made:
    return _cell_scan(b, True, ("lstm_fused", "lstm_flax", "lstm_haiku", "gru_fused", "gru_flax", "gru_haiku",
                                "rnn_tanh"))


def loop_weight_first(b: "Builder") -> Made:
    """An Equinox cell in ``lax.scan``: ``jax.vmap`` of the cell on one example, ``W @ x`` (a tanh RNN,
    eqx.nn.GRUCell; eqx.nn.LSTMCell, whose carry is ``(h, c)``)."""
    dtype, t, n = _float(b, 0.85), b.rng.choice([2, 3, 5]), b.rng.choice([1, 2, 3])
    d, h = b.rng.choice([2, 3, 4]), b.rng.choice([2, 3, 4])
    sig = "(1 / (1 + jnp.exp(-({}))))" if b.rng.random() < 0.6 else "jax.nn.sigmoid({})"
    zeros = f"jnp.zeros(({n}, {h}), jnp.{dtype})"
    kind = b.rng.choice(["rnn", "gru", "lstm"])
    if kind == "lstm":
        i, f, g, o = (sig.format(f"z[{k * h}:{(k + 1) * h}]") if k != 2 else f"jnp.tanh(z[{2 * h}:{3 * h}])"
                      for k in range(4))
        wx, bias, wh = _w(b, (4 * h, d), dtype), _w(b, (4 * h,), dtype, 0.1), _w(b, (4 * h, h), dtype)
        cell = (f"(lambda z: (lambda c: ({o} * jnp.tanh(c), c))({f} * cc + {i} * {g}))"
                f"({wx} @ xx + {bias} + {wh} @ hh)")
        body = f"lambda s, xt: (lambda hc: (hc, hc[0]))(jax.vmap(lambda hh, cc, xx: {cell})(s[0], s[1], xt))"
        carry = f"({zeros}, {zeros})"
    else:
        if kind == "rnn":
            wx, wh, bias = _w(b, (h, d), dtype), _w(b, (h, h), dtype), _w(b, (h,), dtype, 0.1)
            cell = f"jnp.tanh({wx} @ xx + {wh} @ hh + {bias})"
        else:
            r, z = sig.format(f"ig[:{h}] + hg[:{h}]"), sig.format(f"ig[{h}:{2 * h}] + hg[{h}:{2 * h}]")
            wx, bias, wh = _w(b, (3 * h, d), dtype), _w(b, (3 * h,), dtype, 0.1), _w(b, (3 * h, h), dtype)
            cell = (f"(lambda ig, hg: (lambda r, z: (lambda n: n + z * (hh - n))(jnp.tanh(ig[{2 * h}:] + r * "
                    f"hg[{2 * h}:])))({r}, {z}))({wx} @ xx + {bias}, {wh} @ hh)")
        body = f"lambda s, xt: (lambda hn: (hn, hn))(jax.vmap(lambda hh, xx: {cell})(s, xt))"
        carry = zeros
    return f"eqx_scan_{kind}", (b.fresh((t, n, d), dtype),), \
        f"lax.scan({body}, {carry}, {{0}}){b.rng.choice(['[1]', '[1]', '[1][-1]'])}"


def attention(b: "Builder") -> Made:
    """Attention between head Transposes: q, k and v by constant weights, split into heads, scores scaled
    (multiplied or divided), a causal mask's fill (-inf, finfo.min, -1e9) or an additive mask or none,
    softmax, ``p @ v``, heads merged back. The program is converted at opset 23, where the Attention op is."""
    dtype = _float(b, 0.85)
    n, t, h, dh = _batch(b), b.rng.choice([2, 3, 4]), b.rng.choice([1, 2, 2, 2, 4]), b.rng.choice([2, 4])
    d = h * dh
    scale = b.rng.choice([f"{dh ** -0.5:.6g}", f"(1 / np.sqrt({dh}))"])
    scores = b.rng.choice([f"(q @ jnp.swapaxes(k, -1, -2)) * {scale}",
                           f"jnp.einsum('bhqd,bhkd->bhqk', q, k) / np.sqrt({dh})"])
    big = "-1e9" if dtype in ("float32", "float64") else "-1e4"
    fill = b.rng.choice(["-jnp.inf", f"jnp.finfo(jnp.{dtype}).min", big])
    tri = f"jnp.tril(jnp.ones(({t}, {t}), bool))"
    mask = b.rng.choice(["none", "causal", "causal", "additive"])
    if mask == "causal":
        scores = f"jnp.where({tri}, {scores}, {fill})"
    elif mask == "additive":
        scores = f"{scores} + jnp.where({tri}, 0.0, {fill}).astype(jnp.{dtype})"
    heads = f"({{0}} @ W).reshape({n}, {t}, {h}, {dh}).transpose(0, 2, 1, 3)"
    weights = ", ".join(_w(b, (d, d), dtype) for _ in range(3))
    b.program.opset = ATTENTION_OPSET
    block = f"(jax.nn.softmax({scores}, axis=-1) @ v).transpose(0, 2, 1, 3).reshape({n}, {t}, {d})"
    x = b.fresh((n, t, d), dtype)
    return "attention", (x,), f"(lambda q, k, v: {block})(*({heads} for W in ({weights})))"


# each form, named after the rule it reaches, and its weight (the cells fire their rule about half the time:
# Flax's and Haiku's forms, jax.nn.sigmoid where the rules read 1 / (1 + exp(-x)))
FORMS: dict[str, tuple[Callable[["Builder"], Made], float]] = {
    "clamps": (clamps, 1.0), "einsum_order": (einsum_order, 1.0), "one_hot_rows": (one_hot_rows, 1.0),
    "gather_fill": (gather_fill, 1.1), "gather_matmul": (gather_matmul, 1.1),
    "kv_broadcast": (kv_broadcast, 0.9), "repeat_gathers": (repeat_gathers, 1.0),
    "nearest_resize": (nearest_resize, 1.0), "pointwise_conv": (pointwise_conv, 0.9),
    "axis_products": (axis_products, 0.6), "column_sums": (column_sums, 1.1),
    "broadcast_spans": (broadcast_spans, 1.5), "weight_first": (weight_first, 0.9),
    "matmul_order": (matmul_order, 0.6), "weighted_sums": (weighted_sums, 1.0),
    "reshape_scale": (reshape_scale, 1.0), "product_scale": (product_scale, 0.9),
    "head_merge": (head_merge, 1.3), "unit_scale": (unit_scale, 1.0), "lstm": (lstm, 1.1), "gru": (gru, 1.0),
    "unrolled_steps": (unrolled_steps, 0.8), "loop_weight_first": (loop_weight_first, 1.0),
    "attention": (attention, 2.2),
}


def layers(b: "Builder") -> Made:
    """One of ``FORMS`` (a maker, as ``ops.MAKERS``' are)."""
    names = list(FORMS)
    name = b.rng.choices(names, weights=[FORMS[k][1] for k in names])[0]
    return FORMS[name][0](b)


def program(name: str, seed: int) -> "FuzzProgram | None":
    """The form ``name`` alone as a program (seeded as ``generate`` seeds one; its inputs are the form's), or
    None where jax rejects what the form drew."""
    import random

    from conformance.fuzz.generate import Builder, _typed_last
    from conformance.fuzz.program import Step

    rng = random.Random(seed)
    b = Builder(rng, x64=rng.random() < 0.25)
    made = FORMS[name][0](b)
    if made is None:
        return None
    op, args, expr = made
    step = Step(op, tuple(args), expr, b.program.new_id())
    b.program.steps.append(step)
    b.program.outputs = [step.out]
    typed = _typed_last(b.program)
    if typed is None:
        return None
    b.program.types[step.out] = typed
    return b.program
