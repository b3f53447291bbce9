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

How it weighs (``two_thread_weights``): each product takes ``max(flops / rate, bytes of its
right operand / STREAM_BYTES)`` on one thread, ``rate`` this machine's product rate on one core
(``product_rate.core_flops``, measured once a process; ``CORE_FLOPS`` on the Xeon the weighing was fitted
on, an AMD EPYC's about 100-115 GFLOP/s) (a product on a few rows streams its weight: a
``[2, 1728] x [1728, 512]`` of 3.5 MFLOP took 121 us on one thread, 52 us on two); a second thread saves
``SECOND_THREAD_SAVES`` of that and costs ``WAKE_SECONDS`` for waking it; every other kernel of the
call (an elementwise op, a reshape, a reduction: ORT parallelises some, and each pays) costs
``OTHER_SECONDS`` more on two threads. The model records ``THREADS_KEY = "1"`` where the costs
outweigh the savings. The measures were fitted to 89 zoo models (``scripts/bench_zoo.py``), each run
in ORT alone on one thread and on two, alternating (quiet 2-core Xeon, load 0.7-1.6): where the old
line (products under 10 MFLOP outweighing the rest: one thread) chose the slower count for 18 of them
(GPT-2, GPT-Neo, GPT-J, BLOOM, DINOv2, HF ResNet, the Haiku and NNX transformers, Mixtral and the
keras CNN, 1.05-1.22x on two threads; the Equinox CNN and Haiku ResNet-50, 1.47-1.69x on one), summing
2.6 in excess time ratios, this weighing chooses the slower for 3 (the Equinox MLP 1.07x, the Flax
U-Net 1.06x, Flax's ``nn.scan`` LSTM 1.04x), summing 0.17. Alone, chains of ``[128, K] x [K, N]``
products took 1.30x the wall time on two threads at 8.4 MFLOP, 0.89x at 16.8 and 0.54-0.72x from 34
to 268: such a chain of 8.4 MFLOP products weighs as two threads, as products in whole models paid less
per product on two threads than these chains, and the fit follows the models. Convolutions are weighed
as products.

A model with no products (an optimizer's update, an elementwise function, a preprocessing step) is
weighed by its elementwise kernels instead: ORT splits one over its threads from about 64K elements
(``SPLIT_ELEMENTS``), where waking the second thread costs ``WAKE_SECONDS`` and the split saves about
``ELEMENTWISE_SAVES`` of the kernel's one-thread time (AMD EPYC, two cores, ORT 1.32, spinning off: Add
0.16 ns an element on one thread, Sqrt 0.36, Log 1.7; two threads took 1.0x one's time at 64K elements
for Add, 1.2-1.45x at 128-256K, 0.7x at 1M; Exp, Sqrt, Tanh, Erf 0.6-0.9x from 256K; Min, Round, Sin,
Cos, Sign and Where 1.0x at every size: not split). Every other kernel costs ``OTHER_SECONDS`` as
beside products. Such a model used to get ORT's count: Optax updates of an MLP's 268K parameters
(784x256 and 256x256 weights; ``scripts/bench_zoo.py --training``) now record one thread and took
0.85-0.97x the time (ORT alone, alternating, 3 sessions a side); Adam's update of one parameter of n
elements took 1.19-1.36x the time on two threads at n = 128K, 0.91-0.94x at 256K, 0.69x at
1M, which the weighing follows. With symbolic sizes such a model records its elementwise kernels by size
(``BY_SIZE_KEY``), as they gain from a second thread above the sizes weighed.

ORT's LSTM and RNN ops thread their steps themselves (the benchmark LSTM op: 0.46x on two threads,
0.80x on one), so a model with one gets no record, nor does one
whose product sizes are not all known (a dimension shape inference made up: a Concat's along a
symbolic one, a Reshape's). Except a small LSTM op (each step's ``[B, H] x [H, 4H]`` at most
``LSTM_ONE_THREAD_MULTIPLIES``, 262,144 multiplies), weighed as its products like the GRU op: the LSTM op
alone (T 64, input 32, Intel Xeon, quiet) took 0.83-0.88x the wall time on one thread of two at 16K-262K
multiplies a step (0.48-0.71x the CPU time), 1.17-1.22x at 524K-1M and 1.58x at 4M (the benchmark LSTM);
Equinox's GRU and LSTM cells stacked (B4 H128) then record one thread and the GRU scan becomes the GRU op.
With a symbolic batch an LSTM op's step size is a polynomial: the by-size record keeps it (``lstm_steps``),
so that a call at sizes where it is large takes ORT's count and one where it is small is weighed as a
static one (Keras' Bidirectional(LSTM)+GRU exported ``i32[b, 16]``: 2.63x its static export's time at batch
2, on two threads, -> 1.01x).
A Loop's scan outputs take their row count from its trip count where shape inference left it unknown, a
Transpose a rule made without a shape its input's dims permuted, and a Loop body's inputs of unknown dims
their initial values' (the rules weigh a model before shape inference runs again). The GRU op is
weighed as the products it runs (the input projection of every step at once, then each step's recurrent
product): two threads cost its kernel 2.4-4x the CPU time of one (``rewrites/gru.py``), so where
its steps' products cost a second thread more than it saves it runs on one thread, like the Scan it
replaces. jaxconv's sessions (``check``, ``jaxconv
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
are small at batch 2 and big at 128), no one count serves every size. Where one thread wins at small
sizes (``one_thread_up_to``: every symbolic dimension at 1, 2, 4, ...), the record (``BY_SIZE_KEY``)
holds the products instead: each one's flops, runs and bytes read as polynomials of the inputs'
symbolic dimensions (``dim_sizes.Poly``; ``2*64*128*128*b`` flops for a ``[b*64, 128] @ [128, 128]``),
the count of other kernels, and each input's dimension names. jaxconv's runner keeps a session per
thread count and weighs the products at each
call's sizes (``Record.threads``), so a call at ``b = 2, s = 64`` gets the count a static export at those
sizes records; ``session_options`` takes the shapes a session of one's own will run.

