"""A layer norm over the last axis, written out in jnp, as one LayerNormalization op (opset 17).

``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) * g + b`` lowers to nine ONNX nodes (two
ReduceMeans, Sub, Mul, Add, Sqrt, Div, Mul, Add), each a kernel that reads and writes the whole
activation; ORT's LayerNormalization kernel does it in one kernel over the rows. On the benchmark
transformer (8 norms of [8, 128, 256]; ORT profile, one thread, load 7.6) the nine kernels took 4.7
ms per run and the op 1.8 ms; 172 -> 108 nodes. ORT does not fuse it with the residual Add before it
here (no SkipLayerNormalization in its optimized graph).

ORT's kernel computes the variance as the two-pass form does: its error from the float64 result is
at most jax.jit's (checked up to a mean of 1e4 over a spread of 1). Flax's LayerNorm uses the one-pass
variance ``max(mean(x**2) - mean(x)**2, 0)`` and ``(x - mean) * (rsqrt(var + eps) * scale)``; that
form becomes the op too: where the mean is far from zero against the spread, jax.jit loses digits to
the cancellation and ORT does not, so the op is closer to the float64 result than jax.jit (the
check's float64 reference accepts it); elsewhere they agree within float32 tolerance (benchmark
BERT: max difference from jax.jit 9.5e-7 -> 2.2e-6). A row with NaN or an infinity gives NaN in all
forms. Where a row's squares or its sum overflow, the written-out forms give NaN or the offset and the
op a finite norm, so the op runs behind ``_norm_guard``'s If unless the norm's input is bounded (a model
of token ids): 8 guarded norms of [8, 128, 256] cost the benchmark transformer 1.01-1.02x its time with
the bare op (ORT alone, one and two threads; a ReduceSumSquare and an If per norm). A post-norm residual
``Add`` read by an unguarded norm alone becomes a ``Sum`` (see ``residual_as_sum``). The scale ``g`` and
offset ``b`` are taken in when they are constants of the normalized axis' length; otherwise the Mul or
Add stays after the op. float32 only (the op's statistics are float32 by its default ``stash_type``).
Means the lowering sums in blocks (rows over 1024 columns) are taken up to ``MAX_FUSED_ROW`` columns:
Flax's LayerNorm over [16, 64, 4096], one thread, 3.11x -> 1.16x jax.jit (the guard's ReduceSumSquare is a
pass of its own); ORT's kernel stays closer to float64 than jax.jit's one-pass variance there.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _bounds, _norm_guard
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._norm_match import (
    MIN_OPSET,
    any_mean,
    ddof_guard,
    eps_add,
    last_axis_mean,
    only_uses,
    reciprocal_of,
    row_const,
    steps,
)


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Replace the layer norms over the last axis in ``graph`` (two-pass, or Flax's one-pass variance); returns
    how many."""
    if opset < MIN_OPSET:
        return 0
    memo: _bounds.Memo = {}  # values' magnitude bounds, shared by the norms of the graph
    return sum(_replace(graph, node, memo) or _replace_fast(graph, node, memo) for node in m.each_node(graph, "Sqrt"))


def _affine(value: ir.Value, op: str, d: int) -> tuple[ir.Node, np.ndarray] | None:
    """The single ``op`` reader of ``value`` (``Mul``/``Add``) with a row constant, and that constant."""
    uses = m.live_uses(value)
    if value.is_graph_output() or len(uses) != 1:
        return None
    node = uses[0].node
    pair = m.binary(node, op)
    if pair is None or node.graph is not value.producer().graph:
        return None
    other = m.other_input(node, value)
    arr = row_const(other, d)
    if arr is None or node.outputs[0].shape != value.shape:
        return None
    return node, arr


def _clamp(value: ir.Value) -> tuple[ir.Node, ir.Value] | None:
    """``(node, v)`` for ``value = Relu(v)`` or ``Max(v, 0)`` (Equinox's ``jnp.maximum(0, var)``, Flax's)."""
    node = m.producer(value, "Relu")
    if node is not None and node.inputs[0] is not None:
        return node, node.inputs[0]
    pair = m.binary(m.producer(value, "Max"), "Max")
    if pair is None:
        return None
    for k in (0, 1):
        if m.is_scalar_const(pair[1 - k], 0.0) and m.const(pair[k]) is None:
            return value.producer(), pair[k]
    return None


