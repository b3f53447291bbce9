"""jax.jit's LAPACK calls that never return on some inputs, guarded for the check's edge values.

LAPACK's gesdd with singular vectors (jax.jit's ``jnp.linalg.svd``, ``pinv``, ``lstsq``, ``cond``, ...)
never returns on a matrix of 3x3 or more (both sides) that holds an infinity and no NaN (measured: ``jnp.linalg.pinv``
of ``[[inf, 1, 2], [3, 4, 5], [6, 7, 8]]`` in float32 runs on; its bidiagonal QR iteration does not end),
while a matrix holding NaN gives all-NaN results at once (gesdd refuses it and JAX fills NaN). The check
runs jax.jit on edge values, where a program can hand svd such a matrix (``pinv(jnp.nan_to_num(x, nan=0,
posinf=jnp.inf))``), so ``guarded_program`` is the program with each such svd operand taken as NaN: jax.jit's
own answer there does not exist, NaN is its answer for every other non-finite matrix, and the ONNX
lowering's (``onnx/ops/lapack_svd.py``) for this one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.jaxpr_rebind import bind, rebound_program
from jaxconv.known_differences import program_eqns

NOTE = ("on edge values, jax.jit's reference takes a matrix holding an infinity and no NaN as NaN at svd: "
        "LAPACK's gesdd with vectors never returns on one")
SKIP_NOTE = ("edge values skipped: LAPACK's gesdd with vectors (jax.jit's svd) never returns on a matrix holding an "
             "infinity and no NaN, and this program's svd operands cannot be guarded (an svd in a loop or a branch, "
             "or a loop whose trips read the inputs)")


def _never_returns_on_inf(eqn: Any) -> bool:
    """An ``svd`` computing vectors (LAPACK's gesdd in jax.jit) of matrices of 3x3 or more (smaller ones return:
    junk vectors for 2x2, 2x3 and 3x2, LAPACK's own for a row or a column, which the ONNX lowering follows)."""
    shape = getattr(eqn.invars[0].aval, "shape", ()) if eqn.invars else ()
    return (eqn.primitive.name == "svd" and bool(eqn.params.get("compute_uv", False)) and len(shape) >= 2
            and min(shape[-2:]) >= 3)


def hanging_ops(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> bool:
    """Whether the traced program holds an op jax.jit may never return from on edge values."""
    return any(_never_returns_on_inf(e) for e in program_eqns(fn, arg_specs, flat) or [])


def _guarded(eqn: Any, ins: list[Any]) -> list[Any]:
    """The svd of its operand with each matrix holding an infinity and no NaN replaced by NaN."""
    import jax.numpy as jnp

    a = ins[0]
    infinite = jnp.isinf(a).any(axis=(-2, -1), keepdims=True) & ~jnp.isnan(a).any(axis=(-2, -1), keepdims=True)
    return bind(eqn, [jnp.where(infinite, jnp.full_like(a, jnp.nan), a), *ins[1:]])


def guarded_program(fn: Callable[..., Any], arg_specs: Sequence[Any],
                    flat: Sequence[np.ndarray]) -> Callable[..., Any] | None:
    """``fn`` with every svd's operand guarded as above, a function of the same arguments; None when an svd
    sits in a loop or a branch (``jaxpr_rebind``) or the program does not trace here."""
    try:
        return rebound_program(fn, arg_specs, flat, _never_returns_on_inf, _guarded)
    except Exception:  # noqa: BLE001  (no such program: the caller skips edge values)
        return None
