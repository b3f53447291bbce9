"""When edge values may run through a program's loops: the one rule both checks follow.

Edge values (NaN, infinities, extremes) can keep a loop from ending when its trip count depends on
the inputs' values: ``while x.sum() < 100`` never ends on NaN. A loop runs them when its trip count
cannot depend on the inputs: its condition reads only constants and values computed from constants
(``fori_loop(0, jnp.int32(3), ...)``), or it also counts to a literal limit of at most MAX_EDGE_TRIPS
trips (``i < 50 and not converged``: ``counted_trips``). The rule is read from two programs:

- ``data_dependent_loops``: the ``while`` equations of a traced JAX program (``check``, against jax.jit);
- ``onnx_open_loops``: the ``Loop`` nodes of an ONNX model (``saved-model-to-onnx``'s check, against
  TensorFlow: the model mirrors the SavedModel's graph, whose loops TensorFlow runs).

Both follow the dependence from the inputs through every op (a loop's carry depends on them when its
initial value or any trip's update does, ``carry_fixpoint``; every result of a loop whose trip count
depends on them does too), and ``skip_note`` words the note when edge values are skipped.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from jaxconv.scan_params import scan_counts

MAX_EDGE_TRIPS = 100_000  # a loop counting to at most this many trips runs edge values whatever its other conditions


def counted_trips(start: Any, limit: Any, step: Any) -> int | None:
    """The trips of ``for (i = start; i < limit; i += step)`` with integer literals, when at most
    MAX_EDGE_TRIPS; None for another form (a step that is not positive, a value that is not an integer)."""
    values = [_integer(v) for v in (start, limit, step)]
    if any(v is None for v in values):
        return None
    first, last, by = values
    assert first is not None and last is not None and by is not None
    if by <= 0:
        return None
    trips = max(0, -(-(last - first) // by))
    return trips if trips <= MAX_EDGE_TRIPS else None


def _integer(value: Any) -> int | None:
    if value is None or np.ndim(value) != 0 or np.asarray(value).dtype.kind not in "iu":
        return None
    return int(value)


def carry_fixpoint(carry: list[bool], trip: Callable[[list[bool]], list[bool]]) -> list[bool]:
    """A loop's carries that depend on the inputs after any number of trips: ``carry`` or-ed with what
    one more ``trip`` makes depend, until nothing changes."""
    for _ in range(len(carry) + 1):
        nxt = [c or u for c, u in zip(carry, trip(carry))]
        if nxt == carry:
            break
        carry = nxt
    return carry


def skip_note(loops: Sequence[str] | None, program: str = "the program", loop: str = "a while loop") -> str | None:
    """The note when edge values are skipped for ``loops`` (None: the program could not be read); None
    when there is no such loop and edge values run."""
    if loops is None:
        return f"edge values skipped: {program} could not be traced to look for while loops"
    if not loops:
        return None
    return (f"edge values skipped: {program} has {loop} whose trip count depends on the inputs "
            f"(at {', '.join(loops[:3])}), which edge values may keep from ending")


# ---- a traced JAX program ------------------------------------------------------------------------

def data_dependent_loops(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> list[str] | None:
    """Where the traced program has a ``while`` whose trip count depends on the inputs' values (the
    source line of each, ``?`` when unknown); None when the program cannot be traced here.

    Through an op with a sub-program other than a call, scan, cond or while every output depends on
    every input. A loop that also counts to a literal limit (``jaxpr_trip_bound``) does not count.
    """
    import jax

    try:
        treedef = jax.tree_util.tree_structure(list(arg_specs))
        args = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in flat])
        jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
        found: list[str] = []
        _depends(jaxpr, [True] * len(jaxpr.invars), found)
        return list(dict.fromkeys(found))
    except Exception:  # noqa: BLE001
        return None


def has_while_loop(fn: Callable[..., Any], arg_specs: Sequence[Any], flat: Sequence[np.ndarray]) -> bool | None:
    """Whether the traced program holds a ``while`` whose trip count depends on the inputs' values
    (``data_dependent_loops``); None when the program cannot be traced here."""
    loops = data_dependent_loops(fn, arg_specs, flat)
    return None if loops is None else bool(loops)


def inner_jaxpr(p: Any) -> Any:
    """The jaxpr of a parameter (a closed or open jaxpr), or None."""
    inner = getattr(p, "jaxpr", p)
    return inner if hasattr(inner, "eqns") else None


def _depends(jaxpr: Any, tainted: Sequence[bool], found: list[str], eqns: set[int] | None = None) -> list[bool]:
    """Which outputs of ``jaxpr`` depend on the inputs marked in ``tainted``; loops whose trip count does go in
    ``found`` (their source lines) and ``eqns`` (the ids of their equations)."""
    env: dict[Any, bool] = dict(zip(jaxpr.invars, tainted))

    def read(v: Any) -> bool:
        return False if hasattr(v, "val") else env.get(v, False)  # a literal or a constant: no dependence

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name, params = eqn.primitive.name, eqn.params
        if name == "while":
            nc, nb = params["cond_nconsts"], params["body_nconsts"]
            cond, body = inner_jaxpr(params["cond_jaxpr"]), inner_jaxpr(params["body_jaxpr"])
            carry = carry_fixpoint(ins[nc + nb:], lambda c: _depends(body, ins[nc:nc + nb] + c, []))
            _depends(body, ins[nc:nc + nb] + carry, found, eqns)
            counts = any(_depends(cond, ins[:nc] + carry, found, eqns))
            if counts and jaxpr_trip_bound(eqn) is None:
                found.append(source_line(eqn))
                if eqns is not None:
                    eqns.add(id(eqn))
            outs = [c or counts for c in carry]  # how many trips ran shows in every carry
        elif name == "scan":
            (nc, ncarry), body = scan_counts(params), inner_jaxpr(params["jaxpr"])
            carry = carry_fixpoint(ins[nc:nc + ncarry],
                                   lambda c: _depends(body, ins[:nc] + c + ins[nc + ncarry:], [])[:ncarry])
            outs = _depends(body, ins[:nc] + carry + ins[nc + ncarry:], found, eqns)
            outs = carry + outs[ncarry:]
        elif name == "cond":
            branch_outs = [_depends(inner_jaxpr(b), ins[1:], found, eqns) for b in params["branches"]]
            outs = [ins[0] or any(col) for col in zip(*branch_outs)]
        else:
            subs = [inner_jaxpr(q) for p in params.values() for q in (p if isinstance(p, (list, tuple)) else [p])]
            subs = [j for j in subs if j is not None]
            if len(subs) == 1 and len(subs[0].invars) == len(ins) and len(subs[0].outvars) == len(eqn.outvars):
                outs = _depends(subs[0], ins, found, eqns)  # a call: jit, custom_jvp/vjp, checkpoint
            else:
                for j in subs:
                    _depends(j, [any(ins)] * len(j.invars), found, eqns)
                outs = [any(ins)] * len(eqn.outvars)
        for v, t in zip(eqn.outvars, outs):
            env[v] = t
    return [read(v) for v in jaxpr.outvars]


def jaxpr_trip_bound(eqn: Any) -> int | None:
    """The trip count a ``while`` cannot exceed, when its condition is ``counter < N and ...`` with a
    counter that starts at a literal and grows by a positive literal each trip, and N a literal (a
    ``while_loop`` with a maximum number of iterations); None otherwise or above MAX_EDGE_TRIPS."""
    params = eqn.params
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cond, body = inner_jaxpr(params["cond_jaxpr"]), inner_jaxpr(params["body_jaxpr"])
    producers = {v: e for e in cond.eqns for v in e.outvars}
    body_producers = {v: e for e in body.eqns for v in e.outvars}

    def conjuncts(v: Any) -> list[Any]:
        e = producers.get(v)
        if e is not None and e.primitive.name == "and":
            return [c for u in e.invars for c in conjuncts(u)]
        if e is not None and e.primitive.name == "convert_element_type" and np.dtype(e.params["new_dtype"]) == np.bool_:
            return conjuncts(e.invars[0])
        return [v]

    for c in conjuncts(cond.outvars[0]):
        e = producers.get(c)
        if e is None or e.primitive.name != "lt" or e.invars[0] not in cond.invars[nc:]:
            continue
        k = cond.invars.index(e.invars[0]) - nc
        step_eqn = body_producers.get(body.outvars[k])
        if step_eqn is None or step_eqn.primitive.name != "add":
            continue
        counter = body.invars[nb + k]
        steps = [getattr(u, "val", None) for u in step_eqn.invars if u is not counter]
        if counter in step_eqn.invars and len(steps) == 1:
            trips = counted_trips(getattr(eqn.invars[nc + nb + k], "val", None), getattr(e.invars[1], "val", None), steps[0])
            if trips is not None:
                return trips
    return None


def source_line(eqn: Any) -> str:
    """The user's source line of an equation, ``?`` when unknown."""
    try:
        from jax._src import source_info_util

        return str(source_info_util.summarize(eqn.source_info))
    except Exception:  # noqa: BLE001
        return "?"


