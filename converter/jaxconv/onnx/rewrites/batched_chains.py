"""Identical elementwise chains over small tensors (an optimizer's update of each parameter) run once, over
their concatenation.

An Optax update applies the same arithmetic to every parameter: Adam's 14 kernels (moments, bias
corrections, the step) on each bias, scale and weight. ONNX Runtime runs each op of each parameter as its
own kernel, which costs about 0.4 us on a tensor of 64 elements, nearly none of it arithmetic, where XLA
compiles each parameter's update into one loop. Where k parameters go through the same chain (the same ops
in the same order on the same scalars: a learning rate, a bias correction, a clipping factor), their
operands are flattened and concatenated, the chain runs once, and a Split gives each its part back:
``n + inputs + outputs`` kernels instead of ``k * n``.

Each op here computes an output element from the same element of each input with IEEE arithmetic
(``+ - * /``, square roots, comparisons, selections, casts), which does not depend on where the element
lies, so every element keeps its bits (tests/test_rewrites_batched_chains.py runs each op on a tensor and
on the same tensor shifted by a few places, edge values included). Transcendental ops stay out: their
vectorised and scalar code paths may round apart (ORT 1.32's float16 and float64 Log did, by one place).

Measured (one thread, 8 Adam updates of one size, ORT alone): 0.75x the time at 64 elements each, 0.81 at
1,024, 0.92 at 4,096, 1.08 at 16,384 (the copies cost more than the calls they save), so only tensors of at
most ``MAX_ELEMENTS`` take part, and a group must save more calls than it adds (``MIN_SAVED_CALLS``).
Chains that depend on one another (a layer's activation feeding the next layer's) stay apart, and so does a
chain that reads a product's single-use result (ORT fuses a bias or a scale into the product).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

MAX_ELEMENTS = 8192  # per tensor: at 16K elements the copies cost more than the kernel calls saved
MIN_SAVED_CALLS = 4  # kernel calls a group must save beyond the Concats, Splits and Reshapes it adds
_EXACT = frozenset({
    "Add", "Sub", "Mul", "Div", "Sqrt", "Neg", "Abs", "Reciprocal", "Max", "Min", "Where", "Clip", "Relu",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
    "Sign", "Floor", "Ceil", "Round", "Cast", "Identity",
})  # elementwise, and exact in IEEE arithmetic wherever an element lies
_PRODUCTS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul"})  # ORT fuses what follows
# the types a chain reads and exports (its Concats and Splits): TFLite has no SPLIT_V of booleans, so a
# chain of masks (an unrolled factorization's NaN tests) stays as it is; inside a chain any type
_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE})


@dataclass
class _Chain:
    """Connected elementwise nodes over one shape: their nodes in graph order, the tensors they read from
    outside (in order of first use), and the outputs read outside (graph outputs included)."""

    shape: tuple[int, ...]
    nodes: list[ir.Node] = field(default_factory=list)
    reads: list[ir.Value] = field(default_factory=list)
    exports: list[ir.Value] = field(default_factory=list)
    key: tuple = ()


def rewrite(graph: ir.Graph) -> int:
    """Run each group of identical small elementwise chains of ``graph`` (the main graph) once; returns how
    many chains were merged away."""
    merged = 0
    settled: set[tuple] = set()  # the keys of the groups that merge nothing
    while True:  # the chains found again after each merge: a merged group's exports are new values
        for group in _groups(graph):
            if group[0].key in settled:
                continue
            members = _independent(group, _reaching(graph, group)) if _saves(group) else []
            if len(members) >= 2 and _saves(members):
                _merge(graph, members)
                graph.sort()
                merged += len(members) - 1
                break
            settled.add(group[0].key)
        else:
            return merged


def _groups(graph: ir.Graph) -> list[list[_Chain]]:
    """The chains of ``graph`` that have a twin, grouped by what must match."""
    groups: dict[tuple, list[_Chain]] = {}
    for chain in _chains(graph):
        groups.setdefault(chain.key, []).append(chain)
    return [group for group in groups.values() if len(group) >= 2]


def _shape(value: ir.Value | None) -> tuple[int, ...] | None:
    dims = m.static_dims(value)
    return None if dims is None else tuple(dims)


def _is_scalar(value: ir.Value) -> bool:
    """A one-element value of rank 0 or 1: it broadcasts over a flattened tensor as over the original."""
    shape = _shape(value)
    return shape is not None and len(shape) <= 1 and int(np.prod(shape)) == 1


def _body_shape(node: ir.Node) -> tuple[int, ...] | None:
    """The shape every non-scalar input and every output of ``node`` has, where ``node`` can take part."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in _EXACT or not node.outputs:
        return None
    shape = _shape(node.outputs[0])
    if shape is None or not 2 <= int(np.prod(shape)) <= MAX_ELEMENTS:
        return None
    if any(_shape(o) != shape for o in node.outputs):
        return None
    for value in node.inputs:
        if value is None or not (_is_scalar(value) or _shape(value) == shape):
            return None
    return shape


