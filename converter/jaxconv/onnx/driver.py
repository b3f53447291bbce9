"""Lower a StableHLO module to an ONNX model (built on onnx_ir, returned as a ModelProto)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import onnx
import onnx_ir as ir

from jaxconv.errors import ConversionError, JaxconvError, UnsupportedError
from jaxconv.onnx.complex_layout import COMPONENT, METADATA_KEY, metadata_value
from jaxconv.onnx.context import LoweringContext, ir_dtype, ir_shape
from jaxconv.onnx.preflight import preflight
from jaxconv.onnx.registry import lookup_for
from jaxconv.stablehlo import ir as hir

DEFAULT_OPSET = 21
MIN_OPSET = 18


@dataclass(frozen=True)
class GraphIO:
    """One graph input or output.

    Attributes:
        name: ONNX name.
        dtype: dtype name.
        dims: ints and dim_param strings (symbolic dims).
        arg_index: for inputs, the index of the entry function argument it feeds, or None
            when the function does not use it (it stays a graph input all the same).
    """

    name: str
    dtype: str
    dims: tuple[Any, ...]
    arg_index: int | None = None


def lower_ops(ctx: LoweringContext, ops: Sequence[hir.Op]) -> None:
    """Lower ops in order, binding their results in the current scope."""
    for op in ops:
        ctx.current_op = op
        if op.name == "func.call":
            outs = lower_call(ctx, op)
        else:
            lowering = lookup_for(op)
            if lowering is None:
                raise UnsupportedError(f"no ONNX lowering for {op.name} at {hir.short_location(op.location) or 'unknown location'}")
            inputs = [ctx.name_of(v) for v in op.operands]
            try:
                outs = lowering.fn(ctx, op, inputs)
            except JaxconvError:
                raise
            except Exception as e:
                loc = hir.short_location(op.location)
                raise ConversionError(f"lowering {op.name}{' at ' + loc if loc else ''} failed: {type(e).__name__}: {e}") from e
        if outs is None:
            outs = []
        elif isinstance(outs, str):
            outs = [outs]
        if len(outs) != len(op.results):
            raise ConversionError(f"internal: lowering of {op.name} gave {len(outs)} results, expected {len(op.results)}")
        for value, name in zip(op.results, outs):
            ctx.bind(value, name)


def lower_call(ctx: LoweringContext, op: hir.Op) -> list[str]:
    """Inline a func.call."""
    callee = ctx.module.functions.get(op.attrs["callee"])
    if callee is None:
        raise ConversionError(f"call to unknown function @{op.attrs['callee']}")
    if ctx.call_depth > 64:
        raise UnsupportedError(f"recursive call to @{callee.name}")
    ctx.call_depth += 1
    try:
        return ctx.lower_block(callee.body, [ctx.name_of(v) for v in op.operands])
    finally:
        ctx.call_depth -= 1


def lower_module(module: hir.Module, *, inputs: Sequence[GraphIO], outputs: Sequence[GraphIO],
                 entry: str | None = None, opset: int = DEFAULT_OPSET,
                 graph_name: str = "jaxconv", metadata: dict[str, str] | None = None,
                 constants: dict[int, Any] | None = None) -> onnx.ModelProto:
    """Lower ``module``'s entry function to an ONNX model, cleaned up by ``passes.optimize``.

    Args:
        constants: entry-function arguments that are constants (hoisted out of the module), by
            argument index: they become initializers, as a ``stablehlo.constant`` would.

    Raises:
        UnsupportedError: listing every unsupported op/dtype, before anything is lowered.
    """
    model = lower_to_ir(module, inputs=inputs, outputs=outputs, entry=entry, opset=opset,
                        graph_name=graph_name, metadata=metadata, constants=constants)
    return ir.serde.serialize_model(model)


def lower_to_ir(module: hir.Module, *, inputs: Sequence[GraphIO], outputs: Sequence[GraphIO],
                entry: str | None = None, opset: int = DEFAULT_OPSET, graph_name: str = "jaxconv",
                metadata: dict[str, str] | None = None, constants: dict[int, Any] | None = None) -> ir.Model:
    """``lower_module`` before serialization: the cleaned-up ``onnx_ir`` model."""
    from jaxconv.onnx import thread_count
    from jaxconv.onnx.ops.composites import collapse_erfc_groups
    from jaxconv.onnx.passes import optimize

    collapse_erfc_groups(module)  # the exact GELU's erfc, which jax.export writes as ~60 ops, as one op
    with paused_gc():
        model = build_model(module, inputs=inputs, outputs=outputs, entry=entry, opset=opset,
                            graph_name=graph_name, metadata=metadata, constants=constants)
        optimize(model, opset)
        model.metadata_props.update(thread_count.record(model))
    return model


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cycle collector off while a graph is built and cleaned up, back as it was after.

    The lowering allocates some hundred thousand objects, nearly all alive until it ends; each
    allocation burst starts a collection that walks every object the process holds (jax's, onnx's:
    a tenth of a second each time), and finds little to free. The cycles it leaves (a removed
    node and its values) wait for the next collection (``convert`` runs one for big models).
    """
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_model(module: hir.Module, *, inputs: Sequence[GraphIO], outputs: Sequence[GraphIO],
                entry: str | None = None, opset: int = DEFAULT_OPSET,
                graph_name: str = "jaxconv", metadata: dict[str, str] | None = None,
                constants: dict[int, Any] | None = None) -> ir.Model:
    """The lowered graph as an ``onnx_ir`` model, before any clean-up (``constants``: see ``lower_module``)."""
    fn = module.entry(entry)
    preflight(module, fn)
    ctx = LoweringContext(module, opset)
    graph_inputs = []
    bound: list[str | None] = [None] * len(fn.body.args)
    for io in inputs:
        v = ir.Value(name=io.name, type=ir.TensorType(ir_dtype(_stored(io.dtype))), shape=ir_shape(_stored_dims(io)))
        ctx.values[io.name] = v
        graph_inputs.append(v)
        if io.arg_index is not None:
            bound[io.arg_index] = io.name
    for index, value in sorted((constants or {}).items()):
        bound[index] = ctx.const(value, fn.body.args[index].type.dtype, name_hint="w")
    missing = [i for i, b in enumerate(bound) if b is None]
    if missing:
        raise ConversionError(f"internal: entry arguments {missing} have no graph input")
    results = ctx.lower_block(fn.body, bound)  # type: ignore[arg-type]
    if len(results) != len(outputs):
        raise ConversionError(f"internal: function returns {len(results)} values, signature has {len(outputs)}")
    ctx.current_op = None
    graph_outputs = []
    for io, name in zip(outputs, results):
        if name in ctx.tuples:
            raise ConversionError(f"internal: output {io.name} is a tuple")
        out = ctx.op("Identity", [name])
        v = ctx.values[out]
        v.name = io.name  # the Identity goes when the clean-up finds it useless
        v.dtype, v.shape = ir_dtype(_stored(io.dtype)), ir_shape(_stored_dims(io))
        graph_outputs.append(v)
    domains = {n.domain for n in ctx.created if n.domain not in ("", "ai.onnx")}
    graph = ir.Graph(graph_inputs, graph_outputs, nodes=ctx.scope.nodes, name=graph_name,
                     opset_imports={"": opset, **{d: 1 for d in sorted(domains)}})
    for v in ctx.initializers:
        graph.register_initializer(v)
    _detach_orphans(graph, ctx.created)
    model = ir.Model(graph, ir_version=min(onnx.IR_VERSION, _max_ir_version(opset)),
                     producer_name="jaxconv", producer_version=_version())
    for k, val in (metadata or {}).items():
        model.metadata_props[k] = val
    layout = metadata_value({io.name: io.dtype for io in inputs if io.dtype in COMPONENT},
                            {io.name: io.dtype for io in outputs if io.dtype in COMPONENT})
    if layout is not None:
        model.metadata_props[METADATA_KEY] = layout
    return model


def _stored(dtype: str) -> str:
    """The dtype a graph input or output holds: a complex one as its real component (see complex_layout)."""
    return COMPONENT.get(dtype, dtype)


def _stored_dims(io: GraphIO) -> tuple[Any, ...]:
    """A graph input's or output's dims: a complex one gains a trailing (re, im) axis."""
    return tuple(io.dims) + (2,) if io.dtype in COMPONENT else tuple(io.dims)


def _detach_orphans(graph: ir.Graph, created: Sequence[ir.Node]) -> None:
    """Nodes a lowering made and then dropped (a pruned or retried body) stop using their inputs."""
    from jaxconv.onnx.context import detach

    live = {id(n) for n in ir.traversal.RecursiveGraphIterator(graph)}
    for node in created:
        if id(node) not in live:
            detach(node)


def _version() -> str:
    from jaxconv import __version__

    return __version__


def _max_ir_version(opset: int) -> int:
    """The IR version that came with ``opset`` (onnx's own table): the lowest a model of that opset may
    declare, and one every ONNX Runtime that implements the opset reads."""
    return onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", opset)])
