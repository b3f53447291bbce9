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

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from jaxconv.scan_params import scan_counts

_CACHE_SIZE = 8
_CACHE: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # key -> (fn, runner, constants, output tree)


def _cached(key: tuple[Any, ...], fn: Callable[..., Any],
            build: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """``(fn, *build())``, kept under ``key`` for ``fn`` (the oldest entry goes beyond ``_CACHE_SIZE``)."""
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not fn:
        hit = (fn, *build())
        while len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = hit
    return hit


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
    _, run, consts, out_tree = _cached(key, fn, lambda: _hoisted(fn, args))
    return jax.tree_util.tree_unflatten(out_tree, run(consts, *flat))


def _hoisted(fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Callable[..., Any], tuple[Any, ...], Any]:
    """(jitted runner of the jaxpr, hoisted constants, output tree) for ``fn`` at ``args``' shapes."""
    import jax

    from jaxconv.jit_borrow import borrow, eval_borrowed
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
        return eval_borrowed(jaxpr, values, *flat)

    # On the device once, not at every call: jax copies a numpy argument that is not 64-byte aligned
    # on each call (an aligned one, and a jax array, it takes as it is); ``borrow`` passes most of an
    # unaligned numpy array without a copy, ``eval_borrowed`` rebuilds it where the program uses it.
    return jax.jit(run), tuple(borrow(closed.consts[i]) for i in big), traced.out_tree


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
    first, carries = scan_counts(eqn.params)
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


# The float64 reference ---------------------------------------------------------------------------
#
# ``wide_call`` runs ``fn``'s jaxpr, traced at the inputs' own dtypes, with every narrow float
# (float16, bfloat16, float32; complex64) widened to float64 (complex128): the inputs, the constants
# ``fn`` closes over, the literals and the dtypes ops name (``convert_element_type``'s new dtype, a
# dot's or a convolution's preferred element type, ``iota``'s dtype). Tracing ``fn`` again with
# float64 inputs would leave its float32 constants as they are, and an op that wants equal dtypes
# (``lax.conv_general_dilated``, ``lax.add``) then refuses float64 against float32. Control flow
# (scan, while, cond), calls (jit, custom_jvp/custom_vjp, remat), linear solves and reductions with their
# own computation (``lax.reduce``, ``lax.reduce_window``) run their bodies widened too.
# A conversion that rounds on purpose (``x.astype(jnp.bfloat16)`` on float32) still rounds there.
# An op whose meaning is its precision (``bitcast_convert_type``, ``nextafter``), a callback, or one
# whose sub-program this does not rebuild (``shard_map``, ``custom_transpose``) runs at the program's
# dtypes, its inputs rounded back and its outputs widened: ``wide_call`` names those ops.

AfterEqn = Callable[[Any, list[Any], list[Any], Any], list[Any]]  # (equation, inputs, outputs, salt) -> outputs


@dataclass
class _Widening:
    """The state of one widened evaluation: the ops it ran at the program's dtypes, and the caller's
    hook on every equation's outputs, with the call's salt."""
    at_program_dtypes: set[str]
    after_eqn: AfterEqn | None = None
    salt: Any = None

    def in_combiner(self) -> _Widening:
        """For a reduction's or a scatter's combiner, traced on its own: no hook (its salt would leak in)."""
        return _Widening(self.at_program_dtypes)


_WIDE = {"float16": "float64", "bfloat16": "float64", "float32": "float64", "complex64": "complex128"}
# Ops that stay at the program's dtypes: their result depends on the precision itself.
_AT_PROGRAM_DTYPES = frozenset({"bitcast_convert_type", "nextafter", "pure_callback", "io_callback",
                                "debug_callback", "custom_call", "reduce_precision"})
_INLINED = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
            "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
            "custom_vjp_call_jaxpr": "fun_jaxpr", "remat2": "jaxpr", "checkpoint": "jaxpr"}


def _wide_dtype(dtype: Any) -> Any:
    import numpy as np

    name = getattr(dtype, "name", None)
    return np.dtype(_WIDE[name]) if name in _WIDE else dtype


def _widen_to(x: Any, dtype: Any) -> Any:
    from jax import lax

    return x if x.dtype == dtype else lax.convert_element_type(x, dtype)


