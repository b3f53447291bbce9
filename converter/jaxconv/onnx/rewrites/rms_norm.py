"""An RMS norm over the last axis in the form ORT fuses into its SimplifiedLayerNormalization kernel.

``x / sqrt(mean(x * x) + eps) * w`` (Llama's, Mistral's, Gemma's, T5's RMSNorm; ``x * rsqrt(...)``,
``Pow(x, 2)`` too)
lowers to five or six ONNX nodes, each a kernel over the activation or its row statistics. ORT's
optimizer fuses ``Pow(x, 2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(x, .) -> Mul(w)`` into one kernel,
but only that form: not ``Mul(x, x)``, not a Reciprocal and a Mul, not without the scale. So the square
becomes ``Pow(x, 2)``, the reciprocal's product a Div, and a missing scale (a weight of ones that the
``unit_scale`` rule dropped) a Mul by ones.

The fused kernel computes the same ``x / sqrt(mean(x * x) + eps) * w``; the sum of squares in another
order (checked: 7e-7 apart on rows of [2, 64, 128]). Rows with NaN, infinities, squares that overflow
(zeros of x's signs), -0.0 and tiny values give the same elements as the unfused nodes. float32 only.
The rule runs after ``unit_scale``, which would drop the Mul by ones.

Five norms of [2, 64, 128] per model, single-thread process CPU time over jax.jit's
(``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``), alternating, medians, load 3-7: HF Flax Mistral
1.05 -> 1.01, Llama 0.96 -> 0.92, keras-hub Llama (``Pow(x, 2)`` and a Reciprocal) 0.98 -> 0.93.

Rows over 1024 columns (a 7B Llama's 4096) the lowering sums in blocks of 256, as XLA does
(``_norm_match.blocked_row_mean``); up to ``MAX_FUSED_ROW`` columns those blocks become the one ReduceMean
the fusion takes: [16, 64, 4096], one thread, 2.15x -> 0.87x jax.jit (five passes over 16 MB against two);
the fused kernel's one-pass sum 2.2e-6 of float64 on a constant row of 4096 (the blocks: 1.3e-7).

A weight computed from constants (Gemma's ``(1 + w) * norm``) is folded to a 1-D constant here, as
ORT's fusion needs: HF Flax Gemma's five norms then fuse with their weights (the Muls by ``1 + w``
after the fused kernels go; nodes 131 -> 126), outputs bit for bit, one thread's CPU time 0.98x and
0.99x (medians of 61 alternating pairs, load 3.8: within the noise).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _constants as constants
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites._norm_match import blocked_row_mean, eps_add, only_uses, row_const


def rewrite(graph: ir.Graph) -> int:
    """Put the RMS norms over the last axis in ``graph`` in ORT's fusable form; returns how many."""
    return sum(_replace(graph, node) for node in m.each_node(graph, "Sqrt"))


