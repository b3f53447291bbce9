"""LoweringContext: what a lowering function uses to emit ONNX nodes.

The graph is built on ``onnx_ir``: every node is an ``ir.Node`` and every tensor an ``ir.Value``
that knows its dtype, shape and (for constants) its value. The lowerings still pass tensors
around by name: the context maps each name to its ``ir.Value``.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper

from jaxconv.errors import ConversionError, OpsetRequired
from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.complex_layout import COMPONENT
from jaxconv.stablehlo import ir as hir

SAME_SHAPE_KEY = "jaxconv.same_shape_inputs"
# A float Div that XLA's algebraic simplifier computes as a product by the divisor's reciprocal
# (a constant or broadcast divisor): ``passes.optimize`` writes it so once the fusion rules have run.
RECIPROCAL_KEY = "jaxconv.xla_reciprocal"


@dataclass(eq=False)
class GraphScope:
    """Nodes and value names of one ONNX graph (the main graph or a Loop/If body)."""

    parent: "GraphScope | None"
    nodes: list[ir.Node] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    def lookup(self, value: hir.Value) -> str | None:
        scope: GraphScope | None = self
        while scope is not None:
            if value.id in scope.names:
                return scope.names[value.id]
            scope = scope.parent
        return None

    def produced(self) -> set[str]:
        """Names of the values this scope's nodes compute."""
        return {v.name for node in self.nodes for v in node.outputs if v.name}

    def prune(self, outputs: Sequence[str]) -> set[str]:
        """Drop nodes nothing in ``outputs`` needs; returns every name the kept nodes read."""
        needed = set(outputs)
        kept = []
        for node in reversed(self.nodes):
            if not any(v.name in needed for v in node.outputs):
                detach(node)
                continue
            kept.append(node)
            needed.update(v.name for v in node.inputs if v is not None)
            needed.update(subgraph_inputs(node))
        self.nodes[:] = kept[::-1]
        return needed


def subgraph_inputs(node: ir.Node) -> set[str]:
    """Names a node's subgraphs read (outer-scope values included) and their outputs' names."""
    names: set[str] = set()
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            graphs = [attr.value]
        elif attr.type == ir.AttributeType.GRAPHS:
            graphs = list(attr.value)
        else:
            continue
        for g in graphs:
            for n in g:
                names.update(v.name for v in n.inputs if v is not None)
                names.update(subgraph_inputs(n))
            names.update(o.name for o in g.outputs)
    return names


def detach(node: ir.Node) -> None:
    """Make a node that left the graph stop counting as a user of its inputs."""
    for i in range(len(node.inputs)):
        if node.inputs[i] is not None:
            node.replace_input_with(i, None)


def _attribute(name: str, value: Any) -> ir.Attr:
    if isinstance(value, ir.Graph):
        return ir.AttrGraph(name, value)
    if isinstance(value, onnx.GraphProto):
        return ir.AttrGraph(name, ir.serde.deserialize_graph(value))
    # onnx.helper's inference of the attribute type (numpy scalars, mixed int/float lists) stays the rule
    return ir.serde.deserialize_attribute(helper.make_attribute(name, value))


def ir_dtype(dtype: str) -> ir.DataType:
    """The onnx_ir element type of a dtype name."""
    return ir.DataType(dt.onnx_type(dtype))


def ir_shape(dims: Sequence[Any]) -> ir.Shape:
    """An onnx_ir shape from ints, None (unknown) and strings (symbolic dims)."""
    return ir.Shape([d if d is None or isinstance(d, str) else int(d) for d in dims])


