"""float32 arithmetic that the ONNX lowering computes in float64, written back in float32 for TFLite.

The lowering widens two kinds of float32 arithmetic to float64 (``onnx/ops/complex_arith.py``):
XLA's fused multiply-add of a complex product, ``Cast32(Cast64(a) * Cast64(b) + Cast64(c))``,
and, once a factor of 1 is folded away, plain ``Cast32(Cast64(a) + Cast64(c))``. TFLite has no
float64 kernels, so ``narrow_float64`` replaces each such island before translation:

- ``Cast32(Cast64(a) op Cast64(b))`` for op in Add, Sub, Mul is ``a op b`` in float32: a sum,
  difference or product of two float32 values rounded to float64 and then to float32 is the float32
  result (double rounding is innocuous when the wide type has 2 p + 2 bits).
- ``Cast32(Cast64(a) * Cast64(b) + Cast64(c))`` becomes ``Fma32(a, b, c)`` (domain ``jaxconv.tf``):
  Dekker's exact product error and Knuth's exact sum error in float32 (``fma32``): the float64
  route's result, NaN, infinities and zero signs included (products beyond float32's range are
  scaled); like it, one ulp from XLA's FMA where the exact product is a tie that only ``c`` breaks.

Float64 initializers whose values float32 holds exactly count as float32 values. Anything else in
float64 stays, and TFLite's float64 check names it.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value

DOMAIN = "jaxconv.tf"
_FLOAT, _DOUBLE = 1, 11


def _graphs(graph: Any) -> Iterator[Any]:
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def _cast_to(node: Any) -> int | None:
    if node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


def narrow_float64(model: Any) -> int:
    """Rewrite the float32 islands of ``model`` (in place, every subgraph); returns how many."""
    from onnx import helper, numpy_helper

    types = _elem_types(model)
    count = 0
    for g in _graphs(model.graph):
        producer = {o: n for n in g.node for o in n.output}
        have = {i.name for i in g.initializer}
        added: list[Any] = []

        def source(name: str) -> str | None:
            """The float32 name whose float64 copy ``name`` is (a Cast, or a float32-exact constant)."""
            node = producer.get(name)
            if node is not None:
                ok = _cast_to(node) == _DOUBLE and types.get(node.input[0]) == _FLOAT
                return str(node.input[0]) if ok else None
            init = next((i for i in g.initializer if i.name == name and i.data_type == _DOUBLE), None)
            if init is None:
                return None
            wide = numpy_helper.to_array(init)
            with np.errstate(all="ignore"):
                narrow = wide.astype(np.float32)
            if not np.array_equal(narrow.astype(np.float64), wide, equal_nan=True):
                return None
            narrow_name = f"{name}__f32"
            if narrow_name not in have:
                have.add(narrow_name)
                added.append(numpy_helper.from_array(narrow, narrow_name))
            return narrow_name

        new_nodes, before = [], count
        for node in g.node:
            replaced = _replacement(node, producer, source, helper) if _cast_to(node) == _FLOAT else None
            if replaced is None:
                new_nodes.append(node)
                continue
            for p in node.metadata_props:
                replaced.metadata_props.add(key=p.key, value=p.value)
            new_nodes.append(replaced)
            count += 1
        if count > before:
            g.initializer.extend(added)
            del g.node[:]
            g.node.extend(new_nodes)
    if count:
        if not any(o.domain == DOMAIN for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
        _drop_dead(model)
    return count


def _elem_types(model: Any) -> dict[str, int]:
    """Element type per value name, every subgraph included (ONNX shape inference)."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001  (unknown types only leave islands in place)
        inferred = model
    out: dict[str, int] = {}
    for g in _graphs(inferred.graph):
        for v in list(g.input) + list(g.value_info) + list(g.output):
            if v.type.HasField("tensor_type"):
                out[v.name] = int(v.type.tensor_type.elem_type)
        for i in g.initializer:
            out[i.name] = int(i.data_type)
    return out


