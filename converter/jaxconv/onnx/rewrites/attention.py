"""Scaled dot-product attention between head Transposes as the Attention op (opset 23), behind a guard.

The lowering writes ``softmax(where(mask, q @ kᵀ * c, fill)) @ v`` on heads split by a Reshape to
``[b, t, h, dh]`` and a Transpose to ``[b, h, t, dh]`` (``[b, h, dh, t]`` for k), and the output moved
back by a Transpose and a Reshape to ``[b, t, h * dh]``. ONNX Runtime runs that as four Transposes
(which do not use a second thread), a FusedMatMul, the mask, a Softmax and a MatMul; its Attention
kernel reads q, k and v in the ``[b, t, h * dh]`` layout with strided products, one (batch, head)
pair per task. CPU time per call against today's graph (one process, alternating, load 7-9): the
benchmark transformer 0.92x on one thread, 1.00x on two; BERT 0.96x and 0.94x; Hugging Face's
Flax decoders (an additive bias) Llama 0.95, Gemma 0.93-0.97, Mistral 0.88-0.98.

The Attention op computes the same numbers only where the scores are finite and not huge: a masked
score is ``s + A`` with ``A`` a float mask (0 kept, ``-2**100`` dropped) where ``jnp.where`` writes
the fill whatever ``s`` is (a NaN or +inf there would reach the softmax), and ONNX Runtime writes a
zero row where every key of a query is dropped (``jax.nn.softmax`` gives NaN for a -inf fill and
the mean of ``v`` for a finite one). So

    If(bad, then: today's nodes, else: Attention(q, k, v, A))
    bad = not (max |q_i| · max |k_j| · c < B)  [or some query keeps no key: a -inf fill, keras' zeroing]

with ``q_i``, ``k_j`` the rows of each head (``ReduceSumSquare`` over the head size, then ``ReduceMax``;
a NaN, which ``ReduceMax`` skips, or an overflow found by their sums, makes ``bad`` true too) and
``B = min(2**70, |fill| / 2)``. Every score is then below ``B`` in magnitude (Cauchy-Schwarz), so
``s - 2**100`` rounds to ``-2**100`` and the dropped keys get weight 0 as with the fill (a finite fill
``f`` at most -1e6, e.g. ``finfo.min`` or keras' -1e9, gives ``exp(f - max) = 0`` for a row that keeps
a key); a row dropped whole is uniform as with a finite fill; kept scores are ``s + 0``. keras' second
``Where(mask, 0, p)`` after the Softmax changes nothing then. The scale ``c`` is a positive constant
the scores are multiplied or divided by (ONNX Runtime folds that division into its product as
``1 / c`` today as well).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m

MIN_OPSET = 23
_LOWEST = float(np.finfo(np.float32).min)
_DROP = np.float32(2.0**100)  # the float mask's fill, negated
_BOUND = np.float32(2.0**70)  # |q| |k| c below it: every score is, and s - 2**100 rounds to -2**100
_FINITE_FILL = -1e6  # a finite fill f up to this (keras' -1e9, finfo.min): the guard asks |s| < |f| / 2

Masks = dict[tuple[int, bool, str, str], tuple[ir.Value, ir.Value]]  # per mask and lengths


def rewrite(graph: ir.Graph, opset: int) -> int:
    """Rewrite each attention block of ``graph`` (not its subgraphs); returns how many."""
    if opset < MIN_OPSET:
        return 0
    masks: Masks = {}
    return sum(_rewrite(graph, node, masks) for node in m.each_node(graph, "Softmax"))


def _only_use(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    node = uses[0].node
    return node if node.op_type == op_type and node.domain in ("", "ai.onnx") else None


def _transposed(value: ir.Value | None, perm: list[int]) -> ir.Node | None:
    node = m.producer(value, "Transpose")
    if node is None or list(m.attr(node, "perm", []) or []) != perm:
        return None
    return node


def _keys(value: ir.Value | None) -> list[ir.Node] | None:
    """The Transposes that make kᵀ [b, h, dh, L] of k [b, L, h, dh]: one ``[0, 2, 3, 1]``, or a
    ``[0, 1, 3, 2]`` of a ``[0, 2, 1, 3]`` (before the clean-up composes them), the last one first."""
    one = _transposed(value, [0, 2, 3, 1])
    if one is not None:
        return [one]
    last = _transposed(value, [0, 1, 3, 2])
    first = _transposed(last.inputs[0], [0, 2, 1, 3]) if last is not None else None
    return None if first is None or last is None else [last, first]


def _scalar(value: ir.Value | None) -> float | None:
    arr = m.const(value)
    if arr is None or arr.size != 1 or arr.dtype != np.float32:
        return None
    return float(arr.reshape(()))


def _heads(value: ir.Value) -> tuple[object, object, int, int] | None:
    """(batch, length, heads, head size) of a float32 [b, t, h, dh] value with static h and dh."""
    if value.dtype != ir.DataType.FLOAT or value.shape is None or len(value.shape) != 4:
        return None
    b, t, h, dh = value.shape
    if not isinstance(h, int) or not isinstance(dh, int) or h < 1 or dh < 1:
        return None
    return b, t, h, dh


def _rewrite(graph: ir.Graph, softmax: ir.Node, masks: Masks) -> int:
    if m.attr(softmax, "axis", -1) not in (-1, 3) or m.rank(softmax.inputs[0]) != 4:
        return 0
    masking = _masking(softmax.inputs[0])
    if masking is None:
        return 0
    scores, chain, cond, keep, fill = masking
    scale = np.float32(1.0)
    scaled = m.producer(scores, "Div", "Mul")
    if scaled is not None:
        c = _scalar(scaled.inputs[1])
        if c is None or not np.isfinite(c) or c <= 0 or scaled.inputs[0] is None:
            return 0
        scale = np.float32(1.0) / np.float32(c) if scaled.op_type == "Div" else np.float32(c)
        if not (np.isfinite(scale) and scale > 0):
            return 0
        chain.insert(0, scaled)
        scores = scaled.inputs[0]
        if _only_use(scores, scaled.op_type) is None:
            return 0
    qk = m.producer(scores, "MatMul")
    if qk is None:
        return 0
    q_scaled = m.producer(qk.inputs[0], "Div", "Mul")  # q scaled after its Transpose
    if q_scaled is not None and (_scalar(q_scaled.inputs[1]) is None
                                 or _only_use(qk.inputs[0], "MatMul") is None):
        return 0
    q_t, k_ts = _transposed((q_scaled or qk).inputs[0], [0, 2, 1, 3]), _keys(qk.inputs[1])
    probs, zeroed = softmax.outputs[0], _zeroing(softmax.outputs[0], cond, keep)  # keras: Where(mask, 0, p)
    if zeroed is not None:
        chain.append(zeroed)
        probs = zeroed.outputs[0]
    round_trip = _round_trip(probs)  # Hugging Face's: Transposes and Reshapes that give p back
    if round_trip:
        chain += round_trip
        probs = round_trip[-1].outputs[0]
    pv = _only_use(probs, "MatMul")
    if q_t is None or k_ts is None or pv is None or pv.inputs[0] is not probs:
        return 0
    v_t = _transposed(pv.inputs[1], [0, 2, 1, 3])
    back = _only_use(pv.outputs[0], "Transpose")
    if v_t is None or back is None or list(m.attr(back, "perm", []) or []) != [0, 2, 1, 3]:
        return 0
    merge = _only_use(back.outputs[0], "Reshape")
    if merge is None:
        return 0
    q4, k4, v4 = q_t.inputs[0], k_ts[-1].inputs[0], v_t.inputs[0]
    if q4 is None or k4 is None or v4 is None:
        return 0
    qs, ks, vs = _heads(q4), _heads(k4), _heads(v4)
    if qs is None or ks is None or vs is None:
        return 0
    (b, t, h, dh), (kb, kt, kh, kdh), (vb, vt, vh, vdh) = qs, ks, vs
    out = merge.outputs[0]
    if not (b == kb == vb and kt == vt and h == kh == vh and dh == kdh) \
            or not _heads_merged(merge, (b, t, h * vdh)):
        return 0
    if out.is_graph_output():  # the If's branch takes ``out`` as its output: the graph reads a copy
        copy = ir.node("Identity", [out])
        graph.insert_after(merge, copy)
        copy.outputs[0].type, copy.outputs[0].shape = out.type, out.shape
        index = next(i for i, v in enumerate(graph.outputs) if v is out)
        graph.outputs[index] = copy.outputs[0]
        copy.outputs[0].name, out.name = out.name, None
    exact = [qk, *chain, softmax, pv, back, merge]
    moved = {id(n) for n in exact}
    for node in (q_t, *k_ts, v_t):  # a Transpose only the exact branch reads goes into it
        readers = [u.node for u in node.outputs[0].uses()]
        if id(node) not in moved and all(id(r) in moved for r in readers) \
                and not node.outputs[0].is_graph_output():
            exact.insert(0, node)
            moved.add(id(node))

    def add(node: ir.Node) -> ir.Value:
        graph.insert_before(merge, node)
        return node.outputs[0]

    if q_scaled is not None:  # the same scalar op on q before its Transpose, read by both branches
        q_div = add(ir.node(q_scaled.op_type, [q4, q_scaled.inputs[1]]))
        q_div.type, q_div.shape, q4 = q4.type, q4.shape, q_div
        moved_back = ir.node("Transpose", [q4], {"perm": [0, 2, 1, 3]})
        graph.insert_before(qk, moved_back)
        qk.replace_input_with(0, moved_back.outputs[0])  # not a scaled product ORT would fold into its alpha
        exact.append(moved_back)
    exact.sort(key=lambda n: _position(graph, n))

    flat = m.new_initializer(graph, np.array([0, 0, -1], np.int64), "heads_merged")
    q3, k3, v3 = (_merged(x, add, flat) for x in (q4, k4, v4))
    inputs = [q3, k3, v3]
    if cond is not None:
        additive, rows_kept = _mask(graph, cond, keep, (q4, k4), masks, add)
        inputs.append(additive)
    last = m.new_initializer(graph, np.array([-1], np.int64), "head_axis")
    rows = [add(ir.node("ReduceSumSquare", [x, last], {"keepdims": 0})) for x in (q4, k4)]  # |q_i|², |k_j|²
    norms = [add(ir.node("Sqrt", [add(ir.node("ReduceMax", [r], {"keepdims": 0}))])) for r in rows]
    bound = add(ir.node("Mul", [add(ir.node("Mul", norms)), _scalar_init(graph, scale, "scale")]))
    sums = [add(ir.node("ReduceSum", [r], {"keepdims": 0})) for r in rows]  # NaN, which ReduceMax skips
    nan = add(ir.node("IsNaN", [add(ir.node("Add", sums))]))
    limit = _BOUND if fill in (None, -np.inf) else min(_BOUND, np.float32(-fill / 2))
    bad = add(ir.node("Not", [add(ir.node("Less", [bound, _scalar_init(graph, limit, "score_bound")]))]))
    bad = add(ir.node("Or", [bad, nan]))
    if cond is not None:
        if fill == -np.inf or zeroed is not None:
            bad = add(ir.node("Or", [bad, add(ir.node("Not", [rows_kept]))]))
    fast = ir.node("Attention", inputs, {"q_num_heads": h, "kv_num_heads": h, "scale": float(scale)})
    m.branch_on(graph, bad, out, exact, fast, bad.producer(), ("attention_exact", "attention_op"))
    return 1


def _masking(x: ir.Value) -> tuple[ir.Value, list[ir.Node], ir.Value | None, bool, float | None] | None:
    """(scores, the mask's nodes, mask, whether true keeps, fill) of the Softmax's input ``x``:
    ``Where(mask, s, fill)``, ``Where(mask, fill, s)``, ``s + Where(mask, 0, fill)`` (Hugging Face's bias; the
    same numbers where |s| is below 2**70, as the guard asks: ``s + 0 = s`` and ``s + fill`` rounds to
    ``fill``), or ``s`` alone (no mask); the fill -inf or ``finfo(float32).min``."""
    if _only_use(x, "Softmax") is None or x.shape is None:
        return None
    node = m.producer(x, "Where", "Add")
    if node is None:
        return x, [], None, True, None
    if node.op_type == "Add":
        for s, bias in (node.inputs, node.inputs[::-1]):
            where = m.producer(bias, "Where")
            if s is None or s.shape != x.shape or where is None or m.producer(s, "Where", "Add") is not None:
                continue
            cond, a, b = where.inputs
            if _scalar(a) == 0.0 and _scalar(b) in (-np.inf, _LOWEST):  # s + -0.0 and s + 0.0 are s
                found = (s, [node], cond, True, _scalar(b))
            elif _scalar(b) == 0.0 and _scalar(a) in (-np.inf, _LOWEST):
                found = (s, [node], cond, False, _scalar(a))
            else:
                continue
            usable = cond is not None and cond.dtype == ir.DataType.BOOL and _only_use(s, "Add") is not None
            return found if usable else None
        return x, [], None, True, None
    if len(node.inputs) != 3:
        return None
    cond, a, b = node.inputs
    fill_b, fill_a = _scalar(b), _scalar(a)
    if fill_b is not None and fill_a is None:
        fill, s, keep = fill_b, a, True
    elif fill_a is not None and fill_b is None:
        fill, s, keep = fill_a, b, False
    else:
        return None
    if not (fill == -np.inf or -np.inf < fill <= _FINITE_FILL) or cond is None or s is None \
            or cond.dtype != ir.DataType.BOOL or s.shape != x.shape or _only_use(s, "Where") is None:
        return None  # the mask broadcasts to the scores' shape: [b or 1, h or 1, t or 1, L or 1] at most
    return s, [node], cond, keep, fill


def _round_trip(p: ir.Value) -> list[ir.Node]:
    """``Transpose(Reshape(Reshape(Transpose(p, perm), s1), s2), perm⁻¹)`` with ``s2`` the first
    Transpose's static shape, or ``Transpose(Transpose(p, perm), perm⁻¹)`` (the Reshapes dropped by
    ``symbolic``), each node the single reader of the one before: ``p``'s values again."""
    for ops in (("Transpose", "Reshape", "Reshape", "Transpose"), ("Transpose", "Transpose")):
        nodes = _chain(p, ops)
        if nodes and _gives_back(p, nodes):
            return nodes
    return []


