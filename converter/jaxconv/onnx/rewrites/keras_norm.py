"""Keras' layer norm over the last axis as one LayerNormalization op (opset 17).

Keras 3 (``keras.ops.layer_normalization``, so ``keras.layers.LayerNormalization`` and every
keras-hub backbone) does not normalize ``x - mean`` but folds the mean into an offset:

    inv = rsqrt(var(x) + eps) * gamma;  y = x * inv + (-mean(x) * inv + beta)

with ``var`` the two-pass variance. That lowers to thirteen ONNX nodes (ReduceMean, Sub, Mul,
ReduceSum, Div, Add, Sqrt, Reciprocal, Mul, Neg, Mul, Mul, Add), each a kernel over the activation or
its row statistics, which the ``layer_norm`` rule's forms do not match. On keras-hub's BERT and GPT-2
(five norms of [2, 64, 128]; ORT profile, one thread) they took about 50 us per norm against about
8 us for the op.

ORT's kernel computes ``(x - mean) * inv * gamma + beta``: the same statistics; the output differs from
Keras' form by rounding only. Where the mean is large against the spread, both forms round the
float32 mean (an ulp of it over the spread) and Keras' also cancels in ``x * inv - mean * inv``; either
may be closer to the float64 result, by at most that. A row holding NaN or an infinity is NaN in both.

Where a row's squares overflow (``|x|`` above about 1e19) jax.jit's variance is inf, so ``inv`` is 0 and
the row is ``x * 0 - mean * 0 + beta``: beta, or for a zero (or no) beta, zeros whose signs follow x and
the mean, where the op gives zeros of other signs; where the row's sum overflows (``|x|`` near FLT_MAX)
jax.jit's mean is inf and its row NaN, where the op gives the row's norm. So the op runs behind
``_norm_guard``'s If, which runs today's nodes where a row's squares could overflow, except where the
norm's input is bounded (a model of token ids). Per norm that costs a ReduceSumSquare and the If, about
a quarter of what the op saves. (No post-norm Add becomes a Sum, as ``layer_norm`` does for the
unguarded op: the exact branch reads it too.)

Single-thread process CPU time against jax.jit (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``), five
norms of [2, 64, 128] per model, load 5: keras-hub BERT 1.08 -> 0.95, GPT-2 0.98 -> 0.89.
``gamma`` and ``beta`` are taken in when they are float32 constants of the normalized axis' length;
otherwise the rule does not fire. ``eps`` must be positive.
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
    only_uses,
    reciprocal_of,
    row_const,
    steps,
)
from jaxconv.onnx.rewrites.layer_norm import residual_as_sum


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Replace Keras' layer norms over the last axis in ``graph``; returns how many."""
    if opset < MIN_OPSET:
        return 0
    memo: _bounds.Memo = {}  # values' magnitude bounds, shared by the norms of the graph
    return sum(_replace(graph, node, memo) for node in m.each_node(graph, "Sqrt"))


def _single_reader(value: ir.Value, op: str) -> ir.Node | None:
    """The one live reader of ``value`` when it is an ``op`` node of the default domain."""
    uses = m.live_uses(value)
    if value.is_graph_output() or len(uses) != 1:
        return None
    node = uses[0].node
    if node.op_type != op or node.domain not in ("", "ai.onnx"):
        return None
    return node