def _replacement(cast: Any, producer: dict[str, Any], source: Any, helper: Any) -> Any:
    """The float32 node standing for ``cast`` (a Cast to float32 of a float64 island), or None."""
    top = producer.get(cast.input[0])
    if top is None or top.domain not in ("", "ai.onnx"):
        return None
    if top.op_type == "Add":
        for m, c in ((top.input[0], top.input[1]), (top.input[1], top.input[0])):
            mul = producer.get(m)
            if mul is None or mul.op_type != "Mul":
                continue
            a, b, z = source(mul.input[0]), source(mul.input[1]), source(c)
            if a and b and z:
                return helper.make_node("Fma32", [a, b, z], list(cast.output), domain=DOMAIN)
    if top.op_type in ("Add", "Sub", "Mul"):
        x, y = source(top.input[0]), source(top.input[1])
        if x and y:
            return helper.make_node(top.op_type, [x, y], list(cast.output))
    return None


def _drop_dead(model: Any) -> None:
    """Remove nodes whose outputs nothing reads (the float64 islands left behind), to a fixed point."""
    while True:
        used = set()
        for g in _graphs(model.graph):
            for node in g.node:
                used.update(node.input)
            used.update(o.name for o in g.output)
        removed = False
        for g in _graphs(model.graph):
            keep = [n for n in g.node
                    if any(o in used for o in n.output) or n.op_type in ("Loop", "If", "Scan")]
            if len(keep) != len(g.node):
                del g.node[:]
                g.node.extend(keep)
                removed = True
        if not removed:
            return


def fma32(tf: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` in float32 as one fused multiply-add (``_fused``); where ``a * b`` of finite
    factors overflows float32 (both are then at least 1), the same on ``a`` and ``b`` scaled by
    2^-68 and ``c`` by 2^-136, the result scaled back: float64 holds such a product, and the sum
    may be finite or of the other sign's infinity."""
    out = _fused(tf, a, b, c)
    big = tf.constant(np.finfo(np.float32).max, a.dtype)
    over = tf.logical_and(tf.abs(a * b) > big, tf.logical_and(tf.abs(a) <= big, tf.abs(b) <= big))
    down, up = tf.constant(2.0**-68, a.dtype), tf.constant(2.0**68, a.dtype)
    scaled = _fused(tf, a * down, b * down, c * down * down) * up * up
    return tf.where(over, scaled, out)


def _fused(tf: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` in float32 with the product's and the sum's exact errors added back (Dekker's
    product with a 2^12 + 1 split, Knuth's two-sum): the fused multiply-add but for a rare one-ulp
    double rounding. Where the error terms are not finite, the plain ``a * b + c``; where they are
    0, ``fl(a * b + c)`` itself (keeping its zero sign)."""
    p = a * b
    k = tf.constant(4097.0, a.dtype)
    huge, down, up = (tf.constant(v, a.dtype) for v in (2.0**100, 2.0**-40, 2.0**40))
    one = tf.ones_like(a)

    def split(x: Any) -> tuple[Any, Any]:
        t = x * k
        hi = t - (t - x)
        return hi, x - hi

    # factors above 2^100 are split at 2^-40 of their size (x * 4097 must not overflow); the error
    # of the scaled product, scaled back by a power of 2, is the product's
    a_big, b_big = tf.abs(a) > huge, tf.abs(b) > huge
    a_s, b_s = a * tf.where(a_big, down * one, one), b * tf.where(b_big, down * one, one)
    p_s = a_s * b_s
    (ah, al), (bh, bl) = split(a_s), split(b_s)
    err = ((ah * bh - p_s) + ah * bl + al * bh) + al * bl
    err = err * tf.where(a_big, up * one, one) * tf.where(b_big, up * one, one)
    s = p + c
    back = s - p
    tail = (p - (s - back)) + (c - back)
    corr = tail + err
    big = tf.constant(np.finfo(np.float32).max, a.dtype)
    # not finite as NaN or beyond: TF's graph optimizer turns logical_not(|corr| <= big) into
    # |corr| > big, which is False for NaN
    unusable = tf.logical_or(tf.not_equal(corr, corr), tf.abs(corr) > big)
    keep = tf.logical_or(unusable, tf.equal(corr, tf.zeros_like(corr)))
    return tf.where(keep, s, s + corr)


@handles("Fma32")
def fma_op(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    return Value(fma32(tr.tf, ins[0].t, ins[1].t, ins[2].t), "float32")
