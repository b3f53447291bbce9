"""stablehlo.fft: FFT, IFFT, RFFT and IRFFT over the last 1 to 3 axes.

Each transformed axis is a real matrix product with a DFT matrix. The packed (re, im) result is one
MatMul per axis on the packed layout (the axis and the pair axis flattened into one of 2n, the axis
moved last by Transposes). Beside it the lowering computes the result's halves apart, for the ops that
read a half: the last axis by a MatMul on the right, an axis before it by a MatMul on the left (the
axes after it flattened into columns), each half its own MatMul, an imaginary half known to be zeros
(a real value made complex) left out of the products. The clean-up keeps what is read: FNet's
``jnp.fft.fft2(x).real`` computes the real half only, with no Gather of the packed layout and no
Transpose (keras-hub FNet, 2 layers of [2, 64, 128]: CPU time 1.48x jax.jit's -> 0.99x); a result
returned or added as it lies keeps the packed graph alone. Long axes use ONNX's DFT op instead, on the
packed layout. Measured with ONNX Runtime 1.32 on this project's 2-core CPU machine (one
intra-op thread, float32, 64 rows, mean of 20 runs after 3 warm-up runs; error: worst absolute
error over max |X| against numpy's float64 transform):

    n      FFT matmul / DFT op      RFFT matmul / DFT op     IRFFT matmul / DFT op
    16     0.009 / 0.019 ms         0.007 / 0.017 ms         0.010 / 0.049 ms
    64     0.026 / 0.061 ms         0.012 / 0.076 ms         0.016 / 0.14 ms
    256    1.1 / 0.67 ms            0.40 / 0.44 ms           0.094 / 1.6 ms
    512    2.6 / 1.2 ms             0.75 / 0.96 ms           0.75 / 1.3 ms
    1024   12 / 2.4 ms              2.2 / 1.1 ms             1.9 / 3.5 ms
    4096   115 / 7.2 ms             27 / 7.9 ms              34 / 13 ms
    error  1.5e-07..5.4e-07 (matmul), 2.4e-07..8.7e-07 (DFT op), any n and kind

Both are as accurate as float32 allows; the matrix is faster for short axes and costs O(n^2)
weights, so each kind switches to the DFT op at the length in ``DFT_OP_FROM``. ONNX Runtime 1.32
runs DFT in both forms the lowering emits (opsets 18-19: ``axis`` attribute; 20+: ``axis`` input);
it has no c2r form, so IRFFT rebuilds the Hermitian spectrum first. The matrices are built in
float64 from exact angles (j * k mod n) and rounded once to the component type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.ops._complex import component, is_complex, is_zeros, known_parts, pack, parts, share_parts
from jaxconv.onnx.registry import complex_lowering, lowering
from jaxconv.stablehlo import ir as hir

DFT_OP_FROM = {"FFT": 256, "RFFT": 1024, "IRFFT": 2048}  # from the table above
METHOD_OVERRIDE: str | None = None  # "matmul" or "dft" forces one method (measurements and tests)


def _use_dft_op(n: int, kind: str) -> bool:
    if METHOD_OVERRIDE is not None:
        return METHOD_OVERRIDE == "dft"
    return n >= DFT_OP_FROM[kind]


def _turns(n: int, m: int, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """[n, m] float64: cos and sin of ``sign * 2 pi (j k mod n) / n``, exactly 0 and +-1 at quarter turns.

    cos(pi / 2) in float64 is 6.1e-17, not 0: times a huge input it leaves a residue where the transform
    has an exact zero (the real half of fft([1, 1e30, 1, 1]) is [1e30, 0, -1e30, 0] in jax.jit, whose
    butterflies add and subtract; 6.1e13 came out for its zeros).
    """
    j, k = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")
    r = (j * k) % max(n, 1)
    t = sign * 2.0 * np.pi * r / max(n, 1)
    quarter = (4 * r) % max(n, 1) == 0
    q = (4 * r // max(n, 1)) % 4
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[q], np.cos(t))
    sin = np.where(quarter, sign * np.array([0.0, 1.0, 0.0, -1.0])[q], np.sin(t))
    return cos, sin


# The matrices are [n, c_in, m, c_out]: element (j, c_in) of the input to element (k, c_out) of the
# output, c = 0 the real half and 1 the imaginary one (a real input or output has only c = 0).


def complex_matrix(n: int, inverse: bool) -> np.ndarray:
    """[n, 2, n, 2] float64: a complex signal to its DFT (its inverse DFT, 1/n scaled)."""
    c, s = _turns(n, n, 1.0 if inverse else -1.0)
    w = np.empty((n, 2, n, 2))
    w[:, 0, :, 0], w[:, 0, :, 1], w[:, 1, :, 0], w[:, 1, :, 1] = c, s, -s, c
    return w / (n if inverse else 1)


def r2c_matrix(n: int) -> np.ndarray:
    """[n, 1, n//2+1, 2] float64: a real signal to the non-negative half of its spectrum."""
    m = n // 2 + 1
    return np.stack(_turns(n, m, -1.0), axis=-1)[:, None]


def c2r_matrix(n: int) -> np.ndarray:
    """[n//2+1, 2, n, 1] float64: a Hermitian half spectrum to its real inverse transform (1/n scaled).

    The imaginary parts of X_0 and, for even n, X_{n/2} are ignored, as XLA's c2r transform does.
    """
    m = n // 2 + 1
    k = np.arange(m)
    cos, sin = (a.T for a in _turns(n, m, 1.0))  # [m, n]: (k j mod n)
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)[:, None]
    re, im = weight * cos, -weight * sin
    im[0] = 0.0
    if n % 2 == 0 and n:
        im[n // 2] = 0.0
    return np.stack([re, im], axis=1)[..., None] / max(n, 1)


@dataclass(frozen=True)
class Halves:
    """A complex tensor as its real and imaginary halves; ``im`` is None where it is zeros (a real input)."""

    re: str
    im: str | None


Signal = Union[str, Halves]  # a str is a complex tensor in the packed (re, im) layout


def _signal(ctx: LoweringContext, x: str) -> Signal:
    """The complex input ``x`` as halves where a lowering made them, else packed as it is."""
    found = known_parts(ctx, x)
    if found is None:
        return x
    re, im = found
    return Halves(re, None if is_zeros(ctx, im) else im)


def _halves(ctx: LoweringContext, x: Signal) -> Halves:
    return x if isinstance(x, Halves) else Halves(*parts(ctx, x))


def _packed(ctx: LoweringContext, x: Signal, dtype: str) -> str:
    if isinstance(x, str):
        return x
    im = x.im if x.im is not None else ctx.op("Expand", [ctx.scalar(0.0, dtype), ctx.op("Shape", [x.re])])
    return pack(ctx, x.re, im)


def _reshape(ctx: LoweringContext, x: str, lead: int, dims: Sequence[int]) -> str:
    """Reshape to ``lead`` copied leading dims followed by ``dims``."""
    return ctx.op("Reshape", [x, ctx.i64([0] * lead + list(dims))])


def along_last(
    ctx: LoweringContext, x: Signal, rank: int, w: np.ndarray, dtype: str, packed: bool = False
) -> list[str]:
    """The map ``w`` ([n, c_in, m, c_out]) along the last axis of ``x`` (logical rank ``rank``): one
    MatMul on the right per output half, or with ``packed`` one for the packed (re, im) result."""
    n, _, m, halves = w.shape
    if isinstance(x, str):  # packed: (j, c_in) is the flattened last two axes
        rows, w = _reshape(ctx, x, rank - 1, [2 * n]), w.reshape(2 * n, m, halves)
    elif x.im is None:
        rows, w = x.re, w[:, 0]
    else:
        rows = ctx.op("Concat", [x.re, x.im], axis=-1)
        w = w.transpose(1, 0, 2, 3).reshape(2 * n, m, halves)
    if packed and halves == 2:
        out = ctx.op("MatMul", [rows, ctx.const(w.reshape(-1, 2 * m).astype(dtype))])
        return [_reshape(ctx, out, rank - 1, [m, 2])]
    return [ctx.op("MatMul", [rows, ctx.const(w[:, :, c].astype(dtype))]) for c in range(halves)]


def along(
    ctx: LoweringContext, x: Signal, axis: int, after: Sequence[int], w: np.ndarray, dtype: str
) -> list[str]:
    """The map ``w`` along ``axis`` of ``x``, which has the dims ``after`` after it: one MatMul on the
    left per output half, with the axes after ``axis`` flattened into its columns."""
    n, _, m, halves = w.shape
    x = _halves(ctx, x)
    cols = math.prod(after)
    flat = len(after) > 1
    re, im = x.re, x.im
    if flat:
        re = _reshape(ctx, re, axis, [n, cols])
        im = im and _reshape(ctx, im, axis, [n, cols])
    if im is None:
        rows, left = re, w[:, 0].transpose(2, 1, 0)  # [c_out, m, n]
    else:
        rows = ctx.op("Concat", [re, im], axis=-2)
        left = w.transpose(3, 2, 1, 0).reshape(halves, m, 2 * n)
    out = [ctx.op("MatMul", [ctx.const(left[c].astype(dtype)), rows]) for c in range(halves)]
    return [_reshape(ctx, o, axis, [m, *after]) for o in out] if flat else out


def complex_axis(
    ctx: LoweringContext,
    x: Signal,
    rank: int,
    axis: int,
    after: Sequence[int],
    n: int,
    inverse: bool,
    dtype: str,
    packed: bool,
) -> Signal:
    """The complex (I)FFT of ``x`` along ``axis`` (``packed``: on the packed layout, the axis moved last)."""
    if _use_dft_op(n, "FFT"):
        dft = lambda y: _dft_op(ctx, y, rank - 1, inverse)  # noqa: E731
        return _moved_last(ctx, _packed(ctx, x, dtype), rank, axis, dft)
    w = complex_matrix(n, inverse)
    if packed:
        return _moved_last(
            ctx, _packed(ctx, x, dtype), rank, axis, lambda y: along_last(ctx, y, rank, w, dtype, True)[0]
        )
    re, im = along_last(ctx, x, rank, w, dtype) if axis == rank - 1 else along(ctx, x, axis, after, w, dtype)
    return Halves(re, im)


def _swap(ctx: LoweringContext, x: str, rank: int, a: int, b: int) -> str:
    if a == b:
        return x
    perm = list(range(rank))
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.op("Transpose", [x], perm=perm)


def _moved_last(ctx: LoweringContext, x: str, rank: int, axis: int, fn: Callable[[str], str]) -> str:
    """``fn`` applied to the packed tensor ``x`` with ``axis`` moved next to the pair axis, and moved back."""
    return _swap(ctx, fn(_swap(ctx, x, rank + 1, axis, rank - 1)), rank + 1, axis, rank - 1)


def _dft_op(ctx: LoweringContext, x: str, axis: int, inverse: bool, onesided: bool = False) -> str:
    if ctx.opset >= 20:
        return ctx.op(
            "DFT", [x, "", ctx.const(np.array(axis, np.int64))], inverse=int(inverse), onesided=int(onesided)
        )
    return ctx.op("DFT", [x], axis=axis, inverse=int(inverse), onesided=int(onesided))


def rfft_last(ctx: LoweringContext, x: str, rank: int, n: int, dtype: str, packed: bool) -> Signal:
    """The non-negative half spectrum of the real tensor ``x`` along its last axis."""
    if _use_dft_op(n, "RFFT"):
        return _dft_op(ctx, ctx.op("Unsqueeze", [x, ctx.i64([-1])]), rank - 1, False, onesided=True)
    out = along_last(ctx, Halves(x, None), rank, r2c_matrix(n), dtype, packed)
    return out[0] if packed else Halves(*out)


def irfft_last(ctx: LoweringContext, x: Signal, rank: int, n: int, dtype: str) -> str:
    """The real inverse transform, length ``n``, of the half spectrum ``x`` along its last axis."""
    m = n // 2 + 1
    if not _use_dft_op(n, "IRFFT"):
        return along_last(ctx, x, rank, c2r_matrix(n), dtype)[0]
    # the full spectrum: X_k for k <= n/2, conj(X_{n-k}) above; the imaginary parts of X_0
    # (and X_{n/2}) dropped
    re, im = parts(ctx, _packed(ctx, x, dtype))
    keep = np.ones(m)
    keep[0] = 0.0
    if n % 2 == 0:
        keep[-1] = 0.0
    im = ctx.op("Mul", [im, ctx.const(keep.astype(dtype))])
    mirror = np.arange(n - m, 0, -1, dtype=np.int64)  # indices n-k for k = m .. n-1
    re_hi = ctx.op("Gather", [re, ctx.const(mirror)], axis=-1)
    im_hi = ctx.op("Neg", [ctx.op("Gather", [im, ctx.const(mirror)], axis=-1)])
    full_re, full_im = ctx.op("Concat", [re, re_hi], axis=-1), ctx.op("Concat", [im, im_hi], axis=-1)
    y = _dft_op(ctx, pack(ctx, full_re, full_im), rank - 1, True)
    return ctx.op("Gather", [y, ctx.const(np.array(0, np.int64))], axis=-1)


def _check_fft(op: hir.Op) -> str | None:
    lengths = list(op.attrs.get("fft_length") or ())
    t = op.operands[0].type
    if not 1 <= len(lengths) <= 3:
        return f"fft over {len(lengths)} axes"
    if any(d is None for d in t.shape[t.rank - len(lengths) :]) or any(
        d is None for d in op.results[0].type.shape[t.rank - len(lengths) :]
    ):
        return "fft over a dynamic axis is not lowered"
    return None


@lowering("stablehlo.fft", check=_check_fft, onnx_ops=("MatMul", "DFT"))
@complex_lowering("stablehlo.fft", check=_check_fft, onnx_ops=("MatMul", "DFT"))
def lower_fft(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> str:
    """FFT/IFFT/RFFT/IRFFT over the trailing axes: DFT-matrix MatMuls per axis on the halves, ONNX's DFT
    for long axes."""
    kind = str(op.attrs.get("fft_type"))
    lengths = [int(n) for n in op.attrs["fft_length"]]
    t, r = op.operands[0].type, op.results[0].type
    rank = t.rank
    dtype = component(r.dtype)
    axes = list(range(rank - len(lengths), rank))
    if 0 in r.shape or 0 in t.shape:
        shape = [d for d in r.shape] + ([2] if is_complex(r) else [])
        return ctx.const(np.zeros(shape, dtype))
    if kind == "IRFFT":  # the leading axes first, on the input's dims; the c2r transform last
        # one axis: on the halves where they are known (no pack); more: packed (a MatMul on the left
        # with the c2r transform's short rows as columns runs slower than moving the axis)
        x = _signal(ctx, inputs[0]) if len(lengths) == 1 else inputs[0]
        for a, n in zip(axes[:-1], lengths[:-1]):
            x = complex_axis(ctx, x, rank, a, t.shape[a + 1 :], n, True, dtype, isinstance(x, str))
        return irfft_last(ctx, x, rank, lengths[-1], dtype)
    # from the last axis to the first, on the result's dims (RFFT's last one is n//2+1 long); the
    # packed result for its packed readers, its halves computed apart for readers of a half
    packed = _packed(ctx, _transform(ctx, kind, inputs[0], axes, lengths, r.shape, dtype, True), dtype)
    halves = _transform(ctx, kind, inputs[0], axes, lengths, r.shape, dtype, False)
    if isinstance(halves, Halves) and halves.im is not None:
        share_parts(ctx, packed, halves.re, halves.im)
    return packed


def _transform(
    ctx: LoweringContext,
    kind: str,
    x: str,
    axes: list[int],
    lengths: list[int],
    dims: Sequence[int],
    dtype: str,
    packed: bool,
) -> Signal:
    """FFT, IFFT or RFFT of ``x`` (result dims ``dims``) on the packed layout or on the halves."""
    rank = len(dims)
    if kind == "RFFT":
        y = rfft_last(ctx, x, rank, lengths[-1], dtype, packed)
        todo = list(zip(axes[:-1], lengths[:-1]))
    else:
        y, todo = x if packed else _signal(ctx, x), list(zip(axes, lengths))
    for a, n in todo[::-1]:
        on_packed = packed or (isinstance(y, str) and a < rank - 1)  # after ONNX's DFT, packed
        y = complex_axis(ctx, y, rank, a, dims[a + 1 :], n, kind == "IFFT", dtype, on_packed)
    return y