def _chain(value: ir.Value, op_types: tuple[str, ...]) -> list[ir.Node]:
    """The nodes of ``op_types`` that follow ``value``, each the single reader of the one before; [] if not."""
    nodes: list[ir.Node] = []
    for op_type in op_types:
        uses = list(value.uses())
        if len(uses) != 1 or value.is_graph_output() or uses[0].node.op_type != op_type \
                or uses[0].node.domain not in ("", "ai.onnx") or uses[0].idx != 0:
            return []
        nodes.append(uses[0].node)
        value = nodes[-1].outputs[0]
    return nodes


def _gives_back(p: ir.Value, nodes: list[ir.Node]) -> bool:
    """True when the chain's inverse Transposes (and Reshapes back to the moved shape) give ``p`` again."""
    first, last = (list(m.attr(n, "perm", []) or []) for n in (nodes[0], nodes[-1]))
    moved = nodes[0].outputs[0].shape
    identity = list(range(len(first)))
    return bool(first) and sorted(first) == identity and [first[i] for i in last] == identity \
        and moved is not None and moved.is_static() and nodes[-2].outputs[0].shape == moved \
        and nodes[-1].outputs[0].shape == p.shape and p.shape is not None


def _zeroing(p: ir.Value, cond: ir.Value | None, keep: bool) -> ir.Node | None:
    """keras' ``Where(mask, 0, p)`` after the Softmax: +0 at the places the mask dropped, by the same mask."""
    uses = list(p.uses())
    if cond is None or len(uses) != 1 or p.is_graph_output():
        return None
    node = uses[0].node
    if m.producer(node.outputs[0], "Where") is not node or len(node.inputs) != 3:
        return None
    mask, a, b = node.inputs
    zero, kept = (a, b) if not keep else (b, a)
    z = m.const(zero)
    if kept is not p or z is None or z.size != 1 or z.reshape(-1)[0] != 0 or np.signbit(z.reshape(-1)[0]):
        return None
    if not m.same_value(mask, cond, depth=2) or _only_use(node.outputs[0], "MatMul") is None:
        return None
    return node


