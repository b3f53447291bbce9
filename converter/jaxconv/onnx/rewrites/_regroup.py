"""How a Reshape regroups axes, and which permutations of them a sum does not see (``layout``'s moves).

A Reshape from one shape to another splits runs of axes or merges them (``axis_runs``); a Transpose before
it can go after it where each merged run lies in the same order before the Transpose (``regrouped``,
``unit_axes_perm`` for Reshapes that only insert or drop size-1 axes), and a permutation within a run the
Reshape merges is invisible to a reader that only sums that run (``summed_perm``: a group norm's
statistics, which the lowering transposes and sums in blocks). Shapes are ``_dim_products.named_dims``:
ints, and symbolic sizes by name, each a run of its own.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._dim_products import named_dims

Dims = list  # a shape's sizes: ints, and symbolic ones by name


def unit_axes_perm(perm: list[int], y_shape: Dims, z_shape: Dims) -> tuple[Dims, list[int]] | None:
    """For ``z = Reshape(Transpose(x, perm))`` that only inserts or drops size-1 axes (``y_shape`` the
    Transpose's output, ``z_shape`` the Reshape's): the shape ``x`` is reshaped to and the permutation
    after it, ``z = Transpose(Reshape(x, shape), perm2)``; None when the Reshape regroups axes."""
    kept = [k for k, d in enumerate(y_shape) if d != 1]
    places = [j for j, d in enumerate(z_shape) if d != 1]
    if [y_shape[k] for k in kept] != [z_shape[j] for j in places]:
        return None
    order = sorted(perm[k] for k in kept)  # x's axes of size > 1, in x's order
    rank_of = {a: r for r, a in enumerate(order)}
    x_shape = [1] * len(z_shape)
    perm2 = list(range(len(z_shape)))
    for r, a in enumerate(order):
        x_shape[places[r]] = y_shape[perm.index(a)]
    for i, k in enumerate(kept):
        perm2[places[i]] = places[rank_of[perm[k]]]
    return x_shape, perm2


def axis_runs(y_shape: Dims, z_shape: Dims) -> list[tuple[list[int], list[int]]] | None:
    """The smallest runs of consecutive axes of ``y_shape`` and of ``z_shape`` with equal sizes, paired in
    order: the axes a Reshape from the one to the other splits or merges (size-1 axes left at the end join
    the last run; a symbolic size is a run of its own on both sides); None where a size is 0 or the sizes
    differ."""
    fixed_y = [d for d in y_shape if isinstance(d, int)]
    fixed_z = [d for d in z_shape if isinstance(d, int)]
    if 0 in fixed_y or 0 in fixed_z or int(np.prod(fixed_y)) != int(np.prod(fixed_z)) \
            or [d for d in y_shape if isinstance(d, str)] != [d for d in z_shape if isinstance(d, str)]:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(y_shape) and j < len(z_shape):
        if isinstance(y_shape[i], str) or isinstance(z_shape[j], str):
            if y_shape[i] != z_shape[j]:
                return None
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
            continue
        gy, gz, py, pz = [i], [j], y_shape[i], z_shape[j]
        i, j = i + 1, j + 1
        while py != pz:
            if py < pz:
                if isinstance(y_shape[i], str):
                    return None
                gy.append(i)
                py *= y_shape[i]
                i += 1
            else:
                if isinstance(z_shape[j], str):
                    return None
                gz.append(j)
                pz *= z_shape[j]
                j += 1
        groups.append((gy, gz))
    if not groups:
        return None
    groups[-1][0].extend(range(i, len(y_shape)))
    groups[-1][1].extend(range(j, len(z_shape)))
    return groups


def regrouped(perm: list[int], y_shape: Dims, z_shape: Dims) -> tuple[Dims, list[int]] | None:
    """For ``z = Reshape(Transpose(x, perm))`` that splits axes or merges axes that lie in ``x`` in the same
    order (group norm's channels split into groups, and merged back): the shape ``x`` is reshaped to and the
    permutation after it, ``z = Transpose(Reshape(x, shape), perm2)``; None otherwise."""
    groups = axis_runs(y_shape, z_shape)
    if groups is None:
        return None
    for gy, _ in groups:
        if [perm[k] for k in gy] != list(range(perm[gy[0]], perm[gy[0]] + len(gy))):
            return None
    x_shape: Dims = []
    start = {}
    for g in sorted(range(len(groups)), key=lambda g: perm[groups[g][0][0]]):
        start[g] = len(x_shape)
        x_shape += [z_shape[j] for j in groups[g][1]]
    perm2 = [0] * len(z_shape)
    for g, (_, gz) in enumerate(groups):
        for offset, j in enumerate(gz):
            perm2[j] = start[g] + offset
    return x_shape, perm2


def summed(value: ir.Value, axes: set[int], depth: int = 0) -> bool:
    """Whether every reader of ``value`` sums it over all of ``axes`` (ReduceSum or ReduceMean, in one node
    or a chain: a long sum taken in blocks), so that the order of the elements along them does not matter
    but for rounding."""
    rank = m.rank(value)
    uses = list(value.uses())
    if rank is None or not uses or value.is_graph_output() or depth > 8:
        return False
    for use in uses:
        node = use.node
        if node.domain != "" or use.idx != 0:
            return False
        if node.op_type in ("Pad", "Reshape"):
            moved = summed_axes_after(node, axes)
            if moved is None or not summed(node.outputs[0], moved, depth + 1):
                return False
            continue
        if node.op_type not in ("ReduceSum", "ReduceMean"):
            return False
        reduced = m.reduce_axes(node)
        if reduced is None or (not reduced and m.attr(node, "noop_with_empty_axes", 0)):
            return False
        reduced_set = {a % rank for a in reduced} if reduced else set(range(rank))
        left = axes - reduced_set
        if not left:
            continue
        if m.attr(node, "keepdims", 1) != 1:
            left = {a - sum(1 for r in reduced_set if r < a) for a in left}
        if not summed(node.outputs[0], left, depth + 1):
            return False
    return True


def summed_axes_after(node: ir.Node, axes: set[int]) -> set[int] | None:
    """Where the ``axes`` of a Pad's or Reshape's input lie in its output, when the op keeps their sum: a Pad
    of zeros along them only (a sum padded to whole blocks), a Reshape that splits or merges them among
    themselves; None otherwise."""
    if node.op_type == "Pad":
        pads = m.const(node.inputs[1]) if len(node.inputs) > 1 else None
        fill = m.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else np.zeros(())
        rank = m.rank(node.inputs[0])
        if pads is None or rank is None or pads.size != 2 * rank or (len(node.inputs) > 3 and node.inputs[3] is not None) \
                or m.attr(node, "mode", "constant") != "constant" or fill is None or fill.size != 1 or fill.item() != 0:
            return None
        padded = {a for a in range(rank) if pads[a] != 0 or pads[rank + a] != 0}
        return axes if padded <= axes else None
    in_shape, out_shape = named_dims(node.inputs[0]), named_dims(node.outputs[0])
    groups = axis_runs(in_shape, out_shape) if in_shape is not None and out_shape is not None else None
    if groups is None or any(0 < len(axes & set(gy)) < len(gy) for gy, _ in groups):
        return None
    return {j for gy, gz in groups if axes & set(gy) for j in gz}


def summed_perm(perm: list[int], y_shape: Dims, z: ir.Value) -> list[int] | None:
    """For ``z = Reshape(Transpose(x, perm))``: ``perm`` with the axes of each group the Reshape merges put
    back in ``x``'s order where ``z`` is only summed over that group (a reduction over axes that are not
    adjacent, which the lowering transposes to the end and sums in blocks); None where nothing changes."""
    z_shape = named_dims(z)
    groups = axis_runs(y_shape, z_shape) if z_shape is not None else None
    if groups is None:
        return None
    new = list(perm)
    for gy, gz in groups:
        axes = sorted(perm[k] for k in gy)
        if len(gy) > 1 and axes != [perm[k] for k in gy] and summed(z, set(gz)):
            for k, a in zip(gy, axes):
                new[k] = a
    return None if new == perm else new


def lifted(perm: list[int], y_shape: Dims, z_shape: Dims) -> list[int] | None:
    """For ``w = Transpose(Reshape(y, z_shape), perm)`` whose permutation keeps each run of axes the Reshape
    splits together and in order: the permutation of ``y`` with ``w = Reshape(Transpose(y, lifted))``; None
    otherwise (a channel shuffle's merge of groups and channels, lifted above the merge to join the shuffle)."""
    runs = axis_runs(y_shape, z_shape)
    if runs is None:
        return None
    placed = []
    for gy, gz in runs:
        at = [perm.index(j) for j in gz]
        if at != list(range(at[0], at[0] + len(at))):
            return None
        placed.append((at[0], gy))
    return [k for _, gy in sorted(placed) for k in gy]
