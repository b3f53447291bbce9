"""Big numpy constants handed to a jitted program without a second full copy of them.

jax takes a numpy array as a device buffer without copying only when its data is 64-byte aligned,
and numpy's big arrays are not: their data starts 16 bytes into a page. ``jax.device_put`` of such
an array copies all of it, and the caller's array stays alive beside the copy (the check's
``jax.jit`` reference, ``jit_reference``, held both: 2.18x the weights of a 1.4 GB MLP).

``borrow`` splits such an array into its first few elements, copied, and a zero-copy device view of
the rest, which starts on a 64-byte boundary. ``eval_borrowed`` evaluates a jaxpr with the split
constants rebuilt where the program first uses each one: the rebuilt array is a temporary of the
compiled program, live from its first to its last use, and made to depend on the value computed
last before that use, so XLA cannot schedule every rebuild at the start, where all of them would
be live at once. On an MLP only one layer's weight is rebuilt at a time. The values are the
constants' own elements (a concatenation and a slice at an index that is always 0), so the outputs
are those of the program with the constants passed whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

ALIGN = 64
"""The alignment jax (XLA's CPU client) needs to take a host buffer without copying it."""


@dataclass(frozen=True)
class Borrowed:
    """A constant as ``head`` (its first elements, a small device copy) and ``body`` (a device view
    of the rest of the caller's buffer, not copied), flattened; ``shape`` is the constant's."""

    head: Any
    body: Any
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.body.dtype)

    @property
    def nbytes(self) -> int:
        return int(self.head.nbytes) + int(self.body.nbytes)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The constant whole (a copy)."""
        whole = np.concatenate([np.asarray(self.head), np.asarray(self.body)]).reshape(self.shape)
        return whole if dtype is None else whole.astype(dtype)


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


_registered = False


def _register() -> None:
    """Make ``Borrowed`` a pytree, so that a jitted function takes it as an argument."""
    global _registered
    if not _registered:
        import jax

        jax.tree_util.register_pytree_node(Borrowed, lambda b: ((b.head, b.body), b.shape),
                                           lambda shape, parts: Borrowed(*parts, shape))
        _registered = True


def borrow(value: Any) -> Any:
    """``value`` on the device: a ``Borrowed`` for a C-contiguous numpy array whose data is not
    64-byte aligned, when the device view of its aligned part shares the caller's memory; otherwise
    ``jax.device_put(value)``."""
    import jax

    _register()

    if not (isinstance(value, np.ndarray) and value.flags.c_contiguous and value.size > 1
            and value.dtype.kind in ("b", "i", "u", "f")):
        return jax.device_put(value)
    skip, rem = divmod((-_address(value)) % ALIGN, value.itemsize)
    if skip == 0 or rem or skip >= value.size:
        return jax.device_put(value)
    flat = value.reshape(-1)
    body = jax.device_put(flat[skip:])
    if body.unsafe_buffer_pointer() != _address(flat[skip:]):  # jax copied it after all: use the copy whole
        del body
        return jax.device_put(value)
    return Borrowed(jax.device_put(np.array(flat[:skip])), body, tuple(value.shape))


def _dynamic(v: Any) -> bool:
    """A traced value a dependency can be read from: a numeric array with at least one element."""
    aval = getattr(v, "aval", None)
    dtype = getattr(aval, "dtype", None)
    return (getattr(dtype, "kind", None) in ("b", "i", "u", "f", "c")
            and int(np.prod(getattr(aval, "shape", ()), dtype=np.int64)) > 0)


def _rebuild(b: Borrowed, after: Any) -> Any:
    """``b``'s constant, computed after ``after`` (a traced value, or None for no order)."""
    import jax.numpy as jnp
    from jax import lax

    n = int(b.head.shape[0]) + int(b.body.shape[0])
    if after is None:
        return jnp.concatenate([b.head, b.body]).reshape(b.shape)
    first = after.reshape(-1)[0]
    nan = first != first
    zero = lax.convert_element_type(nan & ~nan, np.int32)  # always 0; XLA does not fold it
    padded = jnp.concatenate([b.head, b.body, b.head[:1]])
    return lax.dynamic_slice(padded, [zero], [n]).reshape(b.shape)


def eval_borrowed(jaxpr: Any, consts: Sequence[Any], *args: Any) -> list[Any]:
    """``jax.core.eval_jaxpr(jaxpr, consts, *args)`` where a ``Borrowed`` constant is rebuilt before
    the first equation that reads it, after the value the last equation on an input computed."""
    from jax.extend.core import Literal

    env: dict[Any, Any] = {}
    dynamic: set[Any] = set()
    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    dynamic.update(jaxpr.invars)
    last = next((a for a in args if _dynamic(a)), None)

    def read(v: Any) -> Any:
        if isinstance(v, Literal):
            return v.val
        value = env[v]
        if isinstance(value, Borrowed):
            value = env[v] = _rebuild(value, last)
        return value

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        with eqn.ctx.manager:
            ans = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
        outs = ans if eqn.primitive.multiple_results else [ans]
        env.update(zip(eqn.outvars, outs))
        if any(not isinstance(v, Literal) and v in dynamic for v in eqn.invars):
            dynamic.update(eqn.outvars)
            last = next((o for o in outs if _dynamic(o)), last)
    return [read(v) for v in jaxpr.outvars]
