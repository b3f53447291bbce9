"""Expands made redundant by broadcasting, found by tracking symbolic dimensions.

A function converted with a symbolic dimension (``f32[8,t,256]``) lowers every broadcast to
``Expand(x, shape)`` with ``shape`` computed at run time from ``Shape(input)``. ONNX shape
inference cannot relate such a computed shape to the input's dimensions (the lowering computes
it in int32, behind Casts), so the Expands stay: full-size copies of a scalar ``-inf`` or of a
mask, every run. This rule follows the dimensions through the shape arithmetic (Shape, Cast,
Squeeze, Unsqueeze, Reshape, Concat, Gather, Slice) and through the tensors' shapes (broadcasting
ops, MatMul, Reshape, Slice, Transpose, reductions) and then:

- drops an ``Expand`` whose input already has the target shape;
- lets an elementwise op read an Expand's input when broadcasting its other inputs gives the
  op's output shape anyway;
- gives MatMul the 3-D operand directly, without the Reshape to 2-D and back the lowering of a
  ``dot_general`` with batch-free contraction emits (ORT flattens the operand itself);
- turns Slices that cut one tensor into consecutive pieces along one axis into one Split;
- runs an elementwise op before an Expand of its operand when its other operands are no larger
  (``op(Expand(a, s), c)`` -> ``Expand(op(a, c), s)``; broadcasting commutes with pointwise ops),
  so the Expand can move on to a consumer that makes it redundant;
- likewise a Reshape, Unsqueeze or Squeeze of an Expand that only adds or drops axes of length 1 (on
  the Expand's input too): it runs on the input and the Expand follows with the shape's entries
  gathered, where the shape is known only at run time and every reader is pointwise, so the Expand moves
  on (``jnp.take_along_axis``'s index checks on ``Reshape(Expand(idx), [..., 1])``: keras-hub
  DeBERTa's relative-position indices, ``[1, 1, s, s]`` broadcast over batch and heads, were compared
  with the bounds at full size, four comparisons on ``[2, 4, 64, 64, 1]``, 1.37 of 3.95 ms per run in
  ORT's profile; CPU per run 5.36 -> 2.96 ms, the same bits).

- drops a float ``Mul(x, ones)`` whose ones broadcast nothing, or that only broadcasts into its one reader,
  and a Reshape back to its input's shape or to that of the value the Reshape before it read (Hugging
  Face's head mask of ones between two Transposes of the attention probabilities: they cancel after).

A Slice from clamped starts to starts plus sizes (StableHLO's dynamic_slice: ``pos[:s]`` of a learned
position table) has the sizes' shape, CumSum and Clip their input's, and small integer shape vectors are
added, subtracted and compared entry by entry: Flax linen's and Haiku's encoders with learned positions
and RoBERTa's position ids then keep the sequence's name through the whole encoder, so the mean and scale
Expands of every layer norm go and the norm becomes LayerNormalization as in a static model (the norm
rules' numbers). Symbolic ``s`` against static 64 (zoo, ORT on one thread, alternating, load 8-9): CPU
1.31-1.35x -> 1.00-1.06x (linen_enc), 1.24-1.39x -> 1.02-1.05x (hk_padenc), 1.41-1.50x -> 1.04-1.08x
(hf_robpre, whose head-major attention projections the symbolic graph takes on two threads).

Gather, GatherElements and TopK have known shapes here (data's axes around the indices'; the indices';
the input's with the axis cut to k: a mixture of experts' routing, keras-hub Mixtral 250 -> 228 nodes
with a symbolic batch, 221 static), so a
take's fill broadcast to a lookup of run-time size (T5's relative-position bias, ``jnp.take``'s NaN
fill) needs no Expand, and the norm rules see the embeddings' shapes (DeBERTa 2.96 -> 2.46 ms a run:
its layer norms become LayerNormalization as in a static model; their numbers are those rules').

Dimensions are tokens: an int, or a string naming one run-time value (a graph input's symbolic
dimension, or an internal ``?``-prefixed name for a dimension only this analysis relates).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Iterator, Union

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import dtypes as dt
from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import reshape_entries
from jaxconv.onnx.rewrites.loops import trip_count

Dim = Union[int, str]
Dims = tuple  # tuple[Dim, ...]

_BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Where", "Mod", "PRelu",
    "BitShift"})
_SAME_SHAPE = frozenset({
    "Identity", "Cast", "Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu", "Gelu", "Erf", "Not",
    "IsNaN", "IsInf", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Sin", "Cos", "Softmax", "LogSoftmax",
    "BitwiseNot", "Softplus", "Tan", "Atan", "Asin", "Acos", "CumSum", "Clip"})
_POINTWISE_UNARY = _SAME_SHAPE - {"Softmax", "LogSoftmax", "Identity", "CumSum"}
# Ops whose output has their first input's shape, but that do not commute with broadcasting (per-channel
# or per-row ops): shapes only.
_KEEPS_SHAPE = frozenset({
    "LeakyRelu", "HardSwish", "HardSigmoid", "Elu", "Selu", "Celu", "Softsign", "Mish", "ThresholdedRelu",
    "Shrink", "BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
    "Dropout", "LRN", "Hardmax", "Trilu"})
# Ops on [N, C, spatial...] that keep N, and C too except where the weight gives it (Conv).
_WINDOWED = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
                       "GlobalMaxPool", "GlobalLpPool"})
_SHAPE_PASS = frozenset({"Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten"})
_REDUCE = frozenset({"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd", "ReduceL2",
                     "ReduceL1", "ReduceLogSumExp", "ReduceSumSquare"})
_INT_TYPES = frozenset({ir.DataType.INT64, ir.DataType.INT32})
_INT_ARITHMETIC = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
                   "Max": max, "Min": min}
_NO_ORT_EXPAND = frozenset(ir.DataType(dt.onnx_type(d)) for d in dt.ALL - dt.kernels("Expand"))  # bfloat16


class _Shapes:
    """Symbolic shapes of tensors and symbolic contents of 1-D integer shape tensors."""

    def __init__(self, graph: ir.Graph | None = None) -> None:
        self.graph = graph  # values made outside it (a Loop body's reads of the outer graph) keep their names
        self.shapes: dict[int, Dims | None] = {}
        self.values: dict[int, Dims | None] = {}
        self._fresh = itertools.count()

    # ---- tensor shapes -------------------------------------------------------------------
    def shape(self, v: ir.Value | None) -> Dims | None:
        if v is None:
            return None
        if id(v) not in self.shapes:
            self.shapes[id(v)] = self._declared(v)
        return self.shapes[id(v)]

    def _declared(self, v: ir.Value) -> Dims | None:
        """The value's own shape: ints and real symbol names kept, unknown dims given private tokens."""
        if v.shape is None:
            return None
        dims = []
        for k, d in enumerate(v.shape):
            if isinstance(d, int):
                dims.append(d)
            elif d.value is not None and (v.is_graph_input() or (not d.value.startswith("unk__") and (
                    v.producer() is None or (self.graph is not None and v.producer().graph is not self.graph)))):
                dims.append(d.value)
            else:
                dims.append(f"?{id(v)}:{k}")
        return tuple(dims)

    @contextlib.contextmanager
    def assuming(self, v: ir.Value, dims: Dims) -> Iterator[None]:
        """``v``'s shape taken as ``dims`` inside the block (what a rule would make it), as it was after."""
        known, saved = id(v) in self.shapes, self.shapes.get(id(v))
        self.shapes[id(v)] = tuple(dims)
        try:
            yield
        finally:
            if known:
                self.shapes[id(v)] = saved
            else:
                del self.shapes[id(v)]

    def fresh(self) -> str:
        return f"?n{next(self._fresh)}"

    # ---- shape-tensor contents --------------------------------------------------------------
    def value(self, v: ir.Value | None) -> Dims | None:
        if v is None:
            return None
        if id(v) in self.values:
            return self.values[id(v)]
        self.values[id(v)] = None  # cycles and failures: unknown
        out = self._value(v)
        self.values[id(v)] = out
        return out

    def _value(self, v: ir.Value) -> Dims | None:
        arr = m.const(v)
        if arr is None and v.dtype in _INT_TYPES and v.shape is not None and len(v.shape) <= 1:
            arr = constants.evaluate(v)  # indices computed from constants (a dynamic slice's clamped starts)
        if arr is not None:
            if arr.dtype.kind not in "iu" or arr.ndim > 1 or arr.size > 16:
                return None
            return tuple(int(a) for a in np.atleast_1d(arr))
        node = v.producer()
        if node is None or node.domain not in ("", "ai.onnx"):
            return None
        if v.dtype is not None and v.dtype not in _INT_TYPES:
            return None
        op = node.op_type
        if op == "Shape":
            shape = self.shape(node.inputs[0])
            if shape is None:
                return None
            start, end = m.attr(node, "start", 0), m.attr(node, "end", None)
            return tuple(shape[start:end])
        if op in _SHAPE_PASS:
            if op == "Cast" and (node.inputs[0] is None or node.inputs[0].dtype not in _INT_TYPES):
                return None
            return self.value(node.inputs[0])
        if op == "Concat" and m.attr(node, "axis", 0) in (0, -1):
            parts = [self.value(i) for i in node.inputs]
            return None if any(p is None for p in parts) else tuple(d for p in parts for d in p)
        if op == "Gather" and m.attr(node, "axis", 0) == 0:
            src, idx = self.value(node.inputs[0]), m.const(node.inputs[1])
            if src is None or idx is None or idx.ndim > 1:
                return None
            try:
                return tuple(src[int(i)] for i in np.atleast_1d(idx))
            except IndexError:
                return None
        if op in _INT_ARITHMETIC and len(node.inputs) == 2:
            a, b = self.value(node.inputs[0]), self.value(node.inputs[1])
            if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
                return None
            n = max(len(a), len(b))
            out = tuple(_entry(op, x, y) for x, y in zip(a * n if len(a) == 1 else a, b * n if len(b) == 1 else b))
            bits = 31 if v.dtype == ir.DataType.INT32 else 63
            if not all(-(1 << bits) <= d < 1 << bits for d in out if isinstance(d, int)):
                return None  # no wrap-around
            return tuple(self.fresh() if d is None else d for d in out)
        if op == "Split" and m.attr(node, "axis", 0) in (0, -1) and len(node.inputs) == 2:
            src, sizes = self.value(node.inputs[0]), m.const(node.inputs[1])
            if src is None or sizes is None or sizes.ndim != 1 or int(sizes.sum()) != len(src):
                return None
            k = list(node.outputs).index(v)
            start = int(sizes[:k].sum())
            return tuple(src[start:start + int(sizes[k])])
        if op == "Slice":
            src = self.value(node.inputs[0])
            args = [m.const(i) for i in node.inputs[1:]]
            if src is None or any(a is None for a in args) or len(args) < 2:
                return None
            steps = args[3] if len(args) > 3 else np.array([1])
            if len(np.atleast_1d(args[0])) != 1 or int(np.atleast_1d(steps)[0]) != 1:
                return None
            start, end = int(np.atleast_1d(args[0])[0]), int(np.atleast_1d(args[1])[0])
            return tuple(src[start:end])
        return None

    # ---- propagation ------------------------------------------------------------------------
    def infer(self, node: ir.Node) -> None:
        """Record the symbolic shape of ``node``'s first output computed from its inputs, where known."""
        if node.domain not in ("", "ai.onnx") or not node.outputs:
            return
        try:
            out = self._infer(node)
        except (ValueError, IndexError, TypeError):
            out = None
        if out is not None:
            self.shapes[id(node.outputs[0])] = tuple(out)
        if node.op_type == "Split" and len(node.outputs) > 1:
            for v, dims in zip(node.outputs, self._split_parts(node) or ()):
                self.shapes[id(v)] = dims
        if node.op_type == "TopK" and out is not None and len(node.outputs) > 1:  # the indices: the values' shape
            self.shapes[id(node.outputs[1])] = tuple(out)
        if node.op_type == "Loop":
            self._loop(node)

    def _loop(self, loop: ir.Node) -> None:
        """A Loop's outputs: each state the shape it starts with (StableHLO's while carries each at one type),
        each scan output a row per step of its body's value (an RNN layer's sequence, read by the next)."""
        body = m.attr(loop, "body")
        if not isinstance(body, ir.Graph) or len(body.inputs) != len(loop.inputs) \
                or len(body.outputs) != len(loop.outputs) + 1:
            return
        inner = _Shapes(body)
        states = len(loop.inputs) - 2
        for k in range(states):
            dims = self.shape(loop.inputs[2 + k])
            if dims is not None:
                inner.shapes[id(body.inputs[2 + k])] = dims
                self.shapes[id(loop.outputs[k])] = dims
        for node in body:
            inner.infer(node)
        trip = m.const(loop.inputs[0]) if loop.inputs[0] is not None else None
        steps = int(trip) if trip is not None and trip.size == 1 else trip_count(loop) or self.fresh()
        for k in range(states, len(loop.outputs)):
            row = inner.shape(body.outputs[1 + k])
            if row is not None:
                self.shapes[id(loop.outputs[k])] = (steps, *row)

    def _split_parts(self, node: ir.Node) -> list[Dims] | None:
        """Each Split output's shape: the input's, the axis cut to the part's constant size."""
        a = self.shape(node.inputs[0])
        if a is None:
            return None
        axis = m.attr(node, "axis", 0) % len(a)
        sizes = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        if sizes is None:
            if not isinstance(a[axis], int) or a[axis] % len(node.outputs):
                return None
            sizes = np.full(len(node.outputs), a[axis] // len(node.outputs))
        sizes = np.atleast_1d(sizes)
        if len(sizes) != len(node.outputs):
            return None
        return [tuple(int(n) if k == axis else d for k, d in enumerate(a)) for n in sizes]

    def _branches(self, node: ir.Node) -> Dims | None:
        """An If's first output: the shape both branches give it (a rule's guard: the exact nodes and the
        fast ones, computed from the outer graph's values)."""
        dims = []
        for name in ("then_branch", "else_branch"):
            branch = m.attr(node, name)
            if not isinstance(branch, ir.Graph) or len(branch.outputs) != len(node.outputs):
                return None
            for inner in branch:
                self.infer(inner)
            dims.append(self.shape(branch.outputs[0]))
        return dims[0] if dims[0] is not None and dims[0] == dims[1] else None

    def _infer(self, node: ir.Node) -> Dims | None:
        op, ins = node.op_type, node.inputs
        if op in _BROADCASTING:
            return broadcast(*[self.shape(i) for i in ins])
        if op == "Split":
            parts = self._split_parts(node)
            return parts[0] if parts else None
        if op in _SAME_SHAPE or op in _KEEPS_SHAPE:
            return self.shape(ins[0])
        if op in _WINDOWED:
            return self._windowed(node)
        if op in ("ScatterND", "ScatterElements"):  # the data's shape
            return self.shape(ins[0])
        if op == "Pad":
            return self._pad(node)
        if op == "Concat":
            return self._concat(node)
        if op == "If":
            return self._branches(node)
        if op == "Expand":
            return broadcast(self.shape(ins[0]), self.value(ins[1]))
        if op == "GatherElements":  # the indices' shape
            return self.shape(ins[1])
        if op == "TopK":  # the input's, the axis cut to k (a mixture of experts' routing)
            a, k = self.shape(ins[0]), m.const(ins[1]) if len(ins) > 1 else None
            if a is None or k is None or k.size != 1:
                return None
            axis = m.attr(node, "axis", -1) % len(a)
            return tuple(int(k.reshape(-1)[0]) if j == axis else d for j, d in enumerate(a))
        if op == "GatherND":  # the indices' leading dims, then data's after the indexed ones
            data, idx = self.shape(ins[0]), self.shape(ins[1])
            if data is None or idx is None or not idx or not isinstance(idx[-1], int):
                return None
            return tuple(idx[:-1]) + tuple(data[m.attr(node, "batch_dims", 0) + idx[-1]:])
        if op == "Gather":  # data's axes around the axis, the indices' shape in its place
            data, idx = self.shape(ins[0]), self.shape(ins[1])
            if data is None or idx is None:
                return None
            axis = m.attr(node, "axis", 0) % len(data)
            return tuple(data[:axis]) + tuple(idx) + tuple(data[axis + 1:])
        if op == "MatMul":
            a, b = self.shape(ins[0]), self.shape(ins[1])
            if a is None or b is None or len(a) < 2 or len(b) < 2:
                return None
            batch = broadcast(a[:-2], b[:-2])
            return None if batch is None else batch + (a[-2], b[-1])
        if op == "Range":
            start, limit, delta = (m.const(i) for i in ins)
            n = self.value(ins[1])
            if start is None or delta is None or n is None or len(n) != 1:
                return None
            if int(start) != 0 or int(delta) != 1:
                return None
            return n
        if op == "Transpose":
            a = self.shape(ins[0])
            perm = m.attr(node, "perm")
            if a is None:
                return None
            perm = list(perm) if perm is not None else list(range(len(a)))[::-1]
            return tuple(a[p] for p in perm)
        if op == "Reshape":
            return self._reshape(node)
        if op == "Slice":
            return self._slice(node)
        if op in ("Unsqueeze", "Squeeze"):
            a, axes = self.shape(ins[0]), m.const(ins[1]) if len(ins) > 1 else None
            if a is None or axes is None:
                return None
            axes = [int(x) for x in np.atleast_1d(axes)]
            if op == "Squeeze":
                axes = {x % len(a) for x in axes}
                return tuple(d for k, d in enumerate(a) if k not in axes)
            rank = len(a) + len(axes)
            if len({x % rank for x in axes}) != len(axes) or any(not -rank <= x < rank for x in axes):
                return None
            dims = list(a)
            for k in sorted(x % rank for x in axes):
                dims.insert(k, 1)
            return tuple(dims)
        if op in _REDUCE:
            a, axes = self.shape(ins[0]), m.reduce_axes(node)
            if a is None or axes is None or not axes:
                return None
            axes = {x % len(a) for x in axes}
            keep = m.attr(node, "keepdims", 1)
            return tuple(1 if k in axes else d for k, d in enumerate(a) if keep or k not in axes)
        return None

    def _windowed(self, node: ir.Node) -> Dims | None:
        """N from the input, C from the input (pools) or the weight (Conv), spatial dims as declared or, where
        ONNX's inference lost them (a Slice's bounds computed from ``Shape`` before), from the input's."""
        x, out = self.shape(node.inputs[0]), self._declared(node.outputs[0])
        if x is not None and len(x) >= 3 and (out is None or len(out) != len(x) or not _named(out)):
            out = _window_output(node, x) or out
        if x is None or out is None or len(out) != len(x) or len(x) < 3:
            return None
        channels: Dim | None = x[1]
        if node.op_type in ("Conv", "ConvTranspose"):
            w = self.shape(node.inputs[1])
            group = m.attr(node, "group", 1)
            if w is None:
                channels = None
            elif node.op_type == "Conv":
                channels = w[0]
            else:
                channels = w[1] * group if isinstance(w[1], int) else (w[1] if group == 1 else None)
        return (x[0], out[1] if channels is None else channels) + tuple(out[2:])

    def _unpadded(self, node: ir.Node, starts: Dims, ends: Dims, axes: Dims, steps: Dims) -> Dims | None:
        """``Slice(ScatterND(Pad(y, pads), ...), 0, Shape(y))``: y's shape (the lowering of a scatter that may
        write out of range pads the operand by the updates' size, scatters, and cuts the pad off again)."""
        src = node.inputs[0]
        scatter = m.producer(src, "ScatterND", "ScatterElements")
        pad = m.producer(scatter.inputs[0] if scatter is not None else src, "Pad")
        if pad is None or len(pad.inputs) < 2 or (len(pad.inputs) > 3 and pad.inputs[3] is not None):
            return None
        y, pads = self.shape(pad.inputs[0]), self.value(pad.inputs[1])
        if y is None or pads is None or len(pads) != 2 * len(y) or any(isinstance(p, int) and p < 0 for p in pads):
            return None
        if any(isinstance(p, str) and p.startswith("?n") for p in pads):  # computed here: not known to be sizes
            return None
        cut = {int(x) % len(y): (s, e, st) for x, s, e, st in zip(axes, starts, ends, steps)}
        for k, d in enumerate(y):
            if k in cut and cut[k] != (0, d, 1):
                return None
            if k not in cut and (pads[k], pads[k + len(y)]) != (0, 0):
                return None
        return y

    def _pad(self, node: ir.Node) -> Dims | None:
        """Each axis grown by its constant pads (a named dim kept where its pads are 0)."""
        a = self.shape(node.inputs[0])
        pads = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        axes = m.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
        if a is None or pads is None:
            return None
        rank = len(a)
        axes = list(range(rank)) if axes is None else [int(x) % rank for x in np.atleast_1d(axes)]
        pads = [int(p) for p in np.atleast_1d(pads)]
        if len(pads) != 2 * len(axes):
            return None
        out = list(a)
        for k, axis in enumerate(axes):
            grow = pads[k] + pads[k + len(axes)]
            d = a[axis]
            out[axis] = d + grow if isinstance(d, int) else d if grow == 0 else self.fresh()
        return tuple(out)

    def _concat(self, node: ir.Node) -> Dims | None:
        """The inputs' dims off the axis (a named one where some input has it), their sum along it."""
        parts = [self.shape(i) for i in node.inputs]
        if not parts or any(p is None for p in parts) or len({len(p) for p in parts}) != 1:
            return None
        rank = len(parts[0])
        axis = m.attr(node, "axis", 0) % rank
        out: list[Dim] = []
        for k in range(rank):
            dims = [p[k] for p in parts]
            if k == axis:
                out.append(sum(dims) if all(isinstance(d, int) for d in dims) else self.fresh())
                continue
            named = [d for d in dims if isinstance(d, int) or not d.startswith("?")]
            out.append(named[0] if named else dims[0])
        return tuple(out)

    def _reshape(self, node: ir.Node) -> Dims | None:
        a, target = self.shape(node.inputs[0]), self.value(node.inputs[1])
        if target is None:
            return None
        allowzero = m.attr(node, "allowzero", 0)
        dims = list(target)
        for k, d in enumerate(dims):
            if d == 0 and not allowzero:
                if a is None or k >= len(a):
                    return None
                dims[k] = a[k]
        if -1 in dims:
            if a is None or dims.count(-1) != 1:
                return None
            known = [d for d in dims if d != -1]
            dims[dims.index(-1)] = _quotient(list(a), known) or self.fresh()
        return tuple(dims)

    def _slice(self, node: ir.Node) -> Dims | None:
        ins = node.inputs
        a = self.shape(ins[0])
        if a is None or len(ins) < 3:
            return None
        starts, ends = self.value(ins[1]), self.value(ins[2])
        axes, steps = _axes_steps(ins, len(a), self)
        if axes is not None and steps is not None:
            sized = self._sized_slice(node, a, axes, steps)
            if sized is not None or (starts is None and ends is None):
                return sized
        if starts is None or ends is None or axes is None or steps is None:
            return None
        unpadded = self._unpadded(node, starts, ends, axes, steps)
        if unpadded is not None:
            return unpadded
        out = list(a)
        for s, e, axis, step in zip(starts, ends, axes, steps):
            axis, d = int(axis) % len(a), a[int(axis) % len(a)]
            if int(step) > 1 and isinstance(s, int) and isinstance(e, int) and isinstance(d, int) and 0 <= s and e >= 0:
                out[axis] = max(0, -(-(min(e, d) - s) // int(step)))  # a strided cut of a static axis
                continue
            if int(step) < 0 and isinstance(s, int) and isinstance(e, int):
                if isinstance(d, int):
                    out[axis] = len(range(d)[s:e:int(step)])
                elif int(step) == -1 and s == -1 and e <= -(1 << 62):  # the whole axis reversed (x[..., ::-1])
                    out[axis] = d
                else:
                    return None
                continue
            if int(step) != 1 or not isinstance(s, int) or s < 0:
                return None
            if isinstance(e, int) and isinstance(d, int):
                out[axis] = max(0, min(e if e >= 0 else e + d, d) - min(s, d))
            elif s == 0 and e == d:
                out[axis] = d
            elif isinstance(e, int) and e >= 1 << 62:
                out[axis] = d if s == 0 else self.fresh()
            else:
                out[axis] = self.fresh()
        return tuple(out)

    def _sized_slice(self, node: ir.Node, a: Dims, axes: Dims, steps: Dims) -> Dims | None:
        """``Slice(x, starts, starts + sizes)`` with the starts clamped to ``[0, dims - sizes]`` (the lowering
        of StableHLO's dynamic_slice, dynamic_gather and real_dynamic_slice: ``pos[:s]`` of a learned
        position table, ``lax.dynamic_slice``): ``sizes`` along the axes. A valid program has every size at
        most its dimension (JAX asserts it), so the clamped slice lies inside the operand."""
        begin, end = _int_source(node.inputs[1]), m.producer(_int_source(node.inputs[2]), "Add")
        if begin is None or end is None or any(st != 1 for st in steps) or begin not in end.inputs:
            return None
        sizes = self.value(m.other_input(end, begin))
        if sizes is None or len(sizes) != len(axes):
            return None
        dims = tuple(a[int(axis) % len(a)] for axis in axes)
        if not self._clamped(begin, dims, sizes) and not all(
                self._clamped(_element_of(begin, k, len(axes)), (d,), (n,), scalar=True)
                for k, (d, n) in enumerate(zip(dims, sizes))):
            return None
        out = list(a)
        for axis, size in zip(axes, sizes):
            out[int(axis) % len(a)] = size
        return tuple(out)

    def _clamped(self, start: ir.Value | None, dims: Dims, sizes: Dims, scalar: bool = False) -> bool:
        """``start`` (a vector, or a ``scalar``) lies in ``[0, dims - sizes]``: it is constant 0, or
        ``Min(c, dims - sizes)`` of a constant ``c >= 0``, or that ``Min`` of any ``c`` under
        ``Max(., 0)``."""
        arr = m.const(start)
        if arr is not None:
            return arr.size == (1 if scalar else len(dims)) and not np.any(arr)
        outer = m.producer(start, "Max")
        zero = _zero_in(outer) if outer is not None else None
        inner = m.producer(m.other_input(outer, zero) if zero is not None else start, "Min")
        if outer is not None and zero is None:
            return False
        if inner is None or len(inner.inputs) != 2:
            return False
        for c, hi in (inner.inputs, inner.inputs[::-1]):
            least = self.value(c) if outer is None else None
            if outer is None and (least is None or not all(isinstance(d, int) and d >= 0 for d in least)):
                continue
            if self._difference(hi, dims, sizes):
                return True
        return False

    def _difference(self, hi: ir.Value | None, dims: Dims, sizes: Dims) -> bool:
        """``hi`` holds ``dims - sizes``: a constant, or a (squeezed) ``Sub`` of those dimensions."""
        arr = m.const(hi)
        if arr is not None:
            ints = all(isinstance(d, int) for d in (*dims, *sizes))
            return ints and arr.size == len(dims) and [int(v) for v in arr.reshape(-1)] == [
                d - n for d, n in zip(dims, sizes)]
        while m.producer(hi, "Squeeze", "Reshape", "Unsqueeze", "Cast") is not None:
            hi = hi.producer().inputs[0]
        sub = m.producer(hi, "Sub")
        return sub is not None and len(sub.inputs) == 2 and self.value(sub.inputs[0]) == tuple(dims) \
            and self.value(sub.inputs[1]) == tuple(sizes)


def shape_values(value: ir.Value | None) -> Dims | None:
    """The entries of a 1-D integer shape tensor: numbers, or symbolic sizes' names where they are computed
    from ``Shape`` of a value with named dims (``?``-prefixed tokens for sizes only this analysis relates)."""
    return _Shapes().value(value)


def inferred_shape(value: ir.Value) -> Dims | None:
    """``value``'s dims as this analysis finds them through its graph's nodes (a rule's new values carry no
    shape until the clean-up infers them again); None where one is not a number or a symbolic size's name."""
    graph = value.graph if value.graph is not None else (value.producer().graph if value.producer() else None)
    if graph is None:
        return None
    shapes = _Shapes(graph)
    for node in graph:
        shapes.infer(node)
        if value.producer() is node:
            break
    dims = shapes.shape(value)
    return dims if dims is not None and _named(dims) else None


def _window_output(node: ir.Node, x: Dims) -> Dims | None:
    """The output shape of a Conv or a pool over ``x`` (explicit pads, floor rounding), where its spatial sizes
    and window are static; the channels are the Conv weight's (``_windowed`` puts them in) or the input's."""
    op, spatial = node.op_type, list(x[2:])
    if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
        return (x[0], x[1], *[1] * len(spatial))
    if op not in ("Conv", "MaxPool", "AveragePool", "LpPool") or not all(isinstance(d, int) for d in spatial) \
            or m.attr(node, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or m.attr(node, "ceil_mode", 0):
        return None
    kernel = m.attr(node, "kernel_shape")
    if kernel is None and op == "Conv" and len(node.inputs) > 1 and node.inputs[1] is not None \
            and node.inputs[1].shape is not None and node.inputs[1].shape.is_static():
        kernel = list(node.inputs[1].shape)[2:]
    n = len(spatial)
    strides, dilations = m.attr(node, "strides") or [1] * n, m.attr(node, "dilations") or [1] * n
    pads = m.attr(node, "pads") or [0] * (2 * n)
    if kernel is None or not len(kernel) == len(strides) == len(dilations) == n or len(pads) != 2 * n:
        return None
    out = []
    for k in range(n):
        extent = int(dilations[k]) * (int(kernel[k]) - 1) + 1
        size = spatial[k] + int(pads[k]) + int(pads[n + k]) - extent
        if size < 0:
            return None
        out.append(size // int(strides[k]) + 1)
    return (x[0], x[1], *out)


def _entry(op: str, x: Dim, y: Dim) -> Dim | None:
    """One entry of integer shape arithmetic: ints computed, a named size kept where the other operand is the
    identity (``b + 0``, ``b * 1``), ``b - b`` zero, ``min(b, b)`` b; None where the entry is unknown."""
    if isinstance(x, int) and isinstance(y, int):
        return int(_INT_ARITHMETIC[op](x, y))
    if op == "Add":
        return y if x == 0 else x if y == 0 else None
    if op == "Sub":
        return 0 if x == y else x if y == 0 else None
    if op == "Mul":
        return y if x == 1 else x if y == 1 else 0 if 0 in (x, y) else _product([x, y], [])
    return x if x == y else None  # Max, Min


def factors(d: Dim) -> tuple[int, list[str]]:
    """A dim as (integer, named sizes): ``64*b`` is (64, ['b'])."""
    if isinstance(d, int):
        return d, []
    coef, names = 1, []
    for part in d.split("*"):
        if part.isdigit():
            coef *= int(part)
        else:
            names.append(part)
    return coef, names


def _product(over: list[Dim], under: list[Dim]) -> Dim | None:
    """prod(over) / prod(under) as a dim: an int, a name, or a canonical product of names (``64*b*s``), where
    the division is exact; None where it is not, or where a product would take in a size only this analysis
    names (its token is private to one graph's analysis)."""
    coef, names = 1, []
    for d in over:
        c, n = factors(d)
        coef, names = coef * c, names + n
    div = 1
    for d in under:
        c, n = factors(d)
        div *= c
        for name in n:
            if name not in names:
                return None
            names.remove(name)
    if div == 0 or coef % div:
        return None
    coef //= div
    if not names or coef == 0:
        return coef
    if coef == 1 and len(names) == 1:
        return names[0]
    if any(n.startswith("?") for n in names):
        return None
    return "*".join(([str(coef)] if coef != 1 else []) + sorted(names))


def _int_source(value: ir.Value | None) -> ir.Value | None:
    """``value`` before the Casts between integer types that made it."""
    while (cast := m.producer(value, "Cast")) is not None and cast.inputs[0] is not None \
            and cast.inputs[0].dtype in _INT_TYPES:
        value = cast.inputs[0]
    return value


def _zero_in(node: ir.Node) -> ir.Value | None:
    """The input of ``node`` that is a constant 0, if any."""
    for v in node.inputs:
        arr = m.const(v)
        if arr is not None and arr.size == 1 and int(arr.reshape(())) == 0:
            return v
    return None


def _element_of(vector: ir.Value, k: int, length: int) -> ir.Value | None:
    """Element ``k`` of a ``length``-element vector stacked by Concat from one-element pieces (a scalar
    Unsqueezed, or a constant), as the value it was stacked from."""
    concat = m.producer(vector, "Concat")
    if concat is None or len(concat.inputs) != length:
        return None
    piece = concat.inputs[k]
    if m.const(piece) is not None:
        return piece
    lift = m.producer(piece, "Unsqueeze", "Reshape")
    return lift.inputs[0] if lift is not None else None


def _axes_steps(ins, rank: int, shapes: "_Shapes") -> tuple[Dims | None, Dims | None]:
    """A Slice's axes and steps as int tuples (defaults filled in), None where not constant."""
    axes = shapes.value(ins[3]) if len(ins) > 3 and ins[3] is not None else tuple(range(rank))
    steps = shapes.value(ins[4]) if len(ins) > 4 and ins[4] is not None else (1,) * rank
    if axes is None or steps is None or not all(isinstance(d, int) for d in (*axes, *steps)):
        return None, None
    return axes, steps


def _quotient(total: list[Dim], known: list[Dim]) -> Dim | None:
    """The one dimension d with prod(total) == prod(known) * d, when the symbols allow saying which."""
    return _product(list(total), list(known))


def broadcast(*shapes: Dims | None) -> Dims | None:
    """Numpy broadcasting of symbolic shapes; None when a shape is unknown or two dims may differ."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for k in range(rank):
        dims = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _named(dims: Dims) -> bool:
    return all(isinstance(d, int) or not d.startswith("?") for d in dims)


def rewrite(graph: ir.Graph, keep_unit_muls: bool = False) -> int:
    """Drop and sink the Expands of ``graph`` that broadcasting makes redundant; returns how many.

    ``keep_unit_muls``: leave the Muls by ones (a pass after ``rms_norm``, whose Mul by ones after a
    norm without a weight is the form ORT fuses into SimplifiedLayerNormalization)."""
    shapes = _Shapes(graph)
    sources = _dim_sources(graph)
    count = 0
    for node in list(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Expand" and _noop_expand(graph, node, shapes):
            count += 1
            continue
        if node.op_type in _REGROUP and _sink_regroup(graph, node, shapes):
            count += 1
            continue
        if node.op_type == "Shape" and _shape_from_inputs(graph, node, shapes, sources):
            count += 1
            continue
        if node.op_type == "Slice" and _whole_axes_cut(graph, node, shapes) == "gone":
            count += 1
            continue
        if (node.op_type == "Reshape" and _noop_reshape(node, shapes)) or \
                (node.op_type == "Mul" and not keep_unit_muls and _unit_mul(node, shapes)):
            count += 1
            continue
        if node.op_type in _BROADCASTING or node.op_type in _POINTWISE_UNARY:
            if _sink(graph, node, shapes):
                count += 1
                continue
            if node.op_type in _BROADCASTING:
                count += _drop_inputs(node, shapes, keep_unit_muls)
        shapes.infer(node)
    for node in list(graph):
        if node.domain in ("", "ai.onnx") and node.op_type == "Reshape":
            count += _matmul_without_reshapes(graph, node, shapes)
        elif node.domain in ("", "ai.onnx") and node.op_type == "Expand" and _broadcast_later(node, shapes):
            count += 1
    slices: dict[int, list[ir.Node]] = {}
    for node in graph:
        if node.domain in ("", "ai.onnx") and node.op_type == "Slice" and node.inputs[0] is not None:
            slices.setdefault(id(node.inputs[0]), []).append(node)
    for group in slices.values():
        count += _split(graph, group, shapes)
    _stamp(graph, shapes)
    return count


def name_dims(graph: ir.Graph) -> int:
    """Give ``graph``'s values the symbolic dims this analysis finds, and drop Slice entries that read a
    named axis whole (their bounds computed from ``Shape``), changing nothing else; returns how many Slices
    changed. The rules that match a step's copies by their row Slices (``unrolled_steps``,
    ``unrolled_bodies``) run on this, before the clean-up of ``rewrite`` reshapes the copies unevenly."""
    shapes = _Shapes(graph)
    count = 0
    for node in list(graph):
        cut = _whole_axes_cut(graph, node, shapes) if node.domain in ("", "ai.onnx") and node.op_type == "Slice" \
            else None
        count += cut is not None
        if cut != "gone":
            shapes.infer(node)
    _stamp(graph, shapes)
    return count


def _stamp(graph: ir.Graph, shapes: _Shapes) -> None:
    """The named dims found written into the values' shapes (and Loop bodies' carries)."""
    for node in graph:
        out = node.outputs[0] if node.outputs else None
        dims = shapes.shapes.get(id(out)) if out is not None else None
        if dims is not None and _named(dims) and (out.shape is None or not _named(shapes._declared(out))):
            out.shape = ir.Shape(list(dims))
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx"):
            _stamp_carries(node, shapes)


def _stamp_carries(loop: ir.Node, shapes: _Shapes) -> None:
    """The Loop body's carried inputs given the shapes of their initial values where those have a symbolic
    dim the body does not know (a carry keeps its shape from trip to trip in a lowered while loop), so that
    this rule, run on the body next, follows a symbolic batch inside it too."""
    body = loop.attributes["body"].value
    for outer, inner in zip(loop.inputs[2:], body.inputs[2:]):
        dims = shapes.shape(outer)
        if outer is None or dims is None or not _named(dims) or all(isinstance(d, int) for d in dims):
            continue  # static carries: the scan rules read their shapes from the Loop
        known = list(inner.shape) if inner.shape is not None else None
        if known is not None and (len(known) != len(dims) or all(isinstance(d, int) or d.value is not None
                                                                  for d in known)):
            continue
        if known is not None and any(isinstance(k, int) and k != d for k, d in zip(known, dims)):
            continue
        inner.shape = ir.Shape(list(dims))


def _broadcast_later(expand: ir.Node, shapes: _Shapes) -> bool:
    """``Expand(a, s)`` read through elementwise ops by ops whose other operands broadcast its result to
    the same shape anyway (keras-hub's padding mask of ones ``[b, t]``, its min with the causal triangle,
    then the Wheres over the scores ``[b, h, t, t]`` before and after the softmax): the Expand to that
    run-time shape goes, and the ops between run on ``a``'s shape. Elementwise ops commute with
    broadcasting, so every element of the last ops' outputs is the same. Every path from the Expand must
    end at such an op, and no op may be reached twice (its other input would shrink too)."""
    a, value = expand.inputs[0], expand.outputs[0]
    small, big = shapes.shape(a), shapes.shape(value)
    if a is None or small is None or big is None or len(small) != len(big):
        return False  # an Expand that adds axes: its readers' ranks would change
    if all(isinstance(d, int) for d in big) and (value.dtype is None or value.dtype.is_floating_point()):
        return False  # a float to a known shape: constant folding and the static rules read those
    moved: list[tuple[ir.Value, Dims]] = []
    if not _broadcast_by_readers(value, small, shapes, set(), moved, 0):
        return False
    expand.outputs[0].replace_all_uses_with(a)
    for v, dims in moved:  # the values between now have the smaller shapes
        shapes.shapes[id(v)] = dims
        v.shape = ir.Shape([d if isinstance(d, int) or not d.startswith("?") else None for d in dims])
    return True


def _broadcast_by_readers(value: ir.Value, small: Dims, shapes: _Shapes, seen: set[int],
                          moved: list[tuple[ir.Value, Dims]], depth: int) -> bool:
    """Whether every reader of ``value``, were it of shape ``small``, gives its output's shape anyway or
    passes the smaller shape on to readers that do (``moved`` collects the values that shrink)."""
    uses = m.live_uses(value)
    if value.is_graph_output() or not uses or depth >= _CHAIN_LIMIT:
        return False
    for node in dict.fromkeys(use.node for use in uses):  # a node reading ``value`` twice is one reader
        if id(node) in seen or node.domain not in ("", "ai.onnx"):
            return False
        seen.add(id(node))
        news = _moved_split(node, value, small, shapes) if node.op_type == "Split" else \
            [_moved_as(node, value, small, shapes)] if len(node.outputs) == 1 else None
        if news is None or len(news) != len(node.outputs):
            return False
        for output, new in zip(node.outputs, news):
            out = shapes.shape(output)
            if out is None or new is None or len(new) != len(out):
                return False
            if new == out:
                continue
            moved.append((output, new))
            if not _broadcast_by_readers(output, new, shapes, seen, moved, depth + 1):
                return False
    return True


_CHAIN_LIMIT = 16  # elementwise ops followed from an Expand to the ops that broadcast its result anyway


def _moved_split(node: ir.Node, value: ir.Value, small: Dims, shapes: _Shapes) -> list[Dims | None] | None:
    """The shapes of a Split's outputs when its input ``value`` has the shape ``small``, split along an
    axis ``small`` has whole (a rotary table looked up by broadcast positions, cut into cos and sin)."""
    if node.inputs[0] is not value or not _whole_along(value, small, [m.attr(node, "axis", 0)], shapes):
        return None
    with shapes.assuming(value, small):
        parts = shapes._split_parts(node)
    return None if parts is None else list(parts)


def _moved_as(node: ir.Node, value: ir.Value, small: Dims, shapes: _Shapes) -> Dims | None:
    """The shape of ``node``'s output when its input ``value`` has the shape ``small``: an elementwise op,
    an Unsqueeze of constant axes, a Transpose, a Gather of ``value`` as indices (position ids broadcast
    over the batch, looked up in the position table), a Concat of ``value`` with itself or a reduction
    along axes that ``small`` has whole (a rotary's halves repeated; keras-hub Gemma 2's check for rows
    its mask leaves empty, a ReduceMin over the keys). Each commutes with broadcasting; else None."""
    if node.op_type in _REDUCE and node.inputs[0] is value:
        if not _whole_along(value, small, m.reduce_axes(node), shapes):
            return None
    elif node.op_type == "Gather":  # a lookup of broadcast indices is the broadcast of the lookup
        if len(node.inputs) != 2 or node.inputs[1] is not value or node.inputs[0] is value:
            return None
    elif node.op_type == "Concat":  # of ``value`` with itself along an axis it has whole
        if any(i is not value for i in node.inputs) or \
                not _whole_along(value, small, [m.attr(node, "axis", 0)], shapes):
            return None
    elif node.op_type not in _BROADCASTING and node.op_type not in _POINTWISE_UNARY and (
            node.op_type not in ("Transpose", "Unsqueeze") or node.inputs[0] is not value):
        return None
    with shapes.assuming(value, small):
        try:
            return shapes._infer(node)
        except (ValueError, IndexError, TypeError):
            return None


def _whole_along(value: ir.Value, small: Dims, axes, shapes: _Shapes) -> bool:
    """Whether ``small``, the shape ``value`` would have, has each of ``axes`` (at least one) as ``value``
    has it: an op along those axes then commutes with the broadcast from ``small``."""
    big = shapes.shape(value)
    if not axes or big is None or len(big) != len(small):
        return False
    return all(small[int(k) % len(big)] == big[int(k) % len(big)] for k in axes)


def _noop_expand(graph: ir.Graph, node: ir.Node, shapes: _Shapes) -> bool:
    src, out = node.inputs[0], node.outputs[0]
    a = shapes.shape(src)
    if src is None or a is None or out.is_graph_output() or broadcast(a, shapes.value(node.inputs[1])) != a:
        return False
    out.replace_all_uses_with(src)
    return True


def _noop_reshape(node: ir.Node, shapes: _Shapes) -> bool:
    """A Reshape to its input's shape is its input; a Reshape back to the shape of a value that Reshapes,
    Unsqueezes or Squeezes (``_REGROUP``: the elements in their order) before it made its input from is
    that value (a head mask's Mul between them gone: ``[h, b, s, s]`` to ``[h, 1, b*s*s]`` and back, its
    target from ``Shape`` slices; ``jnp.repeat(k, 1, axis=2)``'s Unsqueeze and Reshape back on two symbolic
    sizes)."""
    out, x = node.outputs[0], node.inputs[0]
    after = shapes.shape(out) if id(out) in shapes.shapes else shapes._reshape(node)
    if out.is_graph_output() or x is None or after is None:
        return False
    source: ir.Value | None = x
    for _ in range(4):
        if source is None:
            return False
        if source.dtype == out.dtype and shapes.shape(source) == tuple(after):
            out.replace_all_uses_with(source)
            return True
        before = source.producer()
        if before is None or before.domain not in ("", "ai.onnx") or before.op_type not in _REGROUP:
            return False
        source = before.inputs[0]
    return False


def _dim_sources(graph: ir.Graph) -> dict[str, tuple[ir.Value, int]]:
    """Each symbolic dim name of the graph's inputs: (an input, its axis) that has it."""
    found: dict[str, tuple[ir.Value, int]] = {}
    for v in graph.inputs:
        for k, d in enumerate(v.shape or ()):
            if not isinstance(d, int) and d.value is not None and not d.value.startswith("unk__"):
                found.setdefault(d.value, (v, k))
    return found


def _shape_from_inputs(graph: ir.Graph, node: ir.Node, shapes: _Shapes, sources: dict) -> bool:
    """``Shape(v)`` of a computed ``v`` whose dims are known (ints, or symbolic dims a graph input has) read
    from that input or given as constants, so that a tensor read only for its size (a stacked scan output's
    batch) need not be computed or kept."""
    v = node.inputs[0]
    dims = shapes.shape(v)
    if v is None or dims is None or v.is_graph_input() or v.producer() is None or node.graph is not graph:
        return False
    start, end = m.attr(node, "start", 0), m.attr(node, "end", None)
    picked = list(dims)[start:end]
    if not picked or not all(isinstance(d, int) or d in sources for d in picked):
        return False
    pieces = []
    for d in picked:
        if isinstance(d, int):
            pieces.append(_int64s(graph, [d], "shape_dims"))
        else:
            src, axis = sources[d]
            piece = ir.node("Shape", [src], {"start": axis, "end": axis + 1})
            graph.insert_before(node, piece)
            pieces.append(piece.outputs[0])
    if len(pieces) == 1:
        new = pieces[0]
    else:
        cat = ir.node("Concat", pieces, {"axis": 0})
        graph.insert_before(node, cat)
        new = cat.outputs[0]
    out = node.outputs[0]
    if out.is_graph_output():
        return False
    new.type, new.shape = out.type, out.shape
    out.replace_all_uses_with(new)
    return True


def _whole_axes_cut(graph: ir.Graph, node: ir.Node, shapes: _Shapes) -> str | None:
    """A Slice's entries that keep a whole axis (``[0, b)`` of a symbolic ``b``: jax's slices and strided
    slices of a symbolic shape name every axis) dropped, the rest as constants: "gone" where none is left
    (readers take the input), "cut" where the Slice now cuts only the other axes, else None."""
    ins, out = node.inputs, node.outputs[0]
    xs = shapes.shape(ins[0])
    if xs is None or len(ins) < 3:
        return None
    starts, ends = shapes.value(ins[1]), shapes.value(ins[2])
    axes, steps = _axes_steps(ins, len(xs), shapes)
    if starts is None or ends is None or axes is None or steps is None or len(starts) != len(ends):
        return None
    rest = []
    for s, e, axis, step in zip(starts, ends, axes, steps):
        d = xs[int(axis) % len(xs)]
        if s == 0 and step == 1 and (e == d or isinstance(e, int) and isinstance(d, int) and e >= d):
            continue
        if not (isinstance(s, int) and isinstance(e, int)):
            return None
        rest.append((s, e, int(axis), step))
    if len(rest) == len(starts):
        return None
    if not rest:
        if out.is_graph_output():
            return None
        out.replace_all_uses_with(ins[0])
        return "gone"
    parts = [_int64s(graph, [r[k] for r in rest], base) for k, base in enumerate(("starts", "ends", "axes", "steps"))]
    for k, value in enumerate(parts):
        if k + 1 < len(ins):
            node.replace_input_with(k + 1, value)
        else:
            node.resize_inputs(k + 2)
            node.replace_input_with(k + 1, value)
    return "cut"


def _unit_mul(node: ir.Node, shapes: _Shapes) -> bool:
    """A float ``Mul(x, ones)`` whose ones broadcast nothing is ``x`` (``x * 1`` is ``x`` for every float,
    NaN and -0 included): Hugging Face's head mask of ones, ``[h, 1, 1]`` against ``[h, 1, b*s*s]``."""
    out = node.outputs[0]
    if out.is_graph_output() or len(node.inputs) != 2 or out.dtype is None \
            or not out.dtype.is_floating_point():
        return False
    for x, ones in (node.inputs, node.inputs[::-1]):
        if x is None or x.dtype != out.dtype or shapes.shape(x) is None:
            continue
        if broadcast(shapes.shape(x), shapes.shape(ones)) != shapes.shape(x):
            continue
        arr = constants.evaluate(ones)
        if arr is not None and arr.size and bool(np.all(arr == 1)):
            out.replace_all_uses_with(x)
            return True
    return False


def _drop_inputs(node: ir.Node, shapes: _Shapes, keep_unit_muls: bool = False) -> int:
    """Read an Expand's input (or a Mul by ones' other input) directly where the op's output shape stays the same."""
    want = broadcast(*[shapes.shape(i) for i in node.inputs])
    if want is None:
        return 0
    count = 0
    for k, value in enumerate(node.inputs):
        source = _broadcast_source(value, keep_unit_muls)
        if source is None:
            continue
        trial = [shapes.shape(source if j == k else i) for j, i in enumerate(node.inputs)]
        if broadcast(*trial) == want:
            node.replace_input_with(k, source)
            count += 1
    return count


def _broadcast_source(value: ir.Value | None, keep_unit_muls: bool = False) -> ir.Value | None:
    """What ``value`` broadcasts: an Expand's input, or ``x`` of a float ``Mul(x, ones)`` that only this
    reader reads (``x * 1`` is ``x`` for every float, NaN and -0 included: a layer norm's scale of ones, as
    initialized; a Mul read elsewhere too stays whole, in the form the norm rules match)."""
    node = m.producer(value)
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Expand":
        return node.inputs[0]
    if node.op_type != "Mul" or keep_unit_muls or len(node.inputs) != 2 or value.dtype is None or \
            not value.dtype.is_floating_point() or not _single_use(value):
        return None
    for x, ones in (node.inputs, node.inputs[::-1]):
        arr = constants.evaluate(ones)
        if x is not None and x.dtype == value.dtype and arr is not None and arr.size \
                and bool(np.all(arr == 1)):
            return x
    return None


def _sink(graph: ir.Graph, node: ir.Node, shapes: _Shapes) -> bool:
    """``op(Expand(a, s), c)`` -> ``Expand(op(a, c), s)`` when ``c`` adds no dimension to ``a``.

    Several operands may be Expands to the same shape ``s``; the op then runs on their inputs.
    """
    if len(node.outputs) != 1 or node.outputs[0].dtype in _NO_ORT_EXPAND:
        return False
    expands = {k: e for k, e in enumerate(m.producer(v, "Expand") for v in node.inputs)
               if e is not None and e.inputs[0] is not None}
    if not expands:
        return False
    target = next(iter(expands.values())).inputs[1]
    want = shapes.value(target)
    if want is None or any(shapes.value(e.inputs[1]) != want for e in expands.values()):
        return False
    sources = [shapes.shape(e.inputs[0]) for e in expands.values()]
    others = [shapes.shape(i) for k, i in enumerate(node.inputs) if k not in expands]
    small = broadcast(*sources)
    if small is None or broadcast(small, *others) != small:
        return False
    if broadcast(*[shapes.shape(i) for i in node.inputs]) is None:
        return False
    operands = [expands[k].inputs[0] if k in expands else i for k, i in enumerate(node.inputs)]
    inner = ir.node(node.op_type, operands, {n: v for n, v in node.attributes.items()})
    inner.outputs[0].dtype = node.outputs[0].dtype
    shapes.shapes[id(inner.outputs[0])] = small
    if broadcast(small, want) == small and not node.outputs[0].is_graph_output():
        # the op's own operands already have the full shape: no Expand after it (one left there would
        # stand between an Exp and its ReduceSum, and keep the softmax rule from seeing them: BLOOM)
        m.replace(graph, node.outputs[0], [inner], node)
        return True
    grow = ir.node("Expand", [inner.outputs[0], target])
    shapes.infer(grow)
    m.replace(graph, node.outputs[0], [inner, grow], node)
    return True


_REGROUP = frozenset({"Reshape", "Unsqueeze", "Squeeze"})


def _sink_regroup(graph: ir.Graph, node: ir.Node, shapes: _Shapes) -> bool:
    """``Reshape(Expand(a, s))`` that only inserts or drops length-1 axes -> ``Expand(Unsqueeze(a), s')``
    (``Squeeze``), ``s'`` gathered from ``s`` and a 1; the same elements in the same order."""
    expand = m.producer(node.inputs[0], "Expand")
    out = node.outputs[0]
    if expand is None or expand.inputs[0] is None or len(node.outputs) != 1 or out.dtype in _NO_ORT_EXPAND:
        return False
    shapes.infer(node)
    big, small, after = shapes.shape(node.inputs[0]), shapes.shape(expand.inputs[0]), shapes.shape(out)
    if node.op_type == "Reshape" and (after is None or not _named(after)):
        after = shapes.value(node.inputs[1])  # the target itself, where it holds no 0 (copy) or -1
        if after is None or any(isinstance(d, int) and d <= 0 for d in after):
            return False
    target = expand.inputs[1]
    want = shapes.value(target)
    if big is None or small is None or after is None or want is None or len(small) != len(big):
        return False
    if not _named(after) or all(isinstance(d, int) for d in want):
        return False  # static: constant folding and the broadcasts rule see the Expand where it is
    readers = [use.node for use in out.uses()]
    if out.is_graph_output() or not readers or any(
            r.op_type not in _BROADCASTING | _POINTWISE_UNARY | _REGROUP for r in readers):
        return False  # only where the Expand moves on past the readers (a MatMul keeps it: jnp.repeat)
    if broadcast(small, want) != tuple(big) or tuple(want) != tuple(big) or not _named(big):
        return False
    plan = _unit_axes(tuple(big), tuple(after))
    if plan is None:
        return False
    inserted, dropped = plan
    if any(small[k] != 1 for k in dropped):
        return False
    nodes: list[ir.Node] = []
    value = expand.inputs[0]
    if dropped:
        nodes.append(ir.node("Squeeze", [value, _int64s(graph, dropped, "regroup_axes")]))
        value = nodes[-1].outputs[0]
    if inserted:
        nodes.append(ir.node("Unsqueeze", [value, _int64s(graph, inserted, "regroup_axes")]))
        value = nodes[-1].outputs[0]
    kept = [k for k in range(len(big)) if k not in dropped]
    index, src = [], iter(kept)
    for j in range(len(after)):
        index.append(len(big) if j in inserted else next(src))
    one = ir.node("Concat", [target, _int64s(graph, [1], "regroup_one")], {"axis": 0})
    gather = ir.node("Gather", [one.outputs[0], _int64s(graph, index, "regroup_dims")], {"axis": 0})
    grow = ir.node("Expand", [value, gather.outputs[0]])
    nodes += [one, gather, grow]
    for n in nodes:
        n.outputs[0].dtype = target.dtype if n in (one, gather) else out.dtype
        shapes.infer(n)
    m.replace(graph, out, nodes, node)
    return True


def _unit_axes(before: Dims, after: Dims) -> tuple[list[int], list[int]] | None:
    """(axes of ``after`` inserted, axes of ``before`` dropped) when they differ only in axes of length 1."""
    core_b = [k for k, d in enumerate(before) if d != 1]
    core_a = [j for j, d in enumerate(after) if d != 1]
    if [before[k] for k in core_b] != [after[j] for j in core_a]:
        return None
    # Keep the length-1 axes that stay put relative to the others: match them greedily in order.
    dropped, inserted = [], []
    i = j = 0
    while i < len(before) or j < len(after):
        if i < len(before) and j < len(after) and before[i] == after[j]:
            i, j = i + 1, j + 1
        elif i < len(before) and before[i] == 1:
            dropped.append(i)
            i += 1
        elif j < len(after) and after[j] == 1:
            inserted.append(j)
            j += 1
        else:
            return None
    return (inserted, dropped) if inserted or dropped else None


def _single_use(v: ir.Value) -> bool:
    return len(v.uses()) == 1 and not v.is_graph_output()


def _matmul_without_reshapes(graph: ir.Graph, after: ir.Node, shapes: _Shapes) -> bool:
    """``Reshape(MatMul(Reshape(x, [P, K]), W), A + T)`` -> ``MatMul(x', W)`` (and ``Reshape(.., A + T)``).

    ``x'`` is ``x`` when its leading dimensions are ``A``, else ``x`` reshaped to ``A + [K]``
    (dims copied with 0 where ``x`` has them in place). W must be 2-D with N columns; T is ``[N]``,
    or two int dims whose product is N (heads split off a dense layer's output), which a last
    Reshape makes. The first Reshape may feed other nodes (q, k and v projections of one input).
    """
    mm = m.producer(after.inputs[0], "MatMul")
    if mm is None or not _single_use(after.inputs[0]) or len(mm.inputs) != 2:
        return False
    before = m.producer(mm.inputs[0], "Reshape")
    w = shapes.shape(mm.inputs[1])
    if before is None or w is None or len(w) != 2 or mm.inputs[0].is_graph_output():
        return False
    x, flat, out = before.inputs[0], shapes.shape(mm.inputs[0]), shapes.shape(after.outputs[0])
    xs = shapes.shape(x)
    if xs is None or flat is None or out is None or len(flat) != 2 or len(out) < 2:
        return False
    if out[-1] == w[1]:
        tail: tuple = ()
    elif (len(out) >= 3 and all(isinstance(d, int) for d in (*out[-2:], w[1]))
          and out[-2] * out[-1] == w[1]):
        tail = tuple(out[-2:])
    else:
        return False
    # both Reshapes are valid, so prod(lead) * K == P * K == prod(x's dims)
    lead = out[:-1] if not tail else out[:-2]
    new: list[ir.Node] = []
    if xs[:-1] == lead and xs[-1] == w[0]:
        source = x
    else:
        dims = _copied(lead, xs)
        if dims is None or not isinstance(w[0], int):
            return False
        reshape = ir.node("Reshape", [x, _int64s(graph, dims + [w[0]], "matmul_shape")])
        shapes.shapes[id(reshape.outputs[0])] = tuple(lead) + (w[0],)
        source = reshape.outputs[0]
        new.append(reshape)
    matmul = ir.node("MatMul", [source, mm.inputs[1]])
    matmul.outputs[0].dtype = after.outputs[0].dtype
    shapes.shapes[id(matmul.outputs[0])] = tuple(lead) + (w[1],)
    new.append(matmul)
    if tail:
        heads = _int64s(graph, [0] * len(lead) + list(tail), "heads_shape")
        split = ir.node("Reshape", [matmul.outputs[0], heads])
        split.outputs[0].dtype = after.outputs[0].dtype
        shapes.shapes[id(split.outputs[0])] = out
        new.append(split)
    m.replace(graph, after.outputs[0], new, after)
    return True


def _copied(lead: Dims, xs: Dims) -> list[int] | None:
    """A Reshape target for ``lead``: 0 (copy) where ``xs`` has the same dim in place, else ints."""
    dims = []
    for k, d in enumerate(lead):
        if k < len(xs) and xs[k] == d:
            dims.append(0)
        elif isinstance(d, int) and d != 0:
            dims.append(d)
        else:
            return None
    return dims


def _int64s(graph: ir.Graph, values: list[int], base: str) -> ir.Value:
    """A new 1-D int64 initializer of ``graph``."""
    value = ir.Value(name=None, const_value=ir.tensor(np.array(values, np.int64)))
    value.type, value.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([len(values)])
    graph.register_initializer(_named_initializer(graph, value, base))
    return value


def _named_initializer(graph: ir.Graph, value: ir.Value, base: str) -> ir.Value:
    k = 0
    while f"{base}_{k}" in graph.initializers:
        k += 1
    value.name = f"{base}_{k}"
    return value


def _split(graph: ir.Graph, group: list[ir.Node], shapes: _Shapes) -> int:
    """Slices of one tensor that cut it into consecutive pieces along one axis -> one Split."""
    if len(group) < 2:
        return 0
    xs = shapes.shape(group[0].inputs[0])
    if xs is None or not _varies(group[0].inputs[0]):
        return 0  # Slices of a constant fold away; a Split (several outputs) would not
    pieces = []
    axis_of = set()
    for node in group:
        cut = _one_axis_cut(node, xs, shapes)
        if cut is None:
            return 0
        axis, start, end = cut
        axis_of.add(axis)
        pieces.append((start, end, node))
    if len(axis_of) != 1:
        return 0
    axis = axis_of.pop()
    pieces.sort(key=lambda p: p[0])
    gaps = any(p[1] != q[0] for p, q in zip(pieces, pieces[1:]))
    if pieces[0][0] != 0 or pieces[-1][1] != xs[axis] or gaps:
        return 0
    sizes = _int64s(graph, [e - s for s, e, _ in pieces], "split_sizes")
    order = {id(n): k for k, n in enumerate(graph)}
    first = min(group, key=lambda n: order[id(n)])
    split = ir.node("Split", [group[0].inputs[0], sizes], {"axis": axis}, num_outputs=len(pieces))
    graph.insert_before(first, split)
    for (_, _, node), out in zip(pieces, split.outputs):
        old = node.outputs[0]
        out.type, out.shape = old.type, old.shape
        old.replace_all_uses_with(out, replace_graph_outputs=True)
        name, old.name = old.name, None
        out.name = name
    return len(pieces) - 1


def _varies(value: ir.Value, limit: int = 256) -> bool:
    """True when ``value`` depends on a graph input (or more than ``limit`` nodes would have to be
    looked at to tell); False when it is computed from constants only."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen or m.const(v) is not None:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None or len(seen) > limit:
            return True
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return True
        stack.extend(node.inputs)
    return False


def _one_axis_cut(node: ir.Node, xs: Dims, shapes: _Shapes) -> tuple[int, int, int] | None:
    """(axis, start, end) when the Slice keeps every axis whole but one, cut at int positions."""
    ins = node.inputs
    if len(ins) < 3:
        return None
    starts, ends = shapes.value(ins[1]), shapes.value(ins[2])
    axes, steps = _axes_steps(ins, len(xs), shapes)
    if starts is None or ends is None or axes is None or steps is None or any(st != 1 for st in steps):
        return None
    cut = None
    for s, e, axis in zip(starts, ends, axes):
        axis = int(axis) % len(xs)
        d = xs[axis]
        if s == 0 and (e == d or isinstance(e, int) and isinstance(d, int) and e >= d):
            continue
        if cut is not None or not (isinstance(s, int) and isinstance(e, int) and isinstance(d, int)):
            return None
        if not 0 <= s < e <= d:
            return None
        cut = (axis, s, e)
    return cut


def constant_targets(graph: ir.Graph) -> int:
    """Give Reshapes and Expands whose target is computed at run time from ``Shape`` a constant target where
    the analysis relates every entry to the input's dims; returns how many (in subgraphs too).

    A model exported for any batch or length computes each head merge's target from ``Shape`` (``Shape``,
    ``Gather``, ``Unsqueeze``, ``Cast``, ``Concat``: about five kernels a Reshape, every call). A Reshape's
    entry that repeats the input's dim at the same place becomes 0 (``allowzero`` 0 copies it: the
    lowering's 1 goes, no entry being a size 0); one entry no other gives becomes -1 where every other
    entry is a positive number (a 0-sized input then infers 0, as the computed target gives). An Expand's
    entry that repeats the input's aligned dim becomes 1. A target holding 0 (a size-0 axis) stays
    computed. Run after every rule that reads the shape arithmetic (``einsum_order``'s
    ``_dim_products``, the masks' bounds)."""
    count = 0
    for g in list(m.all_graphs(graph)):
        shapes = _Shapes(g)
        for node in list(g):
            if node.domain in ("", "ai.onnx") and node.op_type in ("Reshape", "Expand") and len(node.inputs) == 2 \
                    and m.const(node.inputs[1]) is None:
                target = shapes.value(node.inputs[1])
                x = shapes.shape(node.inputs[0])
                entries = None
                if target is not None and x is not None:
                    entries = (_expand_entries if node.op_type == "Expand" else reshape_entries)(x, target)
                if entries is not None:
                    node.replace_input_with(1, _int64s(g, entries, "target"))
                    if node.op_type == "Reshape":  # 0 copies the input's dim (no entry is a size 0)
                        node.attributes.pop("allowzero", None)
                    count += 1
            shapes.infer(node)
    return count


def _expand_entries(x: Dims, target: Dims) -> list[int] | None:
    """A constant Expand target giving ``target`` from an input of dims ``x``, or None."""
    if len(target) < len(x):
        return None
    lead = len(target) - len(x)
    entries = []
    for k, d in enumerate(target):
        if isinstance(d, int):
            if d <= 0:
                return None
            entries.append(d)
        elif k >= lead and x[k - lead] == d:
            entries.append(1)
        else:
            return None
    return entries