def _heads_merged(merge: ir.Node, want: tuple) -> bool:
    """Whether the Reshape ``merge`` of [b, t, h, dh] gives [b, t, h * dh]: by its result's shape, or by its
    constant target (0 copies a dimension; -1 is the rest)."""
    out = merge.outputs[0]
    if out.dtype not in (None, ir.DataType.FLOAT):
        return False
    if out.shape is not None and tuple(out.shape) == want:
        return True
    target = m.const(merge.inputs[1]) if len(merge.inputs) > 1 else None
    if target is None or target.shape != (3,) or m.attr(merge, "allowzero", 0):
        return False
    dims = [int(d) for d in target]
    return dims[2] in (want[2], -1) and dims[0] in (0, want[0]) and dims[1] in (0, want[1], -1) \
        and (dims[1] != -1 or dims[2] != -1)


def _merged(x: ir.Value, add: Callable[[ir.Node], ir.Value], flat: ir.Value) -> ir.Value:
    """``x`` [b, t, h, dh] as [b, t, h * dh]: the value a Reshape split, else a Reshape of ``x``."""
    split = m.producer(x, "Reshape")
    if split is not None and split.inputs[0] is not None and split.inputs[0].shape is not None \
            and len(split.inputs[0].shape) == 3 and tuple(split.inputs[0].shape)[:2] == tuple(x.shape)[:2] \
            and split.inputs[0].shape[2] == x.shape[2] * x.shape[3]:
        return split.inputs[0]
    return add(ir.node("Reshape", [x, flat]))


