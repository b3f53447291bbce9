"""The intra-op thread count a model runs fastest with in ONNX Runtime, kept in the model's metadata.

With spinning off (``runtimes.onnxrt.session_options``), ORT wakes its pool's workers for every
kernel it runs in parallel. A matrix product of a few MFLOP takes tens of microseconds on one core,
so a second thread gains less than waking it costs; ORT splits such a product anyway. A model whose
product work is mostly made of them (an RNN cell in a Scan: each step's ``h @ w``) runs faster on
one thread: the benchmark GRU (t64 b16 h256, two products of 2-4 MFLOP per step) took 0.85x
``jax.jit`` on one thread and 0.90-0.92x on two (scripts/bench.py), at 1.2x the CPU time. Models
with big products (the benchmark MLP's 67 MFLOP, the transformer's, the convolutions) gain from
every core: MLP 1.23x on one thread against 0.87x on two.

Where the line lies: a transformer's feed-forward products at batch 2, sequence 64 and width 128
(``[128, 128] @ [128, 256]``, 8.4 MFLOP) run as fast on one thread: the Hugging Face BERT-style models
and ViT, whose other products outweigh their two such products a layer, record one thread and gain
(ViT 0.94x, CLIP vision 0.86x, OPT 0.87x on one thread against two), and the Llama family (three
such products a layer: SwiGLU), which the line at 8 MFLOP gave two threads, took 0.96-0.98x on one
thread (quiet machine) and 1.3-1.9x ``jax.jit``'s CPU time on two. A 3x3 convolution of 14 MFLOP
(the Flax linen and NNX MNIST CNNs) gains from the second thread (1.18-1.31x on one): the line is
10 MFLOP, between the two.

``recommend`` weighs the products of a converted model (MatMul, Gemm, Conv, ConvTranspose; those
in a Scan body once per step): when the ones under ``SMALL_FLOPS`` outweigh the rest, the model
records ``THREADS_KEY = "1"``. ORT's LSTM and RNN ops thread their steps themselves (the benchmark
LSTM op: 0.46x on two threads, 0.80x on one), so a model with one gets no record, nor does one
whose product sizes are not all known. The GRU op is weighed as the products it runs (the input
projection of every step at once, then each step's recurrent product): two threads cost its kernel
2.4-4x the CPU time of one (``rewrites/gru.py``), so where its steps' small products outweigh the
rest it runs on one thread, like the Scan it replaces. jaxconv's sessions (``check``, ``jaxconv
bench``, scripts/bench.py) read the record (``recorded``) when no thread count is asked for.
"""

from __future__ import annotations

import math
from typing import Any, BinaryIO, Callable, Collection, Iterator

import numpy as np

from jaxconv.onnx import proto_wire

THREADS_KEY = "jaxconv.intra_op_threads"
SMALL_FLOPS = 1e7  # a product below this gains less from a second thread than waking it costs
_SELF_THREADED = ("LSTM", "RNN")  # ORT's RNN ops that gain from a second thread
_RNN_OPS = (*_SELF_THREADED, "GRU")
_METADATA_FIELD = 14  # ModelProto.metadata_props


def recommend(model: Any, *, skip_unknown: bool = False) -> int | None:
    """1 where the model's small products outweigh its big ones, else None (ORT's thread count).

    Args:
        model: an ``onnx_ir`` model, cleaned up.
        skip_unknown: weigh only the products whose sizes are known (an estimate while rewrite
            rules run, some of whose new values carry no shape yet), instead of giving None.

    A conversion asks twice: the rules for that estimate (``attention_heads`` runs only off one
    thread) and the driver for the record, on the finished graph; the answers can differ (the
    benchmark LSTM's estimate is 1, its record none: the LSTM op comes from a later rule).
    """
    return recommend_graph(model.graph, skip_unknown=skip_unknown)


def recommend_graph(graph: Any, *, skip_unknown: bool = False) -> int | None:
    """``recommend`` for a graph."""
    weights = weigh(graph, skip_unknown=skip_unknown)
    return None if weights is None else one_thread_for(*weights)


def one_thread_for(small: float, large: float) -> int | None:
    """The record for products of ``small`` and ``large`` flops in all (``weigh``)."""
    return 1 if small > large else None


def weigh(graph: Any, *, skip_unknown: bool = False, loop_steps: Callable[[Any], int | None] | None = None,
          leave_out: Collection[Any] = ()) -> tuple[float, float] | None:
    """(flops of the products under ``SMALL_FLOPS``, of the others) a call runs, or None where a size
    is unknown (unless ``skip_unknown``) or an LSTM or RNN op runs.

    Args:
        loop_steps: the steps of a Loop that will run a fixed number of them (a rule's estimate
            before ``to_scan`` makes it a Scan); without it a Loop's products are of unknown count.
        leave_out: nodes not weighed, nor their subgraphs (a Loop a rule is about to replace).
    """
    small = large = 0.0
    for node, repeats, known in _products(graph, 1, {}, loop_steps, {id(n) for n in leave_out}):
        if node.op_type in _SELF_THREADED:
            return None
        weighed = _gru_products(node, known) if node.op_type == "GRU" else [(_flops(node, known), 1)]
        for flops, times in weighed:
            if flops is None or repeats is None:
                if skip_unknown:
                    continue
                return None
            if flops < SMALL_FLOPS:
                small += flops * repeats * times
            else:
                large += flops * repeats * times
    return small, large


_Known = dict[int, list[int]]  # dims of a body's inputs that carry no shape, by id of the value