Spinning during a run (``SPIN_KEY``). With spinning off, every kernel ORT splits wakes the pool's worker; with the
pool spinning during a run and stopped after it (``session.force_spinning_stop``), the worker waits for the next
kernel awake and the next caller in the process pays nothing (one ``jax.jit`` call after each run: 0.98-1.02x its
time after a run with spinning off, 24 models). Measured on zoo models (AMD EPYC, two cores, ORT 1.32, load
0.8-1.8), two spinning threads against jaxconv's spinning-off session (the count ``recommend`` gives), calls back to
back: 27 of 27 short models (0.2-1.4 ms of kernels on one thread) took 0.67-0.95x the time. With 1 ms of idle time
before each call (``benchmark.alternate``'s settling), the run first wakes a sleeping core: about 100 us more a
call, so the calls under about 0.7 ms of kernels lost (Haiku and Equinox MLPs, NNX and Equinox CNNs, Optax SGD and
RMSProp: 1.04-1.27x) while the longer ones held or gained (0.71-0.99x; Optax Lion and the HF T5 encoder 1.05 and
1.07x). A long call gains less (the benchmark transformer 0.97x, BERT 0.95x) and loses when another process keeps a
core busy: while one busy loop ran beside it, the benchmark MLP took 1.9x its time, BERT 1.4x, the CNN 1.2x, while
19 of 20 short models held or gained (0.63-1.00x; BART, at 1.8 ms the longest, 1.16x). A spinning worker competes with
the busy loop for its core, where a sleeping one woken per kernel is let in at once: with the loop beside them, two
spinning threads took either about the time of one thread or 2-2.5x it, run by run, for calls of 1-3 ms too (the same
model and setting in two sessions gave both), where one thread held its time. So a model whose sizes are
all fixed records ``SPIN_KEY`` where its kernels, weighed on one thread, take from ``SPIN_SHORTEST_CALL_SECONDS``
(0.7 ms) to ``SPIN_CALL_SECONDS`` (3 ms) and a second thread saves more than it costs with waking at
``SPIN_WAKE_SECONDS`` a kernel (4 us, against 15 with spinning off), ``SPIN_OTHER_SECONDS`` every other kernel (0.5 us,
against 2) and ``WAKE_SECONDS`` once a run. The 0.5 us is what the kernels that are no product took more, summed, on
two spinning threads than on one in ORT's profile (HF LongT5 143 us over 225 kernels, Whisper 80 over 171); with 2 us
and a line at 1.5 ms, 32 of the 134 zoo models were weighed to the setting without spinning that they now leave:
alternating the two (ORT alone, two sessions a side, load 0.4-1.1), after 1 ms of idle time each new session took
0.59-1.04x the old one's time (BART, mBART, Pegasus, T5, mT5, keras-hub T5, CLIP 0.68-0.73, keras-hub Mixtral 0.83,
the CNNs 0.59-0.98, the Gemma, Llama and Qwen decoders of about 1 ms 0.79-1.04), called back to back 0.66-0.92x with a
run of 1.1-1.3x now on one model, now on another (Whisper 1.30 then 0.76, Gemma 2 0.81 then 1.29). jaxconv's sessions
(``runtimes.onnxrt.session_options``) then run it on one thread per core, spinning during each run;
``spinning=False`` asks for the spinning-off session on a busy machine. A model with symbolic sizes records its
kernels instead (polynomials of the sizes), and each call is weighed at its own sizes: ``f32[b, 256]`` through six
256-wide products spins at b = 256 and not at b = 64 or 2048.

