"""Complex arithmetic: constants, complex/real/imag, convert, + - * /, negate, abs, sign, compare.

Every formula follows XLA's CPU emitter (``ElementalIrEmitter``), so that edge values (zeros,
infinities, NaN) come out as ``jax.jit`` gives them.
"""

from __future__ import annotations

import math

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import complex_const, component, is_complex, pack, parts, real_lowering, select
from jaxconv.onnx.registry import complex_lowering, lowering
from jaxconv.stablehlo import ir as hir


def zeros_like(ctx: LoweringContext, x: str, dtype: str) -> str:
    """+0 in ``x``'s shape (``x * 0`` would give NaN where ``x`` is infinite)."""
    return ctx.op("Expand", [ctx.scalar(0.0, dtype), ctx.op("Shape", [x])])


@complex_lowering("stablehlo.constant", onnx_ops=("initializer",))
def lower_constant(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A complex constant as (re, im) pairs."""
    return complex_const(ctx, np.asarray(op.attrs["value"]))


@lowering("stablehlo.complex", onnx_ops=("Concat",))
@complex_lowering("stablehlo.complex", onnx_ops=("Concat",))
def lower_complex(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """complex(re, im): the two halves stacked on a trailing axis."""
    return pack(ctx, inputs[0], inputs[1])


@lowering("stablehlo.real", onnx_ops=("Gather",))
@complex_lowering("stablehlo.real", onnx_ops=("Gather",))
def lower_real(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """The real half of a complex tensor (a real operand is its own real part)."""
    if not is_complex(op.operands[0].type):
        return ctx.op("Identity", [inputs[0]])
    return parts(ctx, inputs[0])[0]


@lowering("stablehlo.imag", onnx_ops=("Gather",))
@complex_lowering("stablehlo.imag", onnx_ops=("Gather",))
def lower_imag(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """The imaginary half of a complex tensor (zeros for a real operand)."""
    if not is_complex(op.operands[0].type):
        return zeros_like(ctx, inputs[0], op.results[0].type.dtype)
    return parts(ctx, inputs[0])[1]


@complex_lowering("stablehlo.convert", onnx_ops=("Cast",))
def lower_convert(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Complex to complex casts both halves; real to complex adds a zero imaginary half; complex to
    real keeps the real half (then converts it like a real value)."""
    src, dst = op.operands[0].type, op.results[0].type
    if is_complex(src) and is_complex(dst):
        re, im = parts(ctx, inputs[0])
        to = component(dst.dtype)
        return pack(ctx, ctx.cast_if(re, component(src.dtype), to), ctx.cast_if(im, component(src.dtype), to))
    if is_complex(dst):
        to = component(dst.dtype)
        real_op = hir.Op(
            "stablehlo.convert",
            op.operands,
            [hir.Value(hir.TensorType(to, dst.shape), id=-1)],
            {},
            [],
            op.location,
        )
        re = real_lowering(ctx, real_op, inputs)[0]
        return pack(ctx, re, zeros_like(ctx, re, to))
    re = parts(ctx, inputs[0])[0]
    real_op = hir.Op(
        "stablehlo.convert",
        [hir.Value(hir.TensorType(component(src.dtype), src.shape), id=-2)],
        op.results,
        {},
        [],
        op.location,
    )
    return real_lowering(ctx, real_op, [re])[0]


@complex_lowering("stablehlo.add", "stablehlo.subtract", onnx_ops=("Add", "Sub"))
def lower_add_sub(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Add or subtract the (re, im) pairs elementwise."""
    return ctx.op("Add" if op.name == "stablehlo.add" else "Sub", inputs, same_shape_inputs=True)


@complex_lowering("stablehlo.negate", onnx_ops=("Neg",))
def lower_negate(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Negate both halves."""
    return ctx.op("Neg", inputs)


def _two_product_error(ctx: LoweringContext, a: str, b: str, p: str) -> str:
    """a * b - p exactly, for p = fl(a * b) (Dekker's product with Veltkamp's split of float64 values);
    0 where that is not finite (infinite or huge operands: the plain product is all there is)."""
    o = ctx.op
    k = ctx.scalar(134217729.0, "float64")  # 2^27 + 1

    def split(x: str) -> tuple[str, str]:
        t = o("Mul", [x, k])
        hi = o("Sub", [t, o("Sub", [t, x])])
        return hi, o("Sub", [x, hi])

    (ah, al), (bh, bl) = split(a), split(b)
    err = o("Add", [o("Sub", [o("Mul", [ah, bh]), p]), o("Mul", [ah, bl])])
    err = o("Add", [o("Add", [err, o("Mul", [al, bh])]), o("Mul", [al, bl])])
    zero = ctx.scalar(0.0, "float64")
    finite = o("Not", [o("Or", [o("IsNaN", [err]), o("IsInf", [err])])])
    return o("Where", [finite, err, zero])


def _fma(ctx: LoweringContext, a: str, b: str, c: str, work: str) -> str:
    """a * b + c with one rounding, as the FMA LLVM emits: exact through float64 for float32; for
    float64, (fl(a b) + c) + the product's exact error (exact whenever the sum cancels)."""
    o = ctx.op
    if work == "float32":
        wide = [ctx.cast(x, "float64") for x in (a, b, c)]
        return ctx.cast(o("Add", [o("Mul", wide[:2]), wide[2]]), "float32")
    p = o("Mul", [a, b])
    return o("Add", [o("Add", [p, c]), _two_product_error(ctx, a, b, p)])


def multiply(ctx: LoweringContext, a: tuple[str, str], b: tuple[str, str], work: str) -> tuple[str, str]:
    """XLA's complex product on the CPU, where LLVM fuses one product of each half into an FMA:
    re = fma(ar, br, -(ai bi)), im = fma(ai, br, ar bi) (NaN, overflow and cancellation included)."""
    (ar, ai), (br, bi) = a, b
    re = _fma(ctx, ar, br, ctx.op("Neg", [ctx.op("Mul", [ai, bi])]), work)
    im = _fma(ctx, ai, br, ctx.op("Mul", [ar, bi]), work)
    return re, im


@complex_lowering("stablehlo.multiply", onnx_ops=("Mul", "Sub", "Add"))
def lower_multiply(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Complex product without special-casing infinities (XLA's formula, with its FMAs)."""
    work = component(op.results[0].type.dtype)
    return pack(ctx, *multiply(ctx, parts(ctx, inputs[0]), parts(ctx, inputs[1]), work))


def _copysign(ctx: LoweringContext, magnitude: str, sign_of: str, work: str) -> str:
    from jaxconv.onnx.ops.elementwise import sign_bit

    mag = ctx.op("Abs", [magnitude])
    return select(ctx, sign_bit(ctx, sign_of, work), ctx.op("Neg", [mag]), mag, work)


def divide(ctx: LoweringContext, a: tuple[str, str], b: tuple[str, str], work: str) -> tuple[str, str]:
    """Smith's algorithm with XLA's corrections where it gives (NaN, NaN): a zero denominator, an
    infinite numerator over a finite denominator, a finite numerator over an infinite denominator."""
    (ar, ai), (br, bi) = a, b
    op = ctx.op
    zero, one, inf = ctx.scalar(0.0, work), ctx.scalar(1.0, work), ctx.scalar(math.inf, work)
    rb = op("Div", [br, bi])  # |br| < |bi|
    db = op("Add", [bi, op("Mul", [rb, br])])
    ri = op("Div", [bi, br])
    di = op("Add", [br, op("Mul", [ri, bi])])
    abs_br, abs_bi = op("Abs", [br]), op("Abs", [bi])
    lt = op("Less", [abs_br, abs_bi])
    cr = select(
        ctx,
        lt,
        op("Div", [op("Add", [op("Mul", [rb, ar]), ai]), db]),
        op("Div", [op("Add", [op("Mul", [ri, ai]), ar]), di]),
        work,
    )
    ci = select(
        ctx,
        lt,
        op("Div", [op("Sub", [op("Mul", [rb, ai]), ar]), db]),
        op("Div", [op("Sub", [ai, op("Mul", [ri, ar])]), di]),
        work,
    )

    def isnan(x: str) -> str:
        return op("IsNaN", [x])

    def notnan(x: str) -> str:
        return op("Not", [isnan(x)])

    # 1. zero denominator
    zero_den = op(
        "And",
        [
            op("And", [op("Equal", [abs_br, zero]), op("Equal", [abs_bi, zero])]),
            op("Or", [notnan(ar), notnan(ai)]),
        ],
    )
    inf_b = _copysign(ctx, inf, br, work)
    z_r, z_i = op("Mul", [inf_b, ar]), op("Mul", [inf_b, ai])
    # 2. infinite numerator, finite denominator
    abs_ar, abs_ai = op("Abs", [ar]), op("Abs", [ai])
    finite = lambda x: op("And", [op("Not", [op("Equal", [x, inf])]), notnan(x)])  # noqa: E731
    ar_inf, ai_inf = op("Equal", [abs_ar, inf]), op("Equal", [abs_ai, inf])
    inf_num = op("And", [op("Or", [ar_inf, ai_inf]), op("And", [finite(abs_br), finite(abs_bi)])])
    sar = _copysign(ctx, select(ctx, ar_inf, one, zero, work), ar, work)
    sai = _copysign(ctx, select(ctx, ai_inf, one, zero, work), ai, work)
    n_r = op("Mul", [inf, op("Add", [op("Mul", [sar, br]), op("Mul", [sai, bi])])])
    n_i = op("Mul", [inf, op("Sub", [op("Mul", [sai, br]), op("Mul", [sar, bi])])])
    # 3. finite numerator, infinite denominator
    br_inf, bi_inf = op("Equal", [abs_br, inf]), op("Equal", [abs_bi, inf])
    inf_den = op("And", [op("Or", [br_inf, bi_inf]), op("And", [finite(abs_ar), finite(abs_ai)])])
    sbr = _copysign(ctx, select(ctx, br_inf, one, zero, work), br, work)
    sbi = _copysign(ctx, select(ctx, bi_inf, one, zero, work), bi, work)
    d_r = op("Mul", [zero, op("Add", [op("Mul", [ar, sbr]), op("Mul", [ai, sbi])])])
    d_i = op("Mul", [zero, op("Sub", [op("Mul", [ai, sbr]), op("Mul", [ar, sbi])])])
    c_nan = op("And", [isnan(cr), isnan(ci)])
    out = []
    for c, z, n, d in ((cr, z_r, n_r, d_r), (ci, z_i, n_i, d_i)):
        fixed = select(
            ctx, zero_den, z, select(ctx, inf_num, n, select(ctx, inf_den, d, c, work), work), work
        )
        out.append(select(ctx, c_nan, fixed, c, work))
    return out[0], out[1]


@complex_lowering("stablehlo.divide", onnx_ops=("Div", "Where"))
def lower_divide(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """Overflow-safe complex division (Smith's algorithm, XLA's edge cases); by a constant, a product
    with its reciprocal, which is what XLA's algebraic simplifier makes of it."""
    work = component(op.results[0].type.dtype)
    known = ctx.fold(inputs[1])
    if known is not None:
        with np.errstate(all="ignore"):
            c = known.astype(np.float64)
            norm = c[..., 0] ** 2 + c[..., 1] ** 2
            recip = np.stack([c[..., 0] / norm, -c[..., 1] / norm + 0.0], axis=-1).astype(work)
        if np.isfinite(recip).all():
            b = ctx.const(recip[..., 0]), ctx.const(recip[..., 1])
            return pack(ctx, *multiply(ctx, parts(ctx, inputs[0]), b, work))
    return pack(ctx, *divide(ctx, parts(ctx, inputs[0]), parts(ctx, inputs[1]), work))


def _abs_parts(ctx: LoweringContext, re: str, im: str, work: str) -> tuple[str, str, str]:
    """(min, max, 1 + (min/max)^2) of |re| and |im|, with XLA's NaN-propagating max and min."""
    from jaxconv.onnx.ops.elementwise import extremum

    a, b = ctx.op("Abs", [re]), ctx.op("Abs", [im])
    hi, lo = extremum(ctx, a, b, work, True), extremum(ctx, a, b, work, False)
    q = ctx.op("Div", [lo, hi])
    return lo, hi, ctx.op("Add", [ctx.scalar(1.0, work), ctx.op("Mul", [q, q])])


def magnitude(ctx: LoweringContext, re: str, im: str, work: str, root: float = 1.0) -> str:
    """|re + i im|^root without overflow, as XLA: max^root * (1 + (min/max)^2)^(root/2), and min^root
    where that is NaN ((0, 0), (inf, inf), NaN parts). ``root`` is 1, 0.5 (sqrt) or -0.5 (rsqrt)."""
    lo, hi, s = _abs_parts(ctx, re, im, work)
    if root == 1.0:
        out = ctx.op("Mul", [hi, ctx.op("Sqrt", [s])])
        fallback = lo
    elif root == 0.5:
        out = ctx.op("Mul", [ctx.op("Sqrt", [hi]), ctx.op("Sqrt", [ctx.op("Sqrt", [s])])])
        fallback = ctx.op("Sqrt", [lo])
    else:
        out = ctx.op(
            "Div", [ctx.op("Reciprocal", [ctx.op("Sqrt", [hi])]), ctx.op("Sqrt", [ctx.op("Sqrt", [s])])]
        )
        fallback = ctx.op("Reciprocal", [ctx.op("Sqrt", [lo])])
    return select(ctx, ctx.op("IsNaN", [out]), fallback, out, work)


@complex_lowering("stablehlo.abs", onnx_ops=("Sqrt", "Max", "Min"))
def lower_abs(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """|z|, hypot-safe."""
    return magnitude(ctx, *parts(ctx, inputs[0]), op.results[0].type.dtype)


@complex_lowering("stablehlo.sign", onnx_ops=("Div",))
def lower_sign(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """z / |z|, 0 at 0."""
    work = component(op.results[0].type.dtype)
    re, im = parts(ctx, inputs[0])
    r = magnitude(ctx, re, im, work)
    zero = ctx.scalar(0.0, work)
    is_zero = ctx.op("Equal", [r, zero])
    return pack(
        ctx,
        select(ctx, is_zero, zero, ctx.op("Div", [re, r]), work),
        select(ctx, is_zero, zero, ctx.op("Div", [im, r]), work),
    )


_ORDERED = {"LT": "Less", "LE": "LessOrEqual", "GT": "Greater", "GE": "GreaterOrEqual"}


def _check_compare(op: hir.Op) -> str | None:
    direction = op.attrs.get("comparison_direction")
    if direction not in ("EQ", "NE") and op.attrs.get("compare_type") == "TOTALORDER":
        return (f"complex comparison {direction} with TOTALORDER: XLA accepts only FLOAT comparisons of "
                "complex values")
    return None


@complex_lowering("stablehlo.compare", check=_check_compare, onnx_ops=("Equal", "Less", "And", "Or"))
def lower_compare(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """EQ: both halves equal; NE: either half differs (NaN differs from everything). The orders are
    XLA's CPU ones, ordered float comparisons (a NaN in a compared half makes them false): LT and GT
    are lexicographic (``a.re < b.re or (a.re == b.re and a.im < b.im)``), while LE and GE compare the
    real parts only (``a.re <= b.re``), as jax.jit computes them (checked on every pairing of zeros,
    infinities, NaN and finite values)."""
    (ar, ai), (br, bi) = parts(ctx, inputs[0]), parts(ctx, inputs[1])
    direction = op.attrs.get("comparison_direction")
    if direction in ("LE", "GE"):
        return ctx.op(_ORDERED[direction], [ar, br])
    eq_r = ctx.op("Equal", [ar, br])
    if direction in ("LT", "GT"):
        then = ctx.op("And", [eq_r, ctx.op(_ORDERED[direction], [ai, bi])])
        return ctx.op("Or", [ctx.op(_ORDERED[direction], [ar, br]), then])
    eq_i = ctx.op("Equal", [ai, bi])
    if direction == "EQ":
        return ctx.op("And", [eq_r, eq_i])
    return ctx.op("Or", [ctx.op("Not", [eq_r]), ctx.op("Not", [eq_i])])


def _check_bitcast(op: hir.Op) -> str | None:
    src, dst = op.operands[0].type, op.results[0].type
    if src.dtype != dst.dtype:
        return f"bitcast_convert from {src.dtype} to {dst.dtype} is not lowered"
    return None


@complex_lowering("stablehlo.bitcast_convert", check=_check_bitcast, onnx_ops=("Identity",))
def lower_bitcast_convert(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """A complex value to its own type (what lax.bitcast_convert_type allows): the same bits."""
    return ctx.op("Identity", inputs)
