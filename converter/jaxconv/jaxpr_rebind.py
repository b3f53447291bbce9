"""A traced program evaluated again equation by equation, some equations computed by a rule of the caller's.

The check's references sometimes need the program with a few ops changed: eigenvectors with canonical
signs (``vector_signs``), LAPACK calls guarded against inputs on which they never return
(``lapack_hangs``). ``rebound_program`` traces the program once and returns a function of the same
arguments that binds every equation as jax.jit binds it, except those ``chosen`` picks, which ``rule``
computes. Calls (jit, closed calls, custom derivatives, remat) are followed into; a chosen op inside a
loop or a branch cannot be reached this way, and then there is no such program (None).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

# Ops whose sub-program runs once, its inputs and outputs those of the op: followed into.
CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
                   "checkpoint", "remat2", "remat"})

Chosen = Callable[[Any], bool]  # an equation -> whether the rule computes it
Rule = Callable[[Any, list[Any]], list[Any]]  # (equation, its input values) -> its output values


def bind(eqn: Any, ins: Sequence[Any]) -> list[Any]:
    """``eqn`` on ``ins`` as jax.core.eval_jaxpr binds it (in the equation's own context)."""
    with eqn.ctx.manager:
        result = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
    return list(result) if eqn.primitive.multiple_results else [result]


def _subprogram(eqn: Any) -> Any | None:
    """The sub-program (a ClosedJaxpr or Jaxpr) of a call in ``CALLS``; None for any other op."""
    if eqn.primitive.name not in CALLS:
        return None
    sub = eqn.params.get("call_jaxpr", eqn.params.get("jaxpr"))
    return sub if hasattr(getattr(sub, "jaxpr", sub), "eqns") else None


def _nested(eqn: Any) -> list[Any]:
    """The jaxprs an equation holds (loop bodies, branches, calls)."""
    found = []
    for p in eqn.params.values():
        for sub in (p if isinstance(p, (list, tuple)) else [p]):
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                found.append(inner)
    return found


def holds(jaxpr: Any, chosen: Chosen) -> bool:
    """Whether ``jaxpr`` holds a chosen equation, at any depth."""
    return any(chosen(e) or any(holds(s, chosen) for s in _nested(e)) for e in jaxpr.eqns)


def reachable(jaxpr: Any, chosen: Chosen) -> bool:
    """Every chosen equation of ``jaxpr`` sits at its top or in calls (``CALLS``), never in a loop or a branch."""
    for eqn in jaxpr.eqns:
        inner = _subprogram(eqn)
        if inner is not None:
            if not reachable(getattr(inner, "jaxpr", inner), chosen):
                return False
        elif any(holds(s, chosen) for s in _nested(eqn)):
            return False
    return True


def evaluate(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], chosen: Chosen, rule: Rule) -> list[Any]:
    """``jaxpr`` on ``args`` (traced values), each chosen equation computed by ``rule``."""
    from jax.extend.core import Literal

    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        sub = _subprogram(eqn)
        if sub is not None and holds(getattr(sub, "jaxpr", sub), chosen):
            outs = evaluate(getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins, chosen, rule)
        else:
            outs = rule(eqn, ins) if chosen(eqn) else bind(eqn, ins)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def rebound_program(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray], chosen: Chosen,
                    rule: Rule) -> Callable[..., Any] | None:
    """``fn`` with its chosen equations computed by ``rule``, as a function of the same arguments (the program
    traced once at ``flat``'s shapes, the constants it closes over embedded as jax.jit embeds them); None
    when a chosen equation sits in a loop or a branch."""
    import jax

    treedef = jax.tree_util.tree_structure(list(arg_specs))
    specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in flat]
    closed = jax.make_jaxpr(lambda *leaves: fn(*jax.tree_util.tree_unflatten(treedef, list(leaves))))(*specs)
    if not reachable(closed.jaxpr, chosen):
        return None

    def program(*args: Any) -> list[Any]:
        return evaluate(closed.jaxpr, closed.consts, jax.tree_util.tree_leaves(list(args)), chosen, rule)

    return program