def _products(graph: Any, repeats: int | None, known: _Known,
              loop_steps: Callable[[Any], int | None] | None = None,
              leave_out: frozenset[int] | set[int] = frozenset()) -> Iterator[tuple[Any, int | None, _Known]]:
    """(node, how many times a call runs it, dims known of body inputs) for every product and RNN
    op, subgraphs included. A Scan body's inputs often carry no shape: they take the Scan's inputs'."""
    for node in graph:
        if node.domain not in ("", "ai.onnx") or id(node) in leave_out:
            continue
        if not any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue  # dead (a rule's estimate runs before dead nodes are removed)
        if node.op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose", *_RNN_OPS):
            yield node, repeats, known
        for attr in node.attributes.values():
            if attr.type.name != "GRAPH":
                continue
            steps: int | None = 1
            inner = known
            if node.op_type == "Loop":
                steps = None if loop_steps is None else loop_steps(node)
                inner = _loop_carries(node, attr.value, known)
            elif node.op_type == "Scan":
                steps, inner = _scan_steps(node, attr.value, known)
            times = None if repeats is None or steps is None else repeats * steps
            yield from _products(attr.value, times, inner, loop_steps, leave_out)


def _gru_products(node: Any, known: _Known) -> list[tuple[float | None, int]]:
    """(flops, times a run of the op does it) of a GRU op: ORT's kernel projects every step's input
    at once (``[T * B, I] x [I, 3H]`` per direction), then runs each step's ``[B, H] x [H, 3H]``."""
    x = _dims(node.inputs[0], known)
    r = _dims(node.inputs[2], known) if len(node.inputs) > 2 else None
    layout = node.attributes.get("layout")
    if not x or len(x) != 3 or not r or len(r) != 3 or (layout is not None and int(layout.value)):
        return [(None, 1)]
    steps, batch, width = x
    directions, gates, hidden = r
    projection, step = 2.0 * steps * batch * width * gates, 2.0 * batch * hidden * gates
    return [(projection, directions), (step, directions * steps)]


def _scan_steps(scan: Any, body: Any, known: _Known) -> tuple[int | None, _Known]:
    """A Scan over axis 0: its step count, and its body inputs' dims from the Scan's inputs."""
    for name in ("scan_input_axes", "scan_output_axes"):
        attr = scan.attributes.get(name)
        if attr is not None and any(int(v) != 0 for v in attr.value):
            return None, known
    n_state = len(scan.inputs) - int(scan.attributes["num_scan_inputs"].value)
    inner, steps = dict(known), None
    for k, (outer, inside) in enumerate(zip(scan.inputs, body.inputs)):
        dims = _dims(outer, known)
        if dims is None:
            continue
        if k < n_state:
            inner[id(inside)] = dims
        elif dims:
            steps = dims[0]
            inner[id(inside)] = dims[1:]
    return steps, inner


def _loop_carries(loop: Any, body: Any, known: _Known) -> _Known:
    """A Loop body's inputs' dims from the Loop's inputs (each carry keeps its initial value's shape)."""
    inner = dict(known)
    for outer, inside in zip(loop.inputs[2:], body.inputs[2:]):
        dims = _dims(outer, known)
        if dims is not None and inside.shape is None:
            inner[id(inside)] = dims
    return inner


def _dims(value: Any, known: _Known) -> list[int] | None:
    if value is None:
        return None
    if id(value) in known:
        return known[id(value)]
    shape = value.shape
    if shape is None and value.const_value is not None:  # an initializer a rule made without a shape
        shape = value.const_value.shape
    if shape is None or not shape.is_static():
        return None
    return [int(d) for d in shape.numpy()]


def _flops(node: Any, known: _Known) -> float | None:
    """Multiply-adds times two of one run of a product, from its operands' static shapes; None when unknown."""
    a = _dims(node.inputs[0], known)
    b = _dims(node.inputs[1], known) if len(node.inputs) > 1 else None
    if not a or not b:
        return None
    if node.op_type == "MatMul":
        a2, b2 = ([1, *a] if len(a) == 1 else a), ([*b, 1] if len(b) == 1 else b)
        try:
            batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
        except ValueError:
            return None
        return 2.0 * math.prod(batch) * a2[-2] * a2[-1] * b2[-1]
    if node.op_type == "Gemm":
        trans_a, trans_b = (node.attributes.get(n) for n in ("transA", "transB"))
        m, k = (a[1], a[0]) if trans_a is not None and int(trans_a.value) else (a[0], a[-1])
        n = b[0] if trans_b is not None and int(trans_b.value) else b[-1]
        return 2.0 * m * k * n
    if node.op_type == "Conv":  # weight [Cout, Cin/group, k...]: each output sums Cin/group x window
        out = _dims(node.outputs[0], known)
        return None if not out else 2.0 * math.prod(out) * math.prod(b[1:])
    return 2.0 * math.prod(a) * math.prod(b[1:])  # ConvTranspose, weight [Cin, Cout/group, k...]


def recorded(path_or_bytes: str | bytes) -> int | None:
    """The thread count a model file (or its bytes) records under ``THREADS_KEY``, without parsing its graph."""
    return proto_wire.read_model(path_or_bytes, _read_record)


def _read_record(f: BinaryIO, size: int) -> int | None:
    """Walk the ModelProto's top-level fields, reading none but the metadata entries."""
    for field in proto_wire.fields(f, 0, size):
        if field.number != _METADATA_FIELD or field.wire != proto_wire.LEN:
            continue
        entry = proto_wire.strings(proto_wire.read(f, field.value, field.stop))
        if entry.get(1, "") == THREADS_KEY:
            value = entry.get(2, "")
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None
