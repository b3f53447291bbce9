"""jax.jit of a function with its big closed-over constants passed as arguments, for the check.

``jax.jit(fn)`` embeds every array ``fn`` closes over in the compiled executable: on an MLP with
196 MB of weights that adds about 3.3x the weights to the process (the HLO module, its copies and
the executable's literals). Tracing ``fn`` once to a jaxpr and compiling the jaxpr with its big
constants (``program.HOIST_BYTES`` and more, the same rule as ``trace(hoist_constants=True)``) as
arguments adds only the arguments' device buffers. The program XLA compiles is the same jaxpr, so
the outputs are the same as ``jax.jit(fn)``'s (tests/test_jit_reference.py compares them bit by bit);
small constants stay embedded, where XLA may fold them as it does under ``jax.jit(fn)``. So do big
constants that XLA folds: those an op computes on with no input in it (``jnp.tanh(W)``, ``W.sum()``),
which XLA evaluates at compile time with other kernels than at run time (``folded_constants``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

_CACHE_SIZE = 8
_CACHE: dict[tuple[Any, ...], tuple[Any, Callable[..., Any], tuple[Any, ...], Any]] = {}


def jit_call(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    """``jax.jit(fn)(*args)``, with ``fn``'s big closed-over constants passed as arguments.

    Under ``jax.disable_jit`` ``fn`` runs op by op as before. The traced program is cached per
    function, argument shapes and dtypes and x64 mode until ``clear()``.
    """
    import jax

    if jax.config.jax_disable_jit:  # type: ignore[attr-defined]
        return fn(*args)
    flat, treedef = jax.tree_util.tree_flatten(list(args))
    key = (id(fn), treedef, tuple((tuple(x.shape), str(x.dtype), bool(getattr(getattr(x, "aval", None),
                                                                               "weak_type", False)))
                                  for x in flat), bool(jax.config.jax_enable_x64))  # type: ignore[attr-defined]
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not fn:
        hit = (fn, *_hoisted(fn, args))
        while len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = hit
    _, run, consts, out_tree = hit
    return jax.tree_util.tree_unflatten(out_tree, run(consts, *flat))


def _hoisted(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Callable[..., Any], tuple[Any, ...], Any]:
    """(jitted runner of the jaxpr, hoisted constants, output tree) for ``fn`` at ``args``' shapes."""
    import jax
    from jax.core import eval_jaxpr

    from jaxconv.program import _hoistable

    jitted = fn if hasattr(fn, "lower") and hasattr(fn, "trace") else jax.jit(fn)
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=bool(getattr(getattr(x, "aval", None),
                                                                            "weak_type", False)))
             for x in jax.tree_util.tree_leaves(list(args))]
    specs_tree = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(list(args)), specs)
    traced = jitted.trace(*specs_tree)
    closed = traced.jaxpr
    folded = folded_constants(closed.jaxpr)
    big = [i for i, c in enumerate(closed.consts) if _hoistable(c) and i not in folded]
    small = [None if i in big else c for i, c in enumerate(closed.consts)]
    jaxpr = closed.jaxpr

    def run(consts: tuple[Any, ...], *flat: Any) -> list[Any]:
        values = list(small)
        for i, c in zip(big, consts):
            values[i] = c
        return eval_jaxpr(jaxpr, values, *flat)

    # On the device once, not at every call: jax copies a numpy argument that is not 64-byte aligned
    # on each call (an aligned one, and a jax array, it takes as it is).
    return jax.jit(run), tuple(jax.device_put(closed.consts[i]) for i in big), traced.out_tree


# Ops that move or copy elements only: a constant through them is still folded bit for bit.
_EXACT_OPS = frozenset({"transpose", "reshape", "broadcast_in_dim", "squeeze", "expand_dims", "slice",
                        "concatenate", "rev", "copy", "copy_p", "pad", "select_n"})


def _integral(eqn: Any) -> bool:
    """An op on integers and booleans only, but division: XLA's folding of it is exact."""
    kinds = [getattr(getattr(getattr(v, "aval", None), "dtype", None), "kind", "f")
             for v in (*eqn.invars, *eqn.outvars)]
    return eqn.primitive.name not in ("div", "rem") and all(k in "biu" for k in kinds)


