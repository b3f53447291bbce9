"""A MatMul between Transposes computed with its operands swapped, when that needs fewer Transposes.

``A @ B`` equals ``S(S(B) @ S(A))``, with ``S`` the swap of the last two axes. The lowering of a
dot_general puts each operand into ``[batch..., free, contracting]`` order with a Transpose and the
result into the op's order with another; when a swap composed with those permutations gives an
identity, a Transpose goes. Attention's ``einsum('bhqk,bkhd->bqhd', probs, v)``, which jnp traces as
``dot_general(v, probs)`` followed by a transpose, keeps two of its three Transposes. Each output
element is the same dot product of the same two vectors, so ONNX Runtime's numbers do not change.
"""

from __future__ import annotations

import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m


def rewrite(graph: ir.Graph) -> int:
    """Swap the operands of the MatMuls in ``graph`` where Transposes go; returns how many."""
    return sum(_swap(graph, node) for node in m.each_node(graph, "MatMul"))


def _swap(graph: ir.Graph, mm: ir.Node) -> int:
    a, b = mm.inputs[0], mm.inputs[1]
    out = mm.outputs[0]
    rank = m.rank(out)
    if a is None or b is None or rank is None or rank < 2 or m.rank(a) != rank or m.rank(b) != rank:
        return 0
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    readers = [use.node for use in out.uses()]
    after = m.transpose_perm(readers[0], rank) if len(readers) == 1 and not out.is_graph_output() else None
    operands = []
    for x in (b, a):  # the new first operand is S(b), the second S(a)
        p = m.transpose_perm(x.producer(), rank)
        owned = p is not None and m.sole_use(x)
        source = x.producer().inputs[0] if owned else x
        composed = [p[s] for s in swap] if owned else swap
        operands.append((owned, source, composed))
    out_perm = [swap[p] for p in after] if after is not None else list(swap)
    before = sum(owned for owned, _, _ in operands) + (after is not None)
    later = sum(not m.is_identity(c) for _, _, c in operands) + (not m.is_identity(out_perm))
    if later >= before:
        return 0
    inputs = []
    new_nodes = []
    for _, source, composed in operands:
        if m.is_identity(composed):
            inputs.append(source)
        else:
            t = ir.node("Transpose", [source], attributes={"perm": composed})
            new_nodes.append(t)
            inputs.append(t.outputs[0])
    old = readers[0].outputs[0] if after is not None else out
    return replace_product(graph, mm, old, inputs, new_nodes, out_perm)


def replace_product(graph: ir.Graph, mm: ir.Node, old: ir.Value, inputs: list[ir.Value], new_nodes: list[ir.Node],
                    out_perm: list[int]) -> int:
    """Put ``MatMul(*inputs)``, then a Transpose by ``out_perm`` unless it is the identity, in place of
    ``old`` (``mm``'s output or the Transpose after it), after ``new_nodes`` (the operands' Transposes)."""
    new_mm = ir.node("MatMul", inputs)
    new_nodes.append(new_mm)
    if not m.is_identity(out_perm):
        new_nodes.append(ir.node("Transpose", [new_mm.outputs[0]], attributes={"perm": out_perm}))
    m.replace(graph, old, new_nodes, mm)
    return 1
