"""Control flow: stablehlo.while -> Loop, stablehlo.case / stablehlo.if -> If.

Region bodies become ONNX subgraphs opened with ``ctx.subgraph()``; they read values of the
enclosing graphs by name (ONNX outer-scope references), so nothing has to be threaded through
the loop-carried state except what StableHLO carries itself.
"""

from __future__ import annotations

from typing import Sequence

import onnx

from jaxconv.onnx.context import GraphScope, LoweringContext
from jaxconv.onnx.registry import lowering
from jaxconv.stablehlo import ir as hir


def _check_tokens(op: hir.Op) -> str | None:
    for v in list(op.operands) + list(op.results):
        if v.type.dtype == "token":
            return "token values cannot be carried through ONNX control flow"
    return None


def _produced_in(scope: GraphScope) -> set[str]:
    return {o for node in scope.nodes for o in node.output}


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


def _outputs_info(ctx: LoweringContext, names: Sequence[str], values: Sequence[hir.Value]) -> list[onnx.ValueInfoProto]:
    return [ctx.value_info(n, v.type) for n, v in zip(names, values)]


def _branch_graph(ctx: LoweringContext, block: hir.Block, results: Sequence[hir.Value], name: str) -> onnx.GraphProto:
    """A no-input subgraph computing ``block``'s returned values (an If branch)."""
    with ctx.subgraph() as scope:
        outs = _own_outputs(ctx, scope, ctx.lower_block(block, []))
        return ctx.make_graph(scope, ctx.fresh(name), [], _outputs_info(ctx, outs, results))


@lowering("stablehlo.while", check=_check_tokens, onnx_ops=("Loop",))
def lower_while(ctx: LoweringContext, op: hir.Op, inputs: list[str]) -> list[str]:
    """Loop with M omitted: cond runs once on the initial carry, then at the end of every body."""
    cond_block, body_block = op.regions
    if not op.results:
        return []
    first_cond = ctx.lower_block(cond_block, inputs)[0]
    with ctx.subgraph() as scope:
        iter_name, cond_in = ctx.fresh("iter"), ctx.fresh("cond_in")
        carried = [ctx.fresh("carry") for _ in inputs]
        new_carry = ctx.lower_block(body_block, carried)
        next_cond = ctx.lower_block(cond_block, new_carry)[0]
        outs = _own_outputs(ctx, scope, [next_cond] + new_carry)
        bool_scalar = hir.TensorType("bool", ())
        graph_inputs = [ctx.value_info(iter_name, hir.TensorType("int64", ())),
                        ctx.value_info(cond_in, bool_scalar)]
        graph_inputs += [ctx.value_info(n, hir.TensorType(v.type.dtype, tuple(None for _ in v.type.shape)))
                         for n, v in zip(carried, op.operands)]
        graph_outputs = [ctx.value_info(outs[0], bool_scalar)]
        graph_outputs += _outputs_info(ctx, outs[1:], op.results)
        body = ctx.make_graph(scope, ctx.fresh("while_body"), graph_inputs, graph_outputs)
    ctx.current_op = op
    res = ctx.op("Loop", [None, first_cond, *inputs], outputs=len(op.results), body=body)
    return [res] if len(op.results) == 1 else res


def _if(ctx: LoweringContext, op: hir.Op, cond: str, then_graph: onnx.GraphProto,
        else_graph: onnx.GraphProto) -> list[str]:
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
