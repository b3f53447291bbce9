"""Lower float ``reduce_max``/``reduce_min`` with an explicit NaN guard, for runtimes whose max drops NaN.

XLA's maximum and minimum propagate NaN, so ``jnp.max`` of an array that holds a NaN is NaN. Two
runtimes that run jaxconv's TF artifacts do not: TensorFlow's XLA behind ``XlaCallModule`` (fast
min/max) returns the largest other value, and TFLite's REDUCE_MAX returns FLT_MAX or the largest
other value. Inside ``reductions_keep_nan()`` every float max/min reduction lowered for the CPU
becomes ``select(reduce_or(x != x), NaN, reduce_max(x))``: one extra boolean reduction, the
values XLA computes. Only whole reductions are guarded; max pooling and elementwise max are not
(see README "Known differences").
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


@contextlib.contextmanager
def reductions_keep_nan() -> Iterator[None]:
    """Inside the block, JAX lowers float ``reduce_max``/``reduce_min`` for the CPU with a NaN guard.

    Registered, restored and cache-cleared like ``clamped_gather.gathers_clamped`` (the registry
    read is private JAX; without it the block changes nothing and tests/test_tf_targets.py's NaN
    reduction test fails).
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax.lax import reduce_max_p, reduce_min_p

        registry = mlir._platform_specific_lowerings["cpu"]
        saved = {p: registry.get(p) for p in (reduce_max_p, reduce_min_p)}
        bases = {p: (saved[p] or mlir._lowerings[p]).rule for p in saved}
    except (ImportError, AttributeError, KeyError):
        yield
        return
    import jax

    jax.clear_caches()
    for p, base in bases.items():
        mlir.register_lowering(p, _guarded_rule(base), platform="cpu")
    try:
        yield
    finally:
        for p, previous in saved.items():
            if previous is None:
                registry.pop(p, None)
            else:
                registry[p] = previous
        jax.clear_caches()