# ---- an ONNX model -------------------------------------------------------------------------------

def onnx_open_loops(model: Any) -> list[str]:
    """The ``Loop`` nodes of an ONNX model (an onnx.ModelProto) whose trip count may depend on the graph
    inputs' values, by name (the first output's name for an unnamed node).

    A Loop's trip count depends on them when its trip-count input ``M`` or its condition (the initial
    one, or the body's at the end of a trip) does, unless ``M`` is a constant of at most MAX_EDGE_TRIPS
    or the body's condition counts a carry from a constant to a constant limit (``onnx_trip_bound``).
    Subgraphs read the outer scope's values; through an If, a Scan or another op with subgraphs every
    result depends on what the node reads and its subgraphs compute from the inputs.
    """
    constants = _onnx_constants(model.graph)
    found: list[str] = []
    _onnx_depends(model.graph, {v.name for v in model.graph.input}, constants, found)
    return list(dict.fromkeys(found))


def _onnx_constants(graph: Any) -> dict[str, np.ndarray]:
    """Initializers and Constant outputs of ``graph`` and its subgraphs, by name."""
    from onnx import numpy_helper

    out: dict[str, np.ndarray] = {}
    stack = [graph]
    while stack:
        g = stack.pop()
        out.update((t.name, numpy_helper.to_array(t)) for t in g.initializer)
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for a in node.attribute:
                    if a.name == "value":
                        out[node.output[0]] = numpy_helper.to_array(a.t)
                    elif a.name == "value_int":
                        out[node.output[0]] = np.asarray(a.i, np.int64)
            stack.extend(a.g for a in node.attribute if a.HasField("g"))
            stack.extend(a.graphs for a in node.attribute if a.graphs)
    return out


