"""Capped copies of a program and of an ONNX model, so that edge values can run through loops whose trip
count depends on the inputs (``edge_loops``) without the risk of a loop that never ends.

- ``capped_function``: the traced program re-evaluated with every such ``while`` counting its trips;
  one still running after ``cap`` trips stops and raises ``LoopCapHit`` (through a host callback: a
  run under jax.jit fails with an error naming it, so every reference computed from the copy, the
  float64 and op-by-op ones too, either ends within the cap or fails).
- ``capped_onnx``: the model with a guard in every ``Loop`` body whose trip count may read the
  inputs (``edge_loops.onnx_open_loops``): a trip that would start trip ``cap + 1`` fails (a Gather
  at an index out of range, in a node named ``CAP_NODE``), so ONNX Runtime raises instead of running on.

A run that hits the cap is reported as such by the check: on jax.jit's side the edge set is left out
with a note (jax.jit's loop does not end within the cap there either); on the artifact's side, when
jax.jit's loops ended, it is a mismatch (the artifact loops on where jax.jit stopped).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from jaxconv.edge_loops import MAX_EDGE_TRIPS, _depends, inner_jaxpr, source_line
from jaxconv.scan_params import scan_counts

LOOP_CAP = MAX_EDGE_TRIPS  # trips a capped loop may run
CAP_NODE = "jaxconv_loop_cap"
CAP_MESSAGE = "a while loop was still running after"


class LoopCapHit(RuntimeError):
    """A capped loop was still running after its cap."""


class Uncappable(Exception):
    """A loop to cap sits under an op this module does not re-evaluate."""


# Call-like primitives whose one sub-program runs once on the operands (inlined when a capped loop is inside).
_CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
          "checkpoint": "jaxpr", "remat": "jaxpr"}


def capped_function(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray],
                    cap: int = LOOP_CAP) -> Callable[..., Any] | None:
    """``fn`` with every ``while`` whose trip count depends on the inputs (``edge_loops``) stopped after
    ``cap`` trips, raising ``LoopCapHit`` when it was still running then; None when such a loop sits
    under an op other than a call, while, cond or scan (or the program does not trace).

    The copy takes ``fn``'s arguments and returns its outputs (same pytree): the traced program is
    evaluated equation by equation, each one bound as jax.jit binds it, the capped loops as
    ``lax.while_loop`` with a counter.
    """
    import jax

    try:
        treedef = jax.tree_util.tree_structure(list(arg_specs))
        specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in flat]
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*jax.tree_util.tree_unflatten(treedef, specs))
    except Exception:  # noqa: BLE001
        return None
    loops: set[int] = set()
    _mark(closed.jaxpr, [True] * len(closed.jaxpr.invars), loops)
    if not _reachable(closed.jaxpr, loops):
        return None
    out_tree = jax.tree_util.tree_structure(out_shape)

    def run(*args: Any) -> Any:
        outs = _eval(closed.jaxpr, closed.consts, jax.tree_util.tree_leaves(list(args)), loops, cap)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    return run


def _mark(jaxpr: Any, tainted: Sequence[bool], loops: set[int]) -> None:
    """The ids of the ``while`` equations (anywhere in ``jaxpr``) whose trip count depends on the inputs."""
    found: list[str] = []
    _depends(jaxpr, tainted, found, eqns=loops)


def _subjaxprs(eqn: Any) -> list[Any]:
    return [j for p in eqn.params.values() for q in (p if isinstance(p, (list, tuple)) else [p])
            if (j := inner_jaxpr(q)) is not None]


def _contains(jaxpr: Any, loops: set[int]) -> bool:
    return any(id(e) in loops or any(_contains(j, loops) for j in _subjaxprs(e)) for e in jaxpr.eqns)


def _reachable(jaxpr: Any, loops: set[int]) -> bool:
    """Whether every loop to cap is reached through calls, whiles, conds and scans only."""
    for eqn in jaxpr.eqns:
        subs = _subjaxprs(eqn)
        if not any(_contains(j, loops) for j in subs):
            continue
        if eqn.primitive.name not in ("while", "cond", "scan") and eqn.primitive.name not in _CALLS:
            return False
        if not all(_reachable(j, loops) for j in subs):
            return False
    return True


def _closed(p: Any) -> tuple[Any, Sequence[Any]]:
    """(jaxpr, consts) of a closed or open jaxpr parameter."""
    return (p.jaxpr, p.consts) if hasattr(p, "consts") else (p, ())


def _eval(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], loops: set[int], cap: int) -> list[Any]:
    from jax import lax

    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if hasattr(v, "val") else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name, params = eqn.primitive.name, eqn.params
        if not (id(eqn) in loops or any(_contains(j, loops) for j in _subjaxprs(eqn))):
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
            outs = outs if eqn.primitive.multiple_results else [outs]
        elif name == "while":
            outs = _while(eqn, ins, loops, cap if id(eqn) in loops else None)
        elif name == "cond":
            branches = [_closed(b) for b in params["branches"]]
            fns = [lambda *a, b=b: _eval(b[0], b[1], a, loops, cap) for b in branches]
            outs = lax.switch(ins[0], fns, *ins[1:])
        elif name == "scan":
            body, body_consts = _closed(params["jaxpr"])
            nc, ncarry = scan_counts(params)

            def step(carry: Any, xs: Any, body: Any = body, body_consts: Any = body_consts, nc: int = nc,
                     ins: Any = ins, ncarry: int = ncarry) -> Any:
                out = _eval(body, body_consts, list(ins[:nc]) + list(carry) + list(xs), loops, cap)
                return out[:ncarry], out[ncarry:]

            carry, ys = lax.scan(step, list(ins[nc:nc + ncarry]), list(ins[nc + ncarry:]), length=params["length"],
                                 reverse=params["reverse"])
            outs = list(carry) + list(ys)
        elif name in _CALLS:
            inner, inner_consts = _closed(params[_CALLS[name]])
            outs = _eval(inner, inner_consts, ins, loops, cap)
        else:
            raise Uncappable(name)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _while(eqn: Any, ins: Sequence[Any], loops: set[int], cap: int | None) -> list[Any]:
    """A ``while`` re-evaluated; with ``cap``, it counts its trips and stops after ``cap`` of them."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    params = eqn.params
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond, cond_consts = _closed(params["cond_jaxpr"])
    body, body_consts = _closed(params["body_jaxpr"])
    cargs, bargs, init = list(ins[:nc]), list(ins[nc:nc + nb]), list(ins[nc + nb:])

    def pred(carry: Sequence[Any]) -> Any:
        return _eval(cond, cond_consts, cargs + list(carry), loops, cap)[0]

    def test(carry: Sequence[Any]) -> Any:  # a batched predicate (vmap): while any element holds
        p = pred(carry)
        return jnp.any(p) if jnp.ndim(p) else p

    def step(carry: Sequence[Any]) -> list[Any]:
        new = _eval(body, body_consts, bargs + list(carry), loops, cap)
        p = pred(carry)
        if not jnp.ndim(p):
            return new
        # as XLA's while does with a batched predicate: the elements whose predicate fails keep their value
        return [jnp.where(jnp.reshape(p, p.shape + (1,) * (jnp.ndim(n) - p.ndim)), n, c) for n, c in zip(new, carry)]

    if cap is None:
        return list(lax.while_loop(test, step, init))
    where = source_line(eqn)
    trips, out = lax.while_loop(lambda s: test(s[1]) & (s[0] < cap), lambda s: (s[0] + 1, step(s[1])),
                                (jnp.int32(0), init))
    jax.debug.callback(lambda hit: _raise_hit(hit, cap, where), (trips >= cap) & test(out))
    return list(out)


