"""Loop and If as TF's while_loop and cond (TFLite's WHILE and IF)."""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf.graph import attrs
from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value


@handles("Loop", exact=True)
def loop(tr: Any, node: Any, ins: list[Value | None], env: Any) -> list[Value]:
    tf = tr.tf
    body = attrs(node)["body"]
    n_carried = len(ins) - 2
    if len(body.output) - 1 != n_carried:
        raise ValueError("Loop scan outputs")
    trip = ins[0]
    cond0 = ins[1]
    carried = [v for v in ins[2:] if v is not None]
    dtypes = [v.dtype for v in carried]
    limit = tf.cast(tf.reshape(trip.t, []), tf.int64) if trip is not None else None

    def keep_going(i: Any, c: Any, *vals: Any) -> Any:
        return c if limit is None else tf.logical_and(i < limit, c)

    def step(i: Any, c: Any, *vals: Any) -> list[Any]:
        feeds = [Value(i, "int64"), Value(c, "bool")] + [Value(t, d) for t, d in zip(vals, dtypes)]
        outs = tr.subgraph(body, feeds, env)
        return [i + 1, tf.reshape(outs[0].t, [])] + _unpermuted(tf, i, list(vals), [o.t for o in outs[1:]])

    c0 = tf.reshape(cond0.t, []) if cond0 is not None else tf.constant(True)
    result = tf.while_loop(
        keep_going, step, [tf.constant(0, tf.int64), c0] + [v.t for v in carried], maximum_iterations=None
    )
    return [Value(t, d) for t, d in zip(result[2:], dtypes)]


def _unpermuted(tf: Any, i: Any, inputs: list[Any], outputs: list[Any]) -> list[Any]:
    """Outputs where a body passes carried value k on unchanged as value j != k become
    ``where(i >= 0, value_k, value_j)`` (always value k): TFLite's converter mistakes such a pure
    permutation of loop-carried values for loop-invariant ones and computes the loop wrongly."""
    out = []
    for j, t in enumerate(outputs):
        moved = any(t is v for k, v in enumerate(inputs) if k != j)
        out.append(tf.where(i >= 0, t, inputs[j]) if moved and t.shape == inputs[j].shape else t)
    return out


@handles("If", exact=True)
def if_(tr: Any, node: Any, ins: list[Value], env: Any) -> list[Value]:
    tf = tr.tf
    a = attrs(node)
    kinds: list[str] = []

    def branch(graph: Any) -> Any:
        def build() -> list[Any]:
            outs = tr.subgraph(graph, [], env)
            kinds[:] = [o.dtype for o in outs]
            return [o.t for o in outs]

        return build

    outs = tf.cond(tf.reshape(ins[0].t, []), branch(a["then_branch"]), branch(a["else_branch"]))
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return [Value(t, d) for t, d in zip(outs, kinds)]


@handles("Scan", exact=True)
def scan(tr: Any, node: Any, ins: list[Value], env: Any) -> list[Value]:
    """Scan (axis 0, forward, at least one step: what the lowering's Loop-to-Scan rewrite writes).

    Step 0 runs before a while_loop (it gives the rows' shapes); each later step reads row ``i``
    of every scan input with a gather and writes row ``i`` of every scan output with a
    scatter-update (builtins; TensorArrays would need ops TFLite lacks).
    """
    tf = tr.tf
    a = attrs(node)
    body, m = a["body"], a["num_scan_inputs"]
    for key in ("scan_input_axes", "scan_output_axes", "scan_input_directions", "scan_output_directions"):
        if any(a.get(key, [])):
            raise ValueError(f"Scan with {key} {list(a[key])}")
    states, xs = ins[: len(ins) - m], ins[len(ins) - m :]
    n = len(states)
    steps = tf.shape(xs[0].t, out_type=tf.int32)[0]

    def run(i: Any, carried: list[Value]) -> tuple[list[Value], list[Value]]:
        outs = tr.subgraph(body, carried + [Value(tf.gather(x.t, i), x.dtype) for x in xs], env)
        return outs[:n], outs[n:]

    first, rows = run(tf.constant(0, tf.int32), list(states))
    out_dtypes, state_dtypes = [r.dtype for r in rows], [v.dtype for v in first]
    stacks = [
        tf.tensor_scatter_nd_update(
            tf.zeros(tf.concat([[steps], tf.shape(r.t, out_type=tf.int32)], 0), r.t.dtype), [[0]], [r.t]
        )
        for r in rows
    ]

    def step(i: Any, *vals: Any) -> list[Any]:
        carried, stacked = list(vals[:n]), list(vals[n:])
        nxt, new_rows = run(i, [Value(t, d) for t, d in zip(carried, state_dtypes)])
        nxt_t = _unpermuted(tf, i, carried, [v.t for v in nxt])
        written = [tf.tensor_scatter_nd_update(s, [[i]], [r.t]) for s, r in zip(stacked, new_rows)]
        return [i + 1] + nxt_t + written

    result = tf.while_loop(
        lambda i, *vals: i < steps, step, [tf.constant(1, tf.int32)] + [v.t for v in first] + stacks
    )
    finals = [Value(t, d) for t, d in zip(result[1 : 1 + n], state_dtypes)]
    return finals + [Value(t, d) for t, d in zip(result[1 + n :], out_dtypes)]