def _subgraphs(node: Any) -> list[Any]:
    return [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]


def _onnx_depends(graph: Any, tainted: set[str], constants: dict[str, np.ndarray], found: list[str]) -> set[str]:
    """The names of ``graph`` (and the outer scope's) that depend on those in ``tainted``; Loops whose trip
    count does go in ``found``."""
    tainted = set(tainted)
    for node in graph.node:
        ins = [name in tainted for name in node.input if name]
        subs = _subgraphs(node)
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and subs:
            outs = _onnx_loop(node, subs[0], tainted, constants, found)
        elif subs:  # If, Scan, ...: every result from what the node reads and what its subgraphs compute
            inner = [_onnx_depends(g, tainted | ({i.name for i in g.input} if any(ins) else set()), constants, found)
                     for g in subs]
            reads = any(ins) or any(o.name in t for g, t in zip(subs, inner) for o in g.output)
            outs = [reads] * len(node.output)
        else:
            outs = [any(ins)] * len(node.output)
        tainted.update(name for name, t in zip(node.output, outs) if t and name)
    return tainted


def _onnx_loop(node: Any, body: Any, tainted: set[str], constants: dict[str, np.ndarray], found: list[str]) -> list[bool]:
    """Which results of a Loop depend on the inputs; the Loop goes in ``found`` when its trip count does."""
    m = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    initial = list(node.input[2:])
    n = len(initial)
    names = [i.name for i in body.input]  # iteration number, condition, carries

    def run(carry: list[bool], into: list[str]) -> set[str]:
        seeds = {name for name, t in zip(names[2:], carry) if t} | ({names[1]} if cond in tainted else set())
        return _onnx_depends(body, tainted | seeds, constants, into)

    def trip(carry: list[bool]) -> list[bool]:
        after = run(carry, [])
        return [o.name in after for o in body.output[1:1 + n]]

    carry = carry_fixpoint([name in tainted for name in initial], trip)
    after = run(carry, found)
    counts = m in tainted or cond in tainted or body.output[0].name in after
    if counts and onnx_trip_bound(node, body, constants) is None:
        found.append(node.name or node.output[0])
    scans = [o.name in after for o in body.output[1 + n:]]
    return [t or counts for t in carry + scans]