def _raise_hit(hit: Any, cap: int, where: str) -> None:
    if bool(np.asarray(hit)):
        raise LoopCapHit(f"{CAP_MESSAGE} {cap} trips (at {where})")


class _QuietHits(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], LoopCapHit))


@contextlib.contextmanager
def quiet_cap_hits() -> Iterator[None]:
    """Within the block, JAX does not log the traceback of a ``LoopCapHit`` raised in its host callback."""
    log = logging.getLogger("jax._src.debugging")
    quiet = _QuietHits()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def is_cap_hit(e: BaseException) -> bool:
    """Whether an error (jax's, ONNX Runtime's, or one chained to them) comes from a capped loop."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, LoopCapHit) or CAP_MESSAGE in str(e) or CAP_NODE in str(e):
            return True
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return False


def cap_hit_text(e: BaseException) -> str:
    """``while loop was still running after N trips (at LINE)`` from a cap's error (jax's or ONNX Runtime's)."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur)
        if CAP_MESSAGE in text:
            return "while loop" + text[text.index(CAP_MESSAGE) + len("a while loop"):].splitlines()[0].rstrip(".")
        cur = cur.__cause__ or cur.__context__
    return f"Loop was still running after {LOOP_CAP} trips (a guard node {CAP_NODE} stopped it)"