def _normalizer(sqrt: ir.Node, dim: int) -> tuple[ir.Node, ir.Value, list[ir.Node], ir.Node | None] | None:
    """How ``s = sqrt(var + eps)`` normalizes: ``(norm, d, nodes, scale)`` for ``norm = d / s``, or
    ``d * r`` with ``r = 1 / s`` (rsqrt), or ``d * (r * g)`` with ``g`` a row constant (Flax, Haiku);
    ``nodes`` the Reciprocal and Mul by ``g`` between, ``scale`` that Mul."""
    recip = reciprocal_of(sqrt)
    if recip is None:
        uses = m.live_uses(sqrt.outputs[0])
        if sqrt.outputs[0].is_graph_output() or len(uses) != 1 or m.binary(uses[0].node, "Div") is None \
                or uses[0].idx != 1:
            return None
        return uses[0].node, uses[0].node.inputs[0], [], None
    factor, scale = recip.outputs[0], None
    uses = m.live_uses(factor)
    if len(uses) == 1 and m.binary(uses[0].node, "Mul") is not None \
            and row_const(m.other_input(uses[0].node, factor), dim) is not None:
        scale = uses[0].node
        factor = scale.outputs[0]
        uses = m.live_uses(factor)
    if factor.is_graph_output() or len(uses) != 1 or m.binary(uses[0].node, "Mul") is None:
        return None
    norm = uses[0].node
    if not only_uses(recip.outputs[0], scale if scale is not None else norm):
        return None
    return norm, m.other_input(norm, factor), [recip] + ([scale] if scale is not None else []), scale


def _replace(graph: ir.Graph, sqrt: ir.Node, memo: _bounds.Memo) -> int:
    """``d / sqrt(mean(d * d) + eps)`` with ``d = x - mean(x)`` (or ``d * rsqrt(...)``, the variance as
    ``jnp.var`` writes it, clamped at 0 or not): one LayerNormalization."""
    found = eps_add(sqrt)
    if found is None:
        return 0
    add, var, eps_value = found
    steps_up: list[tuple[ir.Node, ir.Node]] = []  # (node, its one reader) from the variance up to the Add
    reader = add
    clamp = _clamp(var)
    if clamp is not None:
        steps_up.append((clamp[0], reader))
        reader, var = clamp
    guard = ddof_guard(var)
    if guard is not None:
        steps_up.append((guard, reader))
        reader, var = guard, guard.inputs[2]
    rank = m.rank(var)
    var_mean = any_mean(var, rank) if rank else None
    square = m.producer(var_mean[0], "Mul") if var_mean is not None else None
    if square is None or square.inputs[0] is not square.inputs[1]:
        return 0
    d = square.inputs[0]
    sub = m.producer(d, "Sub")
    if sub is None or len(sub.inputs) != 2:
        return 0
    x, mean = sub.inputs
    if x is None or mean is None or x.dtype != ir.DataType.FLOAT or x.shape is None or len(x.shape) != rank:
        return 0
    dim = x.shape[rank - 1]
    x_mean = any_mean(mean, rank)
    if not isinstance(dim, int) or x_mean is None or x_mean[0] is not x:
        return 0
    normalizer = _normalizer(sqrt, dim)
    if normalizer is None:
        return 0
    norm, num, between, scale = normalizer
    sub2 = second = None
    if num is not d:  # x - mean(x) written twice (CSE has not run yet), of the same mean or of another
        sub2 = m.producer(num, "Sub")
        if sub2 is None or sub2.inputs[0] is not x or not only_uses(num, norm):
            return 0
        if sub2.inputs[1] is not mean:
            second = any_mean(sub2.inputs[1], rank)
            if second is None or second[0] is not x or not only_uses(sub2.inputs[1], sub2) \
                    or not all(only_uses(n.outputs[0], c) for n, c in steps(second[1])):
                return 0
    if d.shape != x.shape or norm.outputs[0].shape != x.shape:
        return 0
    chain = [sub, square, add, sqrt, *between, *(n for n, _ in steps_up), *x_mean[1], *var_mean[1]]
    chain += ([sub2] if sub2 is not None else []) + (second[1] if second is not None else [])
    d_readers = (square, norm) if sub2 is None else (square,)
    mean_readers = (sub,) if sub2 is None or second is not None else (sub, sub2)
    if not (only_uses(mean, *mean_readers) and only_uses(d, *d_readers)
            and only_uses(square.outputs[0], var_mean[1][-1]) and only_uses(var, reader)
            and all(only_uses(n.outputs[0], r) for n, r in steps_up)
            and only_uses(add.outputs[0], sqrt)
            and all(only_uses(n.outputs[0], c) for n, c in steps(x_mean[1]) + steps(var_mean[1]))):
        return 0
    if any(n.graph is not graph for n in chain):
        return 0
    g = row_const(m.other_input(scale, between[0].outputs[0]), dim) if scale is not None else None
    return _emit(graph, x, dim, eps_value, norm, chain, memo, g)