Convolutions are weighed by their flops like the other products, grouped and depthwise ones
included (``group`` divides each output's window). Under the earlier line (products under 10 MFLOP
outweighing the rest): chains of one kind of convolution at 0.6-57
MFLOP (3x3, 1x1, depthwise 3x3 and 5x5; ORT runs them as NCHWc blocked convolutions) took 0.27-0.92x
the wall time on one thread of two below 30 MFLOP (load 10), depthwise ones included, and the
keras-hub MobileNetV3, EfficientNet and CSPDarkNet (every convolution under 10 MFLOP but the half
of CSPDarkNet's flops in its 3x3 ones: all three record one thread) took a median 0.78x, 0.53x and
0.78x the wall time on one thread of two (0.75x, 0.82x, 0.88x the CPU time; 12 x 41 pairs each).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any, BinaryIO, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import dim_sizes, product_rate, proto_wire

Size = int | float | dim_sizes.Poly  # a dimension's size, a product's flops: a polynomial of symbolic sizes
THREADS_KEY = "jaxconv.intra_op_threads"
# The weighing's measures (``two_thread_weights``; Intel Xeon with AVX-512, ORT 1.32, spinning off):
CORE_FLOPS = product_rate.FITTED  # one core's product rate there: 8-268 MFLOP products ran at 166-190 GFLOP/s;
# the weighing takes this machine's own (``product_rate.core_flops``: measured once, or JAXCONV_CORE_FLOPS)
STREAM_BYTES = 1.5e10  # bytes a second a product on few rows reads its right operand at ([2, 1728] x [1728, 512])
SECOND_THREAD_SAVES = 0.47  # of a product's one-thread time (8-268 MFLOP alone: 0.53-0.60x the time on two)
WAKE_SECONDS = 15e-6  # what a product ORT splits over two threads pays for waking the second
OTHER_SECONDS = 2e-6  # what every other kernel a call runs (elementwise, shapes, reductions) costs on two
# A model with no products weighs its elementwise kernels instead (``two_thread_weights``): ORT splits
# one over its threads from about ``SPLIT_ELEMENTS`` elements on, where the second thread saves
# ``ELEMENTWISE_SAVES`` of its one-thread time (its elements times an element's seconds, measured below)
# and costs ``WAKE_SECONDS``.
SPLIT_ELEMENTS = 1 << 16
ELEMENTWISE_SAVES = 0.4
_ELEMENT_SECONDS = 0.2e-9  # one float32 element of a cheap op (Add, Mul, Neg, Exp) on one thread
_COSTLY_ELEMENT_SECONDS = {"Sqrt": 0.36e-9, "Erf": 0.55e-9, "Gelu": 0.66e-9, "Log": 1.7e-9, "Elu": 1.9e-9,
                           "Pow": 4.5e-9, "Softplus": 11.3e-9}
# The ops ORT splits (Min, Round, Sin, Cos, Sign, Where took the same time on two threads as on one)
_SPLIT_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Pow", "Neg", "Abs", "Relu", "Exp", "Log", "Sqrt",
                        "Reciprocal", "Tanh", "Sigmoid", "Erf", "Floor", "Ceil", "Softplus", "LeakyRelu", "Elu",
                        "Gelu", "Clip"})
_SELF_THREADED = ("LSTM", "RNN")  # ORT's RNN ops that gain from a second thread
_RNN_OPS = (*_SELF_THREADED, "GRU")
_SHAPE_TYPES = (ir.DataType.INT64, ir.DataType.INT32)
_PRODUCT_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", *_RNN_OPS)
# An LSTM op whose steps multiply at most this many (``batch * 4H * H``) is weighed as its products
# (the module docstring): it runs faster on one thread.
LSTM_ONE_THREAD_MULTIPLIES = 1 << 18
_METADATA_FIELD = 14  # ModelProto.metadata_props
RECORD_SIZES = (16, 128)  # each symbolic dimension's sizes when a model's record is weighed
BY_SIZE_KEY = "jaxconv.intra_op_threads_by_size"  # the products, to weigh at a call's sizes
SMALL_SIZES = (1, 2, 4, 8, 16, 32, 64)  # where one thread wins at the first of these, BY_SIZE_KEY is recorded
# Spinning during a run (the module docstring, "Spinning during a run"): a model whose call is short records it
SPIN_KEY = "jaxconv.spin_during_run"
SPIN_WAKE_SECONDS = 4e-6  # what a kernel split over two threads pays for the second when the pool spins
SPIN_OTHER_SECONDS = 0.5e-6  # what every other kernel costs on two threads when the pool spins during the run
SPIN_CALL_SECONDS = 3e-3  # the longest call (its kernels on one thread, as weighed) that records spinning
SPIN_SHORTEST_CALL_SECONDS = 0.7e-3  # and the shortest: a run after an idle gap wakes a sleeping core first


def record(model: Any) -> dict[str, str]:
    """The metadata entries of a converted model's thread count: ``SPIN_KEY`` "1" where a call of the
    model's (all its sizes fixed) is short and gains from a second thread that spins during the run
    (``spins_during_run``: ORT's count, the pool spinning during each run); else ``THREADS_KEY`` where ``recommend``
    gives one thread at every size weighed, else ``BY_SIZE_KEY`` where its symbolic sizes give one
    thread at small sizes (``one_thread_up_to``): its products' flops (a model without products: its
    elementwise kernels' sizes) as polynomials of the inputs' symbolic dimensions, for the runner to weigh
    at each call's sizes; else none. A model with symbolic sizes and no products always records its
    elementwise kernels, as they gain from a second thread at sizes above those weighed. A model with symbolic
    sizes also records its kernels under ``SPIN_KEY`` (JSON, as ``BY_SIZE_KEY``'s, elementwise kernels
    included), for the runner to weigh at each call's sizes whether the call spins (``Record.spins``)."""
    graph = model.graph
    names = symbolic_names(graph)
    if not names and spins_during_run(graph):
        return {SPIN_KEY: "1"}
    kernels = kernels_of(graph, sizes={n: dim_sizes.Poly.name(n) for n in names}) if names else None
    entries = _thread_entries(model, kernels)
    if kernels is not None and (kernels.products or kernels.elementwise) and _may_spin(graph):
        entries[SPIN_KEY] = json.dumps(_kernels_json(graph, kernels, elementwise=True), separators=(",", ":"))
    return entries


