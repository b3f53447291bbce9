"""jax.jit's references for the check: its outputs, the same program in float64, run op by op, and
how far it moves when the inputs move by one rounding step.

Each takes the function, its argument pytrees' specs and flat inputs. ``reference_outputs`` is the
reference; the others judge an output beyond tolerance again (``verify``): ``float64_outputs`` (the
traced program with its inputs, closed-over constants and literals widened: ``jit_reference.wide_call``),
``eager_outputs`` (``jax.disable_jit``) and ``spread_outputs``. Those return None when they fail.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.compare import as_float64, is_float


def reference_outputs(fn: Callable[..., Any], arg_specs: Sequence[Any], flat_inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """jax.jit(fn) on flat inputs rebuilt into the argument pytrees.

    The big arrays ``fn`` closes over are passed to the compiled program as arguments instead of
    being embedded in it (``jit_reference``): the same outputs, without the executable's copies of
    the weights.
    """
    import jax

    from jaxconv.jit_reference import jit_call

    treedef = jax.tree_util.tree_structure(list(arg_specs))
    args = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in flat_inputs])
    out = jit_call(fn, args)
    return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def float64_outputs(fn: Callable[..., Any], arg_specs: Sequence[Any],
                    flat: Sequence[np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """jax.jit(fn) computed in float64: inputs, closed-over constants and literals widened
    (``jit_reference.wide_call``); (None, why) when that fails."""
    import jax

    from jaxconv.jit_reference import wide_call

    try:
        treedef = jax.tree_util.tree_structure(list(arg_specs))
        args = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in flat])
        out, _ = wide_call(fn, args)
        return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)], ""
    except Exception as e:  # noqa: BLE001  (any failure only means there is no float64 reference)
        text = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {text[0][:160] if text else ''}"


def eager_outputs(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """fn run op by op (``jax.disable_jit``), or None when that fails."""
    import jax

    try:
        with jax.disable_jit():
            return reference_outputs(fn, arg_specs, flat)
    except Exception:  # noqa: BLE001
        return None


def _perturbed(flat: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Float inputs moved by one rounding step (relative eps of their dtype, random sign); others unchanged."""
    out = []
    for x in flat:
        x = np.asarray(x)
        if is_float(x) and x.size:
            component = x.real.dtype if x.dtype.kind == "c" else x.dtype
            import ml_dtypes

            eps = float(ml_dtypes.finfo(component).eps)
            with np.errstate(all="ignore"):
                x = (x * (1 + eps * rng.choice([-1.0, 1.0], size=x.shape))).astype(x.dtype)
        out.append(x)
    return out


def spread_outputs(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                   expected: Sequence[np.ndarray], runs: int = 2) -> list[np.ndarray | None] | None:
    """Per output (float64, complex as pairs): how far jax.jit moves when the float inputs move by one rounding step.

    This estimates the error any float32 implementation makes on an ill-conditioned program,
    where jax.jit may happen to be exact. None when the perturbed runs fail.
    """
    rng = np.random.default_rng(12345)
    spread: list[np.ndarray | None] = [None] * len(expected)
    try:
        for _ in range(runs):
            moved = reference_outputs(fn, arg_specs, _perturbed(flat, rng))
            for i, (e, m) in enumerate(zip(expected, moved)):
                if is_float(e) and np.shape(m) == e.shape:
                    with np.errstate(all="ignore"):
                        d = np.abs(as_float64(m) - as_float64(e))
                    d = np.where(np.isfinite(d), d, 0.0)
                    spread[i] = d if spread[i] is None else np.maximum(spread[i], d)
    except Exception:  # noqa: BLE001  (no spread then)
        return None
    return spread
