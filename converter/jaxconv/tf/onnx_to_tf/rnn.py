"""ONNX LSTM and GRU (the lowering's rewrites of a ``lax.scan`` cell) as while_loops of builtins.

Forward, layout 0, default activations, no peepholes, clip or coupled gates: the forms the rewrites
write. ONNX's LSTM gate order is i, o, f, c::

    c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')

and GRU's z, r, h (``linear_before_reset`` 0: ``n = tanh(x @ wh + (r * h) @ rh + bh)``, 1:
``n = tanh(x @ wh + wbh + r * (h @ rh + rbh))``; ``h' = (1 - z) * n + z * h``), with
``sigmoid(z) = 1 / (1 + exp(-z))`` as the scan computed it.
"""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf.graph import attrs
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value

_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]


def _refuse(op: str, a: dict[str, Any], ins: list[Value | None], defaults: list[str], **more: bool) -> None:
    unsupported = {
        "direction": a.get("direction", "forward") != "forward",
        "layout": a.get("layout", 0) != 0,
        "activations": list(a.get("activations", defaults)) != defaults,
        "clip": "clip" in a,
        "sequence_lens": len(ins) > 4 and ins[4] is not None,
        **more,
    }
    if any(unsupported.values()):
        raise ValueError(f"{op} with {', '.join(k for k, v in unsupported.items() if v)}")


@handles("LSTM")
def lstm(tr: Any, node: Any, ins: list[Value | None], env: Any) -> list[Value]:
    tf = tr.tf
    a = attrs(node)
    _refuse("LSTM", a, ins, _DEFAULT_ACTIVATIONS, input_forget=a.get("input_forget", 0) != 0,
            peepholes=len(ins) > 7 and ins[7] is not None)
    x, w, r = ins[0], ins[1], ins[2]
    dtype = x.dtype
    hidden = int(a["hidden_size"])
    wt, rt = tf.transpose(w.t[0]), tf.transpose(r.t[0])  # [input, 4H], [H, 4H]
    bias = None
    if len(ins) > 3 and ins[3] is not None:  # Wb + Rb
        bias = ins[3].t[0, : 4 * hidden] + ins[3].t[0, 4 * hidden :]
    steps = tf.shape(x.t, out_type=tf.int32)[0]
    batch = tf.shape(x.t, out_type=tf.int32)[1]
    zeros = tf.zeros(tf.stack([batch, hidden]), x.t.dtype)
    h0 = ins[5].t[0] if len(ins) > 5 and ins[5] is not None else zeros
    c0 = ins[6].t[0] if len(ins) > 6 and ins[6] is not None else zeros
    one = tf.ones([], x.t.dtype)

    def sigmoid(z: Any) -> Any:
        return one / (one + tf.exp(-z))

    def step(i: Any, h: Any, c: Any, ys: Any) -> list[Any]:
        z = tf.matmul(tf.gather(x.t, i), wt) + tf.matmul(h, rt)
        if bias is not None:
            z = z + bias
        gi, go, gf, gc = tf.split(z, 4, axis=-1)
        c = sigmoid(gf) * c + sigmoid(gi) * tf.tanh(gc)
        h = sigmoid(go) * tf.tanh(c)
        return [i + 1, h, c, tf.tensor_scatter_nd_update(ys, [[i]], [h])]

    ys0 = tf.zeros(tf.stack([steps, batch, hidden]), x.t.dtype)
    _, h, c, ys = tf.while_loop(lambda i, *rest: i < steps, step, [tf.constant(0, tf.int32), h0, c0, ys0])
    return [Value(tf.expand_dims(ys, 1), dtype), Value(h[None], dtype), Value(c[None], dtype)]


@handles("GRU")
def gru(tr: Any, node: Any, ins: list[Value | None], env: Any) -> list[Value]:
    tf = tr.tf
    a = attrs(node)
    _refuse("GRU", a, ins, ["Sigmoid", "Tanh"])
    x, w, r = ins[0], ins[1], ins[2]
    assert x is not None and w is not None and r is not None
    dtype = x.dtype
    hidden = int(a["hidden_size"])
    before_reset = bool(a.get("linear_before_reset", 0))
    wt, rt = tf.transpose(w.t[0]), tf.transpose(r.t[0])  # [input, 3H], [H, 3H]
    r_zr, r_h = rt[:, : 2 * hidden], rt[:, 2 * hidden :]
    zeros3 = tf.zeros([3 * hidden], x.t.dtype)
    wb, rb = (ins[3].t[0, : 3 * hidden], ins[3].t[0, 3 * hidden :]) if len(ins) > 3 and ins[3] is not None \
        else (zeros3, zeros3)
    steps = tf.shape(x.t, out_type=tf.int32)[0]
    batch = tf.shape(x.t, out_type=tf.int32)[1]
    h0 = ins[5].t[0] if len(ins) > 5 and ins[5] is not None else tf.zeros(tf.stack([batch, hidden]), x.t.dtype)
    one = tf.ones([], x.t.dtype)

    def sigmoid(z: Any) -> Any:
        return one / (one + tf.exp(-z))

    def step(i: Any, h: Any, ys: Any) -> list[Any]:
        xw = tf.matmul(tf.gather(x.t, i), wt) + wb
        zr = sigmoid(xw[:, : 2 * hidden] + tf.matmul(h, r_zr) + rb[: 2 * hidden])
        z, reset = zr[:, :hidden], zr[:, hidden:]
        if before_reset:
            n = tf.tanh(xw[:, 2 * hidden :] + reset * (tf.matmul(h, r_h) + rb[2 * hidden :]))
        else:
            n = tf.tanh(xw[:, 2 * hidden :] + tf.matmul(reset * h, r_h) + rb[2 * hidden :])
        h = (one - z) * n + z * h
        return [i + 1, h, tf.tensor_scatter_nd_update(ys, [[i]], [h])]

    ys0 = tf.zeros(tf.stack([steps, batch, hidden]), x.t.dtype)
    _, h, ys = tf.while_loop(lambda i, *rest: i < steps, step, [tf.constant(0, tf.int32), h0, ys0])
    return [Value(tf.expand_dims(ys, 1), dtype), Value(h[None], dtype)]
