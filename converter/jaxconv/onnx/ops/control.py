"""Control flow: stablehlo.while -> Loop, stablehlo.case / stablehlo.if -> If.

Region bodies become ONNX subgraphs opened with ``ctx.subgraph()``; they read values of the
enclosing graphs by name (ONNX outer-scope references), so nothing has to be threaded through
the loop-carried state except what StableHLO carries itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import onnx_ir

from jaxconv.onnx.context import GraphScope, LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir


def _check_tokens(op: hir.Op) -> str | None:
    for v in list(op.operands) + list(op.results):
        if v.type.dtype == "token":
            return "token values cannot be carried through ONNX control flow"
    return None


def _produced_in(scope: GraphScope) -> set[str]:
    return scope.produced()


def _own_outputs(ctx: LoweringContext, scope: GraphScope, names: Sequence[str]) -> list[str]:
    """Names safe to list as subgraph outputs: each made by a node of ``scope``, no repeats.

    A region may return one of its arguments, an outer value or the same value twice; an
    Identity gives each such output a node of its own.
    """
    produced = _produced_in(scope)
    out: list[str] = []
    for name in names:
        if name not in produced or name in out:
            name = ctx.op("Identity", [name])
        out.append(name)
    return out


def _outputs_info(ctx: LoweringContext, names: Sequence[str], values: Sequence[hir.Value]) -> list[onnx_ir.Value]:
    return [ctx.value_info(n, v.type) for n, v in zip(names, values)]


def _branch_graph(ctx: LoweringContext, block: hir.Block, results: Sequence[hir.Value], name: str) -> onnx_ir.Graph:
    """A no-input subgraph computing ``block``'s returned values (an If branch)."""
    with ctx.subgraph() as scope:
        outs = _own_outputs(ctx, scope, ctx.lower_block(block, []))
        return ctx.make_graph(scope, ctx.fresh(name), [], _outputs_info(ctx, outs, results))