def _thread_entries(model: Any, kernels: Kernels | None) -> dict[str, str]:
    """``record``'s ``THREADS_KEY`` or ``BY_SIZE_KEY`` entry (``kernels``: the graph's, of polynomial sizes)."""
    graph = model.graph
    by_size = kernels is not None and not kernels.products and bool(kernels.elementwise) \
        and colliding_scatter(graph) is None
    threads = None if by_size else recommend(model, symbolic_sizes=RECORD_SIZES)
    if threads is not None:
        return {THREADS_KEY: str(threads)}
    up_to = one_thread_up_to(graph)
    if up_to is None or kernels is None or not (kernels.products or kernels.elementwise):
        return {}
    data = {"one_thread_up_to": up_to, **_kernels_json(graph, kernels, elementwise=not kernels.products)}
    return {BY_SIZE_KEY: json.dumps(data, separators=(",", ":"))}


def _kernels_json(graph: Any, kernels: Kernels, elementwise: bool) -> dict[str, Any]:
    """The kernels of polynomial sizes as a record's JSON: each input's dimension names, the products
    (flops, runs and bytes read of each kind), the other kernels' count, and with ``elementwise`` the split
    elementwise kernels (elements, runs, seconds an element)."""
    runs: dict[tuple[dim_sizes.Poly, dim_sizes.Poly], dim_sizes.Poly] = {}  # one run's (flops, bytes read): runs
    for flops, count, streamed in kernels.products:
        one = (dim_sizes.Poly.of(flops), dim_sizes.Poly.of(streamed))
        runs[one] = runs.get(one, dim_sizes.Poly({})) + count
    inputs = [[d.value if isinstance(d, ir.SymbolicDim) else None for d in v.shape or ()] for v in graph.inputs]
    data: dict[str, Any] = {"inputs": inputs, "others": kernels.others,
                            "products": [[flops.to_json(), count.to_json(), streamed.to_json()]
                                         for (flops, streamed), count in runs.items()]}
    if elementwise:
        data["elementwise"] = [[dim_sizes.Poly.of(n).to_json(), dim_sizes.Poly.of(count).to_json(), per]
                               for n, count, per in kernels.elementwise]
    if kernels.lstm_steps:
        data["lstm_steps"] = [dim_sizes.Poly.of(step).to_json() for step in kernels.lstm_steps]
    return data


def one_thread_up_to(graph: Any) -> int | None:
    """The largest of ``SMALL_SIZES`` up to which every size weighs to one thread, with each symbolic
    dimension of the graph's inputs at that size; None where the smallest does not, or none is symbolic
    (``record`` writes ``BY_SIZE_KEY`` where it is not None, with this size as a summary)."""
    names = symbolic_names(graph)
    best = None
    for size in SMALL_SIZES if names else ():
        weights = weigh(graph, sizes=dict.fromkeys(names, size))
        if weights is None or one_thread_for(*weights) is None:
            break
        best = size
    return best


