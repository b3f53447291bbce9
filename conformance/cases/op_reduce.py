"""Op rows: reduce with every body, dtype, NaN propagation, init values, empty and zero-size axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from conformance.case import op_row

RNG = np.random.default_rng(1)
B = jax.export.symbolic_shape("b")[0]
Spec = jax.ShapeDtypeStruct


def _f(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i(shape, dtype, lo=-50, hi=50):
    info = np.iinfo(dtype)
    return RNG.integers(max(lo, info.min), min(hi, info.max), size=shape, endpoint=True).astype(dtype)


FOLDS = {"sum": jnp.sum, "prod": jnp.prod, "max": jnp.max, "min": jnp.min}

for name, fn in FOLDS.items():
    for axis in (0, 1, (0, 2), None):
        op_row(f"reduce.float.{name}.axis{axis}", lambda x, fn=fn, axis=axis: fn(x, axis=axis), _f((3, 4, 5)) * 0.8)

for name, fn in (("max", jnp.max), ("min", jnp.min)):
    x = _f((4, 6))
    x[1, 2] = np.nan
    x[3, 0] = np.nan
    x[2, :] = np.inf if fn is jnp.max else -np.inf
    op_row(f"reduce.nan.{name}.axis1", lambda x, fn=fn: fn(x, axis=1), x)
    op_row(f"reduce.nan.{name}.axis0", lambda x, fn=fn: fn(x, axis=0), x)

for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32):
    for name, fn in FOLDS.items():
        # Values large enough that narrow sums and products wrap like XLA's.
        op_row(f"reduce.int.{name}.{np.dtype(dtype).name}",
               lambda x, fn=fn, dtype=dtype: fn(x, axis=1, dtype=dtype) if fn in (jnp.sum, jnp.prod) else fn(x, axis=1),
               _i((3, 7), dtype, -120, 250))

for dtype in (np.int64, np.uint64):
    for name in ("sum", "max", "min"):
        x = RNG.integers(0, 2**62, size=(3, 5)).astype(dtype)
        if dtype == np.uint64:
            x[0, 1] = np.uint64(2**64 - 5)  # above INT64_MAX: unsigned order must survive
        op_row(f"reduce.int.{name}.{np.dtype(dtype).name}", lambda x, fn=FOLDS[name]: fn(x, axis=1), x)

X = _f((4, 5), np.float64)
X[0, 0] = np.nan
op_row("reduce.float64", lambda x: (x.sum(0), x.max(1), x.min(1), x.prod(0)), X)

for dtype in (np.float16, ml_dtypes.bfloat16):
    x = _f((4, 64), dtype)
    x[1, 3] = np.nan
    op_row(f"reduce.half.{np.dtype(dtype).name}", lambda x: (x.sum(1).astype(jnp.float32), x.max(1).astype(jnp.float32),
                                                            x.min(0).astype(jnp.float32)), x, tol=(2e-2, 5e-2))

BOOLS = RNG.random((4, 5)) < 0.3
BOOLS[0] = True
BOOLS[1] = False
op_row("reduce.bool.any_all", lambda x: (jnp.any(x, axis=1), jnp.all(x, axis=1), jnp.any(x), jnp.all(x, axis=0)), BOOLS)
op_row("reduce.bool.xor", lambda x: lax.reduce(x, False, lax.bitwise_xor, (1,)), RNG.random((4, 6)) < 0.5)

for k, (op, init) in enumerate([(lax.bitwise_and, -1), (lax.bitwise_or, 0), (lax.bitwise_xor, 0),
                                (lax.bitwise_and, 0x0F0F), (lax.bitwise_xor, 7)]):
    x = _i((3, 7, 5), np.int32, -1000, 1000)
    op_row(f"reduce.bitwise.{op.__name__}.{init}.axis1", lambda x, op=op, init=init: lax.reduce(x, np.int32(init), op, (1,)), x)
    op_row(f"reduce.bitwise.{op.__name__}.{init}.axes02",
           lambda x, op=op, init=init: lax.reduce(x, np.int32(init), op, (0, 2)), x)

op_row("reduce.bitwise.or.uint8", lambda x: lax.reduce(x, np.uint8(0), lax.bitwise_or, (0,)), _i((5, 6), np.uint8, 0, 255))

for op, init in [(lax.add, 2.5), (lax.mul, -2.0), (lax.max, 0.5), (lax.min, -0.25)]:
    op_row(f"reduce.init.{op.__name__}.{init}", lambda x, op=op, init=init: lax.reduce(x, np.float32(init), op, (1,)),
           _f((3, 4)))

op_row("reduce.init.argument", lambda x, i: lax.reduce(x, i, lax.add, (0,)), _f((3, 4)), np.float32(1.5))
X34 = _f((3, 4))
op_row("reduce.no_dimensions.init1", lambda x: lax.reduce(x, np.float32(1.0), lax.add, ()), X34)
op_row("reduce.no_dimensions.init0", lambda x: lax.reduce(x, np.float32(0.0), lax.add, ()), X34)

for op, init in [(lax.add, 3.0), (lax.max, -np.inf), (lax.min, 2.0), (lax.mul, 1.0)]:
    op_row(f"reduce.zero_size_axis.{op.__name__}.{init}",
           lambda x, op=op, init=init: lax.reduce(x, np.float32(init), op, (1,)), np.zeros((3, 0, 2), np.float32))

op_row("reduce.int32.wraps", lambda x: (jnp.sum(x, axis=1), jnp.prod(x, axis=0)),
       RNG.integers(2**29, 2**31 - 1, size=(4, 9)).astype(np.int32))
op_row("reduce.zero_size.int_max", lambda x: jnp.max(x, axis=0, initial=-7), np.zeros((0, 4), np.int32))
op_row("reduce.dynamic_batch", lambda x: (x.sum(0), x.max(1), jnp.any(x > 0, axis=0)), _f((3, 6)),
       specs=[Spec((B, 6), np.float32)], runs=[[_f((5, 6))]])


# ---- variadic and general bodies ----------------------------------------------------------------------
for dtype in (np.float32, ml_dtypes.bfloat16, np.bool_):
    # Result i combines only accumulator i with operand i (max over one, min over the other).
    x = _f((4, 6)).astype(dtype) if dtype is not np.bool_ else RNG.random((4, 6)) > 0.5
    y = RNG.integers(-9, 9, size=(4, 6)).astype(np.int32)
    init = np.array(3 if dtype is not np.bool_ else False, dtype)
    op_row(f"reduce.variadic.independent.{np.dtype(dtype).name}",
           lambda x, y, init=init: lax.reduce((x, y), (init, np.int32(0)),
                                              lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])), (0,)), x, y)

XY = [RNG.integers(-9, 9, size=(2, 4, 6)).astype(np.int32) for _ in range(2)]
op_row("reduce.variadic.dynamic_batch",
       lambda x, y: lax.reduce((x, y), (np.int32(3), np.int32(0)), lambda a, b: (lax.max(a[0], b[0]), lax.min(a[1], b[1])),
                               (1, 2)),
       *XY, specs=[Spec((B, 4, 6), np.int32)] * 2, runs=[[RNG.integers(-9, 9, size=(3, 4, 6)).astype(np.int32)] * 2])


def _min_with_payload(a, b):
    take = a[0] <= b[0]
    return lax.select(take, a[0], b[0]), lax.select(take, a[1], b[1])


for axes in [(0,), (1,), (0, 1), ()]:
    op_row(f"reduce.general.halving_tree.axes{''.join(map(str, axes)) or '_none'}",
           lambda k, p, axes=axes: lax.reduce((k, p), (np.float32(np.inf), np.float32(0)), _min_with_payload, axes),
           _f((5, 7)), _f((5, 7)))

op_row("reduce.general.logaddexp", lambda x: lax.reduce(x, np.float32(-np.inf), jnp.logaddexp, (1,)), _f((3, 9)))
op_row("reduce.general.zero_size", lambda k, p: lax.reduce((k, p), (np.float32(np.inf), np.float32(5)), _min_with_payload, (0,)),
       np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))

for dtype in (np.int64, np.uint64):
    info = np.iinfo(dtype)
    x = np.array([[info.max, 7, info.max // 2 + 3], [info.max, info.max, 1]], dtype)
    op_row(f"reduce.sum64.dynamic_wraps.{np.dtype(dtype).name}", lambda x: (jnp.sum(x, axis=0), jnp.sum(x)), x,
           specs=[Spec((B, 3), dtype)], runs=[[np.zeros((0, 3), dtype)], [np.tile(x, (3, 1))]])
