"""The intra-op thread count a model runs fastest with in ONNX Runtime, kept in the model's metadata.

(And one a model needs: a combining scatter at indices that may repeat races on more than one thread in
ONNX Runtime, so such a model records one thread: ``colliding_scatter``.)

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
whose product sizes are not all known (a dimension shape inference made up: a Concat's along a
symbolic one, a Reshape's). The GRU op is weighed as the products it runs (the input
projection of every step at once, then each step's recurrent product): two threads cost its kernel
2.4-4x the CPU time of one (``rewrites/gru.py``), so where its steps' small products outweigh the
rest it runs on one thread, like the Scan it replaces. jaxconv's sessions (``check``, ``jaxconv
bench``, scripts/bench.py) read the record (``recorded``) when no thread count is asked for.

A model with symbolic sizes (``f32[b, 784]``, a sequence ``s``) runs at sizes the conversion does
not know, and one session serves them all. The record weighs its products with every symbolic
dimension of its inputs at each of ``RECORD_SIZES`` (16 and 128) and records one thread only when
both weighings do: an MLP ``f32[b, 64] -> 64`` records it (1 MFLOP at 128), ``f32[b, 784] -> 512``
(103 MFLOP at 128) does not, nor does a model whose products the symbolic sizes multiply together
(``b`` and ``s``: 16384 rows at 128), nor a scan over a symbolic length (a Loop whose trip count
the weighing does not know). The encoders of width 128 with a symbolic sequence
(``scripts/zoo_more_transformers.py``: linen_enc, hk_padenc, hf_robpre, batch 2) record it: at
s = 16, 64 and 128 one thread took 0.26-1.05x the wall time of two and 0.78-1.01x the CPU time, and
at s = 256 and 512, above the sizes weighed, 0.48-0.98x and 0.80-0.91x (hk_padenc; alternating,
load 9-10). A caller that runs much larger sizes on an idle machine, where products of tens of
MFLOP gain from the second thread, asks for a thread count.

Where the two weighings differ (a BERT-style encoder exported with ``f32[b, 64, ...]``: its products
are small at batch 2 and big at 128), no one count serves every size. The record then weighs the sizes
of ``SMALL_SIZES`` and names the largest up to which every size weighs one thread (``BY_SIZE_KEY``:
that size and each input's symbolic axes; ``one_thread_up_to``). jaxconv's runner keeps a session per
thread count and picks one by the sizes of each call (``Record.threads``); ``session_options`` takes the
sizes a session of one's own will run. Exported with a symbolic batch and run at batch 2, one thread
against two (scripts/bench_zoo.py --symbolic-batch, one process each, load 0.1-1.3): HF BERT 0.84x
``jax.jit`` against 0.86x (CPU 0.84x against 0.93x), ViT 0.65x against 0.70x, Llama CPU 1.03x against
1.31x, RegNet 0.47x against 0.52x.

Convolutions are weighed by their flops like the other products, grouped and depthwise ones
included (``group`` divides each output's window): chains of one kind of convolution at 0.6-57
MFLOP (3x3, 1x1, depthwise 3x3 and 5x5; ORT runs them as NCHWc blocked convolutions) took 0.27-0.92x
the wall time on one thread of two below 30 MFLOP (load 10), depthwise ones included, and the
keras-hub MobileNetV3, EfficientNet and CSPDarkNet (every convolution under 10 MFLOP but the half
of CSPDarkNet's flops in its 3x3 ones: all three record one thread) took a median 0.78x, 0.53x and
0.78x the wall time on one thread of two (0.75x, 0.82x, 0.88x the CPU time; 12 x 41 pairs each).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, BinaryIO, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import dim_sizes, proto_wire

THREADS_KEY = "jaxconv.intra_op_threads"
SMALL_FLOPS = 1e7  # a product below this gains less from a second thread than waking it costs
_SELF_THREADED = ("LSTM", "RNN")  # ORT's RNN ops that gain from a second thread
_RNN_OPS = (*_SELF_THREADED, "GRU")
_METADATA_FIELD = 14  # ModelProto.metadata_props
RECORD_SIZES = (16, 128)  # each symbolic dimension's sizes when a model's record is weighed
BY_SIZE_KEY = "jaxconv.intra_op_threads_by_size"  # one thread up to a size, where RECORD_SIZES give none
SMALL_SIZES = (1, 2, 4, 8, 16, 32, 64)  # the sizes BY_SIZE_KEY's record is weighed at


def record(model: Any) -> dict[str, str]:
    """The metadata entries of a converted model's thread count: ``THREADS_KEY`` where ``recommend``
    gives one thread at every size weighed, else ``BY_SIZE_KEY`` where its symbolic sizes give one
    thread up to a size (``one_thread_up_to``), else none."""
    threads = recommend(model, symbolic_sizes=RECORD_SIZES)
    if threads is not None:
        return {THREADS_KEY: str(threads)}
    up_to = one_thread_up_to(model.graph)
    if up_to is None:
        return {}
    axes = [[k for k, d in enumerate(v.shape or ()) if isinstance(d, ir.SymbolicDim) and d.value is not None]
            for v in model.graph.inputs]
    return {BY_SIZE_KEY: json.dumps({"one_thread_up_to": up_to, "symbolic_axes": axes}, separators=(",", ":"))}


def one_thread_up_to(graph: Any) -> int | None:
    """The largest of ``SMALL_SIZES`` up to which every size weighs to one thread, with each symbolic
    dimension of the graph's inputs at that size; None where the smallest does not, or none is symbolic.

    A model exported with ``f32[b, ...]`` runs at sizes the conversion does not know. Where its products
    are small at a small batch and big at a large one (a BERT-style encoder at batch 2 and at 128), no
    thread count serves every size: the record says up to which size one thread does, and jaxconv's
    runner picks the session by the sizes of each call (``Record.threads``)."""
    names = symbolic_names(graph)
    best = None
    for size in SMALL_SIZES if names else ():
        weights = weigh(graph, sizes=dict.fromkeys(names, size))
        if weights is None or one_thread_for(*weights) is None:
            break
        best = size
    return best


def recommend(model: Any, *, skip_unknown: bool = False, symbolic_sizes: Sequence[int] = ()) -> int | None:
    """1 where the model's small products outweigh its big ones, else None (ORT's thread count).

    Args:
        model: an ``onnx_ir`` model, cleaned up.
        skip_unknown: weigh only the products whose sizes are known (an estimate while rewrite
            rules run, some of whose new values carry no shape yet), instead of giving None.
        symbolic_sizes: where the graph's inputs have symbolic dimensions, weigh the products once
            with every input's symbolic dimension at each of these sizes, and give 1 only when
            every weighing does (the record: ``RECORD_SIZES``). Empty: such a product's size is unknown.

    A conversion asks twice: the rules for that estimate (``attention_heads`` runs only off one
    thread) and the driver for the record, on the finished graph; the answers can differ (the
    benchmark LSTM's estimate is 1, its record none: the LSTM op comes from a later rule).
    """
    return recommend_graph(model.graph, skip_unknown=skip_unknown, symbolic_sizes=symbolic_sizes)


def recommend_graph(graph: Any, *, skip_unknown: bool = False, symbolic_sizes: Sequence[int] = ()) -> int | None:
    """``recommend`` for a graph."""
    if colliding_scatter(graph) is not None:
        return 1
    names = symbolic_names(graph)
    if not names or not symbolic_sizes:
        weights = weigh(graph, skip_unknown=skip_unknown)
        return None if weights is None else one_thread_for(*weights)
    for size in symbolic_sizes:
        weights = weigh(graph, skip_unknown=skip_unknown, sizes=dict.fromkeys(names, size))
        if weights is None or one_thread_for(*weights) is None:
            return None
    return 1


def colliding_scatter(graph: Any) -> Any:
    """A ScatterND that combines updates (``reduction`` add, mul, max or min) at indices that may repeat
    (computed at run time, or constants with a repeat), subgraphs included; else None.

    ONNX Runtime 1.32 splits such a scatter's updates over its intra-op threads, and two threads that
    combine into the same element race: on two threads, a segment sum (4,000 rows of 64 into 1,000)
    differed from the sequential sum in 3 of 200 runs, once by 2.6 (an update lost; mul and max
    alike); on one thread, never. A model with one records one thread, whatever its products."""
    for node in ir.traversal.RecursiveGraphIterator(graph):
        if node.domain in ("", "ai.onnx") and node.op_type == "ScatterND" and _combines(node) \
                and not _unique_constant_rows(node.inputs[1]):
            return node
    return None


def _combines(node: Any) -> bool:
    reduction = node.attributes.get("reduction")
    return reduction is not None and reduction.value not in ("none", b"none")


def _unique_constant_rows(indices: Any) -> bool:
    tensor = None if indices is None else indices.const_value
    if tensor is None:
        return False
    arr = tensor.numpy()
    rows = arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1)
    return len(np.unique(rows, axis=0)) == len(rows)


def symbolic_names(graph: Any) -> set[str]:
    """The names of the symbolic dimensions of the graph's inputs (``b`` of ``f32[b, 784]``)."""
    return {d.value for v in graph.inputs if v.shape is not None
            for d in v.shape if isinstance(d, ir.SymbolicDim) and d.value is not None}


def one_thread_for(small: float, large: float) -> int | None:
    """The record for products of ``small`` and ``large`` flops in all (``weigh``)."""
    return 1 if small > large else None


def weigh(graph: Any, *, skip_unknown: bool = False, loop_steps: Callable[[Any], int | None] | None = None,
          leave_out: Collection[Any] = (), sizes: Mapping[str, int] | None = None) -> tuple[float, float] | None:
    """(flops of the products under ``SMALL_FLOPS``, of the others) a call runs, or None where a size
    is unknown (unless ``skip_unknown``) or an LSTM or RNN op runs.

    Args:
        loop_steps: the steps of a Loop that will run a fixed number of them (a rule's estimate
            before ``to_scan`` makes it a Scan); without it a Loop's products are of unknown count.
        leave_out: nodes not weighed, nor their subgraphs (a Loop a rule is about to replace).
        sizes: a size for each named symbolic dimension (of the graph's inputs: ``symbolic_names``);
            an expression of them as jax.export writes one (``64*b``) is evaluated; a dimension of
            another name (one the shape inference made up) stays unknown.
    """
    small = large = 0.0
    shapes = _Shapes({}, dim_sizes.with_equated(graph, sizes or {}))
    for node, repeats, seen in _products(graph, 1, shapes, loop_steps, {id(n) for n in leave_out}):
        if node.op_type in _SELF_THREADED:
            return None
        weighed = _gru_products(node, seen) if node.op_type == "GRU" else [(_flops(node, seen), 1)]
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


@dataclasses.dataclass(frozen=True)
class _Shapes:
    """Where dims come from besides a value's static shape: a Scan or Loop body's inputs that carry
    no shape (they take the outer value's, by id of the body input), and named symbolic dims."""

    known: dict[int, list[int]]
    sizes: dict[str, int]

    def with_known(self, more: dict[int, list[int]]) -> _Shapes:
        return _Shapes({**self.known, **more}, self.sizes)


def _products(graph: Any, repeats: int | None, shapes: _Shapes,
              loop_steps: Callable[[Any], int | None] | None = None,
              leave_out: frozenset[int] | set[int] = frozenset()) -> Iterator[tuple[Any, int | None, _Shapes]]:
    """(node, how many times a call runs it, where its dims come from) for every product and RNN
    op, subgraphs included. A Scan body's inputs often carry no shape: they take the Scan's inputs'."""
    for node in graph:
        if node.domain not in ("", "ai.onnx") or id(node) in leave_out:
            continue
        if not any(o.uses() or o.is_graph_output() for o in node.outputs):
            continue  # dead (a rule's estimate runs before dead nodes are removed)
        if node.op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose", *_RNN_OPS):
            yield node, repeats, shapes
        for attr in node.attributes.values():
            if attr.type.name != "GRAPH":
                continue
            steps: int | None = 1
            inner = shapes
            if node.op_type == "Loop":
                steps = None if loop_steps is None else loop_steps(node)
                inner = _loop_carries(node, attr.value, shapes)
            elif node.op_type == "Scan":
                steps, inner = _scan_steps(node, attr.value, shapes)
            times = None if repeats is None or steps is None else repeats * steps
            yield from _products(attr.value, times, inner, loop_steps, leave_out)


def _gru_products(node: Any, shapes: _Shapes) -> list[tuple[float | None, int]]:
    """(flops, times a run of the op does it) of a GRU op: ORT's kernel projects every step's input
    at once (``[T * B, I] x [I, 3H]`` per direction), then runs each step's ``[B, H] x [H, 3H]``."""
    x = _dims(node.inputs[0], shapes)
    r = _dims(node.inputs[2], shapes) if len(node.inputs) > 2 else None
    layout = node.attributes.get("layout")
    if not x or len(x) != 3 or not r or len(r) != 3 or (layout is not None and int(layout.value)):
        return [(None, 1)]
    steps, batch, width = x
    directions, gates, hidden = r
    projection, step = 2.0 * steps * batch * width * gates, 2.0 * batch * hidden * gates
    return [(projection, directions), (step, directions * steps)]


def _scan_steps(scan: Any, body: Any, shapes: _Shapes) -> tuple[int | None, _Shapes]:
    """A Scan over axis 0: its step count, and its body inputs' dims from the Scan's inputs."""
    for name in ("scan_input_axes", "scan_output_axes"):
        attr = scan.attributes.get(name)
        if attr is not None and any(int(v) != 0 for v in attr.value):
            return None, shapes
    n_state = len(scan.inputs) - int(scan.attributes["num_scan_inputs"].value)
    inner: dict[int, list[int]] = {}
    steps = None
    for k, (outer, inside) in enumerate(zip(scan.inputs, body.inputs)):
        dims = _dims(outer, shapes)
        if dims is None:
            continue
        if k < n_state:
            inner[id(inside)] = dims
        elif dims:
            steps = dims[0]
            inner[id(inside)] = dims[1:]
    return steps, shapes.with_known(inner)


def _loop_carries(loop: Any, body: Any, shapes: _Shapes) -> _Shapes:
    """A Loop body's inputs' dims from the Loop's inputs (each carry keeps its initial value's shape)."""
    inner: dict[int, list[int]] = {}
    for outer, inside in zip(loop.inputs[2:], body.inputs[2:]):
        dims = _dims(outer, shapes)
        if dims is not None and inside.shape is None:
            inner[id(inside)] = dims
    return shapes.with_known(inner)


def _dims(value: Any, shapes: _Shapes, start: int = 0) -> list[int] | None:
    """The sizes of ``value``'s dimensions from ``start`` on; None where one is unknown."""
    if value is None:
        return None
    if id(value) in shapes.known:
        return shapes.known[id(value)][start:]
    shape = value.shape
    if shape is None and value.const_value is not None:  # an initializer a rule made without a shape
        shape = value.const_value.shape
    if shape is None:
        return None
    dims = [d if isinstance(d, int) else dim_sizes.size_of(d.value, shapes.sizes) for d in list(shape)[start:]]
    return None if any(d is None for d in dims) else dims


def _flops(node: Any, shapes: _Shapes) -> float | None:
    """Multiply-adds times two of one run of a product, from its operands' static shapes; None when unknown."""
    a = _dims(node.inputs[0], shapes)
    b = _dims(node.inputs[1], shapes) if len(node.inputs) > 1 else None
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
        # the output's batch is the input's (a rule's rewritten value may carry a made-up name for it)
        window = _dims(node.outputs[0], shapes, start=2)
        return None if window is None else 2.0 * a[0] * b[0] * math.prod(window) * math.prod(b[1:])
    return 2.0 * math.prod(a) * math.prod(b[1:])  # ConvTranspose, weight [Cin, Cout/group, k...]


@dataclasses.dataclass(frozen=True)
class Record:
    """What a model file records: a thread count for every size (``THREADS_KEY``), or one thread up to
    a size of its symbolic dimensions (``BY_SIZE_KEY``: that size, and each input's symbolic axes)."""

    threads_always: int | None = None
    one_thread_up_to: int | None = None
    symbolic_axes: tuple[tuple[int, ...], ...] = ()

    def threads(self, shapes: Sequence[Sequence[int]] | None = None) -> int | None:
        """The thread count for a call on inputs of ``shapes`` (in the model's input order); None: ORT's
        default. Without shapes, only a count for every size."""
        if self.threads_always is not None or shapes is None or self.one_thread_up_to is None:
            return self.threads_always
        if len(shapes) != len(self.symbolic_axes):
            return None
        fits = all(k < len(shape) and shape[k] <= self.one_thread_up_to
                   for axes, shape in zip(self.symbolic_axes, shapes) for k in axes)
        return 1 if fits else None


def recorded(path_or_bytes: str | bytes, shapes: Sequence[Sequence[int]] | None = None) -> int | None:
    """The thread count a model file (or its bytes) records for a call on inputs of ``shapes``
    (``Record.threads``), without parsing its graph."""
    return read_record(path_or_bytes).threads(shapes)


def read_record(path_or_bytes: str | bytes) -> Record:
    """A model file's (or its bytes') ``Record``; an empty one where it records nothing or cannot be read."""
    return proto_wire.read_model(path_or_bytes, _read_record) or Record()


def _read_record(f: BinaryIO, size: int) -> Record:
    """Walk the ModelProto's top-level fields, reading none but the metadata entries."""
    values: dict[str, str] = {}
    for field in proto_wire.fields(f, 0, size):
        if field.number != _METADATA_FIELD or field.wire != proto_wire.LEN:
            continue
        entry = proto_wire.strings(proto_wire.read(f, field.value, field.stop))
        if entry.get(1, "") in (THREADS_KEY, BY_SIZE_KEY):
            values[entry[1]] = entry.get(2, "")
    count = values.get(THREADS_KEY, "")
    if count.isdigit() and int(count) > 0:
        return Record(threads_always=int(count))
    return _by_size(values.get(BY_SIZE_KEY, ""))


def _by_size(value: str) -> Record:
    """``BY_SIZE_KEY``'s JSON as a Record; an empty one where it is missing or malformed."""
    try:
        data = json.loads(value)
        up_to, axes = data["one_thread_up_to"], data["symbolic_axes"]
        if isinstance(up_to, int) and up_to > 0 and all(all(isinstance(k, int) and k >= 0 for k in a) for a in axes):
            return Record(one_thread_up_to=up_to, symbolic_axes=tuple(tuple(a) for a in axes))
    except (ValueError, TypeError, KeyError):
        pass
    return Record()