def _chains(graph: ir.Graph) -> list[_Chain]:
    """The connected components of the nodes that can take part, joined through their non-scalar values."""
    shapes = {node: s for node in graph if (s := _body_shape(node)) is not None}
    parent: dict[ir.Node, ir.Node] = {node: node for node in shapes}

    def root(node: ir.Node) -> ir.Node:
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for node in shapes:
        for value in node.inputs:
            source = value.producer() if value is not None else None
            if source in shapes and not _is_scalar(value):
                parent[root(node)] = root(source)
    chains: dict[ir.Node, _Chain] = {}
    for node in graph:  # graph order
        if node in shapes:
            chains.setdefault(root(node), _Chain(shapes[node])).nodes.append(node)
    return [chain for chain in chains.values() if _describe(chain)]


def _describe(chain: _Chain) -> bool:
    """Fill ``chain``'s reads, exports and key (what must match for two chains to run as one); False where
    the chain cannot take part."""
    members = {id(node) for node in chain.nodes}
    where: dict[int, tuple[int, int]] = {}
    reads: dict[int, int] = {}
    code = []
    for k, node in enumerate(chain.nodes):
        inputs = []
        for value in node.inputs:
            if id(value) in where:
                inputs.append(("node", *where[id(value)]))
            elif _is_scalar(value):
                inputs.append(("scalar", _scalar_key(value)))
            else:
                if id(value) not in reads:
                    if _fused_product(value) or value.dtype not in _FLOATS:
                        return False
                    reads[id(value)] = len(chain.reads)
                    chain.reads.append(value)
                inputs.append(("read", reads[id(value)], value.dtype))
        for j, out in enumerate(node.outputs):
            where[id(out)] = (k, j)
        attrs = tuple(sorted((a.name, repr(a.value)) for a in node.attributes.values()))
        if any(use.node.graph is not node.graph for o in node.outputs for use in o.uses()):
            return False  # read in a subgraph: the order check below does not see through it
        exported = tuple(o.is_graph_output() or any(id(use.node) not in members for use in o.uses())
                         for o in node.outputs)
        if any(e and o.dtype not in _FLOATS for o, e in zip(node.outputs, exported)):
            return False
        chain.exports.extend(o for o, e in zip(node.outputs, exported) if e)
        code.append((node.op_type, attrs, tuple(inputs), tuple(o.dtype for o in node.outputs), exported))
    chain.key = tuple(code)
    return bool(chain.exports)


def _scalar_key(value: ir.Value) -> tuple:
    """Scalars must be the same in each chain: the same constant, or the same computed value."""
    arr = m.const(value)
    if arr is not None:
        return ("const", arr.dtype.str, arr.tobytes(), arr.shape)
    return ("value", id(value))


def _fused_product(value: ir.Value) -> bool:
    """True where ``value`` is a product's only result ORT may fuse the chain's first op into."""
    source = value.producer()
    return source is not None and source.op_type in _PRODUCTS and len(list(value.uses())) == 1


