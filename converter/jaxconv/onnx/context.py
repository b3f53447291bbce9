"""LoweringContext: what a lowering function uses to emit ONNX nodes."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from jaxconv.errors import ConversionError, UnsupportedError
from jaxconv.onnx import dtypes as dt
from jaxconv.stablehlo import ir as hir


@dataclass(eq=False)
class GraphScope:
    """Nodes and value names of one ONNX graph (the main graph or a Loop/If body)."""

    parent: "GraphScope | None"
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)

    def lookup(self, value: hir.Value) -> str | None:
        scope: GraphScope | None = self
        while scope is not None:
            if value.id in scope.names:
                return scope.names[value.id]
            scope = scope.parent
        return None


SAME_SHAPE_KEY = "jaxconv.same_shape_inputs"


class LoweringContext:
    """State shared while lowering one module.

    Attributes:
        opset: target ai.onnx opset.
        module: the StableHLO module being lowered (for func.call and composites).
    """

    def __init__(self, module: hir.Module, opset: int) -> None:
        self.module = module
        self.opset = opset
        self.scope = GraphScope(parent=None)
        self.initializers: list[onnx.TensorProto] = []
        self.value_types: dict[str, hir.TensorType] = {}
        self._counter = itertools.count()
        self._const_cache: dict[tuple, str] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.tuples: dict[str, list[str]] = {}  # stablehlo.tuple values: a name standing for its elements
        self.current_op: hir.Op | None = None
        self.call_depth = 0

    # ---- names ---------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        """A new unique tensor name."""
        return f"{hint}_{next(self._counter)}"

    def bind(self, value: hir.Value, name: str) -> None:
        """Make ``name`` the ONNX tensor holding ``value`` in the current scope."""
        self.scope.names[value.id] = name
        self.value_types[name] = value.type

    def name_of(self, value: hir.Value) -> str:
        found = self.scope.lookup(value)
        if found is None:
            raise ConversionError(f"internal: value {value!r} used before it was defined")
        return found

    # ---- emitting ------------------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str | None], *, outputs: int = 1, domain: str = "",
           name_hint: str | None = None, same_shape_inputs: bool = False, **attrs: Any) -> Any:
        """Emit one node; returns its output name, or a list when ``outputs`` > 1.

        ``None`` in ``inputs`` becomes an omitted optional input (""). ``same_shape_inputs`` marks
        a node whose inputs all have the output's shape (the operands of an elementwise StableHLO
        op), which lets the clean-up passes drop Expands that ONNX broadcasting makes redundant.
        """
        hint = (name_hint or op_type).lower()
        outs = [self.fresh(hint) for _ in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node(op_type, ["" if i is None else i for i in inputs], outs,
                                name=self.fresh(f"n_{op_type}"), domain=domain or None, **attrs)
        if self.current_op is not None:
            loc = hir.short_location(self.current_op.location)
            entry = node.metadata_props.add()
            entry.key, entry.value = "stablehlo.op", self.current_op.name
            if loc:
                entry = node.metadata_props.add()
                entry.key, entry.value = "source", loc
        if same_shape_inputs:
            entry = node.metadata_props.add()
            entry.key, entry.value = SAME_SHAPE_KEY, "1"
        self.scope.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any, dtype: str | None = None, name_hint: str = "c") -> str:
        """A constant tensor (an initializer, deduplicated for small values)."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(dt.numpy_dtype(dtype))
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._const_cache:
                return self._const_cache[key]
        name = self.fresh(name_hint)
        self.initializers.append(make_tensor(arr, name))
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
            raise UnsupportedError(f"{what} needs ONNX opset >= {needed}; the model is being built for opset {self.opset} (use --opset {needed})")

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

    def make_graph(self, scope: GraphScope, name: str, inputs: list[onnx.ValueInfoProto],
                   outputs: list[onnx.ValueInfoProto]) -> onnx.GraphProto:
        return helper.make_graph(scope.nodes, name, inputs, outputs)

    def value_info(self, name: str, ttype: hir.TensorType, dims: Sequence[Any] | None = None) -> onnx.ValueInfoProto:
        shape = list(dims) if dims is not None else [d if d is not None else None for d in ttype.shape]
        return helper.make_tensor_value_info(name, dt.onnx_type(ttype.dtype), shape)


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
