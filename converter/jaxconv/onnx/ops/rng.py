"""stablehlo.rng_bit_generator with the THREE_FRY algorithm, bit for bit as XLA expands it.

The state is ``[key, counter]`` (uint64). Each output word comes from Threefry-2x32 (20 rounds)
of a 64-bit counter under the 64-bit key: counters are ``counter`` plus the element's row-major
offset (over dimensions longer than 1). A 64-bit output joins the two 32-bit words of its own
counter (first word low); a 32-bit output halves one dimension (the first even one, else the
first longest, rounded up) and interleaves the two words along it. The new state advances the
counter by the number of counters used. DEFAULT and PHILOX are backend-defined or not lowered.
"""

from __future__ import annotations

import numpy as np

from jaxconv.onnx.context import LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA
_OUTPUTS = frozenset({"uint32", "int32", "uint64", "int64"})


def _check(op: hir.Op) -> str | None:
    algorithm = op.attrs.get("rng_algorithm")
    if algorithm != "THREE_FRY":
        return (f"rng_bit_generator with algorithm {algorithm}: only THREE_FRY is reproducible (DEFAULT is "
                "backend-defined)")
    out, state = op.results[1].type, op.operands[0].type
    if out.dtype not in _OUTPUTS or not out.is_static or state.shape != (2,) or state.dtype != "uint64":
        return ("rng_bit_generator THREE_FRY with a uint64[2] state and a static 32- or 64-bit integer "
                "output only")
    return None


def counter_offsets(shape: tuple[int, ...]) -> np.ndarray:
    """Each element's counter offset: row-major over the dimensions longer than 1."""
    out = np.zeros(shape, np.uint64)
    stride = 1
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] < 2:
            continue
        view = [1] * len(shape)
        view[axis] = shape[axis]
        out = out + np.arange(shape[axis], dtype=np.uint64).reshape(view) * np.uint64(stride)
        stride *= shape[axis]
    return out


def split_axis(shape: tuple[int, ...]) -> int | None:
    """The dimension a 32-bit output halves: the first even one, else the first longest (None: scalar)."""
    if not shape:
        return None
    even = [a for a, d in enumerate(shape) if d % 2 == 0 and d > 0]
    return even[0] if even else int(np.argmax(shape))


def _u32(ctx: LoweringContext, v: int) -> str:
    return ctx.scalar(v, "uint32")


def _rotl(ctx: LoweringContext, x: str, r: int) -> str:
    left = ctx.op("BitShift", [x, _u32(ctx, r)], direction="LEFT")
    right = ctx.op("BitShift", [x, _u32(ctx, 32 - r)], direction="RIGHT")
    return ctx.op("BitwiseOr", [left, right])


def threefry2x32(ctx: LoweringContext, x0: str, x1: str, k0: str, k1: str) -> tuple[str, str]:
    """Threefry-2x32 with 20 rounds (uint32 tensors; keys broadcast)."""
    k2 = ctx.op("BitwiseXor", [ctx.op("BitwiseXor", [k0, k1]), _u32(ctx, _PARITY)])
    keys = (k0, k1, k2)
    x0, x1 = ctx.op("Add", [x0, k0]), ctx.op("Add", [x1, k1])
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = ctx.op("Add", [x0, x1])
            x1 = ctx.op("BitwiseXor", [_rotl(ctx, x1, r), x0])
        x0 = ctx.op("Add", [x0, keys[(i + 1) % 3]])
        x1 = ctx.op("Add", [ctx.op("Add", [x1, keys[(i + 2) % 3]]), _u32(ctx, i + 1)])
    return x0, x1


def _halves(ctx: LoweringContext, x: str) -> tuple[str, str]:
    """(low, high) 32-bit words of uint64 ``x``."""
    low = ctx.cast(ctx.op("BitwiseAnd", [x, ctx.scalar(0xFFFFFFFF, "uint64")]), "uint32")
    high = ctx.cast(ctx.op("BitShift", [x, ctx.scalar(32, "uint64")], direction="RIGHT"), "uint32")
    return low, high


@lowering("stablehlo.rng_bit_generator", check=_check,
          onnx_ops=("Add", "BitShift", "BitwiseXor", "BitwiseOr"),
          conditions="algorithm THREE_FRY; a uint64[2] state; a static 32- or 64-bit integer output")
def lower_rng_bit_generator(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """THREE_FRY bits exactly as XLA expands them (Threefry-2x32 on uint32 words); new state first."""
    state = inputs[0]
    out = op.results[1].type
    shape = tuple(int(d) for d in out.shape)
    key = ctx.op("Gather", [state, ctx.const(np.array(0, np.int64))], axis=0)
    counter = ctx.op("Gather", [state, ctx.const(np.array(1, np.int64))], axis=0)
    k0, k1 = _halves(ctx, key)
    wide = out.dtype.endswith("64")
    axis = None if wide else split_axis(shape)
    counter_shape = list(shape)
    if axis is not None:
        counter_shape[axis] = -(-shape[axis] // 2)
    elif not wide:
        counter_shape = [1]  # a scalar takes the first word of one counter
    c = ctx.op("Add", [counter, ctx.const(counter_offsets(tuple(counter_shape)))])
    x0, x1 = threefry2x32(ctx, *_halves(ctx, c), k0, k1)
    if wide:
        bits = ctx.op("BitwiseOr", [ctx.cast(x0, "uint64"),
                                    ctx.op("BitShift", [ctx.cast(x1, "uint64"), ctx.scalar(32, "uint64")],
                                           direction="LEFT")])
    elif axis is None:
        bits = ctx.op("Reshape", [x0, ctx.i64([])])
    else:
        pair = ctx.op("Concat", [ctx.op("Unsqueeze", [x, ctx.i64([axis + 1])]) for x in (x0, x1)],
                      axis=axis + 1)
        merged = counter_shape[:axis] + [2 * counter_shape[axis]] + counter_shape[axis + 1:]
        bits = ctx.op("Reshape", [pair, ctx.i64(merged)])
        if merged[axis] != shape[axis]:
            bits = ctx.op("Slice", [bits, ctx.i64([0]), ctx.i64([shape[axis]]), ctx.i64([axis])])
    used = int(np.prod(counter_shape))
    new_state = ctx.op("Concat", [ctx.op("Unsqueeze", [key, ctx.i64([0])]),
                                  ctx.op("Unsqueeze", [ctx.op("Add", [counter, ctx.scalar(used, "uint64")]),
                                                       ctx.i64([0])])], axis=0)
    return [new_state, ctx.cast_if(bits, "uint64" if wide else "uint32", out.dtype)]
