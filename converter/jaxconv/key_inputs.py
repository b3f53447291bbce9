"""Typed PRNG keys (``jax.random.key(...)``, a Flax NNX state's ``RngKey``) as their key data, in and out.

A key array has no numpy dtype, so no artifact (ONNX, a SavedModel, TFLite, an .npz of inputs) can take
one. Such an input becomes its key data, ``uint32[*shape, *key_shape]`` (threefry: 2 words per key), as
``jax.random.key_data(key)`` gives it; the function is traced with that data wrapped back into keys
(``jax.random.wrap_key_data``), so it computes what it computes on the keys. Callers pass the key data.
A key output (``jax.random.split(key)``, an updated NNX state) is returned as its key data likewise.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence


def key_impl(spec: Any) -> Any | None:
    """The PRNG implementation of a key-typed spec or array (its ``key_shape`` and ``name``), else None."""
    import jax

    dtype = getattr(spec, "dtype", None)
    try:
        is_key = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:
        return None
    return getattr(dtype, "_impl", None) if is_key else None


def as_key_data(fn: Callable[..., Any], arg_specs: Sequence[Any]) -> tuple[Callable[..., Any], list[Any]]:
    """``fn`` and ``arg_specs`` with every key-typed input replaced by its uint32 key data; unchanged
    (the same objects) when no input is a key."""
    import jax
    import numpy as np

    leaves, tree = jax.tree_util.tree_flatten(list(arg_specs))
    impls = [key_impl(leaf) for leaf in leaves]
    if not any(impls):
        return fn, list(arg_specs)
    data = [jax.ShapeDtypeStruct((*leaf.shape, *impl.key_shape), np.uint32) if impl is not None else leaf
            for leaf, impl in zip(leaves, impls)]

    @functools.wraps(fn)
    def with_keys(*args: Any) -> Any:
        flat = jax.tree_util.tree_leaves(list(args))
        keys = [jax.random.wrap_key_data(x, impl=impl.name) if impl is not None else x for x, impl in zip(flat, impls)]
        return fn(*jax.tree_util.tree_unflatten(tree, keys))

    return with_keys, jax.tree_util.tree_unflatten(tree, data)


def key_data_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with every key-typed output replaced by its key data (``jax.random.key_data``)."""
    import jax

    @functools.wraps(fn)
    def as_data(*args: Any) -> Any:
        return jax.tree_util.tree_map(lambda v: jax.random.key_data(v) if key_impl(v) is not None else v, fn(*args))

    return as_data