def _independent(group: list[_Chain], reaching: dict[int, int]) -> list[_Chain]:
    """The chains of ``group``, in graph order, that can run at one point: none reads what its own or
    another's exports lead to (``reaching``: a value's id -> the bits of the chains whose exports lead to it)."""
    chosen: list[_Chain] = []
    chosen_bits = after_chosen = 0
    for k, chain in enumerate(group):
        after = 0  # the chains this one's reads come after
        for read in chain.reads:
            after |= reaching.get(id(read), 0)
        if after >> k & 1 or after & chosen_bits or after_chosen >> k & 1:
            continue
        chosen.append(chain)
        chosen_bits |= 1 << k
        after_chosen |= after
    return chosen


def _reaching(graph: ir.Graph, group: list[_Chain]) -> dict[int, int]:
    """For every value of ``graph`` (in topological order), the bits ``1 << k`` of the chains ``group[k]``
    whose exports it is computed from; a node with subgraphs reads the outer values they capture too."""
    bits: dict[int, int] = {}
    for k, chain in enumerate(group):
        for value in chain.exports:
            bits[id(value)] = bits.get(id(value), 0) | 1 << k
    for node in graph:
        reads = list(node.inputs)
        for attr in node.attributes.values():
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
                subgraphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else list(attr.value)
                reads += [v for sub in subgraphs for inner in ir.traversal.RecursiveGraphIterator(sub)
                          for v in inner.inputs]
        mask = 0
        for value in reads:
            if value is not None:
                mask |= bits.get(id(value), 0)
        if mask:
            for out in node.outputs:
                bits[id(out)] = bits.get(id(out), 0) | mask
    return bits


def _saves(members: list[_Chain]) -> bool:
    first = members[0]
    reshapes = sum(len(c.shape) != 1 for c in members) * (len(first.reads) + len(first.exports))
    added = len(first.reads) + len(first.exports) + reshapes // 2  # a Reshape is about half a call
    return (len(members) - 1) * len(first.nodes) - added >= MIN_SAVED_CALLS


def _merge(graph: ir.Graph, members: list[_Chain]) -> None:
    first = members[0]
    sizes = [int(np.prod(c.shape)) for c in members]
    total = sum(sizes)
    new_nodes: list[ir.Node] = []
    mapping: dict[int, ir.Value] = {}
    for j, read in enumerate(first.reads):
        parts = [_reshaped(graph, c.reads[j], c.shape, (size,), new_nodes) for c, size in zip(members, sizes)]
        concat = ir.node("Concat", parts, {"axis": 0})
        concat.outputs[0].type, concat.outputs[0].shape = read.type, ir.Shape([total])
        new_nodes.append(concat)
        mapping[id(read)] = concat.outputs[0]
    body = m.clone(first.nodes, mapping)
    for node in body:
        for out in node.outputs:
            out.shape = ir.Shape([total])
    new_nodes.extend(body)
    split_sizes = m.new_initializer(graph, np.array(sizes, np.int64), "chain_sizes")
    for j, export in enumerate(first.exports):
        split = ir.node("Split", [mapping[id(export)], split_sizes], {"axis": 0}, num_outputs=len(members))
        new_nodes.append(split)
        for chain, piece, size in zip(members, split.outputs, sizes):
            old = chain.exports[j]
            piece.type, piece.shape = old.type, ir.Shape([size])
            m.take_over(old, _reshaped(graph, piece, (size,), chain.shape, new_nodes))
    graph.extend(new_nodes)
    for chain in members:
        for node in reversed(chain.nodes):
            graph.remove(node, safe=True)


def _reshaped(graph: ir.Graph, value: ir.Value, shape: tuple[int, ...], to: tuple[int, ...],
              out: list[ir.Node]) -> ir.Value:
    """``value`` (of ``shape``) as ``to``: itself where they are the same, else a Reshape appended to ``out``."""
    if shape == to:
        return value
    target = m.new_initializer(graph, np.array(to, np.int64), "chain_shape")
    node = ir.node("Reshape", [value, target])
    node.outputs[0].type, node.outputs[0].shape = value.type, ir.Shape(list(to))
    out.append(node)
    return node.outputs[0]