class LoweringContext:
    """State shared while lowering one module.

    Attributes:
        opset: target ai.onnx opset.
        module: the StableHLO module being lowered (for func.call and composites).
        values: every ONNX tensor so far, by name.
        initializers: constants of the main graph (subgraphs read them from the outer scope).
    """

    def __init__(self, module: hir.Module, opset: int) -> None:
        self.module = module
        self.opset = opset
        self.scope = GraphScope(parent=None)
        self.values: dict[str, ir.Value] = {}
        self.initializers: list[ir.Value] = []
        self.value_types: dict[str, hir.TensorType] = {}
        self._counter = itertools.count()
        self._const_cache: dict[tuple, str] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.tuples: dict[str, list[str]] = {}  # stablehlo.tuple values: a name standing for its elements
        self.current_op: hir.Op | None = None
        self.call_depth = 0
        self.created: list[ir.Node] = []
        self.complex_parts: dict[tuple[Any, str], tuple[str, str]] = {}  # (scope, name) -> (re, im) halves
        self._sources: dict[str, str] = {}  # MLIR location -> file.py:LINE (many ops share a line)
        self._defining: dict[int, hir.Op] | None = None  # id of a result -> its op, built on first ask

    def defining_op(self, value: hir.Value) -> hir.Op | None:
        """The StableHLO op whose result ``value`` is, in any function of the module (one walk, then a map)."""
        if self._defining is None:
            self._defining = {id(r): o for fn in self.module.functions.values() for o in hir.walk_ops(fn.body)
                              for r in o.results}
        return self._defining.get(id(value))

    # ---- names ---------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        """A new unique tensor name."""
        return f"{hint}_{next(self._counter)}"

    def bind(self, value: hir.Value, name: str) -> None:
        """Make ``name`` the ONNX tensor holding ``value`` in the current scope."""
        self.scope.names[value.id] = name
        self.value_types[name] = value.type
        known = self.values.get(name)
        if known is not None:
            _stamp(known, value.type)

    def name_of(self, value: hir.Value) -> str:
        found = self.scope.lookup(value)
        if found is None:
            raise ConversionError(f"internal: value {value!r} used before it was defined")
        return found

    def value(self, name: str) -> ir.Value:
        """The ``ir.Value`` called ``name``; a name nothing made yet (a subgraph input) gets one."""
        found = self.values.get(name)
        if found is None:
            found = self.values[name] = ir.Value(name=name)
            ttype = self.value_types.get(name)
            if ttype is not None:
                _stamp(found, ttype)
        return found

    def producer(self, name: str) -> ir.Node | None:
        """The node computing ``name``, or None for inputs and constants."""
        found = self.values.get(name)
        return found.producer() if found is not None else None

    # ---- emitting ------------------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str | None], *, outputs: int = 1, domain: str = "",
           name_hint: str | None = None, same_shape_inputs: bool = False, **attrs: Any) -> Any:
        """Emit one node; returns its output name, or a list when ``outputs`` > 1.

        ``None`` in ``inputs`` becomes an omitted optional input. ``same_shape_inputs`` marks
        a node whose inputs all have the output's shape (the operands of an elementwise StableHLO
        op), which lets the clean-up passes drop Expands that ONNX broadcasting makes redundant.
        """
        hint = (name_hint or op_type).lower()
        values = [None if not i else self.value(i) for i in inputs]
        attributes = [_attribute(k, v) for k, v in attrs.items() if v is not None]
        meta: dict[str, str] = {}
        if self.current_op is not None:
            meta["stablehlo.op"] = self.current_op.name
            loc = self._source(self.current_op.location)
            if loc:
                meta["source"] = loc
        if same_shape_inputs:
            meta[SAME_SHAPE_KEY] = "1"
        node = ir.Node(domain, op_type, values, attributes, num_outputs=outputs,
                       name=self.fresh(f"n_{op_type}"), metadata_props=meta)
        names = []
        for out in node.outputs:
            out.name = self.fresh(hint)
            self.values[out.name] = out
            names.append(out.name)
        if op_type == "Cast" and not domain:
            node.outputs[0].dtype = ir.DataType(node.attributes["to"].as_int())
        self.scope.nodes.append(node)
        self.created.append(node)
        return names[0] if outputs == 1 else names

    def _source(self, location: str) -> str:
        """``hir.short_location(location)``, computed once per distinct location."""
        found = self._sources.get(location)
        if found is None:
            found = self._sources[location] = hir.short_location(location)
        return found

    def const(self, value: Any, dtype: str | None = None, name_hint: str = "c") -> str:
        """A constant tensor (an initializer, deduplicated for small values)."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dt.numpy_dtype(dtype), copy=False)
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._const_cache:
                return self._const_cache[key]
        name = self.fresh(name_hint)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        tensor = ir.Tensor(arr, name=name)
        v = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(arr.shape), const_value=tensor)
        self.values[name] = v
        self.initializers.append(v)
        self.constants[name] = arr
        if key is not None:
            self._const_cache[key] = name
        return name

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant this context made, else None."""
        return self.constants.get(name)

    def scalar(self, value: Any, dtype: str) -> str:
        return self.const(np.array(value, dtype=dt.numpy_dtype(dtype)))

    def i64(self, values: Sequence[int]) -> str:
        """A 1-D int64 constant (axes, shapes, pads)."""
        return self.const(np.asarray(list(values), dtype=np.int64))

    def cast(self, name: str, to: str) -> str:
        return self.op("Cast", [name], to=dt.onnx_type(to))

    def cast_if(self, name: str, src: str, to: str) -> str:
        return name if src == to else self.cast(name, to)

    def require_opset(self, needed: int, what: str) -> None:
        if self.opset < needed:
            raise OpsetRequired(f"{what} needs ONNX opset >= {needed}; the model is being built for opset "
                                f"{self.opset} (use --opset {needed})", needed, what)

    def fold(self, name: str, limit: int = 64) -> np.ndarray | None:
        """The value of ``name`` when it is computed from constants only (at most ``limit`` nodes), else None."""
        known = self.constant_value(name)
        if known is not None:
            return known
        order: list[ir.Node] = []
        leaves: set[str] = set()
        state: dict[int, bool] = {}

        def visit(v: ir.Value | None) -> bool:
            if v is None:
                return True
            if v.name in self.constants:
                leaves.add(v.name)
                return True
            node = v.producer()
            if node is None or any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
                return False
            if id(node) in state:
                return state[id(node)]
            state[id(node)] = True
            if not all(visit(i) for i in node.inputs) or len(order) >= limit:
                state[id(node)] = False
                return False
            order.append(node)
            return True

        if not visit(self.values.get(name)):
            return None
        from onnx.reference import ReferenceEvaluator

        graph = helper.make_graph([ir.serde.serialize_node(n) for n in order], "fold", [],
                                  [helper.make_tensor_value_info(name, 0, None)],
                                  initializer=[make_tensor(self.constants[n], n) for n in sorted(leaves)])
        try:
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
            # numpy's warnings are the model's business (T5's relative buckets take the log of 0 where a
            # where masks it), not the conversion's: the values are numpy's either way.
            with np.errstate(all="ignore"):
                return np.asarray(ReferenceEvaluator(model).run(None, {})[0])
        except Exception:  # noqa: BLE001  (not foldable: the caller lowers the general case)
            return None

    # ---- regions / subgraphs ---------------------------------------------------------------
    def lower_block(self, block: hir.Block, inputs: Sequence[str]) -> list[str]:
        """Lower a block inline in the current graph, with its arguments bound to ``inputs``."""
        from jaxconv.onnx.driver import lower_ops

        if len(inputs) != len(block.args):
            raise ConversionError(f"internal: block takes {len(block.args)} args, got {len(inputs)}")
        for arg, name in zip(block.args, inputs):
            self.bind(arg, name)
        lower_ops(self, block.ops)
        return [self.name_of(v) for v in block.returns]

    @contextlib.contextmanager
    def subgraph(self) -> Iterator[GraphScope]:
        """Open a nested ONNX graph scope (Loop/If/Scan body) that sees outer names."""
        outer = self.scope
        inner = GraphScope(parent=outer)
        self.scope = inner
        saved_op = self.current_op
        try:
            yield inner
        finally:
            self.scope = outer
            self.current_op = saved_op

    def make_graph(self, scope: GraphScope, name: str, inputs: list[ir.Value], outputs: list[ir.Value]) -> ir.Graph:
        """A subgraph of ``scope``'s nodes with the given inputs and outputs (from ``value_info``)."""
        return ir.Graph(inputs, outputs, nodes=scope.nodes, name=name)

    def value_info(self, name: str, ttype: hir.TensorType, dims: Sequence[Any] | None = None) -> ir.Value:
        """The value ``name`` typed as ``ttype`` (``dims`` overrides the shape), for graph inputs and outputs."""
        v = self.value(name)
        shape = list(dims) if dims is not None else list(ttype.shape)
        if ttype.dtype in COMPONENT:  # complex: (re, im) pairs on a trailing axis
            v.dtype, v.shape = ir_dtype(COMPONENT[ttype.dtype]), ir_shape(shape + [2])
            return v
        v.dtype = ir_dtype(ttype.dtype)
        v.shape = ir_shape(shape)
        return v


def _stamp(v: ir.Value, ttype: hir.TensorType) -> None:
    """Give ``v`` the StableHLO type's dtype where it has none yet.

    Not its shape: lowerings apply a region (a reduce or sort body typed on scalars) to whole
    tensors, so a region value's StableHLO shape is not always the ONNX tensor's. Shapes come
    from ONNX shape inference in the clean-up, and from the declared graph inputs and outputs.
    """
    if v.type is None and ttype.dtype in dt.ONNX_TYPE:
        v.dtype = ir_dtype(ttype.dtype)
    elif v.type is None and ttype.dtype in COMPONENT:
        v.dtype = ir_dtype(COMPONENT[ttype.dtype])


def make_tensor(arr: np.ndarray, name: str) -> onnx.TensorProto:
    """A TensorProto for any numpy array, bfloat16 included."""
    if arr.dtype.name == "bfloat16":
        t = onnx.TensorProto()
        t.name = name
        t.data_type = onnx.TensorProto.BFLOAT16
        t.dims.extend(arr.shape)
        t.raw_data = arr.copy(order="C").view(np.uint16).tobytes()
        return t
    return numpy_helper.from_array(arr.copy(order="C"), name)