def wide_call(fn: Callable[..., Any], args: Sequence[Any], after_eqn: AfterEqn | None = None,
              salt: int = 0) -> tuple[Any, frozenset[str]]:
    """``fn(*args)`` computed in float64 (complex128), constants and literals included, by jax.jit;
    returns (outputs, the ops computed at the program's dtypes). ``args`` keep their own dtypes.

    The jaxpr is traced under the caller's x64 setting, as ``jit_call`` traces it, and runs under
    ``jax.enable_x64``; every constant travels as an argument (widened inside the compiled program).
    ``after_eqn`` (equation, its widened inputs, its widened outputs, ``salt`` as a traced uint64) ->
    outputs, when given, replaces each equation's outputs, loop bodies' and calls' equations included
    (``rounding_noise``); the program is compiled once per hook, ``salt`` varying between calls.
    """
    import jax

    flat, treedef = jax.tree_util.tree_flatten(list(args))
    import numpy as np

    key = ("wide", id(fn), after_eqn, treedef,
           tuple((tuple(x.shape), str(x.dtype)) for x in flat), bool(jax.config.jax_enable_x64))  # type: ignore[attr-defined]

    def build() -> tuple[Any, ...]:
        jitted = fn if hasattr(fn, "lower") and hasattr(fn, "trace") else jax.jit(fn)
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in flat]
        traced = jitted.trace(*jax.tree_util.tree_unflatten(treedef, specs))
        closed = traced.jaxpr
        w = _Widening(set(), after_eqn)

        def run(consts: tuple[Any, ...], salt: Any, *xs: Any) -> list[Any]:
            w.at_program_dtypes.clear()
            w.salt = salt
            wide = [_widen_to(x, _wide_dtype(v.aval.dtype)) for x, v in zip(consts, closed.jaxpr.constvars)]
            ins = [_widen_to(x, _wide_dtype(v.aval.dtype)) for x, v in zip(xs, closed.jaxpr.invars)]
            return _eval_wide(closed.jaxpr, wide, ins, w)

        with jax.enable_x64(True):
            consts = tuple(jax.device_put(_host_widened(c) if _has_subnormals(c) else c) for c in closed.consts)
        return (jax.jit(run), w.at_program_dtypes), consts, traced.out_tree

    _, (run_jit, narrow_ops), consts, out_tree = _cached(key, fn, build)
    with jax.enable_x64(True):  # widened here: XLA on the CPU would flush subnormal inputs as it widens them
        out = run_jit(consts, np.uint64(salt), *[_host_widened(x) for x in flat])
    return jax.tree_util.tree_unflatten(out_tree, out), frozenset(narrow_ops)


def _eval_wide(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], w: _Widening) -> list[Any]:
    """Evaluate ``jaxpr`` (open) on widened values, every narrow float value widened."""
    import numpy as np
    from jax.extend.core import DropVar, Literal

    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        if isinstance(v, Literal):
            dtype = getattr(v.aval, "dtype", None)
            return np.asarray(v.val, _wide_dtype(dtype)) if dtype is not None and dtype.name in _WIDE else v.val
        return env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _eqn_wide(eqn, ins, w)
        if w.after_eqn is not None:
            outs = w.after_eqn(eqn, ins, outs, w.salt)
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, DropVar):
                env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _eval_closed(closed: Any, args: Sequence[Any], w: _Widening) -> list[Any]:
    """A ClosedJaxpr (or an open one) on widened values, its own constants widened."""
    import jax.numpy as jnp

    jaxpr = getattr(closed, "jaxpr", closed)
    consts = [_widen_to(jnp.asarray(c), _wide_dtype(v.aval.dtype))
              for c, v in zip(getattr(closed, "consts", ()), jaxpr.constvars)]
    return _eval_wide(jaxpr, consts, args, w)


def _host_widened(x: Any) -> Any:
    """A narrow float array widened by numpy (exactly, subnormals kept); anything else as it is."""
    import numpy as np

    name = getattr(getattr(x, "dtype", None), "name", "")
    return np.asarray(x).astype(_WIDE[name]) if name in _WIDE else x


def _has_subnormals(c: Any) -> bool:
    """Whether a narrow float constant holds subnormals (XLA on the CPU would flush them as it widens them)."""
    import ml_dtypes
    import numpy as np

    name = getattr(getattr(c, "dtype", None), "name", "")
    if name not in _WIDE:
        return False
    a = np.abs(np.asarray(c))
    tiny = ml_dtypes.finfo(a.dtype).smallest_normal
    return bool(((a != 0) & (a < tiny)).any())


def _narrows(src: Any, dst: Any) -> bool:
    """Whether converting ``src`` to ``dst`` rounds floats to fewer bits (float32 to bfloat16, not int to float)."""
    import ml_dtypes
    import numpy as np

    if getattr(dst, "name", None) not in _WIDE or getattr(src, "name", None) not in (*_WIDE, "float64", "complex128"):
        return False
    if np.dtype(src).kind == "c" or np.dtype(dst).kind == "c":
        return np.dtype(dst).itemsize < np.dtype(src).itemsize
    s, d = ml_dtypes.finfo(src), ml_dtypes.finfo(dst)
    return bool(d.nmant < s.nmant or d.maxexp < s.maxexp)


def _wide_scalar_jaxpr(jaxpr: Any, w: _Widening) -> Any:
    """A scatter's open combiner jaxpr (scalars in, scalars out) traced again on widened scalars."""
    import jax

    specs = [jax.ShapeDtypeStruct(v.aval.shape, _wide_dtype(v.aval.dtype)) for v in jaxpr.invars]
    with jax.enable_x64(True):
        return jax.make_jaxpr(lambda *a: _eval_wide(jaxpr, [], a, w.in_combiner()))(*specs).jaxpr


