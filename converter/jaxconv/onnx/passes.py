"""Graph clean-up after lowering: dead-code removal, constant folding, identity removal."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from jaxconv.onnx.context import SAME_SHAPE_KEY, make_tensor

FOLD_MAX_ELEMENTS = 1 << 16
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Loop", "If", "Scan"}


def subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the outer scope (and their own names)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for n in g.node:
                names.update(n.input)
                names.update(subgraph_inputs(n))
            names.update(o.name for o in g.output)
    return names


def _consumers(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    used: set[str] = set()
    for n in nodes:
        used.update(i for i in n.input if i)
        used.update(subgraph_inputs(n))
    return used


def remove_dead_nodes(graph: onnx.GraphProto) -> None:
    """Drop nodes whose outputs nobody reads, and unused initializers."""
    outputs = {o.name for o in graph.output}
    nodes = list(graph.node)
    while True:
        used = _consumers(nodes) | outputs
        keep = [n for n in nodes if any(o in used for o in n.output if o)]
        if len(keep) == len(nodes):
            break
        nodes = keep
    del graph.node[:]
    graph.node.extend(nodes)
    used = _consumers(nodes) | outputs
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def fold_constants(model: onnx.ModelProto) -> None:
    """Evaluate nodes whose inputs are all initializers (small results only)."""
    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    if not any(all(i in consts for i in n.input if i) for n in graph.node if n.op_type not in _NO_FOLD):
        return
    from onnx.reference import ReferenceEvaluator

    opset = model.opset_import
    new_nodes = []
    for node in graph.node:
        ins = [i for i in node.input if i]
        if node.op_type in _NO_FOLD or node.domain not in ("", "ai.onnx") or not all(i in consts for i in ins) or not ins:
            new_nodes.append(node)
            continue
        try:
            values = _evaluate(node, consts, opset)
        except Exception:
            new_nodes.append(node)
            continue
        in_size = sum(int(np.prod(consts[i].dims)) for i in ins)
        grows = any(v.size > 16 and v.size > 4 * in_size for v in values or [])  # Expand/Tile of a constant: keep it small
        if values is None or grows or any(v.size > FOLD_MAX_ELEMENTS for v in values):
            new_nodes.append(node)
            continue
        for name, value in zip(node.output, values):
            t = make_tensor(value, name)
            consts[name] = t
            graph.initializer.append(t)
    del graph.node[:]
    graph.node.extend(new_nodes)


def _evaluate(node: onnx.NodeProto, consts: dict[str, onnx.TensorProto], opset) -> list[np.ndarray] | None:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    if any(consts[i].data_type == onnx.TensorProto.BFLOAT16 for i in node.input if i):
        return None
    inputs = [i for i in node.input if i]
    g = helper.make_graph([node], "fold", [], [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o],
                          initializer=[consts[i] for i in set(inputs)])
    m = helper.make_model(g, opset_imports=list(opset))
    outs = ReferenceEvaluator(m).run(None, {})
    return [np.asarray(o) for o in outs]


def remove_output_identities(graph: onnx.GraphProto) -> None:
    """Rename a producer's output to the graph output name instead of keeping an Identity."""
    graph_inputs = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    outputs = [o.name for o in graph.output]
    producers = {o: n for n in graph.node for o in n.output}
    for node in list(graph.node):
        if node.op_type != "Identity" or node.output[0] not in outputs:
            continue
        src = node.input[0]
        if src in graph_inputs or src in outputs or src not in producers:
            continue
        others = [n for n in graph.node if n is not node and (src in n.input or src in subgraph_inputs(n))]
        if others:
            continue
        producer = producers[src]
        for k, o in enumerate(producer.output):
            if o == src:
                producer.output[k] = node.output[0]
        graph.node.remove(node)


