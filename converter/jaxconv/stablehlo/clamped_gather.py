"""Lower ``gather`` with its start indices clamped explicitly, for converters that do not clamp.

StableHLO's ``gather`` clamps each start index so the whole slice lies inside the operand, and
JAX relies on that: ``x[i]``, ``jnp.take(..., mode="clip")`` and the masked gather behind
``mode="fill"`` all lower to a bare ``stablehlo.gather`` whose indices may be out of range. The
TFLite converter turns it into ``GATHER_ND``, which fails at run time on a negative or too-large
index where JAX returns the clamped slice. Inside ``gathers_clamped()`` every gather lowered for
the CPU gets ``clamp(0, index, operand_dim - slice_size)`` in front of it: the same values XLA
computes, written out so that TFLite computes them too. The ONNX lowering adds the same guard
itself (``onnx/ops``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def _clamp_indices(operand: Any, indices: Any, *, start_index_map: tuple[int, ...],
                   slice_sizes: tuple[Any, ...]) -> Any:
    """``indices`` (index vector last) clamped to [0, operand.shape[d] - slice_sizes[d]] per mapped dim."""
    import numpy as np
    from jax import lax

    if not start_index_map:
        return indices
    upper = lax.shape_as_value(tuple(operand.shape[d] - slice_sizes[d] for d in start_index_map))
    limit = np.iinfo(indices.dtype).max
    if np.iinfo(upper.dtype).max > limit:
        upper = lax.min(upper, lax.full_like(upper, limit))
    upper = lax.convert_element_type(upper, indices.dtype)
    upper = lax.broadcast_in_dim(upper, indices.shape, (indices.ndim - 1,))
    return lax.clamp(lax.full_like(indices, 0), indices, upper)


def _clamping_rule(base: Any) -> Any:
    """A gather lowering rule that clamps the indices, then lowers with ``base``."""
    from jax._src import dtypes
    from jax._src.interpreters import mlir
    from jax._src.lax.slicing import GatherScatterMode

    def rule(ctx: Any, operand: Any, indices: Any, *, dimension_numbers: Any, slice_sizes: Any, mode: Any,
             **params: Any) -> Any:
        operand_aval, indices_aval = ctx.avals_in
        plain = (not dtypes.issubdtype(operand_aval.dtype, dtypes.extended)
                 and mode != GatherScatterMode.FILL_OR_DROP)  # fill lowers to a gather that comes back here
        if plain and dimension_numbers.start_index_map:
            clamp = mlir.lower_fun(lambda o, i: _clamp_indices(
                o, i, start_index_map=tuple(dimension_numbers.start_index_map), slice_sizes=tuple(slice_sizes)),
                multiple_results=False)
            out = clamp(ctx.replace(primitive=None, avals_out=[indices_aval]), operand, indices)
            indices = out[0]
            if isinstance(indices, (list, tuple)):
                indices = indices[0]
        return base(ctx, operand, indices, dimension_numbers=dimension_numbers, slice_sizes=slice_sizes, mode=mode,
                    **params)

    return rule


@contextlib.contextmanager
def gathers_clamped() -> Iterator[None]:
    """Inside the block, JAX lowers every ``gather`` for the CPU with explicitly clamped start indices.

    This registers a CPU lowering rule for ``lax.gather_p`` through JAX's public
    ``mlir.register_lowering`` and, on exit, puts back what was there before (reading and
    restoring the registry, ``jax._src.interpreters.mlir._platform_specific_lowerings``, is
    private). JAX's caches are cleared on entry and exit, so no lowering made outside the block is
    reused inside it, nor the other way round. Without that registry the block changes nothing;
    tests/test_tflite_gather.py then fails.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax.slicing import gather_p

        registry = mlir._platform_specific_lowerings["cpu"]
        previous = registry.get(gather_p)
        base = (previous or mlir._lowerings[gather_p]).rule
    except (ImportError, AttributeError, KeyError):
        yield
        return
    import jax

    jax.clear_caches()  # a lowering cached before the block would skip the clamps
    mlir.register_lowering(gather_p, _clamping_rule(base), platform="cpu")
    try:
        yield
    finally:
        if previous is None:
            registry.pop(gather_p, None)
        else:
            registry[gather_p] = previous
        jax.clear_caches()  # and one cached inside must not serve later exports