# ---- the ONNX model ------------------------------------------------------------------------------

def capped_onnx(model: Any, cap: int = LOOP_CAP) -> tuple[Any, int]:
    """A copy of ``model`` (an onnx.ModelProto) whose Loops, in any graph, fail on a trip that would
    start trip ``cap + 1``: the body's condition is read as ``Gather([cond], Where(stop, 2, 0))`` (an index
    out of range: ONNX Runtime raises, naming the node ``CAP_NODE``; graph optimizers keep a Gather of a
    computed index, where they merge two Reshapes into one).
    Only the Loops whose trip count may read the inputs (``edge_loops.onnx_open_loops``, as only such
    ``while`` loops are capped on jax.jit's side) get the guard: a Loop counting 200000 trips whatever the
    inputs runs them, as jax.jit's does. Returns the copy and how many Loops were capped."""
    import onnx

    from jaxconv.edge_loops import _onnx_constants, onnx_open_loops

    capped = onnx.ModelProto()
    capped.CopyFrom(model)
    constants = _onnx_constants(capped.graph)
    open_ = set(onnx_open_loops(capped))
    count = 0
    stack = [capped.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            subs = [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]
            stack.extend(subs)
            if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") or not subs:
                continue
            m = node.input[0] if node.input else ""
            if (node.name or node.output[0]) not in open_:
                continue
            if m in constants and np.size(constants[m]) == 1 and int(np.asarray(constants[m]).reshape(-1)[0]) <= cap:
                continue
            _guard(subs[0], m, cap, count)
            count += 1
    return capped, count


def _guard(body: Any, m: str, cap: int, k: int) -> None:
    """Route the body's condition output through the cap's guard (``capped_onnx``)."""
    from onnx import helper, numpy_helper

    p = f"{CAP_NODE}_{k}_"
    raw = body.output[0].name
    body.output[0].name = p + "cond_out"
    iteration = body.input[0].name

    def const(name: str, value: Any) -> Any:
        return helper.make_node("Constant", [], [p + name], value=numpy_helper.from_array(np.asarray(value), p + name))

    nodes = [const("next", np.int64(1)), const("cap", np.int64(cap)), const("axis", np.array([0], np.int64)),
             const("zero", np.int64(0)), const("outside", np.int64(2)),
             helper.make_node("Add", [iteration, p + "next"], [p + "done"]),
             helper.make_node("GreaterOrEqual", [p + "done", p + "cap"], [p + "full"]),
             helper.make_node("And", [raw, p + "full"], [p + "stop"])]
    stop = p + "stop"
    if m:  # a trip count M of the Loop's own ends it first: not the cap
        nodes += [helper.make_node("Cast", [m], [p + "m"], to=7),
                  helper.make_node("Less", [p + "done", p + "m"], [p + "below_m"]),
                  helper.make_node("And", [p + "stop", p + "below_m"], [p + "stop_m"])]
        stop = p + "stop_m"
    nodes += [helper.make_node("Where", [stop, p + "outside", p + "zero"], [p + "index"]),
              helper.make_node("Unsqueeze", [raw, p + "axis"], [p + "row"]),
              helper.make_node("Gather", [p + "row", p + "index"], [p + "cond_out"], axis=0, name=CAP_NODE)]
    body.node.extend(nodes)
