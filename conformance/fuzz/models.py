"""Model-shaped programs: the layers jaxconv's ONNX rewrites match, with random sizes and edge values.

Random 2-8-op programs rarely take the shapes the graph rewrites look for (a Dense by a constant
weight, an attention block between head Transposes, a layer norm over the last axis, an LSTM cell in
a scan). ``generate_model`` draws a small model instead: feed-forward blocks (GELU, ReLU, SiLU,
SwiGLU; hidden widths that are multiples of 1024 and not), attention with causal and padding masks
(-inf, ``finfo.min`` and other fills), softmax / log_softmax heads, layer and RMS norms, LSTM and GRU
cells in ``lax.scan`` (fused hand-written, per-gate Flax-style, Haiku's; ``unroll=k``), the same cells unrolled
at trace time (a Python loop over time steps, ``unroll=True``) and a Python loop over stacked layer weights,
NHWC conv and pool chains, a classifier reading one row of its last layer, ``fori_loop`` with loop invariants or
reading and writing one row of a sequence a step, a mixture of experts (top-k routing, the experts' einsums) and
the real halves of small FFTs (FNet's token mixing), and the gradients a training step takes (``jax.vjp`` of
small CNNs and MLPs: ReLU's select, the pools' gradients, a convolution's weight gradient), some above the size
where the select rule fires; and a transformer layer at the sizes the size-bound rules need (``wide``: 64-128
tokens of width 256, head-major projections, a wide feed-forward with selects over its units, top-1 routed
experts), drawn twice as often as another kind. ``layers.py`` draws the small forms of the other rules into the
random programs.

Weights are mostly closed-over constants (the rules match constant weights), written as
``_w(seed, shape, dtype, scale, edge)``: seeded normal values, a share ``edge`` of them replaced by
edge values (NaN, +-inf, +-FLT_MAX, -0.0, subnormals), so edge values also reach the rewritten
places through the weights. Some weights are function inputs instead. Each layer is one step, so
the minimiser can cut a failing model down layer by layer.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence

from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types

KINDS = ("mlp", "encoder", "decoder", "classifier", "lstm", "gru", "cnn", "loop", "heads", "unrolled", "moe",
         "fft", "deep_rnn", "train", "conv1d", "wide_norm", "wide", "optimizer")
# The kinds a model program draws from when none are named: ``wide`` twice, the one kind of the rules that
# need its sizes (attention_heads, dense_bias, select_gathers, where_products, expert_split)
DRAWN = KINDS + ("wide",)
HIDDEN_1024 = (1024, 2048)
MAX_INPUT_WEIGHT = 4096  # a weight made a function input holds at most this many elements


class ModelBuilder:
    """The program under construction; ``step`` appends one layer, ``w`` writes a weight."""

    def __init__(self, rng: random.Random, dtype: str, symbolic: bool = False) -> None:
        self.rng = rng
        self.dtype = dtype
        self.symbolic = symbolic  # the inputs' batch axes exported as a symbolic size
        self.program = FuzzProgram(family="model")
        self.args: list[int] = []
        # the program's share of edge values in constants: most programs have none, some a few, some many
        self.edge = rng.choice([0.0, 0.0, 0.0, 0.001, 0.01, 0.05])
        self.weight_inputs = rng.random() < 0.3
        self.exact_sigmoid = False
        self.opsets: tuple[int | None, ...] = (None, 23)  # the opsets the program is converted at, one drawn

    def input(self, shape: tuple[int, ...], dtype: str | None = None, role: str = "", batch_axis: int | None = None) -> int:
        """A function input; ``batch_axis``: the axis that holds the batch (symbolic in a symbolic program)."""
        v = self.program.new_id()
        self.program.types[v] = Value(tuple(shape), dtype or self.dtype, role, batch_axis if self.symbolic else None)
        self.program.inputs.append(v)
        return v

    def lead(self, b: int) -> str:
        """A reshape target's batch entry: ``-1`` where the batch is symbolic."""
        return "-1" if self.symbolic else str(b)

    def batch_of(self, v: int, axis: int, b: int) -> int | str:
        """The batch size as a step writes it: ``b``, or input ``v``'s size on ``axis`` where it is symbolic."""
        return f"{self.ref(v)}.shape[{axis}]" if self.symbolic else b

    def ref(self, v: int) -> str:
        """``{k}`` naming value ``v`` in the step being written."""
        if v not in self.args:
            self.args.append(v)
        return "{" + str(self.args.index(v)) + "}"

    def w(self, shape: tuple[int, ...], scale: float | None = None, edge: float | None = None,
          may_input: bool = True) -> str:
        """A weight: a closed-over constant, or (sometimes) a function input of that shape."""
        n = 1
        for d in shape:
            n *= d
        if may_input and self.weight_inputs and n <= MAX_INPUT_WEIGHT and self.rng.random() < 0.4:
            return self.ref(self.input(shape))
        if scale is None:
            scale = 1.0 / max(shape[0] if len(shape) > 1 else 1, 1) ** 0.5
        e = self.edge if edge is None else edge
        if e and self.rng.random() < 0.5:
            e = 0.0  # not every weight of an edge program is broken: the others keep the values finite
        return f"_w({self.rng.randrange(1 << 30)}, {tuple(shape)}, {self.dtype!r}, {scale:.4g}, {e:g})"

    def bias(self, n: int) -> str:
        r = self.rng.random()
        if r < 0.15:
            return f"jnp.zeros({n}, jnp.{self.dtype})"  # zero_bias drops it, as XLA does
        if r < 0.2:
            return f"jnp.full({n}, -0.0, jnp.{self.dtype})"
        return self.w((n,), 0.1)

    def step(self, op: str, expr: str, shape: tuple[int, ...], dtype: str | None = None) -> int:
        v = self.program.new_id()
        self.program.steps.append(Step(op, tuple(self.args), expr, v))
        self.program.types[v] = Value(tuple(shape), dtype or self.dtype)
        self.args = []
        return v

    def sig(self, z: str) -> str:
        """A sigmoid in the form ``cell`` drew for its gates (the GRU rule reads ``1 / (1 + exp(-z))``)."""
        return f"(1 / (1 + jnp.exp(-({z}))))" if self.exact_sigmoid else f"jax.nn.sigmoid({z})"

    # -- layers -----------------------------------------------------------------------------------

    def dense(self, x: int, shape: tuple[int, ...], out: int, op: str = "dense") -> int:
        d = shape[-1]
        form = self.rng.random()
        if form < 0.1 and len(shape) == 3:  # Equinox's Linear, W @ x vmapped over batch and sequence
            expr = (f"jax.vmap(jax.vmap(lambda v: {self.w((out, d), 1.0 / d ** 0.5, may_input=False)} @ v))({self.ref(x)})"
                    f" + {self.bias(out)}")
        elif form < 0.2:
            expr = f"jnp.einsum('...d,df->...f', {self.ref(x)}, {self.w((d, out))}) + {self.bias(out)}"
        elif form < 0.25:
            expr = f"{self.ref(x)} @ {self.w((d, out))}"
        else:
            expr = f"{self.ref(x)} @ {self.w((d, out))} + {self.bias(out)}"
        return self.step(op, expr, shape[:-1] + (out,))

    def act(self, x: int, shape: tuple[int, ...], name: str) -> int:
        fn = {"gelu_tanh": "jax.nn.gelu({0}, approximate=True)", "gelu_exact": "jax.nn.gelu({0}, approximate=False)",
              "relu": "jax.nn.relu({0})", "relu_max": "jnp.maximum({0}, 0.0)", "silu": "jax.nn.silu({0})",
              "tanh": "jnp.tanh({0})", "hard_swish": "jax.nn.hard_swish({0})"}[name]
        return self.step(name, fn.format(self.ref(x)), shape)

    def hidden_width(self, d: int) -> int:
        r = self.rng.random()
        if r < 0.45:
            return self.rng.choice(HIDDEN_1024)
        return self.rng.choice([4 * d, 3 * d + 1, 96, 1000, 1536, 2 * d])

    def feed_forward(self, x: int, shape: tuple[int, ...]) -> int:
        d = shape[-1]
        hidden = self.hidden_width(d)
        kind = self.rng.choice(["gelu_tanh", "gelu_exact", "relu", "relu_max", "silu", "swiglu", "swiglu_fused"])
        hshape = shape[:-1] + (hidden,)
        if kind == "swiglu":
            g = self.dense(x, shape, hidden, "dense_gate")
            u = self.dense(x, shape, hidden, "dense_up")
            h = self.step("swiglu", f"jax.nn.silu({self.ref(g)}) * {self.ref(u)}", hshape)
        elif kind == "swiglu_fused":
            gu = self.step("dense_gate_up", f"{self.ref(x)} @ {self.w((d, 2 * hidden))}", shape[:-1] + (2 * hidden,))
            h = self.step("swiglu_split", f"(lambda g, u: jax.nn.silu(g) * u)(*jnp.split({self.ref(gu)}, 2, axis=-1))",
                          hshape)
        else:
            h = self.act(self.dense(x, shape, hidden, "dense_up"), hshape, kind)
        return self.dense(h, hshape, d, "dense_down")

    def norm(self, x: int, shape: tuple[int, ...]) -> int:
        d = shape[-1]
        eps = self.rng.choice(["1e-5", "1e-6", "1e-12", "0.0"])
        r = self.rng.random()
        g = f"jnp.ones({d}, jnp.{self.dtype})" if r < 0.2 else self.w((d,), 1.0)
        b = self.bias(d)
        x_ = self.ref(x)
        form = self.rng.choice(["two_pass", "one_pass", "var", "keras", "rms", "rms_f32"])
        if form == "two_pass":
            expr = (f"(lambda c: c / jnp.sqrt(jnp.mean(c * c, -1, keepdims=True) + {eps}) * {g} + {b})"
                    f"({x_} - jnp.mean({x_}, -1, keepdims=True))")
        elif form == "one_pass":  # flax.linen.LayerNorm
            expr = (f"(lambda m, m2: ({x_} - m) * lax.rsqrt(jnp.maximum(m2 - m * m, 0.0) + {eps}) * {g} + {b})"
                    f"(jnp.mean({x_}, -1, keepdims=True), jnp.mean(lax.square({x_}), -1, keepdims=True))")
        elif form == "var":
            expr = (f"({x_} - jnp.mean({x_}, -1, keepdims=True)) * lax.rsqrt(jnp.var({x_}, -1, keepdims=True) + {eps})"
                    f" * {g} + {b}")
        elif form == "keras":  # keras.ops.layer_normalization: the mean folded into the offset
            expr = (f"(lambda inv: {x_} * inv + (-jnp.mean({x_}, -1, keepdims=True) * inv + {b}))"
                    f"(lax.rsqrt(jnp.var({x_}, -1, keepdims=True) + {eps}) * {g})")
        elif form == "rms":
            expr = f"{x_} * lax.rsqrt(jnp.mean(jnp.square({x_}), -1, keepdims=True) + {eps}) * {g}"
        else:
            expr = (f"({x_}.astype(jnp.float32) * lax.rsqrt(jnp.mean(jnp.square({x_}.astype(jnp.float32)), -1, "
                    f"keepdims=True) + {eps})).astype(jnp.{self.dtype}) * {g}")
        return self.step(f"norm_{form}", expr, shape)

    def fill(self) -> str:
        fills = ["-jnp.inf", f"jnp.finfo(jnp.{self.dtype}).min", "-1e4"]
        if self.dtype in ("float32", "bfloat16"):
            fills.append("-1e9")
        return self.rng.choice(fills)

    def attention(self, x: int, shape: tuple[int, ...], causal: bool) -> int:
        b, t, d = shape
        heads = self.rng.choice([h for h in (1, 2, 4, 8) if d % h == 0])
        dh = d // heads
        fused = self.rng.random() < 0.35
        if fused:
            qkv = self.step("dense_qkv", f"{self.ref(x)} @ {self.w((d, 3 * d))} + {self.bias(3 * d)}", (b, t, 3 * d))
            q, k, v = (self.step(f"split_{n}", f"jnp.split({self.ref(qkv)}, 3, axis=-1)[{i}]", shape)
                       for i, n in enumerate("qkv"))
        else:
            q, k, v = (self.dense(x, shape, d, f"dense_{n}") for n in "qkv")
        heads_shape = (b, heads, t, dh)
        q, k, v = (self.step(f"heads_{n}", f"{self.ref(u)}.reshape({self.lead(b)}, {t}, {heads}, {dh}).transpose(0, 2, 1, 3)",
                             heads_shape) for n, u in zip("qkv", (q, k, v)))
        if dh % 2 == 0 and self.rng.random() < 0.3:  # interleaved rotary embedding (RoFormer, GPT-J)
            cos, sin = self.w((t, dh), 1.0, may_input=False), self.w((t, dh), 1.0, may_input=False)
            q, k = (self.step(f"rotary_{n}", f"{self.ref(u)} * {cos} + jnp.stack([-{self.ref(u)}[..., 1::2], "
                              f"{self.ref(u)}[..., ::2]], -1).reshape({self.lead(b)}, {heads}, {t}, {dh}) * {sin}", heads_shape)
                    for n, u in zip("qk", (q, k)))
        scale = self.rng.choice([f"{dh ** -0.5:.6g}", f"(1 / np.sqrt({dh}))"])
        if self.rng.random() < 0.5:
            s = self.step("scores", f"({self.ref(q)} @ jnp.swapaxes({self.ref(k)}, -1, -2)) * {scale}", (b, heads, t, t))
        else:
            s = self.step("scores", f"jnp.einsum('bhqd,bhkd->bhqk', {self.ref(q) + ' * ' + scale}, {self.ref(k)})",
                          (b, heads, t, t))
        fill = self.fill()
        mask_kind = self.rng.choice(["causal", "causal", "padding", "both", "additive", "none"]) if causal else \
            self.rng.choice(["padding", "additive_padding", "none", "none"])
        keeps = []  # the mask's parts: keras zeroes their dropped places again after its softmax
        if mask_kind in ("causal", "both"):
            tri = f"jnp.tril(jnp.ones(({t}, {t}), bool))"
            if self.rng.random() < 0.3:
                tri = f"(jnp.arange({t})[:, None] >= jnp.arange({t})[None, :])"
            s = self.step("causal_mask", f"jnp.where({tri}, {self.ref(s)}, {fill})", (b, heads, t, t))
            keeps.append(tri)
        if mask_kind == "additive":
            s = self.step("causal_bias", f"{self.ref(s)} + jnp.where(jnp.tril(jnp.ones(({t}, {t}), bool)), 0.0, {fill})"
                          f".astype(jnp.{self.dtype})", (b, heads, t, t))
            keeps.append(f"jnp.tril(jnp.ones(({t}, {t}), bool))")
        if mask_kind in ("padding", "both", "additive_padding"):
            if self.rng.random() < 0.6 or self.symbolic:
                m = self.ref(self.input((b, t), "bool", batch_axis=0))
            else:
                lengths = [self.rng.randint(1, t) for _ in range(b)]
                m = f"(jnp.arange({t})[None, :] < jnp.array({lengths})[:, None])"
            if mask_kind == "additive_padding":
                s = self.step("padding_bias", f"{self.ref(s)} + jnp.where({m}[:, None, None, :], 0.0, {fill})"
                              f".astype(jnp.{self.dtype})", (b, heads, t, t))
            else:
                s = self.step("padding_mask", f"jnp.where({m}[:, None, None, :], {self.ref(s)}, {fill})",
                              (b, heads, t, t))
            keeps.append(f"{m}[:, None, None, :]")
        if self.dtype != "float32" and self.rng.random() < 0.5:
            p = self.step("softmax_f32", f"jax.nn.softmax({self.ref(s)}.astype(jnp.float32), axis=-1).astype(jnp.{self.dtype})",
                          (b, heads, t, t))
        else:
            p = self.step("softmax", f"jax.nn.softmax({self.ref(s)}, axis=-1)", (b, heads, t, t))
        if keeps and self.rng.random() < 0.35:  # keras: where(mask, p, 0), or the drop mask's where(~mask, 0, p)
            keep = " & ".join(f"({k})" for k in keeps)
            expr = f"jnp.where({keep}, {self.ref(p)}, 0.0)" if self.rng.random() < 0.5 else \
                f"jnp.where(~({keep}), 0.0, {self.ref(p)})"
            p = self.step("rezero", f"{expr}.astype(jnp.{self.dtype})", (b, heads, t, t))
        o = self.step("attend", f"({self.ref(p)} @ {self.ref(v)}).transpose(0, 2, 1, 3).reshape({self.lead(b)}, {t}, {d})", shape)
        return self.dense(o, shape, d, "dense_out")

    def block(self, x: int, shape: tuple[int, ...], causal: bool) -> int:
        pre = self.rng.random() < 0.5
        if pre:
            a = self.attention(self.norm(x, shape), shape, causal)
            x = self.step("residual", f"{self.ref(x)} + {self.ref(a)}", shape)
            f = self.feed_forward(self.norm(x, shape), shape)
            return self.step("residual", f"{self.ref(x)} + {self.ref(f)}", shape)
        a = self.attention(x, shape, causal)
        x = self.norm(self.step("residual", f"{self.ref(x)} + {self.ref(a)}", shape), shape)
        f = self.feed_forward(x, shape)
        return self.norm(self.step("residual", f"{self.ref(x)} + {self.ref(f)}", shape), shape)

    def head(self, x: int, shape: tuple[int, ...]) -> int:
        classes = self.rng.choice([2, 3, 10])
        logits = self.dense(x, shape, classes, "dense_head")
        r = self.rng.random()
        out_shape = shape[:-1] + (classes,)
        if r < 0.35:
            return self.step("softmax", f"jax.nn.softmax({self.ref(logits)}, axis=-1)", out_shape)
        if r < 0.7:
            return self.step("log_softmax", f"jax.nn.log_softmax({self.ref(logits)}, axis=-1)", out_shape)
        return logits

    # -- models -----------------------------------------------------------------------------------

    def tokens(self, d: int | None = None) -> tuple[int, tuple[int, ...]]:
        d = d or self.rng.choice([4, 8, 16, 32, 64])
        b, t = self.rng.choice([1, 2, 3]), self.rng.choice([1, 2, 3, 5, 8])
        if self.rng.random() < 0.2:  # 64 rows or more: the k_blocks rule's least (MIN_ROWS)
            b, t, d = 2, self.rng.choice([32, 64]), self.rng.choice([4, 8, 16])
        if self.rng.random() < 0.2:  # a text model's first layer: ids looked up in a table
            return self.embedded_tokens((b, t, d))
        return self.input((b, t, d), batch_axis=0), (b, t, d)

    def mlp(self) -> None:
        d = self.rng.choice([4, 8, 16, 32, 64])
        r = self.rng.random()
        shape = (self.rng.choice([1, 2, 4, 8]), d) if r < 0.4 else (2, 3, d) if r < 0.7 else \
            (self.rng.choice([64, 128]), min(d, 16))  # the k_blocks rule needs 64 rows (128 after a norm)
        x = self.input(shape, batch_axis=0)
        for _ in range(self.rng.choice([1, 1, 2])):
            f = self.feed_forward(x, shape)
            x = self.step("residual", f"{self.ref(x)} + {self.ref(f)}", shape) if self.rng.random() < 0.5 else f
            if self.rng.random() < 0.5:
                x = self.norm(x, shape)
        self.head(x, shape)

    def wide_norm(self) -> None:
        """Norms over rows longer than 1024 (a 7B model's 4096; 4100 pads the last block): the lowering sums such
        rows in blocks, which the norm rules read as their means; residuals between, a head after."""
        shape = (self.rng.choice([1, 2]), self.rng.choice([1, 3]), self.rng.choice([1025, 2048, 4096, 4100]))
        x = self.input(shape, batch_axis=0)
        for _ in range(self.rng.choice([1, 2])):
            y = self.norm(x, shape)
            x = self.step("residual", f"{self.ref(x)} + {self.ref(y)}", shape) if self.rng.random() < 0.5 else y
        self.head(x, shape)

    def encoder(self, causal: bool) -> None:
        x, shape = self.tokens()
        for _ in range(self.rng.choice([1, 1, 2])):
            x = self.block(x, shape, causal)
        if self.rng.random() < 0.5:
            self.head(x, shape)

    def embedded_tokens(self, shape: tuple[int, int, int] | None = None) -> tuple[int, tuple[int, ...]]:
        """Token ids looked up in a table, by a one-hot product (the accelerators' way) or by a gather; ``shape``
        (batch, length, width), else a small one."""
        b, t, d = shape or (self.rng.choice([1, 2, 3]), self.rng.choice([1, 3, 8]), self.rng.choice([4, 8, 16]))
        vocab = self.rng.choice([5, 20, 64])
        ids = self.ref(self.input((b, t), "int32", batch_axis=0))
        lookup = self.rng.choice(["jax.nn.one_hot({0}, {1}, dtype=jnp.{3}) @ {2}", "jnp.take({2}, {0}, axis=0)"])
        return self.step("embed", lookup.format(ids, vocab, self.w((vocab, d), 1.0, may_input=False), self.dtype),
                         (b, t, d)), (b, t, d)

    def classifier(self) -> None:
        x, shape = self.embedded_tokens() if self.rng.random() < 0.3 else self.tokens()
        x = self.block(x, shape, causal=self.rng.random() < 0.3)
        b, t, d = shape
        pooling = self.rng.choice(["row", "row", "masked_mean", "attention_pool"])
        if pooling == "masked_mean":  # a sentence encoder's mean over the tokens its mask keeps
            mask = self.ref(self.input((b, t), "bool", batch_axis=0))
            r = self.step("masked_mean", f"({self.ref(x)} * {mask}[..., None].astype(jnp.{self.dtype})).sum(1) / "
                          f"jnp.maximum({mask}.sum(1, keepdims=True), 1).astype(jnp.{self.dtype})", (b, d))
            rshape = (b, d)
        elif pooling == "attention_pool":
            scores = self.ref(self.input((b, t), batch_axis=0))
            r = self.step("attention_pool", f"jnp.sum(jax.nn.softmax({scores}, -1)[..., None] * {self.ref(x)}, axis=1)",
                          (b, d))
            rshape = (b, d)
        else:
            row = self.rng.choice(["{0}[:, 0]", "{0}[:, 0, :]", "{0}[:, -1]", "{0}[:, :1]"])
            r = self.step("row_slice", row.format(self.ref(x)), (b, 1, d) if ":1]" in row else (b, d))
            rshape = (b, 1, d) if ":1]" in row else (b, d)
        if self.rng.random() < 0.5:
            r = self.act(self.dense(r, rshape, d, "dense_pooler"), rshape, "tanh")
        self.head(r, rshape)

    def heads(self) -> None:
        """Attention logits straight into a masked softmax / log_softmax (no projections)."""
        b, h, t = self.rng.choice([1, 2]), self.rng.choice([1, 2, 4]), self.rng.choice([2, 3, 4, 8])
        s = self.input((b, h, t, t), batch_axis=0)
        fill = self.fill()
        s = self.step("causal_mask", f"jnp.where(jnp.tril(jnp.ones(({t}, {t}), bool), {self.rng.choice([0, 0, 1, -1])}),"
                      f" {self.ref(s)}, {fill})", (b, h, t, t))
        fn = self.rng.choice(["softmax", "log_softmax"])
        p = self.step(fn, f"jax.nn.{fn}({self.ref(s)}, axis=-1)", (b, h, t, t))
        if self.rng.random() < 0.5:
            dh = self.rng.choice([2, 4, 8])
            v = self.input((b, h, t, dh), batch_axis=0) if self.rng.random() < 0.5 or self.symbolic else None
            vv = self.ref(v) if v is not None else self.w((b, h, t, dh), 1.0)
            self.step("attend", f"{self.ref(p)} @ {vv}", (b, h, t, dh))

    def cell(self, kind: str, d: int, h: int, b: int | str) -> tuple[str, str, str]:
        """A recurrent cell: a ``lax.scan`` body ``lambda carry, xt: (carry, y)``, its first carry, its name.

        Kinds: ``rnn_tanh``; ``lstm_fused`` (one product, jax's (i, f, g, o) columns), ``lstm_flax`` (one
        Dense per gate), ``lstm_haiku`` (``concat([x, h]) @ W``, forget bias 1); ``gru_fused`` (reset before
        the product, ONNX's default), ``gru_flax`` (reset after it), ``gru_haiku`` (``(1 - z) * h + z * n``).
        ``b``: the batch, a size or (symbolic) an expression of an input's shape.
        """
        self.exact_sigmoid = self.rng.random() < 0.5  # one form for every gate of the cell
        sig = self.sig
        zeros = f"jnp.zeros(({b}, {h}), jnp.{self.dtype})"
        if self.rng.random() < 0.7:
            init = zeros
        elif isinstance(b, str):  # a learned initial state, broadcast over the symbolic batch
            init = f"jnp.broadcast_to({self.w((h,), 1.0)}, ({b}, {h}))"
        else:
            init = self.w((b, h), 1.0)
        if kind == "rnn_tanh":
            body = (f"lambda s, xt: (lambda hn: (hn, hn))(jnp.tanh(xt @ {self.w((d, h))} + "
                    f"s @ {self.w((h, h))} + {self.bias(h)}))")
            return body, init, kind
        if kind == "lstm_fused":
            wx, wh, bias = self.w((d, 4 * h)), self.w((h, 4 * h)), self.bias(4 * h)
            body = (f"lambda hc, xt: (lambda i, f, g, o: (lambda c: ((lambda hn: ((hn, c), hn))("
                    f"{sig('o')} * jnp.tanh(c))))({sig('f')} * hc[1] + {sig('i')} * jnp.tanh(g)))("
                    f"*jnp.split(xt @ {wx} + hc[0] @ {wh} + {bias}, 4, axis=-1))")
            return body, f"({init}, {zeros})", kind
        if kind == "lstm_flax":  # flax.linen.LSTMCell: carry (c, h)
            gates = {g: (self.w((d, h)), self.w((h, h)), self.bias(h)) for g in "ifgo"}

            def pre(g: str) -> str:
                wi, whh, bb = gates[g]
                return f"xt @ {wi} + (ch[1] @ {whh} + {bb})"
            body = (f"lambda ch, xt: (lambda c: (lambda hn: ((c, hn), hn))({sig(pre('o'))} * jnp.tanh(c)))"
                    f"({sig(pre('f'))} * ch[0] + {sig(pre('i'))} * jnp.tanh({pre('g')}))")
            return body, f"({zeros}, {init})", kind
        if kind == "lstm_haiku":  # hk.LSTM: carry (h, c), columns (i, g, f, o), the forget gate's bias 1
            w, bias = self.w((d + h, 4 * h)), self.bias(4 * h)
            body = (f"lambda hc, xt: (lambda i, g, f, o: (lambda c: (lambda hn: ((hn, c), hn))("
                    f"{sig('o')} * jnp.tanh(c)))({sig('f + 1')} * hc[1] + {sig('i')} * jnp.tanh(g)))("
                    f"*jnp.split(jnp.concatenate([xt, hc[0]], -1) @ {w} + {bias}, 4, axis=-1))")
            return body, f"({init}, {zeros})", kind
        if kind in ("gru_fused", "gru_haiku"):
            # gru_fused: r, z columns, (1 - z) * n + z * h; hk.GRU: z, r columns, (1 - z) * h + z * n
            wx, wh, un, bias = self.w((d, 3 * h)), self.w((h, 2 * h)), self.w((h, h)), self.bias(3 * h)
            fused = kind == "gru_fused"
            gates, update = ("r, z", "(1 - z) * n + z * s") if fused else ("z, r", "(1 - z) * s + z * n")
            body = (f"lambda s, xt: (lambda gx: (lambda {gates}: (lambda n: ({update},) * 2)("
                    f"jnp.tanh(gx[..., {2 * h}:] + (r * s) @ {un})))("
                    f"*jnp.split({sig(f'gx[..., :{2 * h}] + s @ {wh}')}, 2, axis=-1)))(xt @ {wx} + {bias})")
            return body, init, kind
        # flax.linen.GRUCell: r, z, n Dense per gate; linear_before_reset
        ir_, iz, in_ = (self.w((d, h)) for _ in range(3))
        hr, hz, hn = (self.w((h, h)) for _ in range(3))
        bir, biz, bin_, bhn = (self.bias(h) for _ in range(4))
        body = (f"lambda s, xt: (lambda r, z: (lambda n: ((1 - z) * n + z * s,) * 2)("
                f"jnp.tanh(xt @ {in_} + {bin_} + r * (s @ {hn} + {bhn}))))("
                f"{sig(f'xt @ {ir_} + {bir} + s @ {hr}')}, {sig(f'xt @ {iz} + {biz} + s @ {hz}')})")
        return body, init, "gru_flax"

    def rnn(self, cell: str) -> None:
        """A cell in ``lax.scan`` (sometimes ``unroll=k``, the input projection left in the body); GRUs of
        the small sizes the GRU op takes (B 1-4, H up to 128) too."""
        # size-1 dims are rare: the LSTM and GRU rules do not match them (no products to fuse)
        k = self.rng.choice([2, 3, 4]) if self.rng.random() < 0.25 else 0
        # with unroll=k: two or more trips of k steps, sometimes steps left over (jax runs them after the loop)
        t = self.rng.choice([6, 8, 9, 12, 16] if k else [1, 2, 3, 5, 5])
        b = self.rng.choice([1, 2, 3, 4])
        d = self.rng.choice([1, 2, 3, 4, 4, 8, 16])
        h = self.rng.choice([1, 2, 3, 3, 4, 8, 16, 32] + ([64, 128] if cell == "gru" else []))
        batch_major = self.rng.random() < 0.3
        xs = self.input((b, t, d) if batch_major else (t, b, d), batch_axis=0 if batch_major else 1)
        seq = f"jnp.swapaxes({self.ref(xs)}, 0, 1)" if batch_major else self.ref(xs)
        kinds = ["lstm_fused", "lstm_flax"] if cell == "lstm" else ["gru_fused", "gru_flax", "gru_haiku"]
        body, carry, op = self.cell(self.rng.choice(kinds), d, h, self.batch_of(xs, 0 if batch_major else 1, b))
        unroll = f", unroll={k}" + (", reverse=True" if self.rng.random() < 0.3 else "") if k else ""
        if self.rng.random() < 0.5:
            expr = f"lax.scan({body}, {carry}, {seq}{unroll})[1]"
            shape: tuple[int, ...] = (t, b, h)
        else:
            expr = f"lax.scan({body}, {carry}, {seq}{unroll})[1][-1]"
            shape = (b, h)
        y = self.step(op, expr, shape)
        if self.rng.random() < 0.5:
            self.head(y, shape)

    def deep_rnn(self) -> None:
        """Two or three stacked cells in one ``lax.scan`` step (``hk.DeepRNN``, a multi-layer LSTM written by
        hand): each layer reads the new output of the layer below it at the same step; sometimes a layer
        also reads the state of the one above it at the previous step (feedback: no layer-by-layer split)."""
        t, b = self.rng.choice([3, 5, 8]), self.rng.choice([1, 2, 3])
        d = self.rng.choice([2, 3, 4, 8])
        sizes = [self.rng.choice([2, 3, 4, 8, 16]) for _ in range(self.rng.choice([2, 2, 3]))]
        kinds = ["rnn_tanh", "lstm_fused", "lstm_flax", "lstm_haiku", "gru_fused", "gru_flax", "gru_haiku"]
        xs = self.input((t, b, d), batch_axis=1)
        cells = []
        width = d
        for h in sizes:
            cells.append(self.cell(self.rng.choice(kinds), width, h, self.batch_of(xs, 1, b)))
            width = h
        feedback = self.rng.random() < 0.2
        # the step: r_i = cell_i(carry[i], input_i); the carry is the tuple of every layer's carry
        inner = "((" + ", ".join(f"r{i}[0]" for i in range(len(cells))) + ",), r" + str(len(cells) - 1) + "[1])"
        between = self.rng.choice(["", "", "jax.nn.relu", "jnp.tanh", "0.5 * "])  # applied to a layer's output
        for i in reversed(range(len(cells))):
            arg = "xt" if i == 0 else f"{between}(r{i - 1}[1])"
            if i == 0 and feedback and len(cells) > 1:
                top = sizes[-1]
                arg = f"xt + jnp.mean(_top(cs[{len(cells) - 1}]), axis=-1, keepdims=True)[..., :1] * {1.0 / top}"
            inner = f"(lambda r{i}: {inner})(({cells[i][0]})(cs[{i}], {arg}))"
        top_of = "(lambda c: c[0] if isinstance(c, tuple) else c)"
        body = f"lambda cs, xt: (lambda _top: {inner})({top_of})"
        carry = "(" + ", ".join(c[1] for c in cells) + ",)"
        last = self.rng.random() < 0.4
        unroll = f", unroll={self.rng.choice([2, 4])}" if t >= 4 and self.rng.random() < 0.25 else ""
        scan = f"lax.scan({body}, {carry}, {self.ref(xs)}, reverse={self.rng.random() < 0.2}{unroll})[1]"
        expr, shape = (f"{scan}[-1]", (b, sizes[-1])) if last else (scan, (t, b, sizes[-1]))
        y = self.step("deep_" + "_".join(c[2] for c in cells), expr, shape)
        if self.rng.random() < 0.3:
            self.head(y, shape)

    def unrolled(self) -> None:
        """A recurrence unrolled at trace time: a Python loop over T >= 5 time steps (rows ``xs[:, t]`` or
        ``xs[t]``; the outputs stacked on axis 0 or 1, or only the last kept) or ``lax.scan(...,
        unroll=True)``; or a Python loop over stacked layer weights (``x = f(x @ w[i]) + x``)."""
        if self.rng.random() < 0.2:
            return self.stacked_layers()
        t, b, d = self.rng.choice([5, 6, 8]), self.rng.choice([1, 2, 3, 4]), self.rng.choice([2, 3, 4, 8])
        h = self.rng.choice([2, 3, 4, 8, 16])
        kind = self.rng.choice(["rnn_tanh", "lstm_fused", "lstm_flax", "lstm_haiku", "gru_fused", "gru_flax",
                                "gru_haiku"])
        if self.symbolic:  # the cell reads the batch from the input, so the input comes first
            batch_major = self.rng.random() < 0.5
            xs = self.input((b, t, d) if batch_major else (t, b, d), batch_axis=0 if batch_major else 1)
            body, carry, op = self.cell(kind, d, h, self.batch_of(xs, 0 if batch_major else 1, b))
        else:
            body, carry, op = self.cell(kind, d, h, b)
            batch_major = self.rng.random() < 0.5
            xs = self.input((b, t, d) if batch_major else (t, b, d))
        out = self.rng.choice(["stack0", "stack1", "last"])
        if self.rng.random() < 0.3:
            seq = f"jnp.swapaxes({self.ref(xs)}, 0, 1)" if batch_major else self.ref(xs)
            ys = f"lax.scan({body}, {carry}, {seq}, unroll=True)[1]"  # [t, b, h]
            expr = {"stack0": ys, "stack1": f"jnp.swapaxes({ys}, 0, 1)", "last": f"{ys}[-1]"}[out]
            form = "scan_unrolled"
        else:
            row = f"{self.ref(xs)}[:, t]" if batch_major else f"{self.ref(xs)}[t]"
            steps = f"(lambda body, p: [p := body(p[0], {row}) for t in range({t})])({body}, ({carry}, None))"
            if out == "last":
                expr = f"{steps}[-1][1]"
            else:  # zip, not a comprehension: its iterable may not hold the walrus above
                expr = f"jnp.stack(list(zip(*{steps}))[1], axis={out[-1]})"
            form = "unrolled"
        shape = {"stack0": (t, b, h), "stack1": (b, t, h), "last": (b, h)}[out]
        y = self.step(f"{form}_{op}", expr, shape)
        if self.rng.random() < 0.3:
            self.head(y, shape)

    def stacked_layers(self) -> None:
        n, d = self.rng.choice([2, 3, 5, 6]), self.rng.choice([4, 8, 16])
        rows = (self.rng.choice([1, 2, 4]),) if self.rng.random() < 0.5 else (2, self.rng.choice([3, 5]))
        shape = rows + (d,)
        x = self.input(shape, batch_axis=0)
        f = self.rng.choice(["jnp.tanh", "jax.nn.relu", "jax.nn.gelu"])
        w = self.w((n, d, d), 1.0 / d ** 0.5)
        expr = f"(lambda x: [x := {f}(x @ {w}[i]) + x for i in range({n})][-1])({self.ref(x)})"
        self.step("stacked_layers", expr, shape)

    def wide(self) -> None:
        """A transformer layer at the sizes where the size-bound rules fire, on a model ``thread_count``
        weighs for two threads (64-128 tokens of width 256): attention whose projections go head-major
        (``attention_heads``; grouped key/value heads sometimes, ``kv_broadcast``), a feed-forward of 512 or
        1024 units with its bias before a ReLU or tanh (``dense_bias``), a piecewise function of those units
        and a select of a constant on a comparison of them (``select_gathers``, ``where_products``), and top-1
        routed experts whose second product is a batched one by wide constant weights (``expert_split``).
        float32, its weights constants (the rules rewrite those); each layer is one step."""
        b, t = self.rng.choice([(1, 64), (2, 32), (4, 16), (2, 64), (4, 32)])
        d = 256
        self.opsets = (None, None, None, 23)  # at opset 23 the Attention op takes the block first
        shape = (b, t, d)
        x = self.input(shape, batch_axis=0)
        a = self._wide_attention(x, shape)
        x = self.step("residual", f"{self.ref(x)} + {self.ref(a)}", shape)
        f = self._wide_feed_forward(x, shape)
        x = self.step("residual", f"{self.ref(x)} + {self.ref(f)}", shape)
        self._top1_experts(x, shape)

    def _wide_attention(self, x: int, shape: tuple[int, ...]) -> int:
        b, t, d = shape
        heads = self.rng.choice([4, 8])
        dh = d // heads
        kv = self.rng.choice([heads, heads, heads // 2, 1])  # grouped-query attention: kv heads repeated
        lead = self.lead(b)

        def project(n: str, h: int) -> int:
            bias = f" + {self.bias(h * dh)}" if self.rng.random() < 0.5 else ""
            w = self.w((d, h * dh), may_input=False)
            return self.step(f"dense_{n}", f"({self.ref(x)} @ {w}{bias}).reshape({lead}, {t}, {h}, {dh})"
                             f".transpose(0, 2, 1, 3)", (b, h, t, dh))
        q, k, v = project("q", heads), project("k", kv), project("v", kv)
        if kv != heads:
            k, v = (self.step(f"repeat_{n}", f"jnp.repeat({self.ref(u)}, {heads // kv}, axis=1)",
                              (b, heads, t, dh)) for n, u in (("k", k), ("v", v)))
        scores = f"({self.ref(q)} @ jnp.swapaxes({self.ref(k)}, -1, -2)) * {dh ** -0.5:.6g}"
        if self.rng.random() < 0.5:
            scores = f"jnp.where(jnp.tril(jnp.ones(({t}, {t}), bool)), {scores}, {self.fill()})"
        s = self.step("scores", scores, (b, heads, t, t))
        p = self.step("softmax", f"jax.nn.softmax({self.ref(s)}, axis=-1)", (b, heads, t, t))
        p_, v_ = self.ref(p), self.ref(v)
        o = self.step("attend", f"({p_} @ {v_}).transpose(0, 2, 1, 3).reshape({lead}, {t}, {d})", shape)
        w = self.w((d, d), may_input=False)
        return self.step("dense_out", f"{self.ref(o)} @ {w} + {self.bias(d)}", shape)

    def _wide_feed_forward(self, x: int, shape: tuple[int, ...]) -> int:
        """Dense, its bias before a ReLU or tanh; a piecewise function (Huber's, an ELU, a square root above a
        knee) and a ReLU-gradient-like select of a constant by that data; Dense back."""
        d = shape[-1]
        hidden = self.rng.choice([512, 1024])
        hshape = shape[:-1] + (hidden,)
        act = self.rng.choice(["jax.nn.relu({})", "jnp.maximum({}, 0.0)", "jnp.tanh({})"])
        bias = self.w((hidden,), 0.1, may_input=False)
        x_ = self.ref(x)
        w = self.w((d, hidden), may_input=False)
        h = self.step("dense_up", act.format(f"{x_} @ {w} + {bias}"), hshape)
        u = self.ref(h)
        piece = self.rng.choice([f"jnp.where(jnp.abs({u}) < 1.0, 0.5 * {u} * {u}, jnp.abs({u}) - 0.5)",
                                 f"jnp.where({u} > 0, {u}, 0.5 * jnp.expm1({u}))",
                                 f"jnp.where({u} > 0.25, jnp.sqrt({u}), {u} * 2.0)"])
        g = self.step("piecewise", piece, hshape)
        cmp = self.rng.choice([">", "<", ">=", "<="])
        h_, g_ = self.ref(h), self.ref(g)
        fill = self.rng.choice(["0.0", "-1.0", "2.0"])
        m = self.step("masked", f"jnp.where({h_} {cmp} 0.5, {g_}, {fill})", hshape)
        w = self.w((hidden, d), may_input=False)
        return self.step("dense_down", f"{self.ref(m)} @ {w} + {self.bias(d)}", shape)

    def _top1_experts(self, x: int, shape: tuple[int, ...]) -> int:
        """Switch's top-1 routing: every expert's ``act(x @ up[e]) @ down[e]`` (``[e, m, h]`` constant
        weights, m 1024, at least eight times the tokens), the routed expert's output picked per token and
        scaled by its probability."""
        d = shape[-1]
        e, m = self.rng.choice([2, 4]), 1024
        n = shape[0] * shape[1]
        tokens = self.step("tokens", f"{self.ref(x)}.reshape(-1, {d})", (n, d))
        t_ = self.ref(tokens)
        w_gate = self.w((d, e), may_input=False)
        gates = self.step("moe_router", f"jax.nn.softmax({t_} @ {w_gate}, -1)", (n, e))
        t_ = self.ref(tokens)
        w_up = self.w((e, d, m), d ** -0.5, may_input=False)
        up = self.step("moe_up", f"jnp.einsum('th,ehm->etm', {t_}, {w_up})", (e, n, m))
        a = self.act(up, (e, n, m), self.rng.choice(["relu", "silu", "gelu_tanh"]))
        a_ = self.ref(a)
        w_down = self.w((e, m, d), m ** -0.5, may_input=False)
        down = self.step("moe_down", f"jnp.einsum('etm,emh->eth', {a_}, {w_down})", (e, n, d))
        y, g = self.ref(down), self.ref(gates)
        return self.step("moe_pick", f"jnp.take_along_axis({y}, jnp.argmax({g}, -1)[None, :, None], axis=0)"
                         f"[0] * jnp.max({g}, -1, keepdims=True)", (n, d))

    def moe(self) -> None:
        """A mixture of experts: a router's top-k weights, the experts' ``einsum('th,ehm->etm')`` and
        ``einsum('etm,emh->eth')``, the outputs combined by the routing weights."""
        if self.rng.random() < 0.15:  # few tokens, wide experts: expert_columns and expert_split fire
            t, hd, m, e = 8, self.rng.choice([512, 768]), 1024, self.rng.choice([2, 4])
        else:
            t, hd = self.rng.choice([2, 4, 8, 16, 32]), self.rng.choice([4, 8, 16])
            m, e = self.rng.choice([8, 16, 32]), self.rng.choice([2, 4, 8])
        k = self.rng.choice([1, 2])
        x = self.input((t, hd), batch_axis=0)
        logits = self.step("moe_router", f"{self.ref(x)} @ {self.w((hd, e))}", (t, e))
        if self.rng.random() < 0.5:  # Mixtral: the softmax over the chosen k
            gate = f"(lambda vi: (jax.nn.softmax(vi[0], -1), vi[1]))(lax.top_k({self.ref(logits)}, {k}))"
        else:  # Switch: the softmax over every expert, then the top k
            gate = f"lax.top_k(jax.nn.softmax({self.ref(logits)}, -1), {k})"
        gates = self.step("moe_gates", f"(lambda vi: jnp.sum(jax.nn.one_hot(vi[1], {e}, dtype=vi[0].dtype) * "
                          f"vi[0][..., None], axis=-2))({gate})", (t, e))
        up = f"jnp.einsum('th,ehm->etm', {self.ref(x)}, {self.w((e, hd, m), 1.0 / hd ** 0.5)})"
        if self.rng.random() < 0.4:
            up += f" + {self.w((e, 1, m), 0.1)}"
        u = self.step("moe_up", up, (e, t, m))
        a = self.act(u, (e, t, m), self.rng.choice(["relu", "silu", "gelu_tanh"]))
        w2 = self.w((e, m, hd), 1.0 / m ** 0.5)
        down = self.step("moe_down", f"jnp.einsum('etm,emh->eth', {self.ref(a)}, {w2})", (e, t, hd))
        self.step("moe_combine", f"jnp.einsum('eth,te->th', {self.ref(down)}, {self.ref(gates)})", (t, hd))

    def fft(self) -> None:
        """Real halves of small FFTs (the complex values stay inside one step): ``fft2(x).real``, ``.imag``,
        ``abs(fft(x))``, ``ifft2(z).real``; or FNet's token mixing ``fft2(x).real``, a residual and a norm."""
        b, n = self.rng.choice([1, 2]), self.rng.choice([1, 2, 3, 4, 5, 8])
        m = self.rng.choice([1, 2, 3, 4, 6, 8])
        x = self.input((b, n, m), batch_axis=0)
        form = self.rng.choice(["fft2_real", "fft2_imag", "fft_abs", "ifft2_real", "ifft2_filter", "fnet"])
        if form == "fft2_real" or form == "fnet":
            expr = f"jnp.fft.fft2({self.ref(x)}).real"
        elif form == "fft2_imag":
            expr = f"jnp.fft.fft2({self.ref(x)}).imag"
        elif form == "fft_abs":
            expr = f"jnp.abs(jnp.fft.fft({self.ref(x)}))"
        elif form == "ifft2_real":
            expr = f"jnp.fft.ifft2(lax.complex({self.ref(x)}, {self.ref(self.input((b, n, m), batch_axis=0))})).real"
        else:  # a filter in the frequency domain
            expr = f"jnp.fft.ifft2(jnp.fft.fft2({self.ref(x)}) * {self.w((n, m), 1.0, may_input=False)}).real"
        y = self.step(form, expr, (b, n, m))
        if form == "fnet":
            y = self.norm(self.step("residual", f"{self.ref(x)} + {self.ref(y)}", (b, n, m)), (b, n, m))
            f = self.feed_forward(y, (b, n, m))
            self.step("residual", f"{self.ref(y)} + {self.ref(f)}", (b, n, m))

    def cnn(self) -> None:
        n, hw = self.rng.choice([1, 2]), self.rng.choice([4, 5, 6, 8])
        c = self.rng.choice([1, 3, 4])
        x = self.input((n, hw, hw, c), batch_axis=0)
        shape = (n, hw, hw, c)
        for _ in range(self.rng.choice([1, 2])):
            block_input, block_shape = x, shape
            o = self.rng.choice([4, 8, 16, shape[3]])
            k = self.rng.choice([1, 3])
            pad = self.rng.choice(["'SAME'", "'VALID'"]) if k > 1 else "'VALID'"
            conv = (f"lax.conv_general_dilated({self.ref(x)}, {self.w((k, k, shape[3], o))}, (1, 1), {pad}, "
                    f"dimension_numbers=('NHWC', 'HWIO', 'NHWC'))")
            if self.rng.random() < 0.7:
                conv += f" + {self.bias(o)}"
            size = shape[1] if pad == "'SAME'" else shape[1] - k + 1
            shape = (n, size, size, o)
            x = self.step("conv_nhwc", conv, shape)
            norm = self.rng.random()
            if norm < 0.45:  # inference batch norm
                mean, var = self.w((o,), 1.0), f"jnp.abs({self.w((o,), 1.0)}) + 0.5"
                x = self.step("batch_norm", f"({self.ref(x)} - {mean}) * lax.rsqrt({var} + 1e-5) * {self.w((o,), 1.0)} + "
                              f"{self.bias(o)}", shape)
            elif norm < 0.7:
                x = self._group_norm(x, shape)
            x = self.act(x, shape, self.rng.choice(["relu", "relu_max", "silu", "hard_swish"]))
            x = self._cnn_block_tail(x, shape, block_input, block_shape)
            pool = self.rng.choice(["max", "avg", "none"])
            if pool != "none" and shape[1] >= 2:
                win, stride = self.rng.choice([2, 3]) if shape[1] >= 3 else 2, self.rng.choice([1, 2])
                ppad = self.rng.choice(["'VALID'", "'SAME'"])
                if ppad == "'VALID'":
                    size = (shape[1] - win) // stride + 1
                else:
                    size = -(-shape[1] // stride)
                if pool == "max":
                    expr = (f"lax.reduce_window({self.ref(x)}, -jnp.inf, lax.max, (1, {win}, {win}, 1), "
                            f"(1, {stride}, {stride}, 1), {ppad})")
                else:
                    expr = (f"lax.reduce_window({self.ref(x)}, 0.0, lax.add, (1, {win}, {win}, 1), "
                            f"(1, {stride}, {stride}, 1), {ppad}) / {win * win}")
                shape = (n, size, size, o)
                x = self.step(f"{pool}_pool", expr, shape)
            if self.rng.random() < 0.25:  # a U-Net's upsampling, a downsampling (antialiased): weight matrices
                size = self.rng.choice([max(1, shape[1] // 2), 2 * shape[1], shape[1] + 3])
                method = self.rng.choice(["bilinear", "linear", "cubic", "lanczos3"])
                v = self.ref(x)
                shape = (n, size, size, o)
                x = self.step("resize", f"jax.image.resize({v}, ({v}.shape[0], {size}, {size}, {o}), '{method}')", shape)
        pooled = self.step("spatial_mean", f"jnp.mean({self.ref(x)}, axis=(1, 2))", (n, shape[3]))
        self.head(pooled, (n, shape[3]))

    def conv1d(self) -> None:
        """1-D convolutions over NWC sequences (audio front ends, WaveNet, TCNs): strides, dilations, causal
        padding, a gated ``tanh * sigmoid`` activation, a residual from the layer's input, a mean over time."""
        n, t, c = self.rng.choice([1, 2]), self.rng.choice([6, 9, 16]), self.rng.choice([1, 4, 8])
        x = self.input((n, t, c), batch_axis=0)
        shape = (n, t, c)
        for _ in range(self.rng.choice([1, 2, 3])):
            o = shape[2] if self.rng.random() < 0.5 else self.rng.choice([4, 8, 16])
            k = self.rng.choice([1, 2, 3])
            d = self.rng.choice([1, 2]) if k > 1 else 1
            stride = self.rng.choice([1, 1, 2])
            form = self.rng.choice(["SAME", "VALID", "causal"])
            if form == "VALID" and shape[1] - (k - 1) * d < 1:
                form = "SAME"
            src = self.ref(x)
            if form == "causal":
                src = f"jnp.pad({src}, ((0, 0), ({(k - 1) * d}, 0), (0, 0)))"
            size = (shape[1] - (k - 1) * d - 1) // stride + 1 if form == "VALID" else -(-shape[1] // stride)
            new = (n, size, o)

            def conv() -> str:
                return (f"lax.conv_general_dilated({src}, {self.w((k, shape[2], o))}, ({stride},), "
                        f"'{'VALID' if form == 'causal' else form}', rhs_dilation=({d},), "
                        f"dimension_numbers=('NWC', 'WIO', 'NWC'))")
            if self.rng.random() < 0.4:
                y = self.step("gated_conv_nwc", f"jnp.tanh({conv()}) * jax.nn.sigmoid({conv()})", new)
            else:
                bias = f" + {self.bias(o)}" if self.rng.random() < 0.6 else ""
                y = self.act(self.step("conv_nwc", conv() + bias, new), new,
                             self.rng.choice(["relu", "silu", "gelu_tanh", "gelu_exact"]))
            if new == shape and self.rng.random() < 0.6:
                y = self.step("residual", f"{self.ref(x)} + {self.ref(y)}", new)
            x, shape = y, new
        pooled = self.step("time_mean", f"jnp.mean({self.ref(x)}, axis=1)", (n, shape[2]))
        self.head(pooled, (n, shape[2]))

    def _group_norm(self, x: int, shape: tuple[int, ...]) -> int:
        """A group norm over NHWC (Flax's and Haiku's): the channels split into groups, statistics over the
        spatial axes and each group's channels, as ``E[x^2] - E[x]^2`` (Flax) or ``jnp.var``."""
        h, w, c = shape[1:]
        groups = self.rng.choice([g for g in (1, 2, 4) if c % g == 0])
        if self.rng.random() < 0.5:
            stats = ("(lambda g, m: (g - m) * lax.rsqrt(jnp.maximum((g * g).mean(axis=(1, 2, 4), keepdims=True) "
                     "- m * m, 0.0) + 1e-5))(g, g.mean(axis=(1, 2, 4), keepdims=True))")
        else:
            stats = "(g - g.mean(axis=(1, 2, 4), keepdims=True)) * lax.rsqrt(g.var(axis=(1, 2, 4), keepdims=True) + 1e-5)"
        v = self.ref(x)  # its batch may be symbolic: reshaped by its own size
        expr = (f"(lambda g: {stats})({v}.reshape({v}.shape[0], {h}, {w}, {groups}, {c // groups})).reshape({v}.shape) "
                f"* {self.w((c,), 1.0)} + {self.bias(c)}")
        return self.step("group_norm", expr, shape)

    def _cnn_block_tail(self, x: int, shape: tuple[int, ...], block_input: int, block_shape: tuple[int, ...]) -> int:
        """What follows a conv layer's activation, sometimes: a squeeze-excite scale (a kept-dims spatial mean),
        the channels split in halves and concatenated back (one half scaled), a channel shuffle, a residual from
        the block's input."""
        r = self.rng.random()
        if r < 0.2:
            gate = f"jax.nn.sigmoid(jnp.mean({self.ref(x)}, axis=(1, 2), keepdims=True) * {self.w((shape[3],), 1.0)})"
            x = self.step("squeeze_excite", f"{self.ref(x)} * {gate}", shape)
        elif r < 0.35 and shape[3] % 2 == 0:
            x = self.step("channel_split", f"(lambda a, b: jnp.concatenate([a, jax.nn.relu(b) * 0.5], -1))"
                          f"(*jnp.split({self.ref(x)}, 2, axis=-1))", shape)
        elif r < 0.5 and shape[3] % 2 == 0:  # ShuffleNet's, its batch read from the value (symbolic programs)
            g = self.rng.choice([k for k in (2, 4) if shape[3] % k == 0])
            v = self.ref(x)
            x = self.step("channel_shuffle", f"{v}.reshape({v}.shape[0], {shape[1]}, {shape[2]}, {g}, {shape[3] // g})"
                          f".transpose(0, 1, 2, 4, 3).reshape({v}.shape)", shape)
        if shape == block_shape and self.rng.random() < 0.4:
            x = self.step("residual", f"{self.ref(block_input)} + {self.ref(x)}", shape)
        return x

    def _pool_expr(self, v: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
        """A max or average pool of ``v`` (NHWC) and its shape; ``v`` itself where it is too small."""
        pool = self.rng.choice(["max", "avg", "none"])
        if pool == "none" or shape[1] < 2:
            return v, shape
        win, stride = self.rng.choice([2, 3]) if shape[1] >= 3 else 2, self.rng.choice([1, 2, 2])
        ppad = self.rng.choice(["'VALID'", "'SAME'"])
        size = (shape[1] - win) // stride + 1 if ppad == "'VALID'" else -(-shape[1] // stride)
        window = f"(1, {win}, {win}, 1), (1, {stride}, {stride}, 1), {ppad}"
        if pool == "max":
            return f"lax.reduce_window({v}, -jnp.inf, lax.max, {window})", shape[:1] + (size, size) + shape[3:]
        return f"(lax.reduce_window({v}, 0.0, lax.add, {window}) / {win * win})", shape[:1] + (size, size) + shape[3:]

    def _act_expr(self, v: str) -> str:
        return self.rng.choice(["jax.nn.relu({0})", "jnp.maximum({0}, 0.0)", "jax.nn.leaky_relu({0}, 0.1)",
                                "jax.nn.hard_swish({0})", "jnp.clip({0}, -1.0, 1.0)", "jax.nn.relu6({0})"]).format(v)

    def train(self) -> None:
        """The gradient of a small CNN or MLP against a cotangent input, by ``jax.vjp`` of the input or of
        the first weight (then a function input); some activations of 32768 elements or more."""
        big = self.rng.random() < 0.5
        as_weight = self.rng.random() < 0.4
        differentiated: list[str] = []

        def weight(shape: tuple[int, ...]) -> str:
            if as_weight and not differentiated:
                differentiated.append(self.ref(self.input(shape)))
                return "w"
            return self.w(shape, may_input=False)

        if self.rng.random() < 0.6:
            n = self.rng.choice([1, 2])
            hw = 32 if big else self.rng.choice([4, 6, 8])
            x = self.input((n, hw, hw, self.rng.choice([1, 3, 8])), batch_axis=0)
            shape, chain = self.program.types[x].shape, "v"
            for _ in range(self.rng.choice([1, 2])):
                o, k = (16 if big else self.rng.choice([4, 8])), self.rng.choice([1, 3])
                pad = self.rng.choice(["'SAME'", "'VALID'"]) if k > 1 else "'VALID'"
                conv = (f"lax.conv_general_dilated({chain}, {weight((k, k, shape[3], o))}, (1, 1), {pad}, "
                        f"dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + {self.bias(o)}")
                size = shape[1] if pad == "'SAME'" else shape[1] - k + 1
                shape = (n, size, size, o)
                chain, shape = self._pool_expr(self._act_expr(conv), shape)
        else:
            rows, d = (64, 512) if big else (self.rng.choice([2, 8]), self.rng.choice([8, 32]))
            x = self.input((rows, self.rng.choice([16, 32])), batch_axis=0)
            shape, chain = self.program.types[x].shape, "v"
            for _ in range(self.rng.choice([1, 2])):
                chain = self._act_expr(f"({chain} @ {weight((shape[-1], d))} + {self.bias(d)})")
                shape = (rows, d)
        cot = self.ref(self.input(shape, batch_axis=0))
        if differentiated:
            expr = f"jax.vjp(lambda w: (lambda v: {chain})({self.ref(x)}), {differentiated[0]})[1]({cot})[0]"
            out = self.program.types[self.args_value(differentiated[0])].shape
        else:
            expr = f"jax.vjp(lambda v: {chain}, {self.ref(x)})[1]({cot})[0]"
            out = self.program.types[x].shape
        self.step("vjp", expr, out)

    def optimizer(self) -> None:
        """An optimizer's update of 2-6 parameters of mixed shapes (some one-dimensional, now and then one of
        more than 8192 elements), written as Optax computes it: Adam, AdamW, RMSProp, SGD with momentum or
        Lion on the gradients, the moments and the parameters (inputs, edge values included) and a step count;
        the new parameters and moments concatenated. The first parameter's leading axis is the batch."""
        rule = self.rng.choice(["adam", "adamw", "rmsprop", "momentum", "lion"])
        shapes = [(self.rng.choice([2, 4]), self.rng.choice([3, 8, 16]))]
        for _ in range(self.rng.randint(1, 5)):
            r = self.rng.random()
            shapes.append((self.rng.choice([96, 128]), 96) if r < 0.1 else
                          (self.rng.choice([4, 10, 16, 64]),) if r < 0.55 else
                          (self.rng.choice([3, 8, 16]), self.rng.choice([4, 8, 32])))
        lr, b1, b2 = self.rng.choice([1e-3, 1e-2, 0.1]), self.rng.choice([0.9, 0.8]), self.rng.choice([0.999, 0.99])
        count = self.ref(self.input(()))
        parts = []
        for k, shape in enumerate(shapes):
            axis = 0 if k == 0 else None
            g, mom, v, p = (self.ref(self.input(shape, batch_axis=axis)) for _ in range(4))
            if rule in ("adam", "adamw"):
                m1, v1 = f"({b1} * {mom} + {1 - b1:g} * {g})", f"({b2} * {v} + {1 - b2:g} * ({g} * {g}))"
                step = f"({m1} / (1 - {b1} ** {count})) / (jnp.sqrt({v1} / (1 - {b2} ** {count})) + 1e-8)"
                if rule == "adamw":
                    step = f"({step} + 1e-4 * {p})"
            elif rule == "rmsprop":
                m1, v1 = mom, f"({b2} * {v} + {1 - b2:g} * ({g} * {g}))"
                step = f"({g} / (jnp.sqrt({v1}) + 1e-8))"
            elif rule == "momentum":
                m1, v1 = f"({b1} * {mom} + {g})", v
                step = m1
            else:
                m1, v1 = f"({b2} * {mom} + {1 - b2:g} * {g})", v
                step = f"(jnp.sign({b1} * {mom} + {1 - b1:g} * {g}) + 1e-4 * {p})"
            parts += [f"({p} - {lr} * {step})", m1, v1]
        expr = "jnp.concatenate([jnp.ravel(x) for x in (" + ", ".join(parts) + ",)])"
        self.step(f"{rule}_update", expr, (sum(3 * math.prod(s) for s in shapes),))

    def args_value(self, ref: str) -> int:
        """The value a ``{k}`` reference of the step being written names."""
        return self.args[int(ref.strip("{}"))]

    def loop(self) -> None:
        d = self.rng.choice([2, 4, 8, 16])
        x = self.input((self.rng.choice([1, 2, 4]), d), batch_axis=0)
        n = self.rng.choice([0, 1, 2, 3, 5])
        inv = self.input((d,)) if self.rng.random() < 0.5 else None
        extra = f" * jnp.exp({self.ref(inv)})" if inv is not None else ""
        form = self.rng.choice(["dense", "residual", "scan", "rows"])
        if form == "rows":  # one row of a sequence read and one of the output written a step, along axis 1
            steps = self.rng.choice([1, 3, 8])
            seq = self.input((self.program.types[x].shape[0], steps, d), batch_axis=0)
            h = f"jnp.tanh(c[0] @ {self.w((d, d))} + lax.dynamic_index_in_dim({self.ref(seq)}, i, 1, False)){extra}"
            body = f"lambda i, c: (lambda h: (h, lax.dynamic_update_index_in_dim(c[1], h, i, 1)))({h})"
            init = f"({self.ref(x)}, jnp.zeros_like({self.ref(seq)}))"
            y = self.step("fori_loop", f"lax.fori_loop(0, {steps}, {body}, {init})[1]",
                          self.program.types[seq].shape)
            if self.rng.random() < 0.5:
                self.head(y, self.program.types[y].shape)
            return
        if form == "dense":
            body = f"lambda i, c: jnp.tanh(c @ {self.w((d, d))} + {self.bias(d)}){extra}"
        elif form == "residual":
            body = f"lambda i, c: c + jax.nn.gelu(c @ {self.w((d, d))}){extra} * (i + 1)"
        else:
            body = f"lambda i, c: c.at[i % c.shape[0]].set(jax.nn.relu(c[i % c.shape[0]] @ {self.w((d, d))}){extra})"
        y = self.step("fori_loop", f"lax.fori_loop(0, {n}, {body}, {self.ref(x)})", self.program.types[x].shape)
        if self.rng.random() < 0.5:
            self.head(y, self.program.types[y].shape)


def generate_model(seed: int, kinds: Sequence[str] | None = None, symbolic: bool = False) -> FuzzProgram:
    """A model-shaped program for ``seed`` (deterministic) of one of ``kinds`` (default: ``DRAWN``).

    ``symbolic``: the inputs' batch axes are exported as one symbolic size (``f32[b, ...]``), and the
    steps read the batch from their inputs' shapes (a reshape's ``-1``, ``x.shape[1]``).
    """
    unknown = sorted(set(kinds or ()) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown model kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    rng = random.Random(seed)
    for _ in range(5):
        dtype = rng.choices(["float32", "float16", "bfloat16"], weights=[0.8, 0.1, 0.1])[0]
        mb = ModelBuilder(rng, dtype, symbolic)
        kind = rng.choice(tuple(kinds) if kinds else DRAWN)
        if kind == "fft":
            mb.dtype = "float32"  # jnp.fft computes in complex64 at least: a half float would be widened
        if kind == "wide":
            mb.dtype = "float32"  # the size-bound rules rewrite float32 only
        build: dict[str, Callable[[], None]] = {
            "mlp": mb.mlp, "encoder": lambda: mb.encoder(False), "decoder": lambda: mb.encoder(True),
            "classifier": mb.classifier, "lstm": lambda: mb.rnn("lstm"), "gru": lambda: mb.rnn("gru"),
            "cnn": mb.cnn, "loop": mb.loop, "heads": mb.heads,
            "unrolled": mb.unrolled, "moe": mb.moe, "fft": mb.fft, "deep_rnn": mb.deep_rnn, "train": mb.train,
            "conv1d": mb.conv1d, "wide_norm": mb.wide_norm, "wide": mb.wide, "optimizer": mb.optimizer,
        }
        build[kind]()
        p = mb.program
        p.outputs = [p.steps[-1].out]
        typed = infer_types(p)
        if typed is not None:
            typed.family = "model"
            typed.opset = rng.choice(mb.opsets)  # the attention rule needs opset 23
            return typed
    raise RuntimeError(f"no model program traced for seed {seed}")