def _rename_inputs(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renames:
                node.input[k] = renames[name]
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_inputs(g, renames)
                for o in g.output:
                    if o.name in renames:
                        # a subgraph output that is an outer value: route through Identity
                        g.node.append(onnx.helper.make_node("Identity", [renames[o.name]], [o.name]))


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def eliminate_common_subexpressions(graph: onnx.GraphProto) -> None:
    """Merge nodes with the same op, inputs and attributes (repeated shape arithmetic, casts)."""
    outputs = {o.name for o in graph.output}
    seen: dict[tuple, list[str]] = {}
    renames: dict[str, str] = {}
    keep = []
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renames:
                node.input[k] = renames[name]
        if _has_subgraph(node) or node.op_type in _NO_FOLD:
            keep.append(node)
            continue
        key = (node.domain, node.op_type, tuple(node.input), tuple(a.SerializeToString() for a in node.attribute))
        prev = seen.get(key)
        if prev is not None and len(prev) == len(node.output) and not any(o in outputs for o in node.output):
            renames.update({o: p for o, p in zip(node.output, prev) if o})
            continue
        seen.setdefault(key, list(node.output))
        keep.append(node)
    if renames:
        del graph.node[:]
        graph.node.extend(keep)
        _rename_inputs(graph, renames)


def remove_noop_casts(model: onnx.ModelProto) -> None:
    """Drop Cast nodes whose input already has the target type."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    outputs = {o.name for o in model.graph.output}
    renames: dict[str, str] = {}
    keep = []
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            if name in renames:
                node.input[k] = renames[name]
        if node.op_type == "Cast" and node.output[0] not in outputs:
            to = next(a.i for a in node.attribute if a.name == "to")
            if types.get(node.input[0]) == to:
                renames[node.output[0]] = node.input[0]
                continue
        keep.append(node)
    if renames:
        del model.graph.node[:]
        model.graph.node.extend(keep)
        _rename_inputs(model.graph, renames)


_LOSSLESS_WIDENING = {
    (onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT), (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT),
    (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE), (onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE),
    (onnx.TensorProto.INT8, onnx.TensorProto.INT32), (onnx.TensorProto.INT16, onnx.TensorProto.INT32),
    (onnx.TensorProto.UINT8, onnx.TensorProto.INT32), (onnx.TensorProto.UINT16, onnx.TensorProto.INT32),
    (onnx.TensorProto.INT32, onnx.TensorProto.INT64), (onnx.TensorProto.UINT32, onnx.TensorProto.INT64),
    (onnx.TensorProto.INT8, onnx.TensorProto.INT64), (onnx.TensorProto.UINT8, onnx.TensorProto.INT64),
}


def fold_cancelling_chains(model: onnx.ModelProto) -> None:
    """Transpose∘Transpose, Reshape∘Reshape (constant shape), and lossless Cast round trips."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    consts = {t.name: t for t in graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(graph.input)}
    except Exception:
        types = {}
    types.update({t.name: t.data_type for t in graph.initializer})
    outputs = {o.name for o in graph.output}
    renames: dict[str, str] = {}
    for node in graph.node:
        inner = producers.get(node.input[0]) if node.input else None
        if inner is None or inner.op_type != node.op_type:
            continue
        if node.op_type == "Transpose":
            p1 = next((list(a.ints) for a in inner.attribute if a.name == "perm"), None)
            p2 = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
            if p1 is None or p2 is None:
                continue
            combined = [p1[i] for i in p2]
            node.input[0] = inner.input[0]
            del node.attribute[:]
            node.attribute.extend([onnx.helper.make_attribute("perm", combined)])
            if combined == sorted(combined) and node.output[0] not in outputs:
                renames[node.output[0]] = inner.input[0]
        elif node.op_type == "Reshape":
            shape = consts.get(node.input[1])
            if shape is not None and not (numpy_helper.to_array(shape) <= 0).any():
                node.input[0] = inner.input[0]
        elif node.op_type == "Cast":
            to = next(a.i for a in node.attribute if a.name == "to")
            mid = next(a.i for a in inner.attribute if a.name == "to")
            src = types.get(inner.input[0])
            if src == to and (src, mid) in _LOSSLESS_WIDENING and node.output[0] not in outputs:
                renames[node.output[0]] = inner.input[0]
    if renames:
        keep = [n for n in graph.node if not (n.output and n.output[0] in renames)]
        del graph.node[:]
        graph.node.extend(keep)
        _rename_inputs(graph, renames)


def drop_redundant_expands(graph: onnx.GraphProto) -> None:
    """Let ONNX broadcasting replace an Expand feeding an elementwise op whose other input has the full shape.

    Only nodes marked ``same_shape_inputs`` (the operands of an elementwise StableHLO op all have the
    result's shape) qualify, and one input that is not an Expand must remain.
    """
    expands = {n.output[0]: n for n in graph.node if n.op_type == "Expand"}
    changed = False
    for node in graph.node:
        if expands and any(p.key == SAME_SHAPE_KEY for p in node.metadata_props):
            full = [i for i in node.input if i and i not in expands]
            if full:
                for k, name in enumerate(node.input):
                    if name in expands:
                        node.input[k] = expands[name].input[0]
                        changed = True
        kept = [p for p in node.metadata_props if p.key != SAME_SHAPE_KEY]
        if len(kept) != len(node.metadata_props):
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
    if changed:
        remove_dead_nodes(graph)


def optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """Run the clean-up passes in place and return the model."""
    fold_constants(model)
    eliminate_common_subexpressions(model.graph)
    remove_noop_casts(model)
    fold_cancelling_chains(model)
    drop_redundant_expands(model.graph)
    fold_constants(model)
    remove_dead_nodes(model.graph)
    remove_output_identities(model.graph)
    return model