def has_subprogram(params: dict[str, Any]) -> bool:
    """Whether an equation's params hold a jaxpr (a call's, a loop's, a branch's, a combiner's)."""
    return any(hasattr(p, "eqns") or hasattr(getattr(p, "jaxpr", None), "eqns")
               for value in params.values() for p in (value if isinstance(value, (list, tuple)) else [value]))


def _eqn_wide(eqn: Any, ins: list[Any], w: _Widening) -> list[Any]:
    """One equation on widened values; its outputs widened."""
    import jax.numpy as jnp
    from jax import lax

    name, params = eqn.primitive.name, eqn.params
    if name in _INLINED and _INLINED[name] in params:
        return _eval_closed(params[_INLINED[name]], ins, w)
    if name == "convert_element_type" and _narrows(eqn.invars[0].aval.dtype, params["new_dtype"]):
        # the program rounds here on purpose (``x.astype(jnp.bfloat16)``): so does the reference
        rounded = lax.convert_element_type(ins[0], params["new_dtype"])
        return [lax.convert_element_type(rounded, _wide_dtype(params["new_dtype"]))]
    if name == "custom_linear_solve":  # its value is its ``solve`` program on that program's constants and b
        n, jaxprs = params["const_lengths"], params["jaxprs"]
        start = n.matvec + n.vecmat
        consts = ins[start:start + n.solve]
        rhs = ins[n.matvec + n.vecmat + n.solve + n.transpose_solve:]
        return _eval_closed(jaxprs.solve, [*consts, *rhs], w)
    if name in ("reduce", "reduce_window") and "jaxpr" in params:  # a reduction with its own computation
        half = len(ins) // 2
        body, consts = params["jaxpr"], [_widen_to(jnp.asarray(c), _wide_dtype(jnp.asarray(c).dtype))
                                          for c in params.get("consts", ())]

        def combine(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
            if hasattr(body, "eqns"):
                return tuple(_eval_wide(body, consts, [*a, *b], w.in_combiner()))
            return tuple(_eval_closed(body, [*a, *b], w.in_combiner()))

        if name == "reduce":
            got = lax.reduce(tuple(ins[:half]), tuple(ins[half:]), combine, params["dimensions"])
        else:
            got = lax.reduce_window(tuple(ins[:half]), tuple(ins[half:]), combine, params["window_dimensions"],
                                    params["window_strides"], params["padding"], params["base_dilation"],
                                    params["window_dilation"])
        return list(got)
    if name == "scan":
        (n_consts, n_carry), body = scan_counts(params), params["jaxpr"]
        consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]

        def step(carry: list[Any], x: list[Any]) -> tuple[list[Any], list[Any]]:
            outs = _eval_closed(body, [*consts, *carry, *x], w)
            return outs[:n_carry], outs[n_carry:]

        carry, ys = lax.scan(step, list(init), list(xs), length=params["length"], reverse=params["reverse"],
                             unroll=params["unroll"])
        return [*carry, *ys]
    if name == "while":
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        cc, bc, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
        return list(lax.while_loop(lambda c: _eval_closed(params["cond_jaxpr"], [*cc, *c], w)[0],
                                   lambda c: _eval_closed(params["body_jaxpr"], [*bc, *c], w), list(init)))
    if name == "cond":
        branches = [lambda *a, b=b: _eval_closed(b, a, w) for b in params["branches"]]
        return list(lax.switch(ins[0], branches, *ins[1:]))
    if params.get("update_jaxpr") is not None and not params.get("update_consts"):  # a scatter's combiner
        params = {**params, "update_jaxpr": _wide_scalar_jaxpr(params["update_jaxpr"], w)}
    if name not in _AT_PROGRAM_DTYPES and not has_subprogram({k: v for k, v in params.items() if k != "update_jaxpr"}):
        wide_params = {k: _wide_dtype(v) if getattr(v, "name", None) in _WIDE else v for k, v in params.items()}
        try:
            got = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(wide_params))
        except Exception:  # noqa: BLE001  (an op that refuses float64: at the program's dtypes below)
            got = None
        if got is not None:
            outs = list(got) if eqn.primitive.multiple_results else [got]
            if all(tuple(o.shape) == tuple(v.aval.shape) and o.dtype == _wide_dtype(v.aval.dtype)
                   for o, v in zip(outs, eqn.outvars)):
                return outs
    w.at_program_dtypes.add(name)
    at_dtypes = [lax.convert_element_type(x, v.aval.dtype) if getattr(getattr(v.aval, "dtype", None), "name", "") in _WIDE
                 and getattr(x, "dtype", v.aval.dtype) != v.aval.dtype else x for x, v in zip(ins, eqn.invars)]
    got = eqn.primitive.bind(*at_dtypes, **eqn.primitive.get_bind_params(params))
    outs = list(got) if eqn.primitive.multiple_results else [got]
    return [_widen_to(o, _wide_dtype(v.aval.dtype)) if hasattr(v.aval, "dtype") else o for o, v in zip(outs, eqn.outvars)]