def _replace(graph: ir.Graph, sqrt: ir.Node) -> int:
    found = eps_add(sqrt)
    if found is None or found[2] <= 0:
        return 0
    add, var, _ = found
    mean = m.producer(var, "ReduceMean")
    rank = m.rank(var)
    blocked = blocked_row_mean(var, rank) if mean is None and rank else None
    if blocked is not None:
        axes, square, first = (rank - 1,), m.producer(blocked[0], "Mul", "Pow"), blocked[1][-1]
    elif mean is None or not rank or not m.attr(mean, "keepdims", 1) or m.attr(mean, "noop_with_empty_axes", 0):
        return 0
    else:
        axes, square, first = m.reduce_axes(mean), m.producer(mean.inputs[0], "Mul", "Pow"), mean
    if axes is None or m.normalize_axes(axes, rank) != (rank - 1,) or square is None or len(square.inputs) != 2:
        return 0
    powered = square.op_type == "Pow"
    if (square.inputs[0] is not square.inputs[1]) if not powered else not _twos(square.inputs[1], rank):
        return 0
    x = square.inputs[0]
    if x is None or x.dtype != ir.DataType.FLOAT or x.shape is None or len(x.shape) != rank \
            or not isinstance(x.shape[rank - 1], int):
        return 0
    dim = x.shape[rank - 1]
    uses = m.live_uses(sqrt.outputs[0])
    if sqrt.outputs[0].is_graph_output() or len(uses) != 1:
        return 0
    reader, product = uses[0].node, None
    pair = m.binary(reader, "Div")
    if pair is not None and pair[0] is x and pair[1] is sqrt.outputs[0]:
        norm = reader
    else:  # x * (1 / s) or x * Reciprocal(s)
        one = reader.op_type == "Reciprocal" or (pair is not None and pair[1] is sqrt.outputs[0]
                                                 and m.is_scalar_const(pair[0], 1.0, rtol=0.0))
        if not one or reader.domain not in ("", "ai.onnx") or reader.outputs[0].is_graph_output():
            return 0
        r_uses = m.live_uses(reader.outputs[0])
        if len(r_uses) != 1 or m.binary(r_uses[0].node, "Mul") is None \
                or m.other_input(r_uses[0].node, reader.outputs[0]) is not x:
            return 0
        product = r_uses[0].node
        norm = product
    out = norm.outputs[0]
    if out.shape != x.shape or not (only_uses(square.outputs[0], first) and only_uses(var, add)
                                    and only_uses(add.outputs[0], sqrt)):
        return 0
    if any(n.graph is not graph for n in (square, first, add, sqrt, reader, norm)):
        return 0
    if mean is None:  # the row summed in blocks: one mean, which the fused kernel takes
        mean = ir.node("ReduceMean", [square.outputs[0], m.new_initializer(graph, np.array([-1], np.int64), "rms_norm_axes")],
                       {"keepdims": 1})
        m.replace(graph, var, mean, add)
    scale = _scale(out, dim)
    if product is None and scale is not None and powered and m.const(square.inputs[1]) is not None \
            and m.const(square.inputs[1]).shape == ():
        return 0  # already the fusable form
    two = m.new_initializer(graph, np.array(2.0, np.float32), "rms_norm_two")
    if powered:  # a scalar exponent, as ORT's fusion asks (the same values: x has the rank)
        square.replace_input_with(1, two)
    else:
        power = ir.node("Pow", [x, two])
        graph.insert_before(square, power)
        mean.replace_input_with(0, power.outputs[0])
        power.outputs[0].dtype, power.outputs[0].shape = x.dtype, x.shape
    if product is not None:
        div = ir.node("Div", [x, sqrt.outputs[0]])
        m.replace(graph, out, div, product)
        out = div.outputs[0]
    if scale is None:
        ones = m.new_initializer(graph, np.ones(dim, np.float32), "rms_norm_scale")
        mul = ir.node("Mul", [out, ones])
        graph.insert_after(out.producer(), mul)
        mul.outputs[0].dtype, mul.outputs[0].shape = out.dtype, out.shape
        for use in list(out.uses()):
            if use.node is not mul:
                use.node.replace_input_with(use.idx, mul.outputs[0])
        if out.is_graph_output():
            index = next(i for i, v in enumerate(graph.outputs) if v is out)
            graph.outputs[index] = mul.outputs[0]
            mul.outputs[0].name, out.name = out.name, None
    return 1


def _twos(value: ir.Value | None, rank: int) -> bool:
    """``value`` is a float32 constant (or an expression of constants) of twos of rank ``rank`` at most."""
    arr = constants.evaluate(value)
    return arr is not None and arr.dtype == np.float32 and arr.size >= 1 and arr.ndim <= rank and bool((arr == 2).all())


def _scale(value: ir.Value, dim: int) -> ir.Node | None:
    """The single Mul reader of ``value`` by a row constant (the norm's weight), if any. A weight computed
    from constants (Gemma's ``1 + w``) becomes that constant, read second: constant folding runs after
    the rules, and ORT's fusion takes only a constant scale (else it fuses the Mul by ones the rule
    would add and leaves the weight's Mul as a pass of its own). Correctly rounded arithmetic: the same
    values, and ``(x / s) * c`` is ``c * (x / s)`` bit for bit."""
    uses = m.live_uses(value)
    if value.is_graph_output() or len(uses) != 1 or m.binary(uses[0].node, "Mul") is None:
        return None
    mul = uses[0].node
    weight = m.other_input(mul, value)
    if row_const(weight, dim) is not None:
        return mul
    arr = constants.evaluate(weight)
    rank = len(value.shape) if value.shape is not None else 0
    if arr is None or arr.dtype != np.float32 or not 1 <= arr.ndim <= rank or arr.shape[-1] != dim \
            or any(n != 1 for n in arr.shape[:-1]) or value.producer() is None or mul.graph is not value.producer().graph:
        return None
    mul.replace_input_with(0, value)
    mul.replace_input_with(1, m.new_initializer(mul.graph, arr.reshape(dim), "rms_norm_weight"))  # ORT fuses 1-D only
    return mul