def _replace_fast(graph: ir.Graph, sqrt: ir.Node, memo: _bounds.Memo) -> int:
    """``sqrt(max(mean(x * x) - mean(x)**2, 0) + eps)`` (Flax's fast variance), dividing ``x - mean(x)``
    or multiplying it by its reciprocal: one LayerNormalization (see the module docstring)."""
    found = eps_add(sqrt)
    if found is None:
        return 0
    add, var, eps_value = found
    clamped = _clamp(var)
    if clamped is None:
        return 0
    clamp, clamped_var = clamped
    diff = m.binary(m.producer(clamped_var, "Sub"), "Sub")
    rank = m.rank(var)
    if diff is None or not rank:
        return 0
    m2, mu_sq = diff
    mean_sq = last_axis_mean(m2, rank)
    square = m.producer(mean_sq[0], "Mul") if mean_sq is not None else None
    mu_mul = m.binary(m.producer(mu_sq, "Mul"), "Mul")
    if square is None or square.inputs[0] is not square.inputs[1] or mu_mul is None or mu_mul[0] is not mu_mul[1]:
        return 0
    x, mean = square.inputs[0], mu_mul[0]
    x_mean = last_axis_mean(mean, rank)
    if x is None or x.dtype != ir.DataType.FLOAT or x.shape is None or len(x.shape) != rank or x_mean is None \
            or x_mean[0] is not x or not isinstance(x.shape[rank - 1], int):
        return 0
    dim = x.shape[rank - 1]
    normalizer = _normalizer(sqrt, dim)
    if normalizer is None:
        return 0
    norm, d, between, scale = normalizer
    sub = m.producer(d, "Sub")
    if sub is None or sub.inputs[0] is not x or sub.inputs[1] is not mean or d.shape != x.shape \
            or norm.outputs[0].shape != x.shape:
        return 0
    chain = [add, sqrt, clamp, diff_node := m.producer(clamped_var), mu_sq.producer(), square, sub, *x_mean[1],
             *mean_sq[1], *between]
    if not (only_uses(mean, mu_sq.producer(), sub) and only_uses(d, norm)
            and only_uses(square.outputs[0], mean_sq[1][-1]) and only_uses(m2, diff_node)
            and only_uses(mu_sq, diff_node) and only_uses(diff_node.outputs[0], clamp)
            and only_uses(var, add) and only_uses(add.outputs[0], sqrt)
            and all(only_uses(n.outputs[0], c) for n, c in steps(x_mean[1]) + steps(mean_sq[1]))):
        return 0
    if any(n is None or n.graph is not graph for n in chain):
        return 0
    g = row_const(m.other_input(scale, between[0].outputs[0]), dim) if scale is not None else None
    return _emit(graph, x, dim, eps_value, norm, chain, memo, g)


def _emit(graph: ir.Graph, x: ir.Value, dim: int, eps: float, norm: ir.Node, chain: list[ir.Node],
          memo: _bounds.Memo, g: np.ndarray | None = None) -> int:
    """Replace ``norm`` (the normalized x, already scaled by ``g`` if given; ``chain`` the nodes that
    compute it from x) and the row scale and offset after it by one LayerNormalization, behind
    ``_norm_guard``'s If unless ``x`` is bounded."""
    out, last, tail = norm.outputs[0], norm, [norm]
    scale = np.ones(dim, np.float32) if g is None else g
    found = _affine(out, "Mul", dim) if g is None else None
    if found is not None:
        last, scale = found
        out = last.outputs[0]
        tail.append(last)
    bias = None
    found = _affine(out, "Add", dim)
    if found is not None:
        last, bias = found
        out = last.outputs[0]
        tail.append(last)
    unguarded = _norm_guard.unguarded(x, dim, memo)
    if unguarded:
        x = residual_as_sum(graph, x, {id(n) for n in chain + [norm]})
    inputs = [x, m.new_initializer(graph, scale, f"{x.name or 'x'}_ln_scale")]
    if bias is not None:
        inputs.append(m.new_initializer(graph, bias, f"{x.name or 'x'}_ln_bias"))
    op = ir.node("LayerNormalization", inputs, {"axis": -1, "epsilon": eps})
    if unguarded:
        m.replace(graph, out, op, last)
    else:
        _norm_guard.guard(graph, x, dim, chain + tail[:-1], last, op, ("layer_norm_exact", "layer_norm_op"))
    return 1


def residual_as_sum(graph: ir.Graph, x: ir.Value, norm: set[int]) -> ir.Value:
    """``x = Add(a, b)`` of two same-shaped tensors, read by the norm alone (a post-norm residual), as
    ``Sum(a, b)`` (the same float addition), so that ORT does not fuse it with the norm into its
    SkipLayerNormalization kernel: on the benchmark BERT that took 1.8 ms per norm of [4, 128, 256]
    against about 0.2 ms for the addition and the norm apart (one thread, load 9). ``norm``: the ids
    of the nodes of the norm, which read ``x`` until the op replaces them."""
    add = m.producer(x, "Add")
    if add is None or add.graph is not graph or len(add.inputs) != 2 or any(v is None for v in add.inputs) \
            or any(id(u.node) not in norm for u in m.live_uses(x)) or x.is_graph_output():
        return x  # a sum read elsewhere too (a pre-norm residual stream): ORT does not fuse it
    a, b = add.inputs
    if a.shape is None or a.shape != b.shape or a.shape != x.shape or m.const(a) is not None or m.const(b) is not None:
        return x
    total = ir.node("Sum", [a, b])
    m.replace(graph, x, total, add)
    graph.remove(add, safe=True)
    return total.outputs[0]
