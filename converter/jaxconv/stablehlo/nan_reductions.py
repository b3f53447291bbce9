"""Lower float ``reduce_max``/``reduce_min`` with an explicit NaN guard, for runtimes whose max drops NaN.

XLA's maximum and minimum propagate NaN, so ``jnp.max`` of an array that holds a NaN is NaN. Two
runtimes that run jaxconv's TF artifacts do not: TensorFlow's XLA behind ``XlaCallModule`` (fast
min/max) returns the largest other value, and TFLite's REDUCE_MAX returns FLT_MAX or the largest
other value. Inside ``reductions_keep_nan()`` every float max/min reduction lowered for the CPU
becomes ``select(reduce_or(x != x), NaN, reduce_max(x))``: one extra boolean reduction, the
values XLA computes. Max/min pooling (``reduce_window``) gets the same guard through one more
max pooling, of ``x != x`` as 0/1 floats. (The TFLite converter keeps ∓inf constants since
``tf/tflite.py`` turns its ``canonicalizing_inf_as_min_max_float`` off, so a window of only ∓inf
gives ∓inf.) Elementwise max and the other kernel differences are not guarded (see README "Known
differences").
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _guard(x: Any, reduced: Any, *, axes: tuple[int, ...]) -> Any:
    """``reduced`` with NaN wherever the reduced slice of ``x`` holds a NaN."""
    from jax import lax

    has_nan = lax.reduce_or(lax.ne(x, x), axes)
    return lax.select(has_nan, lax.full_like(reduced, float("nan")), reduced)


def _guarded_rule(base: Any) -> Any:
    """A reduce_max/reduce_min lowering rule: ``base``, then the NaN guard for floating point operands."""
    import numpy as np
    from jax._src.interpreters import mlir

    def rule(ctx: Any, x: Any, *, axes: Any, **params: Any) -> Any:
        (aval,) = ctx.avals_in
        out = base(ctx, x, axes=axes, **params)
        if not np.issubdtype(aval.dtype, np.floating) or aval.size == 0:
            return out
        reduced = out[0] if isinstance(out, (list, tuple)) else out
        guard = mlir.lower_fun(lambda v, r: _guard(v, r, axes=tuple(axes)), multiple_results=False)
        guarded = guard(ctx.replace(primitive=None, avals_in=[aval, ctx.avals_out[0]]), x, reduced)
        value = guarded[0]
        if isinstance(value, (list, tuple)):
            value = value[0]
        return [value]

    return rule


_NESTED = [0]  # > 0 while a guard is being lowered: its own pooling lowers plainly


def _window_guard(x: Any, pooled: Any, *, params: dict[str, Any]) -> Any:
    """``pooled`` with NaN wherever the pooling window of ``x`` holds a NaN (read from a pooled 0/1 map)."""
    from jax import lax
    from jax._src.lax.windowed_reductions import reduce_window_max_p

    nan_map = lax.convert_element_type(lax.ne(x, x), x.dtype)
    has_nan = lax.gt(reduce_window_max_p.bind(nan_map, **params), lax.full_like(pooled, 0))
    return lax.select(has_nan, lax.full_like(pooled, float("nan")), pooled)


def _guarded_window_rule(base: Any) -> Any:
    """A reduce_window_max/min lowering rule: ``base``, then the NaN guard for floating point operands."""
    import numpy as np
    from jax._src.interpreters import mlir

    def rule(ctx: Any, x: Any, **params: Any) -> Any:
        (aval,) = ctx.avals_in
        out = base(ctx, x, **params)
        if _NESTED[0] or not np.issubdtype(aval.dtype, np.floating) or aval.size == 0:
            return out
        pooled = out[0] if isinstance(out, (list, tuple)) else out
        guard = mlir.lower_fun(lambda v, r: _window_guard(v, r, params=params), multiple_results=False)
        _NESTED[0] += 1
        try:
            guarded = guard(ctx.replace(primitive=None, avals_in=[aval, ctx.avals_out[0]]), x, pooled)
        finally:
            _NESTED[0] -= 1
        value = guarded[0]
        if isinstance(value, (list, tuple)):
            value = value[0]
        return [value]

    return rule


@contextlib.contextmanager
def reductions_keep_nan() -> Iterator[None]:
    """Inside the block, JAX lowers float max/min reductions and pooling for the CPU with a NaN guard.

    Registered, restored and cache-cleared like ``clamped_gather.gathers_clamped`` (the registry
    read is private JAX; without it the block changes nothing and tests/test_tf_targets.py's NaN
    reduction test fails).
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax.lax import reduce_max_p, reduce_min_p
        from jax._src.lax.windowed_reductions import reduce_window_max_p, reduce_window_min_p

        registry = mlir._platform_specific_lowerings["cpu"]
        saved = {p: registry.get(p) for p in (reduce_max_p, reduce_min_p, reduce_window_max_p, reduce_window_min_p)}
        bases = {p: (saved[p] or mlir._lowerings[p]).rule for p in saved}
    except (ImportError, AttributeError, KeyError):
        yield
        return
    import jax

    jax.clear_caches()
    windows = (reduce_window_max_p, reduce_window_min_p)
    for p, base in bases.items():
        mlir.register_lowering(p, (_guarded_window_rule if p in windows else _guarded_rule)(base), platform="cpu")
    try:
        yield
    finally:
        for p, previous in saved.items():
            if previous is None:
                registry.pop(p, None)
            else:
                registry[p] = previous
        jax.clear_caches()