def _scalar_init(graph: ir.Graph, x: np.float32, name: str) -> ir.Value:
    """A float32 scalar initializer."""
    return m.new_initializer(graph, np.array(x, np.float32), name)


def _position(graph: ir.Graph, node: ir.Node) -> int:
    for i, n in enumerate(graph):
        if n is node:
            return i
    return -1


def _mask(graph: ir.Graph, cond: ir.Value, keep: bool, qk: tuple[ir.Value, ir.Value], masks: Masks,
          add: Callable[[ir.Node], ir.Value]) -> tuple[ir.Value, ir.Value]:
    """The float mask (0 kept, -2**100 dropped) with its last two axes [t, L] as the op reads them, and
    whether every query keeps a key; once per mask."""
    lengths = (qk[0].shape[1], qk[1].shape[1])
    key = (id(cond), keep, str(lengths[0]), str(lengths[1]))
    found = masks.get(key)
    if found is not None and all(v.producer() is not None and v.producer().graph is graph for v in found):
        return found
    if cond.shape is None or len(cond.shape) < 2 or tuple(cond.shape)[-2:] != lengths:
        sizes = [add(ir.node("Shape", [x], {"start": 1, "end": 2})) for x in qk]
        cond = add(ir.node("Expand", [cond, add(ir.node("Concat", sizes, {"axis": 0}))]))
    zero = _scalar_init(graph, np.float32(0.0), "kept")
    drop = _scalar_init(graph, -_DROP, "dropped")
    additive = add(ir.node("Where", [cond, zero, drop] if keep else [cond, drop, zero]))
    kept = cond if keep else add(ir.node("Not", [cond]))
    keys_axis = m.new_initializer(graph, np.array([-1], np.int64), "keys_axis")
    any_key = add(ir.node("ReduceMax", [kept, keys_axis], {"keepdims": 0}))
    rows_kept = add(ir.node("ReduceMin", [any_key], {"keepdims": 0}))
    masks[key] = (additive, rows_kept)
    return additive, rows_kept