@lowering("stablehlo.while", check=_check_tokens, onnx_ops=("Loop",))
def lower_while(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Loop with M omitted: cond runs once on the initial carry, then at the end of every body.

    Carries the body returns unchanged are read from the outer scope instead of carried, and the
    stacked outputs of a scan (a buffer written one row per iteration at the loop counter) become
    Loop scan outputs, so no iteration copies the whole buffer.
    """
    cond_block = op.regions[0]
    if not op.results:
        return []
    unrolled = _unrolled_layers(ctx, op, inputs)
    if unrolled is not None:
        return unrolled
    first_cond = ctx.lower_block(cond_block, inputs)[0]
    stacked = find_stacked_carries(ctx, op, inputs)
    result = _loop(ctx, op, inputs, first_cond, stacked)
    if result is None:  # a stacked buffer turned out to be read: carry it after all
        result = _loop(ctx, op, inputs, first_cond, {})
    assert result is not None
    return result


# A loop over a stack of constant weights (lax.scan over layers: Flax nn.scan, Haiku layer_stack) is
# lowered once per layer when it has at most this many trips: each layer then reads its own constant
# weights, which ORT prepacks and the rewrite rules see (a Loop body slices them on every call).
UNROLL_MAX_TRIPS = 16
UNROLL_MAX_OPS = 20_000  # trips x body ops


def _unrolled_layers(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str] | None:
    """The loop lowered inline, once per trip, when it counts ``i`` from 0 to a constant N <= UNROLL_MAX_TRIPS,
    its body multiplies or convolves, and most of the constants it carries unchanged are stacks of N rows
    (the layers' weights; an RNN over a constant sequence carries more weights than sequence); else None."""
    body = op.regions[1]
    tracer = _Tracer(ctx, body)
    found = _counter(tracer, op, inputs)
    if found is None:
        return None
    c, trips = found
    if not 0 < trips <= UNROLL_MAX_TRIPS:
        return None
    constants = {k: arr for k in range(len(inputs)) if k != c and body.returns[k] is body.args[k]
                 and (arr := ctx.constant_value(inputs[k])) is not None}
    sliced = _sliced_args(ctx, body)
    stacked = sum(arr.nbytes for k, arr in constants.items() if _has_rows(arr, trips) and k in sliced)
    if stacked == 0 or stacked <= sum(arr.nbytes for arr in constants.values()) - stacked:
        return None
    ops = _ops_reached(ctx, body)
    if trips * len(ops) > UNROLL_MAX_OPS:
        return None
    if not any(o.name in ("stablehlo.dot_general", "stablehlo.convolution") for o in ops):
        return None
    dtype = op.operands[c].type.dtype
    carry = list(inputs)
    for i in range(trips):
        carry[c] = ctx.scalar(i, dtype)
        carry = ctx.lower_block(body, carry)
    carry[c] = ctx.scalar(trips, dtype)
    return carry


def _sliced_args(ctx: LoweringContext, body: hir.Block, depth: int = 0) -> set[int]:
    """The body arguments a trip takes a slice of (``lax.scan``'s read of its stacked inputs, directly or in
    a called ``dynamic_index_in_dim``): a weight used whole (an RNN's recurrent [H, H] over H steps) is not a
    stack of layers, whatever its first dim."""
    positions = {id(a): k for k, a in enumerate(body.args)}
    out: set[int] = set()
    for o in body.ops:
        if o.name in ("stablehlo.dynamic_slice", "stablehlo.gather") and o.operands \
                and id(o.operands[0]) in positions:
            out.add(positions[id(o.operands[0])])
        callee = o.attrs.get("callee") if o.name == "func.call" else None
        if callee in ctx.module.functions and depth < 4:
            inner = _sliced_args(ctx, ctx.module.functions[callee].body, depth + 1)
            out |= {positions[id(o.operands[j])] for j in inner
                    if j < len(o.operands) and id(o.operands[j]) in positions}
    return out


def _has_rows(arr: np.ndarray | None, rows: int) -> bool:
    return arr is not None and arr.ndim >= 1 and arr.shape[0] == rows


def _ops_reached(ctx: LoweringContext, block: hir.Block) -> list[hir.Op]:
    """The ops of ``block`` and of the functions it calls (each function once)."""
    ops: list[hir.Op] = []
    seen: set[str] = set()
    stack = [block]
    while stack:
        for o in hir.walk_ops(stack.pop()):
            ops.append(o)
            callee = o.attrs.get("callee") if o.name == "func.call" else None
            if callee in ctx.module.functions and callee not in seen:
                seen.add(callee)
                stack.append(ctx.module.functions[callee].body)
    return ops


def _loop(ctx: LoweringContext, op: hir.Op, inputs: list[str], first_cond: str,
          stacked: dict[int, "StackedCarry"]) -> list[str] | None:
    cond_block, body_block = op.regions
    n = len(inputs)
    invariant = {k for k in range(n) if body_block.returns[k] is body_block.args[k] and k not in stacked}
    carried = [k for k in range(n) if k not in invariant and k not in stacked]
    with ctx.subgraph() as scope:
        iter_name, cond_in = ctx.fresh("iter"), ctx.fresh("cond_in")
        names = {k: inputs[k] if k in invariant else ctx.fresh("buffer" if k in stacked else "carry") for k in range(n)}
        new_carry = ctx.lower_block(body_block, [names[k] for k in range(n)])
        next_cond = ctx.lower_block(cond_block, new_carry)[0]
        rows = []
        for k, s in stacked.items():
            row = ctx.name_of(s.row)
            rows.append(ctx.op("Squeeze", [row, ctx.i64([0])]) if s.squeeze else row)
        outs = _own_outputs(ctx, scope, [next_cond] + [new_carry[k] for k in carried] + rows)
        live = _prune(scope, outs)
        if any(names[k] in live for k in stacked):
            return None
        bool_scalar = hir.TensorType("bool", ())
        graph_inputs = [ctx.value_info(iter_name, hir.TensorType("int64", ())), ctx.value_info(cond_in, bool_scalar)]
        graph_inputs += [ctx.value_info(names[k], _rank_only(op.operands[k].type)) for k in carried]
        graph_outputs = [ctx.value_info(outs[0], bool_scalar)]
        graph_outputs += _outputs_info(ctx, outs[1:1 + len(carried)], [op.results[k] for k in carried])
        graph_outputs += [ctx.value_info(name, _rank_only(hir.TensorType(op.results[k].type.dtype, op.results[k].type.shape[1:])))
                          for name, k in zip(outs[1 + len(carried):], stacked)]
        body = ctx.make_graph(scope, ctx.fresh("while_body"), graph_inputs, graph_outputs)
    ctx.current_op = op
    count = len(carried) + len(stacked)
    res = ctx.op("Loop", [None, first_cond, *[inputs[k] for k in carried]], outputs=count, body=body) if count else []
    res = [res] if count == 1 else res
    results: dict[int, str] = {k: inputs[k] for k in invariant}
    results.update(zip(carried, res[:len(carried)]))
    for (k, s), name in zip(stacked.items(), res[len(carried):]):
        if s.reverse:
            name = ctx.op("Slice", [name, ctx.i64([-1]), ctx.i64([np.iinfo(np.int64).min]), ctx.i64([0]), ctx.i64([-1])])
        results[k] = name
    return [results[k] for k in range(n)]


def _rank_only(t: hir.TensorType) -> hir.TensorType:
    return hir.TensorType(t.dtype, tuple(None for _ in t.shape))


def _prune(scope: GraphScope, outputs: Sequence[str]) -> set[str]:
    """Drop nodes of ``scope`` nothing needs; returns every name the kept nodes read."""
    return scope.prune(outputs)


# ---- scan outputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StackedCarry:
    """A loop-carried buffer that iteration i only writes at row i (or N-1-i), nothing reads.

    Attributes:
        row: the body-level value written as the row.
        squeeze: ``row`` still has the unit leading dimension of the update.
        reverse: rows are written from the last one down (``lax.scan(reverse=True)``).
    """

    row: hir.Value
    squeeze: bool
    reverse: bool


@dataclass(frozen=True, eq=False)
class _Frame:
    """Where a callee's arguments come from while looking through func.call."""

    args: dict[int, tuple[hir.Value, "_Frame | None"]]


class _Tracer:
    """Finds the op defining a value, looking through func.call (JAX wraps scan helpers in calls)."""

    def __init__(self, ctx: LoweringContext, body: hir.Block) -> None:
        self.ctx = ctx
        self.defs: dict[int, hir.Op] = {}
        blocks = [body] + [fn.body for fn in ctx.module.functions.values()]
        for block in blocks:
            for o in block.ops:
                for r in o.results:
                    self.defs[r.id] = o

    def producer(self, v: hir.Value, frame: _Frame | None) -> tuple[hir.Op | None, hir.Value, _Frame | None]:
        for _ in range(64):
            if frame is not None and v.id in frame.args:
                v, frame = frame.args[v.id]
                continue
            o = self.defs.get(v.id)
            if o is not None and o.name == "func.call" and o.attrs.get("callee") in self.ctx.module.functions:
                callee = self.ctx.module.functions[o.attrs["callee"]]
                j = next(i for i, r in enumerate(o.results) if r is v)
                frame = _Frame({a.id: (x, frame) for a, x in zip(callee.body.args, o.operands)})
                v = callee.body.returns[j]
                continue
            return o, v, frame
        return None, v, frame

    def constant(self, v: hir.Value, frame: _Frame | None) -> np.ndarray | None:
        o, v, frame = self.producer(v, frame)
        if o is not None and o.name == "stablehlo.constant":
            return np.asarray(o.attrs["value"])
        if o is None and frame is None:
            name = self.ctx.scope.lookup(v)
            return self.ctx.constant_value(name) if name is not None else None
        return None

    def is_value(self, v: hir.Value, frame: _Frame | None, target: hir.Value) -> bool:
        o, v, frame = self.producer(v, frame)
        return o is None and frame is None and v is target

    def body_level(self, v: hir.Value, frame: _Frame | None) -> hir.Value | None:
        """``v`` as a value of the loop body itself (not one inside a callee), if it is one."""
        while frame is not None and v.id in frame.args:
            v, frame = frame.args[v.id]
        return v if frame is None else None


def _scalar_is(arr: np.ndarray | None, value: int) -> bool:
    return arr is not None and arr.size == 1 and arr.dtype.kind in "iu" and int(arr.reshape(())) == value


def _counter(tr: _Tracer, op: hir.Op, inputs: list[str]) -> tuple[int, int] | None:
    """(carry index, trip count) when cond is ``i < N`` with i from 0 in steps of 1, N constant."""
    cond_block, body_block = op.regions
    ops = [o for o in cond_block.ops if o.name != "stablehlo.constant"]
    if len(ops) != 1 or ops[0].name != "stablehlo.compare" or ops[0].attrs.get("comparison_direction") != "LT":
        return None
    cmp = ops[0]
    if cond_block.returns[0] is not cmp.results[0] or cmp.operands[0] not in cond_block.args:
        return None
    c = next(i for i, a in enumerate(cond_block.args) if a is cmp.operands[0])
    bound = tr.constant(cmp.operands[1], None)
    if bound is None or bound.size != 1 or bound.dtype.kind not in "iu":
        return None
    if not _scalar_is(tr.ctx.constant_value(inputs[c]), 0):
        return None
    step, _, frame = tr.producer(body_block.returns[c], None)
    if step is None or step.name != "stablehlo.add" or frame is not None:
        return None
    a, b = step.operands
    if not ((a is body_block.args[c] and _scalar_is(tr.constant(b, None), 1))
            or (b is body_block.args[c] and _scalar_is(tr.constant(a, None), 1))):
        return None
    return c, int(bound.reshape(()))


def _index_kind(tr: _Tracer, v: hir.Value, frame: _Frame | None, counter: hir.Value, n: int) -> str | None:
    """'forward' for the counter, 'reverse' for ``(N - counter) - 1``, else None."""
    if tr.is_value(v, frame, counter):
        return "forward"
    outer, _, f1 = tr.producer(v, frame)
    if outer is None or outer.name != "stablehlo.subtract" or not _scalar_is(tr.constant(outer.operands[1], f1), 1):
        return None
    inner, _, f2 = tr.producer(outer.operands[0], f1)
    if (inner is not None and inner.name == "stablehlo.subtract" and _scalar_is(tr.constant(inner.operands[0], f2), n)
            and tr.is_value(inner.operands[1], f2, counter)):
        return "reverse"
    return None


def find_stacked_carries(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> dict[int, StackedCarry]:
    """Carries that are scan outputs: row ``counter`` written by a full-row dynamic_update_slice."""
    cond_block, body_block = op.regions
    tr = _Tracer(ctx, body_block)
    found = _counter(tr, op, inputs)
    if found is None:
        return {}
    c, n = found
    if n < 1:
        return {}
    counter = body_block.args[c]
    read_by_cond = {v.id for o in hir.walk_ops(cond_block) for v in o.operands}
    out: dict[int, StackedCarry] = {}
    for k, (arg, t) in enumerate(zip(body_block.args, (v.type for v in op.operands))):
        if k == c or arg.id in read_by_cond or cond_block.args[k].id in read_by_cond or t.rank == 0 or t.shape[0] != n:
            continue
        dus, _, frame = tr.producer(body_block.returns[k], None)
        if dus is None or dus.name != "stablehlo.dynamic_update_slice" or not tr.is_value(dus.operands[0], frame, arg):
            continue
        update = dus.operands[1]
        if update.type.shape != (1,) + t.shape[1:]:
            continue
        kind = _index_kind(tr, dus.operands[2], frame, counter, n)
        if kind is None or not all(_scalar_is(tr.constant(s, frame), 0) for s in dus.operands[3:]):
            continue
        stacked = _row_value(tr, update, frame, t)
        if stacked is not None:
            out[k] = StackedCarry(stacked[0], stacked[1], kind == "reverse")
    return out


def _row_value(tr: _Tracer, update: hir.Value, frame: _Frame | None,
               buffer: hir.TensorType) -> tuple[hir.Value, bool] | None:
    """The body-level value holding the row: before its leading unit dim was added, or with it."""
    o, _, f = tr.producer(update, frame)
    # A symbolic batch broadcasts with its run-time shape (dynamic_broadcast_in_dim) where a static one reshapes.
    if o is not None and o.name in ("stablehlo.broadcast_in_dim", "stablehlo.dynamic_broadcast_in_dim",
                                    "stablehlo.reshape"):
        src = o.operands[0]
        plain = o.name == "stablehlo.reshape" or tuple(o.attrs.get("broadcast_dimensions", ())) == tuple(range(1, buffer.rank))
        if plain and src.type.shape == buffer.shape[1:]:
            row = tr.body_level(src, f)
            if row is not None:
                return row, False
    row = tr.body_level(update, frame)
    return (row, True) if row is not None else None


def _if(ctx: LoweringContext, op: hir.Op, cond: str, then_graph: onnx_ir.Graph,
        else_graph: onnx_ir.Graph) -> list[str]:
    ctx.current_op = op
    res = ctx.op("If", [cond], outputs=len(op.results), then_branch=then_graph, else_branch=else_graph)
    return [res] if len(op.results) == 1 else res


@lowering("stablehlo.if", check=_check_tokens, onnx_ops=("If",))
def lower_if(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """If with the two regions as branches; a constant predicate inlines the branch it picks."""
    if not op.results:
        return []
    known = ctx.constant_value(inputs[0])
    if known is not None:
        return ctx.lower_block(op.regions[0 if bool(known) else 1], [])
    then_graph = _branch_graph(ctx, op.regions[0], op.results, "then")
    else_graph = _branch_graph(ctx, op.regions[1], op.results, "else")
    return _if(ctx, op, inputs[0], then_graph, else_graph)


@lowering("stablehlo.case", check=_check_tokens, onnx_ops=("If",))
def lower_case(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """A chain of If on ``index == k``; an index outside ``[0, N)`` takes the last branch.

    A constant index inlines the branch it picks.
    """
    branches = op.regions
    if not op.results:
        return []
    if len(branches) == 1:
        return ctx.lower_block(branches[0], [])
    known = ctx.constant_value(inputs[0])
    if known is not None:
        k = int(known)
        return ctx.lower_block(branches[k if 0 <= k < len(branches) else -1], [])
    index = ctx.cast_if(inputs[0], op.operands[0].type.dtype, "int64")
    conds = [ctx.op("Equal", [index, ctx.const(k, "int64")]) for k in range(len(branches) - 1)]
    return _case_chain(ctx, op, conds, 0)


def _case_chain(ctx: LoweringContext, op: hir.Op, conds: list[str], k: int) -> list[str]:
    """If(conds[k], branch k, <chain from k + 1>); the last branch is the final else."""
    branches = op.regions
    then_graph = _branch_graph(ctx, branches[k], op.results, f"case{k}")
    if k + 1 == len(branches) - 1:
        else_graph = _branch_graph(ctx, branches[k + 1], op.results, f"case{k + 1}")
    else:
        with ctx.subgraph() as scope:
            outs = _own_outputs(ctx, scope, _case_chain(ctx, op, conds, k + 1))
            else_graph = ctx.make_graph(scope, ctx.fresh(f"case{k + 1}_on"), [], _outputs_info(ctx, outs, op.results))
    return _if(ctx, op, conds[k], then_graph, else_graph)
