"""A GRU cell written in a lax.scan, as the ONNX GRU op.

Matches the Loop a forward ``lax.scan`` lowers to (after ``loops`` moved ``xs @ wx`` out of it)
whose body is the GRU cell ONNX calls ``linear_before_reset=0``::

    gx = x @ wx + b;   r, z = split(sigmoid(gx[:, :2H] + h @ wh));   n = tanh(gx[:, 2H:] + (r * h) @ whn)
    h' = (1 - z) * n + z * h;   carry h', emit h'

with the r and z columns in either order, sigmoid written exactly as ``1 / (1 + exp(-a))``, and
the weights constants. ORT's GRU kernel runs the whole sequence in one op; like the LSTM rule,
it runs only when the sequence and the initial state are finite, else the exact Loop does.

Off by default (``ENABLED``), by measurement: on the benchmark's GRU (t64 b16 h256, 2 cores)
the GRU op beats the Loop with one intra-op thread (6.3 vs 7.3 ms; jax.jit 8.1) but with ORT's
default two threads it takes 19.8 ms against the Loop's 8.9: its kernel hands every step's small
products to the thread pool, and waking the pool 64 times costs more than the products.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.lstm import _const, _guarded, _is_counter_index, _sigmoid_of

ENABLED = False  # see the module docstring: slower than the Loop at ORT's default thread count


def _columns(value: ir.Value | None, rows_at_least: list[int]) -> tuple[ir.Value, int, int] | None:
    """(source, start, stop) when ``value`` is columns start:stop of a 2-D value, all rows kept
    (a Slice, or an output of a Split along the last axis).

    A Slice's row count may be unknown here: the rows it keeps go into ``rows_at_least`` for the
    caller to compare with the batch size.
    """
    node = m.producer(value)
    if node is None:
        return None
    if node.op_type == "Split":
        axis = m.attr(node, "axis", 0)
        src = node.inputs[0]
        sizes = m.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        if src is None or m.rank(src) != 2 or axis not in (1, -1) or sizes is None:
            return None
        k = value.index()
        start = int(np.sum(sizes[:k]))
        return src, start, start + int(sizes[k])
    if node.op_type != "Slice" or len(node.inputs) < 4:
        return None
    starts, ends, axes = (m.const(v) for v in node.inputs[1:4])
    steps = m.const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    src = node.inputs[0]
    if starts is None or ends is None or axes is None or m.rank(src) not in (2, None):
        return None
    if steps is not None and np.any(steps != 1):
        return None
    spans = {int(a) % 2: (int(s), int(e)) for a, s, e in zip(np.atleast_1d(axes), np.atleast_1d(starts),
                                                              np.atleast_1d(ends))}
    rows = spans.get(0, (0, 1 << 62))
    if 1 not in spans or rows[0] != 0:
        return None
    rows_at_least.append(rows[1])
    return src, spans[1][0], spans[1][1]


def _pair(value: ir.Value | None, op: str) -> tuple[ir.Value, ir.Value] | None:
    return m.binary(m.producer(value), op)


def _loop_shape(loop: ir.Node) -> int | None:
    """The trip count of a Loop that counts from 0 by 1 while ``counter + 1 < T``, else None."""
    body = loop.attributes["body"].value
    counter = body.inputs[2]
    start = m.folded(loop.inputs[2])
    step = _pair(body.outputs[1], "Add")
    less = _pair(body.outputs[0], "Less")
    if start is None or int(start) != 0 or step is None or step[0] is not counter:
        return None
    if not m.is_scalar_const(step[1], 1.0):
        return None
    if less is None or less[0] is not body.outputs[1] or m.folded(less[1]) is None:
        return None
    first, pair = m.folded(loop.inputs[1]), _pair(loop.inputs[1], "Less")
    if first is None and pair is not None and m.folded(pair[0]) is not None and m.folded(pair[1]) is not None:
        first = int(m.folded(pair[0])) < int(m.folded(pair[1]))  # the first step's condition, not folded yet
    if first is None or not bool(first):
        return None
    return int(m.folded(less[1]))


def _match(loop: ir.Node) -> dict | None:
    body = loop.attributes["body"].value
    if len(loop.inputs) != 4 or len(body.inputs) != 4 or len(body.outputs) != 4 or len(loop.outputs) != 3:
        return None
    if loop.inputs[0] is not None:
        return None
    steps = _loop_shape(loop)
    if steps is None:
        return None
    counter, h_in = body.inputs[2], body.inputs[3]
    h_out, ys = body.outputs[2], body.outputs[3]
    ident = m.producer(ys, "Identity")
    if (ident.inputs[0] if ident is not None else ys) is not h_out:
        return None
    # h' = (1 - z) * n + z * h
    terms = _pair(h_out, "Add")
    if terms is None:
        return None
    z = n = None
    for t1, t2 in (terms, terms[::-1]):
        a, b = _pair(t1, "Mul") or (None, None), _pair(t2, "Mul") or (None, None)
        for zz, hh in ((b[0], b[1]), (b[1], b[0])):
            if hh is h_in and zz is not None:
                for one_minus, nn in ((a[0], a[1]), (a[1], a[0])):
                    sub = _pair(one_minus, "Sub")
                    if sub is not None and sub[1] is zz and m.is_scalar_const(sub[0], 1.0):
                        z, n = zz, nn
    if z is None or m.producer(n, "Tanh") is None:
        return None
    # n = tanh(gx_n + (r * h) @ whn)
    inner = _pair(m.producer(n, "Tanh").inputs[0], "Add")
    if inner is None:
        return None
    r = whn = gx_n = None
    for mm_v, gx_v in (inner, inner[::-1]):
        mm = m.producer(mm_v, "MatMul")
        rh = _pair(mm.inputs[0], "Mul") if mm is not None else None
        if rh is None or m.const(mm.inputs[1]) is None:
            continue
        for rr, hh in (rh, rh[::-1]):
            if hh is h_in:
                r, whn, gx_n = rr, m.const(mm.inputs[1]), gx_v
    if r is None:
        return None
    # r, z: columns of sigmoid(gx_rz + h @ wh)
    rows: list[int] = []
    rc, zc = _columns(r, rows), _columns(z, rows)
    if rc is None or zc is None or rc[0] is not zc[0]:
        return None
    pre = _sigmoid_of(rc[0])
    add = _pair(pre, "Add")
    if add is None:
        return None
    wh = gx_rz = None
    for mm_v, gx_v in (add, add[::-1]):
        mm = m.producer(mm_v, "MatMul")
        if mm is not None and mm.inputs[0] is h_in and m.const(mm.inputs[1]) is not None:
            wh, gx_rz = m.const(mm.inputs[1]), gx_v
    if wh is None:
        return None
    # gx_rz and gx_n: columns of gx = xs[t] @ wx + b
    a_cols, n_cols = _columns(gx_rz, rows), _columns(gx_n, rows)
    if a_cols is None or n_cols is None or a_cols[0] is not n_cols[0]:
        return None
    gx = a_cols[0]
    proj, bias = _projection(gx, loop, counter)
    if proj is None:
        return None
    xs, wx = proj.inputs[0], m.const(proj.inputs[1])
    hidden = whn.shape[0] if whn.ndim == 2 else 0
    if not hidden or whn.shape != (hidden, hidden) or wx is None or wx.dtype != np.float32:
        return None
    if xs.shape is None or len(xs.shape) != 3 or xs.shape[0] != steps or wx.shape[0] != xs.shape[2]:
        return None
    if not isinstance(xs.shape[1], int) or min(rows, default=xs.shape[1]) < xs.shape[1]:
        return None  # every Slice keeps all rows
    if bias is None:
        bias = np.zeros(wx.shape[1], np.float32)
    bias = bias.reshape(-1, bias.shape[-1])
    if not np.all(bias == bias[:1]) or bias.shape[-1] != wx.shape[1]:
        return None
    # column spans: r and z within the sigmoid input (= gx_rz's columns), n within gx
    width = a_cols[2] - a_cols[1]
    if wh.shape != (hidden, width) or n_cols[2] - n_cols[1] != hidden:
        return None
    if rc[2] - rc[1] != hidden or zc[2] - zc[1] != hidden or max(rc[2], zc[2]) > width:
        return None
    if n_cols[2] > wx.shape[1] or a_cols[2] > wx.shape[1]:
        return None
    cols = {"r": (a_cols[1] + rc[1], rc[1]), "z": (a_cols[1] + zc[1], zc[1]), "n": (n_cols[1], None)}
    return {"proj": proj, "xs": xs, "wx": wx, "wh": wh, "whn": whn, "b": bias[0], "hidden": hidden,
            "steps": steps, "h0": loop.inputs[3], "cols": cols}


def _projection(gx: ir.Value, loop: ir.Node, counter: ir.Value) -> tuple[ir.Node | None, np.ndarray | None]:
    """(the outer ``MatMul(xs, wx)``, the bias) for ``gx = Squeeze(Slice(xs @ wx, t)) (+ b)``."""
    bias = None
    terms = [gx]
    add = _pair(gx, "Add")
    if add is not None:
        terms = list(add)
    proj = None
    for term in terms:
        sq = m.producer(term, "Squeeze")
        sl = m.producer(sq.inputs[0], "Slice") if sq is not None else None
        outer = m.producer(sl.inputs[0], "MatMul") if sl is not None else None
        if outer is not None:
            if (outer.graph is not loop.graph or m.const(outer.inputs[1]) is None
                    or list(np.atleast_1d(m.const(sl.inputs[3]))) != [0]
                    or not _is_counter_index(sl.inputs[1], counter)):
                return None, None
            proj = outer
        elif m.folded(term) is not None:
            bias = m.folded(term).astype(np.float32)
        else:
            return None, None
    return proj, bias


def _zrh(got: dict, w: np.ndarray, n_w: np.ndarray | None = None) -> np.ndarray:
    """ONNX's (z, r, h) gate rows from jax's columns of ``w`` (``n_w`` holds h's when separate)."""
    hidden = got["hidden"]
    cols = got["cols"]
    index = 0 if n_w is None else 1
    z = w[..., cols["z"][index]:cols["z"][index] + hidden]
    r = w[..., cols["r"][index]:cols["r"][index] + hidden]
    n = w[..., cols["n"][0]:cols["n"][0] + hidden] if n_w is None else n_w
    return np.ascontiguousarray(np.concatenate([z, r, n], axis=-1).T)


def rewrite(graph: ir.Graph) -> int:
    """Replace GRU-cell scans in ``graph`` (the main graph) by the GRU op; returns how many."""
    count = 0
    for loop in [n for n in graph if n.op_type == "Loop" and n.domain == ""]:
        got = _match(loop)
        if got is None or not all(np.isfinite(got[k]).all() for k in ("wx", "wh", "whn", "b")):
            continue
        hdim = got["hidden"]
        w = _const(graph, "gru_w", _zrh(got, got["wx"])[None])
        r = _const(graph, "gru_r", _zrh(got, got["wh"], got["whn"])[None])
        b = _const(graph, "gru_b", np.concatenate([_zrh(got, got["b"][None])[:, 0],
                                                   np.zeros(3 * hdim, np.float32)])[None])
        axis0 = _const(graph, "gru_axis0", np.array([0], np.int64))
        axis1 = _const(graph, "gru_axis1", np.array([1], np.int64))
        h0 = ir.node("Unsqueeze", [got["h0"], axis0])
        gru = ir.node("GRU", [got["xs"], w, r, b, None, h0.outputs[0]],
                      {"hidden_size": hdim, "linear_before_reset": 0}, num_outputs=2)
        ys = ir.node("Squeeze", [gru.outputs[0], axis1])
        h_last = ir.node("Squeeze", [gru.outputs[1], axis0])
        counter_dtype = loop.outputs[0].dtype
        dtype = counter_dtype.numpy() if counter_dtype else np.int64
        final = ir.node("Constant", [], {"value": ir.tensor(np.array(got["steps"], dtype))})
        fast = [h0, gru, ys, h_last, final]
        fast_out = [final.outputs[0], h_last.outputs[0], ys.outputs[0]]
        _guarded(graph, loop, fast, fast_out, [got["xs"], got["h0"]], got["proj"])
        count += 1
    return count