def onnx_trip_bound(node: Any, body: Any, constants: dict[str, np.ndarray]) -> int | None:
    """The trip count a Loop cannot exceed: its ``M`` when a constant, or when the body's condition is
    ``counter < N and ...`` with a carried counter that starts at a constant and grows by a positive
    constant each trip (``Add``), N a constant; None otherwise or above MAX_EDGE_TRIPS."""
    m = node.input[0] if node.input else ""
    if m in constants:
        trips = _integer(np.asarray(constants[m]).reshape(-1)[0]) if np.size(constants[m]) == 1 else None
        if trips is not None and trips <= MAX_EDGE_TRIPS:
            return max(trips, 0)
    producers = {o: n for n in body.node for o in n.output}
    false = {k for k, v in constants.items() if np.size(v) == 1 and np.asarray(v).dtype == np.bool_ and not _scalar(v)}

    def conjuncts(name: str) -> list[str]:
        p = producers.get(name)
        if p is None:
            return [name]
        if p.op_type == "And":
            return [c for u in p.input for c in conjuncts(u)]
        if p.op_type == "Identity" or (p.op_type == "Cast" and any(a.name == "to" and a.i == 9 for a in p.attribute)):
            return conjuncts(p.input[0])
        q = producers.get(p.input[0]) if p.op_type == "Not" else None
        if q is not None and q.op_type == "Equal" and len(q.input) == 2:  # Not(Equal(x, False)): x as a bool
            others = [u for u in q.input if u not in false]
            if len(others) == 1:
                return conjuncts(others[0])
        return [name]

    inputs = [i.name for i in body.input]
    outputs = [o.name for o in body.output]
    n = len(node.input) - 2
    for c in conjuncts(outputs[0]):
        less = producers.get(c)
        if less is None or less.op_type != "Less" or less.input[1] not in constants:
            continue
        counter = less.input[0]
        if counter in outputs[1:1 + n]:  # counter < N read after the trip's update
            k, extra = outputs.index(counter) - 1, 0
        elif counter in inputs[2:2 + n]:  # before it: one trip more
            k, extra = inputs.index(counter) - 2, 1
        else:
            continue
        add = producers.get(outputs[1 + k])
        start = node.input[2 + k]
        if add is None or add.op_type != "Add" or inputs[2 + k] not in add.input or start not in constants:
            continue
        steps = [u for u in add.input if u != inputs[2 + k]]
        if len(steps) != 1 or steps[0] not in constants:
            continue
        trips = counted_trips(_scalar(constants[start]), _scalar(constants[less.input[1]]), _scalar(constants[steps[0]]))
        if trips is not None:
            return max(trips, 1) + extra
    return None


def _scalar(value: np.ndarray) -> Any:
    return np.asarray(value).reshape(-1)[0] if np.size(value) == 1 else None