def _replace(graph: ir.Graph, sqrt: ir.Node, memo: _bounds.Memo) -> int:
    """``x * inv + (-mean(x) * inv [+ beta])`` with ``inv = 1 / sqrt(var(x) + eps) [* gamma]``: one
    LayerNormalization."""
    found = eps_add(sqrt)
    if found is None:
        return 0
    add, var, eps = found
    guard = ddof_guard(var)
    if guard is not None:
        var = guard.inputs[2]
    rank = m.rank(var)
    var_mean = any_mean(var, rank) if rank else None
    square = m.producer(var_mean[0], "Mul") if var_mean is not None else None
    if square is None or square.inputs[0] is not square.inputs[1]:
        return 0
    d = square.inputs[0]
    sub = m.binary(m.producer(d, "Sub"), "Sub")
    if sub is None:
        return 0
    x, mean = sub
    if x is None or mean is None or x.dtype != ir.DataType.FLOAT or x.shape is None or len(x.shape) != rank:
        return 0
    dim = x.shape[rank - 1]
    x_mean = any_mean(mean, rank)
    if not isinstance(dim, int) or x_mean is None or x_mean[0] is not x or d.shape != x.shape:
        return 0
    recip = reciprocal_of(sqrt)
    if recip is None:
        return 0
    inv, gamma_node, gamma = recip.outputs[0], None, None
    uses = m.live_uses(inv)
    if len(uses) == 1 and m.binary(uses[0].node, "Mul") is not None:
        gamma = row_const(m.other_input(uses[0].node, inv), dim)
        if gamma is not None:
            gamma_node = uses[0].node
            inv = gamma_node.outputs[0]
    if inv.is_graph_output():
        return 0
    uses = m.live_uses(inv)
    if len(uses) != 2:
        return 0
    mul_x = mul_mean = neg = None
    for u in uses:
        other = m.other_input(u.node, inv) if m.binary(u.node, "Mul") is not None else None
        if other is x:
            mul_x = u.node
        elif m.producer(other, "Neg") is not None:
            mul_mean, neg = u.node, other.producer()
    # jnp.var takes its own mean of x: the offset's mean may be a second one (CSE merges them later)
    offset_mean = neg.inputs[0] if neg is not None else None
    second = any_mean(offset_mean, rank) if offset_mean is not None and offset_mean is not mean else None
    if offset_mean is not mean and (second is None or second[0] is not x):
        return 0
    if mul_x is None or mul_mean is None or mul_x.outputs[0].shape != x.shape:
        return 0
    offset, beta_node, beta = mul_mean.outputs[0], None, None
    reader = _single_reader(offset, "Add")
    if reader is not None and m.other_input(reader, offset) is not mul_x.outputs[0]:
        beta = row_const(m.other_input(reader, offset), dim)
        if beta is None:
            return 0
        beta_node, offset = reader, reader.outputs[0]
    last = _single_reader(offset, "Add")
    if last is None or m.other_input(last, offset) is not mul_x.outputs[0] or last.outputs[0].shape != x.shape \
            or not only_uses(mul_x.outputs[0], last):
        return 0
    chain = [sub_node := d.producer(), square, add, sqrt, recip, neg, mul_x, mul_mean, *x_mean[1], *var_mean[1]]
    chain += second[1] if second is not None else []
    mean_readers = (sub_node, neg) if second is None else (sub_node,)
    chain += [n for n in (gamma_node, beta_node) if n is not None]
    chain += [guard] if guard is not None else []
    if not (only_uses(d, square) and only_uses(square.outputs[0], var_mean[1][-1])
            and only_uses(var, guard if guard is not None else add)
            and (guard is None or only_uses(guard.outputs[0], add)) and only_uses(mean, *mean_readers)
            and (second is None or (only_uses(offset_mean, neg)
                                    and all(only_uses(n.outputs[0], c) for n, c in steps(second[1]))))
            and only_uses(add.outputs[0], sqrt) and only_uses(neg.outputs[0], mul_mean)
            and (gamma_node is None or only_uses(recip.outputs[0], gamma_node))
            and all(only_uses(n.outputs[0], c) for n, c in steps(x_mean[1]) + steps(var_mean[1]))):
        return 0
    if sub_node is None or any(n.graph is not graph for n in [*chain, last]):
        return 0
    if eps <= 0:
        return 0
    scale = np.ones(dim, np.float32) if gamma is None else gamma
    inputs = [x, m.new_initializer(graph, scale, f"{x.name or 'x'}_ln_scale")]
    if beta is not None:
        inputs.append(m.new_initializer(graph, beta, f"{x.name or 'x'}_ln_bias"))
    unguarded = _norm_guard.unguarded(x, dim, memo)
    if unguarded:  # a post-norm residual Add as Sum, as ``layer_norm`` leaves it
        inputs[0] = residual_as_sum(graph, x, {id(n) for n in [*chain, last]})
    op = ir.node("LayerNormalization", inputs, {"axis": -1, "epsilon": eps})
    if unguarded:
        m.replace(graph, last.outputs[0], op, last)
        return 1
    _norm_guard.guard(graph, x, dim, chain, last, op, ("keras_norm_exact", "keras_norm_op"))
    return 1