def folded_constants(jaxpr: Any) -> set[int]:
    """Indices of the constants of ``jaxpr`` (its constvars) that an op computes on with no input.

    A value is dynamic when it depends on an input; constant-derived values keep the set of
    constants they come from through the element-moving ops of ``_EXACT_OPS`` and integer ops.
    Any other op whose inputs are all constant-derived is folded by XLA when the constants are
    embedded, so its constants stay embedded. Sub-programs (pjit, scan, cond branches, custom derivatives) are
    followed where their inputs map onto the op's; any other op with sub-programs keeps every
    constant it receives embedded.
    """
    blocked: set[int] = set()
    start = {v: frozenset({i}) for i, v in enumerate(jaxpr.constvars)}
    _walk(jaxpr, start, [True] * len(jaxpr.invars), blocked)
    return blocked


_DYN = None  # the state of a value that depends on an input


def _state(env: dict[Any, Any], v: Any) -> Any:
    if not hasattr(v, "count") and hasattr(v, "val"):  # a Literal: a constant of no concern
        return frozenset()
    return env.get(v, frozenset())


def _walk(jaxpr: Any, consts: dict[Any, Any], dynamic_inputs: list[bool], blocked: set[int]) -> list[Any]:
    """Propagate states through ``jaxpr``; returns the states of its outputs."""
    env: dict[Any, Any] = dict(consts)
    for v, dyn in zip(jaxpr.invars, dynamic_inputs):
        env[v] = _DYN if dyn is True else (dyn if isinstance(dyn, frozenset) else frozenset())
    for eqn in jaxpr.eqns:
        ins = [_state(env, v) for v in eqn.invars]
        subs = [p for p in eqn.params.values() for p in (p if isinstance(p, (list, tuple)) else [p])
                if hasattr(getattr(p, "jaxpr", p), "eqns")]
        sources = frozenset().union(*[s for s in ins if s is not _DYN])
        if subs:
            outs = _walk_sub(eqn, subs, ins, blocked)
        elif any(s is _DYN for s in ins):
            outs = [_DYN] * len(eqn.outvars)
        elif eqn.primitive.name in _EXACT_OPS or _integral(eqn):
            outs = [sources] * len(eqn.outvars)
        else:
            blocked.update(sources)
            outs = [frozenset()] * len(eqn.outvars)
        for v, s in zip(eqn.outvars, outs):
            env[v] = s
    return [_state(env, v) for v in jaxpr.outvars]


def _walk_sub(eqn: Any, subs: list[Any], ins: list[Any], blocked: set[int]) -> list[Any]:
    """States of the outputs of an op with sub-programs, following them where their inputs map."""
    outs: list[Any] | None = None
    for sub in subs:
        inner = getattr(sub, "jaxpr", sub)
        n = len(inner.invars)
        if n > len(ins) or (n < len(ins) and eqn.primitive.name != "cond"):
            sources = frozenset().union(*[s for s in ins if s is not _DYN])
            blocked.update(sources)
            return [_DYN] * len(eqn.outvars)
        mapped = _loop_carries(eqn, inner, ins[len(ins) - n:])
        inner_consts = {v: frozenset() for v in getattr(inner, "constvars", [])}
        got = _walk(inner, inner_consts, [True if s is _DYN else s for s in mapped], blocked)
        if len(got) != len(eqn.outvars):
            got = [_DYN] * len(eqn.outvars)
        outs = got if outs is None else [_DYN if a is _DYN or b is _DYN else a | b for a, b in zip(outs, got)]
    return outs or [_DYN] * len(eqn.outvars)


def _loop_carries(eqn: Any, inner: Any, ins: list[Any]) -> list[Any]:
    """The states of a scan body's inputs: a carry the body makes dynamic is dynamic from the second
    step on, and XLA does not fold a loop-carried value (a scan of one step it may inline: those
    keep the states they enter with)."""
    if eqn.primitive.name != "scan" or eqn.params.get("length", 1) < 2:
        return ins
    first, carries = eqn.params["num_consts"], eqn.params["num_carry"]
    states = list(ins)
    for _ in range(carries):
        outs = _walk(inner, {v: frozenset() for v in getattr(inner, "constvars", [])},
                     [True if s is _DYN else s for s in states], set())
        grown = [i for i in range(carries) if outs[i] is _DYN and states[first + i] is not _DYN]
        if not grown:
            break
        for i in grown:
            states[first + i] = _DYN
    return states


def clear() -> None:
    """Forget the traced programs (and with them any reference to the constants)."""
    _CACHE.clear()
