"""The op catalogue the generator draws from: one maker per op family.

A maker takes the ``Builder`` of the program being generated, picks operands (existing
values or fresh inputs) and static parameters with the builder's seeded ``random.Random``,
and returns ``(op, args, expr)``. The expression is checked with ``jax.eval_shape``
afterwards, so a maker may propose something jax rejects; the builder then draws again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from conformance.fuzz.program import FLOATS, SHORT, SIGNED

if TYPE_CHECKING:
    from conformance.fuzz.generate import Builder

Made = Optional[tuple[str, tuple[int, ...], str]]
Maker = Callable[["Builder"], Made]

UNARY_FLOAT = {
    "neg": "-{0}", "abs": "jnp.abs({0})", "sign": "jnp.sign({0})", "floor": "jnp.floor({0})",
    "ceil": "jnp.ceil({0})", "round": "jnp.round({0})", "round_away": "lax.round({0}, lax.RoundingMethod.AWAY_FROM_ZERO)",
    "trunc": "jnp.trunc({0})", "exp": "jnp.exp({0})", "exp2": "jnp.exp2({0})", "expm1": "jnp.expm1({0})",
    "log": "jnp.log({0})", "log1p": "jnp.log1p({0})", "sqrt": "jnp.sqrt({0})", "rsqrt": "lax.rsqrt({0})",
    "cbrt": "jnp.cbrt({0})", "sin": "jnp.sin({0})", "cos": "jnp.cos({0})", "tan": "jnp.tan({0})",
    "tanh": "jnp.tanh({0})", "sigmoid": "jax.nn.sigmoid({0})", "erf": "lax.erf({0})", "atan": "jnp.arctan({0})",
    "asin": "jnp.arcsin({0})", "acos": "jnp.arccos({0})", "sinh": "jnp.sinh({0})", "cosh": "jnp.cosh({0})",
    "asinh": "jnp.arcsinh({0})", "acosh": "jnp.arccosh({0})", "atanh": "jnp.arctanh({0})",
    "isfinite": "jnp.isfinite({0})", "isnan": "jnp.isnan({0})", "isinf": "jnp.isinf({0})", "signbit": "jnp.signbit({0})",
    "square": "jnp.square({0})", "reciprocal": "1 / {0}", "relu": "jax.nn.relu({0})", "gelu": "jax.nn.gelu({0})",
    "softplus": "jax.nn.softplus({0})", "nan_to_num": "jnp.nan_to_num({0})", "softmax": "jax.nn.softmax({0})",
    "lgamma": "lax.lgamma({0})", "logistic": "lax.logistic({0})", "integer_pow": "lax.integer_pow({0}, 3)",
    "is_finite": "lax.is_finite({0})",
}
UNARY_INT = {
    "neg": "-{0}", "abs": "jnp.abs({0})", "sign": "jnp.sign({0})", "not": "~{0}", "popcnt": "lax.population_count({0})",
    "clz": "lax.clz({0})", "square": "{0} * {0}", "integer_pow": "lax.integer_pow({0}, 2)",
}
UNARY_BOOL = {"not": "~{0}", "logical_not": "jnp.logical_not({0})"}
BINARY_FLOAT = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "pow": "jnp.power({0}, {1})",
    "max": "jnp.maximum({0}, {1})", "min": "jnp.minimum({0}, {1})", "atan2": "jnp.arctan2({0}, {1})",
    "rem": "lax.rem({0}, {1})", "fmod": "jnp.fmod({0}, {1})", "remainder": "jnp.remainder({0}, {1})",
    "floor_divide": "jnp.floor_divide({0}, {1})", "nextafter": "jnp.nextafter({0}, {1})",
    "copysign": "jnp.copysign({0}, {1})", "hypot": "jnp.hypot({0}, {1})", "logaddexp": "jnp.logaddexp({0}, {1})",
    "lax_max": "lax.max({0}, {1})", "lax_min": "lax.min({0}, {1})",
}
BINARY_INT = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "floor_divide": "{0} // {1}", "div": "lax.div({0}, {1})",
    "rem": "lax.rem({0}, {1})", "remainder": "{0} % {1}", "max": "jnp.maximum({0}, {1})", "min": "jnp.minimum({0}, {1})",
    "and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}", "shift_left": "lax.shift_left({0}, {1})",
    "shift_right_logical": "lax.shift_right_logical({0}, {1})",
    "shift_right_arithmetic": "lax.shift_right_arithmetic({0}, {1})", "pow": "lax.pow({0}, {1})",
}
BINARY_BOOL = {"and": "{0} & {1}", "or": "{0} | {1}", "xor": "{0} ^ {1}", "eq": "{0} == {1}", "ne": "{0} != {1}"}
COMPARE = {"eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}", "ge": "{0} >= {1}"}

FLOAT_LITERALS = ("0.0", "-0.0", "1.0", "-1.0", "0.5", "2.0", "3.0", "1e-3", "100.0", "jnp.inf", "-jnp.inf", "65504.0", "1e30")
INT_LITERALS = ("0", "1", "2", "3", "7", "-1", "-3", "100")


def kind_of(dtype: str) -> str:
    if dtype in FLOATS:
        return "f"
    if dtype == "bool":
        return "b"
    return "i"


def literal(b: "Builder", dtype: str) -> str:
    k = kind_of(dtype)
    if k == "f":
        return b.rng.choice(FLOAT_LITERALS)
    if k == "b":
        return b.rng.choice(("True", "False"))
    lits = [x for x in INT_LITERALS if dtype in SIGNED or not x.startswith("-")]
    return b.rng.choice(lits)


def typed_scalar(dtype: str, text: str) -> str:
    return f"np.array({text}, jnp.{dtype})"


def unary(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    k = kind_of(b.type(x).dtype)
    table = UNARY_FLOAT if k == "f" else UNARY_INT if k == "i" else UNARY_BOOL
    op = b.rng.choice(sorted(table))
    return op, (x,), table[op]


def binary(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    dtype = b.type(x).dtype
    k = kind_of(dtype)
    table = BINARY_FLOAT if k == "f" else BINARY_INT if k == "i" else BINARY_BOOL
    op = b.rng.choice(sorted(table))
    r = b.rng.random()
    if r < 0.2:
        lit = literal(b, dtype)
        if b.rng.random() < 0.5:
            return op, (x,), table[op].replace("{1}", lit)
        return op, (x,), table[op].replace("{0}", lit).replace("{1}", "{0}")
    y = b.partner(x, scalar_ok=r < 0.35)
    return op, (x, y), table[op]


def compare(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    op = b.rng.choice(sorted(COMPARE))
    if b.rng.random() < 0.25:
        return op, (x,), COMPARE[op].replace("{1}", literal(b, b.type(x).dtype))
    return op, (x, b.partner(x, scalar_ok=True)), COMPARE[op]


def select(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    y = b.partner(x, scalar_ok=False)
    r = b.rng.random()
    dtype = b.type(x).dtype
    if r < 0.4:
        cmp = b.rng.choice(sorted(COMPARE))
        zero = "0" if kind_of(dtype) != "b" else "False"
        return "where", (x, y), "jnp.where(" + COMPARE[cmp].replace("{1}", zero) + ", {0}, {1})"
    if r < 0.6:
        return "where", (x, y), "jnp.where({0} < {1}, {0}, {1})"
    c = b.pick(kinds="b", shape=b.type(x).shape) if r < 0.8 else None
    if c is None:
        c = b.fresh(b.type(x).shape, "bool")
    if b.rng.random() < 0.5:
        return "select", (c, x, y), "lax.select({0}, {1}, {2})"
    return "where", (c, x, y), "jnp.where({0}, {1}, {2})"


def cast(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    src = b.type(x).dtype
    dst = b.rng.choice(b.dtypes)
    if b.rng.random() < 0.12:
        same = [d for d in b.dtypes if d != src and d != "bool" and src != "bool" and _width(d) == _width(src)]
        if same:
            dst = b.rng.choice(same)
            return f"bitcast_{SHORT[src]}_{SHORT[dst]}", (x,), f"lax.bitcast_convert_type({{0}}, jnp.{dst})"
    return f"convert_{SHORT[src]}_{SHORT[dst]}", (x,), f"{{0}}.astype(jnp.{dst})"


def _width(dtype: str) -> int:
    import numpy as np

    from conformance.case import np_dtype

    return np.dtype(np_dtype(dtype)).itemsize


def clamp(b: "Builder") -> Made:
    x = b.pick(kinds="fi")
    if x is None:
        return None
    dtype = b.type(x).dtype
    lo, hi = sorted((literal(b, dtype), literal(b, dtype)), key=lambda s: float(s.replace("jnp.inf", "inf")))
    if b.rng.random() < 0.5:
        return "clip", (x,), f"jnp.clip({{0}}, {lo}, {hi})"
    return "clamp", (x,), f"lax.clamp({typed_scalar(dtype, lo)}, {{0}}, {typed_scalar(dtype, hi)})"


def _axes(b: "Builder", rank: int) -> str:
    if rank == 0 or b.rng.random() < 0.3:
        return "None"
    n = b.rng.randint(1, rank)
    axes = sorted(b.rng.sample(range(rank), n))
    return str(axes[0]) if n == 1 and b.rng.random() < 0.5 else str(tuple(axes))


def reduce(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    t = b.type(x)
    k = kind_of(t.dtype)
    ops = ["sum", "prod", "max", "min", "argmax", "argmin", "any", "all"] + (["mean", "logsumexp", "var"] if k == "f" else [])
    op = b.rng.choice(ops)
    rank = len(t.shape)
    if op in ("argmax", "argmin"):
        axis = str(b.rng.randrange(rank)) if rank else "None"
        return op, (x,), f"jnp.{op}({{0}}, axis={axis})"
    keep = ", keepdims=True" if b.rng.random() < 0.2 else ""
    fn = "jax.nn.logsumexp" if op == "logsumexp" else f"jnp.{op}"
    return f"reduce_{op}", (x,), f"{fn}({{0}}, axis={_axes(b, rank)}{keep})"


def cumulative(b: "Builder") -> Made:
    x = b.pick(min_rank=1, kinds="fi")
    if x is None:
        return None
    axis = b.rng.randrange(len(b.type(x).shape))
    op = b.rng.choice(["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"])
    if op == "cumlogsumexp" and b.type(x).dtype not in FLOATS:
        op = "cummax"  # jax has no integer cumlogsumexp (its -inf init does not convert)
    if op in ("cummax", "cummin", "cumlogsumexp"):
        rev = ", reverse=True" if b.rng.random() < 0.3 else ""
        return op, (x,), f"lax.{op}({{0}}, axis={axis}{rev})"
    return op, (x,), f"jnp.{op}({{0}}, axis={axis})"


def dot(b: "Builder") -> Made:
    x = b.pick(min_rank=1, max_rank=3, kinds="fi")
    if x is None:
        return None
    t = b.type(x)
    n = b.rng.choice([1, 2, 3, 4])
    if len(t.shape) == 1:
        other = (t.shape[0],) if b.rng.random() < 0.4 else (t.shape[0], n)
    else:
        other = t.shape[:-2] + (t.shape[-1], n)
    y = b.fresh(other, t.dtype)
    if b.rng.random() < 0.2 and kind_of(t.dtype) == "f":
        return "dot_general_f32", (x, y), "jnp.matmul({0}, {1}, preferred_element_type=jnp.float32)"
    return "matmul", (x, y), "jnp.matmul({0}, {1})"


def conv(b: "Builder") -> Made:
    dtype = b.rng.choice([d for d in b.dtypes if d in FLOATS])
    spatial = b.rng.choice([1, 2])
    n, c, o = b.rng.choice([1, 2]), b.rng.choice([1, 2, 3]), b.rng.choice([1, 2])
    size = tuple(b.rng.choice([1, 3, 4, 5]) for _ in range(spatial))
    kernel = tuple(b.rng.choice([1, 2, 3]) for _ in range(spatial))
    x = b.pick(kinds="f", shape=None, rank=spatial + 2) if b.rng.random() < 0.3 else None
    if x is None:
        x = b.fresh((n, c) + size, dtype)
    else:
        c, dtype = b.type(x).shape[1], b.type(x).dtype
    groups = 1
    if c > 1 and b.rng.random() < 0.2:
        groups, o = c, c
    w = b.fresh((o, c // groups) + kernel, dtype)
    strides = tuple(b.rng.choice([1, 1, 2]) for _ in range(spatial))
    if b.rng.random() < 0.3:
        padding = repr(b.rng.choice(["SAME", "VALID"]))
    else:
        padding = str([(b.rng.choice([0, 0, 1, 2]), b.rng.choice([0, 1])) for _ in range(spatial)])
    lhs = tuple(b.rng.choice([1, 1, 2]) for _ in range(spatial))
    rhs = tuple(b.rng.choice([1, 1, 2]) for _ in range(spatial))
    return "conv", (x, w), (f"lax.conv_general_dilated({{0}}, {{1}}, window_strides={strides}, padding={padding}, "
                            f"lhs_dilation={lhs}, rhs_dilation={rhs}, feature_group_count={groups})")


def reduce_window(b: "Builder") -> Made:
    x = b.pick(min_rank=1, kinds="fi")
    if x is None:
        return None
    t = b.type(x)
    rank = len(t.shape)
    op = b.rng.choice(["max", "min", "add"])
    if kind_of(t.dtype) == "f":
        init = {"max": "-jnp.inf", "min": "jnp.inf", "add": "0"}[op]
    else:
        init = {"max": f"jnp.iinfo(jnp.{t.dtype}).min", "min": f"jnp.iinfo(jnp.{t.dtype}).max", "add": "0"}[op]
    dims = tuple(b.rng.choice([1, 2, 3]) if d > 0 else 1 for d in t.shape)
    strides = tuple(b.rng.choice([1, 2]) for _ in range(rank))
    if b.rng.random() < 0.5:
        padding = repr(b.rng.choice(["SAME", "VALID"]))
    else:
        padding = str(tuple((b.rng.choice([0, 1]), b.rng.choice([0, 1])) for _ in range(rank)))
    init = typed_scalar(t.dtype, init)
    return f"reduce_window_{op}", (x,), f"lax.reduce_window({{0}}, {init}, lax.{op}, {dims}, {strides}, {padding})"


def gather(b: "Builder") -> Made:
    x = b.pick(min_rank=1)
    if x is None:
        return None
    t = b.type(x)
    axis = b.rng.randrange(len(t.shape))
    extent = t.shape[axis]
    r = b.rng.random()
    if r < 0.45:
        shape = tuple(b.rng.choice([1, 2, 3]) for _ in range(b.rng.choice([0, 1, 1, 2])))
        i = b.fresh(shape, b.index_dtype(), role=f"index:{extent}")
        mode = b.rng.choice(["clip", "fill", "wrap"])
        return "take", (x, i), f"jnp.take({{0}}, {{1}}, axis={axis}, mode={mode!r})"
    if r < 0.75:
        shape = tuple(d if k != axis else b.rng.choice([1, 2, 3]) for k, d in enumerate(t.shape))
        i = b.fresh(shape, b.index_dtype(), role=f"index:{extent}")
        mode = b.rng.choice(["clip", "fill"])
        return "take_along_axis", (x, i), f"jnp.take_along_axis({{0}}, {{1}}, axis={axis}, mode={mode!r})"
    i = b.fresh((b.rng.choice([1, 2, 3]),), b.index_dtype(), role=f"index:{t.shape[0]}")
    return "getitem", (x, i), "{0}[{1}]"


def scatter(b: "Builder") -> Made:
    x = b.pick(min_rank=1)
    if x is None:
        return None
    t = b.type(x)
    k = kind_of(t.dtype)
    ops = ["set", "add", "mul", "min", "max"] if k != "b" else ["set"]
    op = b.rng.choice(ops)
    n = b.rng.choice([1, 2, 3])
    role = f"unique:{t.shape[0]}" if op == "set" else f"index:{t.shape[0]}"
    i = b.fresh((n,), b.index_dtype(), role=role)
    mode = b.rng.choice(["drop", "clip", "promise_in_bounds"]) if op != "set" else "drop"
    if op == "set" and b.rng.random() < 0.3:
        return "scatter_set", (x, i), f"{{0}}.at[{{1}}].set({literal(b, t.dtype)}, mode={mode!r})"
    u = b.fresh((n,) + t.shape[1:], t.dtype)
    if mode == "promise_in_bounds":
        mode = "drop"
    return f"scatter_{op}", (x, i, u), f"{{0}}.at[{{1}}].{op}({{2}}, mode={mode!r})"


def dynamic_slice(b: "Builder") -> Made:
    x = b.pick(min_rank=1)
    if x is None:
        return None
    t = b.type(x)
    starts = [b.fresh((), b.index_dtype(), role=f"index:{d}") for d in t.shape]
    names = ", ".join(f"{{{k + 1}}}" for k in range(len(starts)))
    if b.rng.random() < 0.5:
        sizes = tuple(b.rng.randint(0, d) if d else 0 for d in t.shape)
        return "dynamic_slice", (x, *starts), f"lax.dynamic_slice({{0}}, ({names},), {sizes})"
    upd = b.fresh(tuple(b.rng.randint(0, d) if d else 0 for d in t.shape), t.dtype)
    names = ", ".join(f"{{{k + 2}}}" for k in range(len(starts)))
    return "dynamic_update_slice", (x, upd, *starts), f"lax.dynamic_update_slice({{0}}, {{1}}, ({names},))"


def slicing(b: "Builder") -> Made:
    x = b.pick(min_rank=1)
    if x is None:
        return None
    t = b.type(x)
    r = b.rng.random()
    if r < 0.35:
        parts = []
        for d in t.shape:
            lo, hi = sorted((b.rng.randint(-d - 1, d + 1), b.rng.randint(-d - 1, d + 1)))
            step = b.rng.choice([1, 1, 2, -1])
            parts.append(f"{lo}:{hi}:{step}" if step > 0 else f"::{step}")
        return "slice", (x,), "{0}[" + ", ".join(parts) + "]"
    if r < 0.55:
        axis = _axes(b, len(t.shape))
        return "reverse", (x,), f"jnp.flip({{0}}, axis={axis})"
    if r < 0.8:
        widths = tuple((b.rng.randint(0, 2), b.rng.randint(0, 2)) for _ in t.shape)
        mode = b.rng.choice(["constant", "constant", "edge", "reflect", "wrap"])
        extra = f", constant_values={literal(b, t.dtype)}" if mode == "constant" else ""
        return f"pad_{mode}", (x,), f"jnp.pad({{0}}, {widths}, mode={mode!r}{extra})"
    config = [(b.rng.randint(-1, 2), b.rng.randint(-1, 2), b.rng.randint(0, 1)) for _ in t.shape]
    return "lax_pad", (x,), f"lax.pad({{0}}, {typed_scalar(t.dtype, literal(b, t.dtype))}, {config})"


def concatenate(b: "Builder") -> Made:
    x = b.pick(min_rank=1)
    if x is None:
        return None
    t = b.type(x)
    axis = b.rng.randrange(len(t.shape))
    if b.rng.random() < 0.5:
        y = b.partner(x, scalar_ok=False)
    else:
        shape = tuple(d if k != axis else b.rng.choice([0, 1, 2, 3]) for k, d in enumerate(t.shape))
        y = b.fresh(shape, t.dtype)
    if b.rng.random() < 0.2 and b.type(y).shape == t.shape:
        return "stack", (x, y), f"jnp.stack([{{0}}, {{1}}], axis={axis})"
    return "concatenate", (x, y), f"jnp.concatenate([{{0}}, {{1}}], axis={axis})"


def layout(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    t = b.type(x)
    rank = len(t.shape)
    r = b.rng.random()
    if r < 0.25 and rank > 1:
        perm = list(range(rank))
        b.rng.shuffle(perm)
        return "transpose", (x,), f"jnp.transpose({{0}}, {tuple(perm)})"
    if r < 0.5:
        size = t.size
        dims = _factor(b, size) if size else [b.rng.choice([0, 1]), 0][: b.rng.randint(1, 2)]
        return "reshape", (x,), f"{{0}}.reshape({tuple(dims)})"
    if r < 0.7:
        lead = tuple(b.rng.choice([1, 2, 3]) for _ in range(b.rng.randint(0, 2)))
        shape = lead + tuple(d if d != 1 else b.rng.choice([1, 3]) for d in t.shape)
        return "broadcast", (x,), f"jnp.broadcast_to({{0}}, {shape})"
    if r < 0.85:
        return "expand_dims", (x,), f"jnp.expand_dims({{0}}, {b.rng.randint(0, rank)})"
    if rank:
        return "repeat", (x,), f"jnp.repeat({{0}}, {b.rng.choice([1, 2])}, axis={b.rng.randrange(rank)})"
    return None


def _factor(b: "Builder", n: int) -> list[int]:
    dims = []
    while n > 1 and len(dims) < 3:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = b.rng.choice(divisors)
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    if b.rng.random() < 0.3:
        dims.insert(b.rng.randint(0, len(dims)), 1)
    return dims or [1]


def sort(b: "Builder") -> Made:
    x = b.pick(min_rank=1, kinds="fib")
    if x is None:
        return None
    t = b.type(x)
    axis = b.rng.randrange(len(t.shape))
    r = b.rng.random()
    if r < 0.35:
        desc = ", descending=True" if b.rng.random() < 0.3 else ""
        return "sort", (x,), f"jnp.sort({{0}}, axis={axis}{desc})"
    if r < 0.65:
        return "argsort", (x,), f"jnp.argsort({{0}}, axis={axis})"
    if t.dtype == "bool" or t.shape[-1] == 0:
        return None
    k = b.rng.randint(1, t.shape[-1])
    which = b.rng.choice([0, 1])
    return ("top_k" if which == 0 else "top_k_indices"), (x,), f"lax.top_k({{0}}, {k})[{which}]"


def control(b: "Builder") -> Made:
    x = b.pick()
    if x is None:
        return None
    dtype = b.type(x).dtype
    k = kind_of(dtype)
    table = UNARY_FLOAT if k == "f" else UNARY_INT if k == "i" else UNARY_BOOL
    safe = [o for o in sorted(table) if o not in ("isfinite", "isnan", "isinf", "signbit", "is_finite", "softmax")]
    body1 = table[b.rng.choice(safe)]
    body2 = table[b.rng.choice(safe)]
    bin_table = BINARY_FLOAT if k == "f" else BINARY_INT if k == "i" else BINARY_BOOL
    binop = bin_table[b.rng.choice(sorted(o for o in bin_table if o not in ("eq", "ne")))]
    r = b.rng.random()
    n = b.rng.choice([0, 1, 2, 3, 5])
    if r < 0.3:
        pred = b.pick(kinds="b", shape=())
        if pred is None:
            pred_expr, args = "jnp.any({1} != 0)" if k != "b" else "jnp.any({1})", (x, x)
        else:
            pred_expr, args = "{1}", (x, pred)
        return "cond", args, (f"lax.cond({pred_expr}, lambda a: {body1.format('a')}, "
                              f"lambda a: {body2.format('a')}, {{0}})")
    if r < 0.55:
        y = b.partner(x, scalar_ok=True)
        return "fori_loop", (x, y), f"lax.fori_loop(0, {n}, lambda i, c: {binop.format('c', '{1}')}, {{0}})"
    if r < 0.8 and b.type(x).shape and b.type(x).shape[0] > 0:
        which = b.rng.choice([0, 1])
        return "scan", (x,), (f"lax.scan(lambda c, e: ({binop.format('c', 'e')}, {body1.format('c')}), "
                              f"{{0}}[0], {{0}})[{which}]")
    return "while_loop", (x,), (f"lax.while_loop(lambda s: s[0] < {n}, lambda s: (s[0] + 1, {body1.format('s[1]')}), "
                                f"(0, {{0}}))[1]")


# Factorizations of square float32/float64 matrices (LAPACK calls in jax.jit), in forms whose values do
# not depend on the vector signs LAPACK picks (the ONNX writes canonical ones: the check's vector_signs).
LINALG = {
    "qr_r": "jnp.linalg.qr({0})[1]", "qr_q": "jnp.linalg.qr({0})[0]", "eigvalsh": "jnp.linalg.eigvalsh({0})",
    "eigh_product": "(lambda w, v: (v * w[..., None, :]) @ jnp.swapaxes(v, -1, -2))(*jnp.linalg.eigh({0}))",
    "det": "jnp.linalg.det({0})", "slogdet": "jnp.linalg.slogdet({0})[1]", "inv": "jnp.linalg.inv({0})",
    "cholesky": "jnp.linalg.cholesky({0})",
}


def linalg(b: "Builder") -> Made:
    x = b.pick(kinds="f", min_rank=2, max_rank=3)
    t = b.type(x) if x is not None else None
    if t is None or t.shape[-1] != t.shape[-2] or t.dtype not in ("float32", "float64"):
        n = b.rng.choice([1, 2, 3, 4])
        dtypes = [d for d in b.dtypes if d in ("float32", "float64")] or ["float32"]
        x = b.fresh((n, n) if b.rng.random() < 0.7 else (2, n, n), b.rng.choice(dtypes))
    op = b.rng.choice(sorted(LINALG))
    return op, (x,), LINALG[op]


def _const(b: "Builder", shape: tuple[int, ...], dtype: str, low: float = -2.0, high: float = 2.0) -> str:
    """A closed-over constant written out: ``np.array([...], jnp.float32)`` of seeded values."""
    import math

    n = math.prod(shape)
    values = [round(b.rng.uniform(low, high), 3) for _ in range(n)]
    return f"np.array({values}, jnp.{dtype}).reshape({shape})"


def forms(b: "Builder") -> Made:
    """The model forms jaxconv's ONNX rewrites target: exact and tanh GELU, softmax over a -inf mask,
    constant (causal) masks, transposes with size-1 axes, sum and mean pooling, a convolution followed
    by a batch norm's affine, an elementwise op between a reshape and its inverse, a vmapped W @ x,
    a mean over spatial axes, LSTM and GRU cells in a scan."""
    x = b.pick(kinds="f", min_rank=1)
    dtype = b.type(x).dtype if x is not None else b.rng.choice([d for d in b.dtypes if d in FLOATS])
    t = b.type(x) if x is not None else None
    form = b.rng.choice(["gelu_exact", "gelu_tanh", "masked_softmax", "masked_log_softmax", "causal_where",
                         "transpose_unit", "sum_pool", "mean_pool", "conv_affine", "reshape_scale", "vmap_matvec",
                         "spatial_mean", "lstm_scan", "gru_scan"])
    uses_x = form in ("gelu_exact", "gelu_tanh", "masked_softmax", "masked_log_softmax", "causal_where",
                      "transpose_unit", "reshape_scale")
    if uses_x and (x is None or t is None or (form == "reshape_scale" and (not t.shape or t.shape[-1] % 2))):
        x = b.fresh(tuple(b.rng.choice([1, 2, 3]) for _ in range(b.rng.randint(0, 2))) + (b.rng.choice([2, 4, 6]),),
                    dtype)
        t = b.type(x)
    if uses_x:
        assert x is not None and t is not None
    if form in ("gelu_exact", "gelu_tanh"):
        return form, (x,), f"jax.nn.gelu({{0}}, approximate={form == 'gelu_tanh'})"
    if form in ("masked_softmax", "masked_log_softmax", "causal_where"):
        n = t.shape[-1]
        m = t.shape[-2] if len(t.shape) > 1 else 1
        mask = f"np.tril(np.ones(({m}, {n}), bool), {b.rng.choice([0, 1, -1])})"
        if len(t.shape) == 1:
            mask += "[0]"
        if form == "causal_where":
            fill = b.rng.choice(["-jnp.inf", "-1e9", "0.0", "-0.0", "jnp.finfo(jnp." + dtype + ").min"])
            return form, (x,), f"jnp.where({mask}, {{0}}, {fill})"
        fn = "softmax" if form == "masked_softmax" else "log_softmax"
        return form, (x,), f"jax.nn.{fn}(jnp.where({mask}, {{0}}, -jnp.inf), axis=-1)"
    if form == "transpose_unit":
        rank = len(t.shape)
        axes = tuple(sorted(b.rng.sample(range(rank + 2), b.rng.choice([1, 2]))))
        perm = list(range(rank + len(axes)))
        b.rng.shuffle(perm)
        return form, (x,), f"jnp.transpose(jnp.expand_dims({{0}}, {axes}), {tuple(perm)})"
    if form in ("sum_pool", "mean_pool", "conv_affine", "spatial_mean"):
        n, c = b.rng.choice([1, 2]), b.rng.choice([1, 2, 3])
        # the conv's padding stays VALID: XLA multiplies or skips padding x inf by shape (known: conv-zeros,
        # which convzeros.py tells only for a conv step of its own)
        size = (b.rng.choice([2, 3, 4]), b.rng.choice([2, 3, 4])) if form != "conv_affine" else (3, b.rng.choice([3, 4]))
        x = b.fresh((n, c) + size, dtype)
        if form == "spatial_mean":
            return form, (x,), f"jnp.mean({{0}}, axis=(2, 3){', keepdims=True' if b.rng.random() < 0.5 else ''})"
        if form in ("sum_pool", "mean_pool"):
            k = (b.rng.choice([1, 2]), b.rng.choice([1, 2]))
            stride = (1, 1) + tuple(b.rng.choice([1, 2]) for _ in k)
            pad = repr(b.rng.choice(["VALID", "SAME"]))
            pool = f"lax.reduce_window({{0}}, np.array(0, jnp.{dtype}), lax.add, (1, 1) + {k}, {stride}, {pad})"
            return form, (x,), pool if form == "sum_pool" else f"{pool} / {k[0] * k[1]}"
        o = b.rng.choice([1, 2, 3])
        w = b.fresh((o, c, 3, 3), dtype)
        mean, var = _const(b, (o, 1, 1), dtype), _const(b, (o, 1, 1), dtype, 0.1, 2.0)
        gamma, beta = _const(b, (o, 1, 1), dtype), _const(b, (o, 1, 1), dtype)
        relu = b.rng.random() < 0.5
        body = (f"(lax.conv_general_dilated({{0}}, {{1}}, (1, 1), 'VALID') - {mean}) * lax.rsqrt({var} + 1e-5) "
                f"* {gamma} + {beta}")
        return form, (x, w), f"jax.nn.relu({body})" if relu else body
    if form == "reshape_scale":
        half = t.shape[-1] // 2
        scale = _const(b, (2, 1), dtype) if b.rng.random() < 0.5 else _const(b, (half,), dtype)
        op = b.rng.choice(["*", "+", "-"])
        return form, (x,), f"({{0}}.reshape({t.shape[:-1]} + (2, {half})) {op} {scale}).reshape({t.shape})"
    if form == "vmap_matvec":
        d, o, batch = b.rng.choice([1, 2, 3, 4]), b.rng.choice([1, 2, 3]), b.rng.choice([1, 2, 3])
        x = b.fresh((batch, d), dtype)
        w = _const(b, (o, d), dtype)
        return form, (x,), f"jax.vmap(lambda v: {w} @ v)({{0}})"
    steps, batch, d, h = b.rng.choice([1, 2, 3]), b.rng.choice([1, 2]), b.rng.choice([1, 2, 3]), b.rng.choice([1, 2])
    x = b.fresh((steps, batch, d), dtype)
    gates = 4 if form == "lstm_scan" else 3
    wx, wh = b.fresh((d, gates * h), dtype), b.fresh((h, gates * h), dtype)
    zeros = f"jnp.zeros(({batch}, {h}), jnp.{dtype})"
    if form == "lstm_scan":
        cell = (f"lambda hc, xt: (lambda g: (lambda c: ((jax.nn.sigmoid(g[..., {3 * h}:]) * jnp.tanh(c), c), "
                f"jax.nn.sigmoid(g[..., {3 * h}:]) * jnp.tanh(c)))(jax.nn.sigmoid(g[..., {h}:{2 * h}]) * hc[1] "
                f"+ jax.nn.sigmoid(g[..., :{h}]) * jnp.tanh(g[..., {2 * h}:{3 * h}])))(xt @ {{1}} + hc[0] @ {{2}})")
        return form, (x, wx, wh), f"lax.scan({cell}, ({zeros}, {zeros}), {{0}})[1]"
    cell = (f"lambda s, xt: (lambda gx, gh: (lambda z, r: (lambda n: ((1 - z) * n + z * s,) * 2)("
            f"jnp.tanh(gx[..., {2 * h}:] + r * gh[..., {2 * h}:])))(jax.nn.sigmoid(gx[..., :{h}] + gh[..., :{h}]), "
            f"jax.nn.sigmoid(gx[..., {h}:{2 * h}] + gh[..., {h}:{2 * h}])))(xt @ {{1}}, s @ {{2}})")
    return form, (x, wx, wh), f"lax.scan({cell}, {zeros}, {{0}})[1]"


# (maker, weight): elementwise ops dominate, as in real programs.
MAKERS: tuple[tuple[Maker, float], ...] = (
    (unary, 6), (binary, 7), (compare, 2), (select, 3), (cast, 3), (clamp, 1), (reduce, 3), (cumulative, 1),
    (dot, 1.5), (conv, 1), (reduce_window, 1), (gather, 1.5), (scatter, 1.5), (dynamic_slice, 1), (slicing, 2),
    (concatenate, 1), (layout, 2), (sort, 1.5), (control, 2), (forms, 3), (linalg, 0.5),
)