def recommend(model: Any, *, skip_unknown: bool = False, symbolic_sizes: Sequence[int] = ()) -> int | None:
    """1 where a second thread would cost the model's kernels more than it saves them, else None (ORT's
    thread count).

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


def one_thread_for(cost: float, saving: float) -> int | None:
    """The record for a second thread that costs a call ``cost`` seconds and saves it ``saving`` (``weigh``)."""
    return 1 if cost > saving else None


def spins_during_run(graph: Any) -> bool:
    """Whether a call of ``graph`` (its sizes all fixed) runs faster on two threads whose pool spins during the run
    (and stops after it) than as ``recommend`` would have it (``spins``, with no sizes). Not for a graph with an
    RNN op (the rules choose ORT's GRU op for one thread) or a combining scatter (which needs one thread)."""
    if not _may_spin(graph):
        return False
    kernels = kernels_of(graph, sizes={})
    return kernels is not None and spins(kernels.products, kernels.others, kernels.elementwise)


def _may_spin(graph: Any) -> bool:
    """No RNN op (the rules choose ORT's GRU op for one thread) and no combining scatter (one thread)."""
    if colliding_scatter(graph) is not None:
        return False
    return not any(node.op_type in _RNN_OPS for node in ir.traversal.RecursiveGraphIterator(graph))


def spins(products: Sequence[Product], others: float, elementwise: Sequence[Elementwise],
          sizes: Mapping[str, int] | None = None) -> bool:
    """``spins_during_run``'s weighing of a call's kernels (polynomials taken at ``sizes``): from
    ``SPIN_SHORTEST_CALL_SECONDS`` to ``SPIN_CALL_SECONDS`` on one thread, and a second thread worth ``SPIN_WAKE_SECONDS`` a split kernel
    plus ``WAKE_SECONDS`` once a run (the pool sleeps between runs)."""
    seconds = one_thread_seconds(products, elementwise, sizes)
    if seconds is None or not SPIN_SHORTEST_CALL_SECONDS <= seconds <= SPIN_CALL_SECONDS:
        return False
    weights = two_thread_weights(products, others, sizes, elementwise, wake=SPIN_WAKE_SECONDS, other=SPIN_OTHER_SECONDS)
    return weights is not None and one_thread_for(weights[0] + WAKE_SECONDS, weights[1]) is None


def one_thread_seconds(products: Sequence[Product], elementwise: Sequence[Elementwise],
                       sizes: Mapping[str, int] | None = None) -> float | None:
    """The seconds a call's products and split elementwise kernels take on one thread, as weighed
    (polynomials taken at ``sizes``); None where one names a dimension without a size."""
    total = 0.0
    rate = product_rate.core_flops() if products else product_rate.FITTED
    for product in products:
        one, count, streamed = (_at(x, sizes) for x in product)
        if one is None or count is None or streamed is None:
            return None
        total += count * max(one / rate, streamed / STREAM_BYTES)
    for elements, runs, per_element in elementwise:
        n, count = _at(elements, sizes), _at(runs, sizes)
        if n is None or count is None:
            return None
        total += n * count * per_element
    return total


def weigh(graph: Any, *, skip_unknown: bool = False, loop_steps: Callable[[Any], int | None] | None = None,
          leave_out: Collection[Any] = (), sizes: Mapping[str, int] | None = None) -> tuple[float, float] | None:
    """(seconds a second intra-op thread costs a call, seconds it saves: ``two_thread_weights``), or None
    where a product's size is unknown (unless ``skip_unknown``) or a big LSTM or an RNN op runs.

    Args:
        loop_steps: the steps of a Loop that will run a fixed number of them (a rule's estimate
            before ``to_scan`` makes it a Scan); without it a Loop's products are of unknown count.
        leave_out: nodes not weighed, nor their subgraphs (a Loop a rule is about to replace).
        sizes: a size for each named symbolic dimension (of the graph's inputs: ``symbolic_names``);
            an expression of them as jax.export writes one (``64*b``) is evaluated, and a name shape
            inference made up takes the size of a dimension an op equates it to (``dim_sizes``).
    """
    kernels = kernels_of(graph, skip_unknown=skip_unknown, loop_steps=loop_steps, leave_out=leave_out,
                         sizes=sizes or {})
    return None if kernels is None else kernels.weights()


Product = tuple[Size, Size, Size]  # (flops of one run, runs a call makes, bytes one run reads of its right operand)
Elementwise = tuple[Size, Size, float]  # (elements of one run, runs a call makes, seconds an element on one thread)


@dataclasses.dataclass
class Kernels:
    """What a call runs, as ``two_thread_weights`` weighs it."""

    products: list[Product]
    others: float  # kernels that are no product (elementwise ones included)
    elementwise: list[Elementwise]  # those of the others ORT splits over its threads, where their sizes are known
    lstm_steps: list[Size] = dataclasses.field(default_factory=list)  # ``_sized_later``: each step's flops

    def weights(self) -> tuple[float, float] | None:
        return two_thread_weights(self.products, self.others, elementwise=self.elementwise)


def kernels_of(graph: Any, *, sizes: Mapping[str, int | dim_sizes.Poly], skip_unknown: bool = False,
               loop_steps: Callable[[Any], int | None] | None = None,
               leave_out: Collection[Any] = ()) -> Kernels | None:
    """The products a call runs (``Product``; with ``dim_sizes.Poly`` sizes, polynomials of the symbolic
    dimensions), how many other kernels it runs (a Loop's or Scan's body's once per step, once where its
    steps are not known) and which of those ORT splits, as ``weigh`` takes them; None where it gives None."""
    products: list[Product] = []
    elementwise: list[Elementwise] = []
    lstm_steps: list[Size] = []
    others = 0.0
    shapes = _Shapes({}, dim_sizes.with_equated(graph, sizes))
    for node, repeats, seen in _kernels(graph, 1, shapes, loop_steps, {id(n) for n in leave_out}):
        if node.op_type not in _PRODUCT_OPS:
            if _other_kernel(node):
                runs = 1 if repeats is None else repeats
                others += runs
                dims = _dims(node.outputs[0], seen) if node.op_type in _SPLIT_OPS else None
                if dims is not None:
                    per = _COSTLY_ELEMENT_SECONDS.get(node.op_type, _ELEMENT_SECONDS)
                    elementwise.append((math.prod(dims, start=1), runs, per))
            continue
        if node.op_type in _SELF_THREADED and not _small_lstm(node, seen):
            if not _sized_later(node, seen):
                return None
            lstm_steps.append(_rnn_products(node, seen)[-1][0])  # ORT's default where large at a call's sizes
        weighed = _rnn_steps_weighed(node, seen) if node.op_type in _RNN_OPS else [(_flops(node, seen), 1)]
        streamed = 0.0 if node.op_type in _RNN_OPS else _streamed(node, seen)
        for flops, times in weighed:
            if flops is None or repeats is None:
                if skip_unknown:
                    continue
                return None
            products.append((flops, repeats * times, streamed))
    return Kernels(products, others, elementwise, lstm_steps)


def _other_kernel(node: Any) -> bool:
    """Whether a node that is no product counts as a kernel a call runs: not one the clean-up after the
    rules folds (its inputs all constants), nor shape arithmetic (integer outputs that are no model output)."""
    if all(v is None or v.const_value is not None for v in node.inputs) and node.inputs:
        return False
    return not all(o.dtype in _SHAPE_TYPES and not o.is_graph_output() for o in node.outputs)


def two_thread_weights(products: Sequence[Product], others: float = 0.0,
                       sizes: Mapping[str, int] | None = None,
                       elementwise: Sequence[Elementwise] = (),
                       wake: float = WAKE_SECONDS, other: float = OTHER_SECONDS) -> tuple[float, float] | None:
    """(seconds a second intra-op thread costs a call, seconds it saves) for ``products`` and ``others``
    other kernels, polynomials taken at ``sizes``; None where one names a dimension without a size.

    Each product takes ``max(flops / rate, bytes read / STREAM_BYTES)`` on one thread, ``rate`` this
    machine's (``product_rate.core_flops``; ``CORE_FLOPS`` on the machine the weighing was fitted on); a second
    thread saves ``SECOND_THREAD_SAVES`` of that and costs ``wake`` (``WAKE_SECONDS`` with spinning off);
    every other kernel costs ``other`` more on two threads (``OTHER_SECONDS`` with spinning off; the module docstring has the
    measurements). A call without products is weighed by its ``elementwise`` kernels: one of at least
    ``SPLIT_ELEMENTS`` elements costs ``wake`` instead and saves ``ELEMENTWISE_SAVES`` of its one-thread time."""
    cost, saving = others * other, 0.0
    if products:
        rate = product_rate.core_flops()
        for product in products:
            one, count, streamed = (_at(x, sizes) for x in product)
            if one is None or count is None or streamed is None:
                return None
            cost += count * wake
            saving += count * SECOND_THREAD_SAVES * max(one / rate, streamed / STREAM_BYTES)
        return cost, saving
    for elements, runs, per_element in elementwise:
        n, count = _at(elements, sizes), _at(runs, sizes)
        if n is None or count is None:
            return None
        if n >= SPLIT_ELEMENTS:
            cost += count * (wake - other)
            saving += count * ELEMENTWISE_SAVES * n * per_element
    return cost, saving


def _at(x: Size, sizes: Mapping[str, int] | None) -> float | None:
    """``x`` with its symbolic sizes (a polynomial's) taken at ``sizes``; None where one has none."""
    return x.value(sizes or {}) if isinstance(x, dim_sizes.Poly) else x


@dataclasses.dataclass(frozen=True)
class _Shapes:
    """Where dims come from besides a value's static shape: a Scan or Loop body's inputs that carry
    no shape (they take the outer value's, by id of the body input), and named symbolic dims."""

    known: dict[int, list[int]]
    sizes: dict[str, int]

    def with_known(self, more: dict[int, list[int]]) -> _Shapes:
        return _Shapes({**self.known, **more}, self.sizes)


def _kernels(graph: Any, repeats: int | None, shapes: _Shapes,
             loop_steps: Callable[[Any], int | None] | None = None,
             leave_out: frozenset[int] | set[int] = frozenset()) -> Iterator[tuple[Any, int | None, _Shapes]]:
    """(node, how many times a call runs it, where its dims come from) for every node but Constants,
    subgraphs included. A Scan body's inputs often carry no shape: they take the Scan's inputs'."""
    live = _live(graph)  # a rule's estimate runs before dead nodes are removed
    for node in graph:
        if node.op_type == "Loop" and node.domain == "" and loop_steps is not None:
            _know_scan_outputs(node, loop_steps(node), shapes)
        if node.domain not in ("", "ai.onnx") or id(node) in leave_out or id(node) not in live:
            continue
        if node.op_type != "Constant":
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
            yield from _kernels(attr.value, times, inner, loop_steps, leave_out)


def _live(graph: Any) -> set[int]:
    """The ids of ``graph``'s nodes that its outputs depend on, through the values its nodes' subgraphs read."""
    live: set[int] = set()
    stack = [v.producer() for v in graph.outputs]
    while stack:
        node = stack.pop()
        if node is None or id(node) in live or node.graph is not graph:
            continue
        live.add(id(node))
        stack.extend(v.producer() for v in node.inputs if v is not None)
        for attr in node.attributes.values():
            if attr.type.name == "GRAPH":
                stack.extend(v.producer() for inner in ir.traversal.RecursiveGraphIterator(attr.value)
                             for v in inner.inputs if v is not None)
    return live


def _know_scan_outputs(loop: Any, steps: int | None, shapes: _Shapes) -> None:
    """Each scan output of ``loop`` has a row per step: its dims where shape inference left the first one
    unknown (the next layer's sequence, which an RNN op made from that layer reads)."""
    if steps is None:
        return
    for out in list(loop.outputs)[len(loop.inputs) - 2:]:
        rest = list(out.shape)[1:] if out.shape is not None and len(out.shape) > 0 else None
        if id(out) not in shapes.known and rest is not None and all(isinstance(d, int) for d in rest):
            shapes.known[id(out)] = [steps, *rest]


def _small_lstm(node: Any, shapes: _Shapes) -> bool:
    """True for an LSTM op whose steps' products multiply at most ``LSTM_ONE_THREAD_MULTIPLIES``."""
    step = _rnn_products(node, shapes)[-1][0] if node.op_type == "LSTM" else None
    return isinstance(step, (int, float)) and step / 2 <= LSTM_ONE_THREAD_MULTIPLIES  # a Poly: sizes to come


def _sized_later(node: Any, shapes: _Shapes) -> bool:
    """True for an LSTM op whose steps' products are polynomials of symbolic sizes: a by-size record keeps
    them (``lstm_steps``), and a call where one is large at its sizes takes ORT's default thread count, as
    ``_small_lstm`` decides for a static one (a stacked Flax LSTM, H 256 at batch 2: one thread took 1.5x the
    time of two); the rest of the call is weighed as usual."""
    return isinstance(_rnn_products(node, shapes)[-1][0], dim_sizes.Poly)


def _rnn_products(node: Any, shapes: _Shapes) -> list[tuple[float | None, int]]:
    """(flops, times a run of the op does it) of a GRU or LSTM op: ORT's kernels project every step's
    input at once (``[T * B, I] x [I, 3H]`` per direction; 4H for the LSTM), then run each step's
    ``[B, H] x [H, 3H]``."""
    x = _dims(node.inputs[0], shapes)
    r = _dims(node.inputs[2], shapes) if len(node.inputs) > 2 else None
    layout = node.attributes.get("layout")
    if not x or len(x) != 3 or not r or len(r) != 3 or (layout is not None and int(layout.value)):
        return [(None, 1)]
    steps, batch, width = x
    directions, gates, hidden = r
    projection, step = 2.0 * steps * batch * width * gates, 2.0 * batch * hidden * gates
    return [(projection, directions), (step, directions * steps)]


def _rnn_steps_weighed(node: Any, shapes: _Shapes) -> list[tuple[float | None, int]]:
    """``_rnn_products`` as ``two_thread_weights`` takes them: each step's product saves nothing on a second
    thread (ORT's GRU kernel took 2.4-4x the CPU time on two threads, ``rewrites/gru.py``), and pays for
    waking it."""
    projection, *steps = _rnn_products(node, shapes)
    return [projection, *((None if flops is None else 0.0, times) for flops, times in steps)]


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
        if dims is not None and (inside.shape is None or not all(isinstance(d, int) for d in inside.shape)):
            inner[id(inside)] = dims  # a body input whose dims shape inference left unknown takes them too
    return shapes.with_known(inner)


def _dims(value: Any, shapes: _Shapes, start: int = 0) -> list[Size] | None:
    """The sizes of ``value``'s dimensions from ``start`` on; None where one is unknown."""
    if value is None:
        return None
    if id(value) in shapes.known:
        return shapes.known[id(value)][start:]
    shape = value.shape
    if shape is None and value.const_value is not None:  # an initializer a rule made without a shape
        shape = value.const_value.shape
    if shape is None:
        return _transposed(value, shapes, start)
    dims = [d if isinstance(d, int) else dim_sizes.size_of(d.value, shapes.sizes) for d in list(shape)[start:]]
    return _transposed(value, shapes, start) if any(d is None for d in dims) else dims


def _transposed(value: Any, shapes: _Shapes, start: int) -> list[Size] | None:
    """The dims of a Transpose's output a rule made without a shape (a weight it transposed), from its input's."""
    node = value.producer()
    if node is None or node.op_type != "Transpose" or node.domain != "" or "perm" not in node.attributes:
        return None
    dims = _dims(node.inputs[0], shapes)
    perm = list(node.attributes["perm"].value)
    return [dims[p] for p in perm][start:] if dims is not None and sorted(perm) == list(range(len(dims))) else None


def _broadcast(x: Sequence[Size], y: Sequence[Size]) -> list[Size] | None:
    """Two shapes' broadcast (numpy's rule; sizes may be polynomials), or None where they do not broadcast."""
    out: list[Size] = []
    for d1, d2 in itertools.zip_longest(reversed(x), reversed(y), fillvalue=1):
        if d1 == 1:
            out.append(d2)
        elif d2 == 1 or d1 == d2:
            out.append(d1)
        else:
            return None
    return out[::-1]


def _streamed(node: Any, shapes: _Shapes) -> Size:
    """The bytes of a product's right operand (a weight, a convolution's kernel), which one run reads; 0
    where its size is unknown."""
    value = node.inputs[1] if len(node.inputs) > 1 else None
    dims = _dims(value, shapes)
    if dims is None:
        return 0.0
    dtype = value.dtype
    return math.prod(dims) * (4 if dtype is None else dtype.itemsize) * 1.0


def _flops(node: Any, shapes: _Shapes) -> Size | None:
    """Multiply-adds times two of one run of a product, from its operands' static shapes; None when unknown."""
    a = _dims(node.inputs[0], shapes)
    b = _dims(node.inputs[1], shapes) if len(node.inputs) > 1 else None
    if not a or not b:
        return None
    if node.op_type == "MatMul":
        a2, b2 = ([1, *a] if len(a) == 1 else a), ([*b, 1] if len(b) == 1 else b)
        batch = _broadcast(a2[:-2], b2[:-2])
        return None if batch is None else 2.0 * math.prod(batch) * a2[-2] * a2[-1] * b2[-1]
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
    """What a model file records: a thread count for every size (``THREADS_KEY``), or its products as
    polynomials of its inputs' symbolic dimensions, to weigh at a call's sizes (``BY_SIZE_KEY``), or
    that its pool spins during each run (``SPIN_KEY``, with ORT's count)."""

    threads_always: int | None = None
    spin: bool = False  # ``SPIN_KEY`` "1": the pool spins during each run where it has more than one thread
    spin_by_size: Record | None = None  # ``SPIN_KEY``'s kernels (symbolic sizes), to weigh at a call's sizes
    inputs: tuple[tuple[str | None, ...], ...] = ()  # each input's dimension names (None: a fixed size)
    products: tuple[tuple[dim_sizes.Poly, dim_sizes.Poly, dim_sizes.Poly], ...] = ()  # ``Product``s
    others: float = 0.0  # the other kernels a call runs
    elementwise: tuple[tuple[dim_sizes.Poly, dim_sizes.Poly, float], ...] = ()  # ``Elementwise``s
    lstm_steps: tuple[dim_sizes.Poly, ...] = ()  # each LSTM op's step flops: large at a call's sizes, ORT's count

    @property
    def by_size(self) -> bool:
        """Whether the count or the spinning depends on each call's sizes."""
        return self.spin_by_size is not None or (self.threads_always is None and bool(self.products or self.elementwise))

    def spins(self, shapes: Sequence[Sequence[int]] | None = None) -> bool:
        """Whether a call on inputs of ``shapes`` runs with the pool spinning during the run (``SPIN_KEY``;
        with symbolic sizes, its kernels weighed at these sizes: ``spins``)."""
        if self.spin:
            return True
        kernels = self.spin_by_size
        sizes = None if kernels is None or shapes is None else kernels.sizes(shapes)
        return sizes is not None and spins(kernels.products, kernels.others, kernels.elementwise, sizes)

    def threads(self, shapes: Sequence[Sequence[int]] | None = None) -> int | None:
        """The thread count for a call on inputs of ``shapes`` (in the model's input order): None (ORT's
        default) where the call spins during the run, else the count for every size, else 1 where the products
        weigh one thread at these sizes; None: ORT's default."""
        if self.spins(shapes):
            return None
        if self.threads_always is not None or not (self.products or self.elementwise) or shapes is None:
            return self.threads_always
        sizes = self.sizes(shapes)
        steps = [None if sizes is None else step.value(sizes) for step in self.lstm_steps]
        if sizes is None or any(step is None or step / 2 > LSTM_ONE_THREAD_MULTIPLIES for step in steps):
            return None  # an LSTM op large at these sizes threads its steps itself (``_small_lstm``)
        weights = two_thread_weights(self.products, self.others, sizes, self.elementwise)
        return None if weights is None else one_thread_for(*weights)

    def sizes(self, shapes: Sequence[Sequence[int]]) -> dict[str, int] | None:
        """Each symbolic dimension's size in a call on inputs of ``shapes``; None where the shapes do not
        fit the inputs (a count or rank that differs, one name at two sizes)."""
        if len(shapes) != len(self.inputs):
            return None
        sizes: dict[str, int] = {}
        for names, shape in zip(self.inputs, shapes):
            if len(names) != len(shape):
                return None
            for name, size in zip(names, shape):
                if name is not None and sizes.setdefault(name, int(size)) != int(size):
                    return None
        return sizes


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
        if entry.get(1, "") in (THREADS_KEY, BY_SIZE_KEY, SPIN_KEY):
            values[entry[1]] = entry.get(2, "")
    spin = values.get(SPIN_KEY, "")
    if spin == "1":
        return Record(spin=True)
    count = values.get(THREADS_KEY, "")
    record = Record(threads_always=int(count)) if count.isdigit() and int(count) > 0 \
        else _by_size(values.get(BY_SIZE_KEY, ""))
    kernels = _by_size(spin) if spin else Record()
    if kernels.products or kernels.elementwise:
        record = dataclasses.replace(record, spin_by_size=kernels)
    return record


def _by_size(value: str) -> Record:
    """``BY_SIZE_KEY``'s JSON as a Record; an empty one where it is missing or malformed."""
    try:
        data = json.loads(value)
        inputs = tuple(tuple(n for n in names) for names in data["inputs"])
        if not all(n is None or isinstance(n, str) for names in inputs for n in names):
            return Record()
        products = tuple(_product_from_json(*entry) for entry in data["products"])
        others = float(data.get("others", 0.0))
        elementwise = tuple((dim_sizes.Poly.from_json(n), dim_sizes.Poly.from_json(count), float(per))
                            for n, count, per in data.get("elementwise", ()))
        lstm_steps = tuple(dim_sizes.Poly.from_json(step) for step in data.get("lstm_steps", ()))
        return Record(inputs=inputs, products=products, others=others, elementwise=elementwise,
                      lstm_steps=lstm_steps)
    except (ValueError, TypeError, KeyError, AttributeError):
        return Record()


def _product_from_json(flops: Any, runs: Any, streamed: Any = None) -> tuple[dim_sizes.Poly, ...]:
    """A ``Product`` of polynomials from its JSON (a record written before bytes were weighed has none)."""
    return tuple(dim_sizes.Poly.from_json(x) for x in (flops, runs, streamed if streamed is not None else []))
