"""The nodes of an ONNX graph with those of its subgraphs (If branches, Loop and Scan bodies), at any depth."""

from __future__ import annotations

from typing import Iterator

import onnx


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph``, each followed by the nodes of the subgraphs it holds."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from all_nodes(g)


def op_types(graph: onnx.GraphProto) -> list[str]:
    """The op type of every node of ``graph`` and its subgraphs, in ``all_nodes`` order."""
    return [n.op_type for n in all_nodes(graph)]
