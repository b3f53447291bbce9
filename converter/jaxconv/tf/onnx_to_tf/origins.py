"""Which ONNX node (and so which StableHLO op and user source line) built a TF op.

The translator builds each ONNX node's TF ops inside a name scope named after the node
(``scope_name``). When TFLite's converter rejects a TF op, its diagnostics point at the translator's
Python code; ``sources_of`` finds the TF ops of that type in the traced function (loop bodies
included) and reads the node, and through it the ``stablehlo.op at model.py:12`` the ONNX lowering
recorded, back from their names.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

_INVALID = re.compile(r"[^A-Za-z0-9_.\-]")
_UNIQUIFIED = re.compile(r"_\d+$")
# TF DataType enum -> the element type names the converter prints (tensor<5xf64>).
_TF_ELEMENT = {
    1: "f32",
    2: "f64",
    3: "i32",
    4: "ui8",
    5: "i16",
    6: "i8",
    9: "i64",
    10: "i1",
    14: "bf16",
    17: "ui16",
    19: "f16",
    22: "ui32",
    23: "ui64",
}


def scope_name(node: Any, index: int) -> str:
    """A valid TF name scope for the ONNX node (its name, else its op type and position)."""
    return "jx_" + _INVALID.sub("_", node.name or f"{node.op_type}{index}")


def _nodes_by_scope(graph: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, node in enumerate(graph.node):
        out.setdefault(scope_name(node, i)[3:], node)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                for k, v in _nodes_by_scope(g).items():
                    out.setdefault(k, v)
    return out


def _tf_nodes(concrete: Any) -> Iterator[Any]:
    """Every NodeDef of the traced function and of the functions it calls (loop bodies)."""
    graph_def = concrete.graph.as_graph_def()
    yield from graph_def.node
    for fn in graph_def.library.function:
        yield from fn.node_def


def _element(node_def: Any) -> str:
    for key in ("T", "dtype", "SrcT", "DstT"):
        if key in node_def.attr and node_def.attr[key].type:
            return _TF_ELEMENT.get(node_def.attr[key].type, "")
    return ""


def source_of(node: Any) -> str:
    """The node's JAX source line as the lowering recorded it (relative to the working folder below it)."""
    import os

    from jaxconv.tf.tflite_errors import display_path

    source = next((p.value for p in node.metadata_props if p.key == "source"), "")
    path, _, line = source.rpartition(":")
    if path and line.isdigit() and os.path.isabs(path):
        return display_path(path, int(line))
    return source


def origin(node: Any) -> str:
    """``model.py:3 (stablehlo.add)`` for a node of jaxconv's lowering; ``ONNX Add`` when unknown."""
    op, source = next((p.value for p in node.metadata_props if p.key == "stablehlo.op"), ""), source_of(node)
    if source:
        return f"{source} ({op or 'ONNX ' + node.op_type})"
    return op or f"ONNX {node.op_type}"


def _owner(name: str, by_scope: dict[str, Any]) -> Any:
    """The ONNX node whose scope (the innermost ``jx_`` component) holds the TF op ``name``."""
    for part in reversed(name.split("/")[:-1]):
        if part.startswith("jx_"):
            key = part[3:]
            return by_scope.get(key) or by_scope.get(
                _UNIQUIFIED.sub("", key)
            )  # TF appends _1 to reused scopes
    return None


def sources_of(model: Any, concrete: Any, is_op: Callable[[str], bool], element: str = "") -> list[str]:
    """Where the TF ops whose type passes ``is_op`` (on ``element`` when given, as ``f64``) came from.

    Returns:
        ``model.py:3 (stablehlo.add)`` (or ``stablehlo.add``, ``ONNX Add``) for each distinct origin,
        in graph order.
    """
    by_scope = _nodes_by_scope(model.graph)
    out: list[str] = []
    for node_def in _tf_nodes(concrete):
        if not is_op(node_def.op) or (element and _element(node_def) not in ("", element)):
            continue
        node = _owner(node_def.name, by_scope)
        if node is None:
            continue
        label = origin(node)
        if label not in out:
            out.append(label)
    return out
