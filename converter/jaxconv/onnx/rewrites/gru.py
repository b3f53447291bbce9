"""A GRU cell written in a lax.scan, as the ONNX GRU op.

Matches the Loop a forward ``lax.scan`` lowers to (after ``loops`` moved the input projections
``xs @ w`` out of it) whose body is a GRU cell, in either of ONNX's two forms::

    r = sigmoid(x @ wr + h @ ur + br);   z = sigmoid(x @ wz + h @ uz + bz)
    n = tanh(x @ wn + bn + (r * h) @ un)            # linear_before_reset=0 (reset first)
    n = tanh(x @ wn + bn + r * (h @ un + bun))      # linear_before_reset=1 (flax.linen.GRUCell, PyTorch)
    h' = (1 - z) * n + z * h;   carry h', emit h'
    h' = n + z * (h - n)                            # eqx.nn.GRUCell (the same, not bit for bit)
    h' = (1 - z) * h + z * n                        # hk.GRU: ONNX's z is 1 - z = sigmoid(-a), its
                                                    # weights and bias negated (not bit for bit)

Each gate's pre-activation is read as a sum of terms, so the weights may be fused (one
``x @ wx`` whose columns are sliced or split, r and z in either order, one sigmoid over both)
or separate (one Dense per gate, as flax writes it). Sigmoid must be written exactly as
``1 / (1 + exp(-a))`` and the weights must be constants. ORT's GRU kernel runs the whole sequence
in one op; like the LSTM rule, it runs only when the sequence and the initial state are finite,
else the exact Loop does.

Chosen by size and threads (``ENABLED`` forces it for every size): the GRU op where each step's
recurrent products are too small for ONNX Runtime's GEMM (MLAS) to split over threads, ``batch * 2H *
H`` multiplies under ``MLAS_THREAD_COMPLEXITY`` (65,536; MLAS gives a product ``multiplies / 65,536 +
1`` threads), or where the model runs on one intra-op thread (``thread_count``: a second thread would cost
its kernels, the scans' products once per step, more than it saves; the model then records that thread, so ORT's
sessions with jaxconv's options run the op on one) and its products are under ``ONE_THREAD_LIMIT``;
the Scan elsewhere. On one thread the op wins at every size (below). Below the line the GRU op never waits on the
thread pool, and it saves the Scan's cost per step (the benchmark GRU's graph with an empty Scan
body took 1.6 ms of the full graph's 6.2 ms, one thread, ORT 1.32; the cell's elementwise nodes
another 1.0 ms): measured on 2 cores under load 8-10 (jaxconv's session
options, medians over jax.jit's, alternating in one process; ``scan`` / ``GRU op``, two threads):
T64 B16 I64 H32 1.79 / 0.93; T64 B1 I64 H128 1.69 / 0.55; T8 B16 I64 H32 1.10 / 0.62;
T64 B64 I16 H16 1.26 / 0.96; T64 B16 I64 H45 1.37 / 0.80. At the line (B32 H32, B8 H64: 65,536)
the op's CPU time with two threads doubles (2.09x and 2.83x jax.jit's against 1.03 and 0.73 with
one) and above it the op loses badly: T64 B4 I64 H128 13.9x against the Scan's 0.81x.

Why not above the line, by measurement on the benchmark GRU (t64 b16 h256, 2-core machine,
ORT 1.32, alternating in one process, ratios to jax.jit): on a quiet machine (load 0.4-1.8,
medians) the GRU op ran at 0.65-0.74x against the Loop's 0.86-0.88x, with ORT's default threads
and with one; with both cores contended (load 6-11, p10 times) the GRU op with two intra-op
threads ran at 2.5-3.1x against the Loop's 0.6-1.2x (flax's form: 2.5x against 1.2x), and about
even at one thread. Process CPU time per call says why (load 15, against the Scan the Loop
becomes): one thread, the GRU op takes 0.85-0.91x the Scan's CPU time (hand-written 6.4 ms
against 7.0; flax 6.7 against 7.6); two threads, 2.4-2.8x (18.4 and 21.1 ms) while the Scan takes
1.1x. The kernel splits each step's two small GEMMs (the recurrent weights passed transposed, so
MLAS packs them on every call) over the thread pool and waits for both threads 128 times a call;
the extra CPU time is most likely that waiting, which a contended machine cannot spare. The LSTM
op, whose kernel prepacks its weights, costs 1.15x its one-thread CPU time with two threads. A rule
that can lose 3x is the wrong default there; ``ENABLED = True`` suits deployments with one
intra-op thread or idle cores.

Measured again on the GRU op alone (T 64, input 64, H 256, spinning off, load 4): with two threads
it takes 4.0x (linear_before_reset=0) and 4.5x (=1) its one-thread CPU time at batch 16, and still
2.2x and 2.5x at batch 256, where each step's products are large, so it is not only the pool's
hand-off on small products; the LSTM op takes 1.1x and 1.0x. Spinning on helps little (2.2-3.2x
jax.jit on the benchmark GRU against 3.0-3.6x), and ORT rejects layout=1. Its graph would also be
four nodes (the finiteness guard, the If, the output product) against the Scan's three.

Measured again (2026-12-01, load 6.6-6.7, benchmark GRU, ``ENABLED = True`` against the Scan with
``scan_rows``, alternating with jax.jit in one process, three rotations each): two threads, the GRU
op 2.11-3.08x jax.jit (18.2-30.6 ms, 21.5-22.2 ms CPU per call) against the Scan's 0.79-0.91x
(7.2-7.9 ms, 7.2-7.3 ms CPU); one thread, 0.73-0.77x (6.6-7.4 ms CPU) against 0.76-0.80x (7.1-7.9
ms CPU). So the collapse is still there: it is the op's two-thread CPU time, three times its
one-thread time, not the load alone; the Scan's two threads cost 1.1x its one-thread CPU time
(each step's two products are two parallel sections of ORT's pool, woken with spinning off).

So the op above the line where the model records one thread (2026-12-02, load 8.4-8.8, the GRU op
against the Scan, both on the one thread the models record, alternating with jax.jit in one process,
three rotations each; CPU time and wall time new / old): the benchmark GRU (t64 b16 h256) 0.84-0.87 /
0.83-0.84 (CPU over jax.jit's 0.64-0.67 -> 0.55-0.57); the zoo's Flax linen GRU tagger (B2 H128)
0.43-0.46 / 0.42-0.44 (1.30-1.49 -> 0.56-0.66); Haiku's ``hk.GRU`` under ``dynamic_unroll`` (B4
H128, which the update form above reads) 0.51-0.55 / 0.47-0.49 (1.24-1.40 -> 0.65-0.72). A session
that ignores the record and runs the op on two threads loses what the paragraphs above say: a plain
``InferenceSession`` ran the benchmark GRU as the op at 1.64x jax.jit against the Scan's 0.98x, so above
``ONE_THREAD_LIMIT`` (8x the line; the benchmark GRU is 32x) the Scan stays whatever the record.

A symbolic batch (``f32[b, t, i]``) is known only at run time: the op goes in where some batch keeps each
step's products under ``ONE_THREAD_LIMIT``, and its If also tests the call's batch (``Shape``) against the
bound (``_batch_bound``: 16 for H 128), the Scan running at or above it. The zoo's Flax linen GRU tagger (H
128) exported ``f32[b, 16]``, against the Scan it was before (one process, alternating, load 0.7-1.2): in
the model's own session 0.36-0.71x the time at batches 1-8, 1.03-1.12x at 16-64, where the Scan runs inside
the If (ORT's If costs about 0.2 ms a call here, measured with the finiteness test and without); in a plain
``InferenceSession`` 0.36-0.77x at 1-8, 1.02-1.26x at 16-64. Keras' GRU slices its gate columns with the
rows' bound computed from the model input's ``Shape`` (``_slice_ends`` reads it as the batch's name).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from jaxconv.onnx import thread_count
from jaxconv.onnx.rewrites import _constants, symbolic
from jaxconv.onnx.rewrites import _dim_products as dp
from jaxconv.onnx.rewrites import _match as m
from jaxconv.onnx.rewrites.loops import scan_steps
from jaxconv.onnx.rewrites.loops import trip_count as _loop_shape
from jaxconv.onnx.rewrites.lstm import _const, _guarded, _initial_state, _is_counter_index, _sigmoid_of

ENABLED = False  # True: every GRU-cell scan becomes the GRU op, whatever its size (module docstring)
MLAS_THREAD_COMPLEXITY = 1 << 16  # ORT's GEMM runs a product of fewer multiplies on one thread
# Above this, the op stays a Scan even where the model records one thread: a session that ignores the
# record (a plain InferenceSession: ORT's default threads, spinning on) runs the op on every core and
# loses (the benchmark GRU, 32x the line: 0.98x -> 1.64x jax.jit); Haiku's and Flax's B2-B4 H128
# GRUs (1-2x the line) took 0.45-0.65x jax.jit as the op in such a session, against 0.83-1.5x.
ONE_THREAD_LIMIT = 8 * MLAS_THREAD_COMPLEXITY


def _one_thread(batch: int, hidden: int, limit: int = MLAS_THREAD_COMPLEXITY) -> bool:
    """True when each step's products (``[batch, H] x [H, 2H]`` and ``[batch, H] x [H, H]``) are
    small enough that ORT's GEMM runs them on the calling thread alone (under ``limit`` multiplies)."""
    return batch * 2 * hidden * hidden < limit


def _static_shape(value: ir.Value, depth: int = 4) -> list[int | str] | None:
    """``value``'s static shape, or where shape inference left it unknown, as the rules know it: a Loop's
    scan output has a row per step, its final state the initial state's shape (the lowering's Loops, from
    StableHLO's while, carry each state at one type), a Transpose its input's dims permuted (the next
    layer's sequence, made from an RNN op's output); else its dims with a symbolic one by its name."""
    dims = m.static_dims(value)
    if dims is not None:
        return list(dims)
    derived = _derived_shape(value, depth - 1) if depth > 0 else None
    if derived is None:
        derived = dp.named_dims(value)
    if derived is None and value.producer() is not None:
        inferred = symbolic.inferred_shape(value)  # after an earlier layer's rule: an RNN op's outputs joined
        derived = list(inferred) if inferred is not None else None
    return derived


def _derived_shape(value: ir.Value, depth: int) -> list[int | str] | None:
    loop = m.producer(value, "Loop")
    if loop is not None:
        k = list(loop.outputs).index(value)
        if k < len(loop.attributes["body"].value.inputs) - 2:  # a state
            return _static_shape(loop.inputs[2 + k], depth)
        rest = dp.named_dims(value, start=1)
        steps = _loop_shape(loop)  # a scan output: one row per step
        return None if steps is None or rest is None else [steps, *rest]
    node = m.producer(value, "Transpose")
    inner = _static_shape(node.inputs[0], depth) if node is not None else None
    perm = m.attr(node, "perm", None) if inner is not None else None
    if perm is None or sorted(perm) != list(range(len(inner))):
        return None
    return [inner[p] for p in perm]


def _state_fits(loop: ir.Node, k: int, batch: int, hidden: int) -> bool:
    """True when the state ``loop`` carries at input ``k`` is known to be ``[batch, hidden]``, the shape the
    RNN ops take their initial state in. A state of more rows than the sequence (``zeros((2, H))`` over a
    batch of 1, the cell's sums broadcasting the sequence) would make the op return the sequence's batch."""
    body = loop.attributes["body"].value
    shapes = (_static_shape(loop.inputs[k]), dp.named_dims(body.inputs[k]))
    known = [dims for dims in shapes if dims is not None]
    return bool(known) and all(dims == [batch, hidden] for dims in known)


@dataclass
class _Linear:
    """A gate pre-activation ``x_t @ wx + h @ wh + b`` restricted to some columns.

    ``wx``/``wh`` are None when the term is absent; ``projs`` are the outer ``MatMul(xs, w)``
    nodes the x part came from.
    """

    wx: np.ndarray | None = None
    wh: np.ndarray | None = None
    b: np.ndarray | None = None
    projs: list = field(default_factory=list)

    def plus(self, other: "_Linear") -> "_Linear | None":
        if (self.wx is not None and other.wx is not None) or (self.wh is not None and other.wh is not None):
            return None
        if self.b is not None and other.b is not None:
            b = self.b + other.b
        else:
            b = self.b if self.b is not None else other.b
        wx = self.wx if self.wx is not None else other.wx
        wh = self.wh if self.wh is not None else other.wh
        return _Linear(wx, wh, b, self.projs + other.projs)


class _Cell:
    """What the terms of one loop body share: the state value, the counter, the sequence, the rows kept."""

    def __init__(self, loop: ir.Node, h_in: ir.Value, counter: ir.Value):
        self.loop, self.h_in, self.counter = loop, h_in, counter
        self.xs: ir.Value | None = None
        self.batch_major = False  # the projections read xs as [batch, steps, width] (``_projection``)
        self.rows: list[int | str] = []

    def sequence(self, steps: int) -> tuple[ir.Value, int | str, int] | None:
        """(xs, batch, width): the sequence the terms read, ``[steps, batch, width]`` with a static width
        and a batch that is a number or a symbolic size's name, when every Slice of it keeps all rows;
        else None."""
        xs = self.xs
        dims = _static_shape(xs) if xs is not None else None
        if dims is None or len(dims) != 3:
            return None
        if self.batch_major:
            dims = [dims[1], dims[0], dims[2]]
        batch, n_in = dims[1], dims[2]
        if dims[0] != steps or not isinstance(n_in, int):
            return None
        if not all(r == batch or isinstance(r, int) and isinstance(batch, int) and r >= batch for r in self.rows):
            return None  # every Slice keeps all rows
        return xs, batch, n_in

    def linear(self, value: ir.Value | None, cols: tuple[int, int] | None = None,
               depth: int = 8) -> _Linear | None:
        """``value`` (columns ``cols`` of it, all when None) as a ``_Linear``, else None."""
        if value is None or depth == 0:
            return None
        sel = _columns(value, self.rows)
        if sel is not None:
            src, start, stop = sel
            if cols is not None:
                if cols[1] > stop - start:
                    return None
                start, stop = start + cols[0], start + cols[1]
            return self.linear(src, (start, stop), depth - 1)
        add = m.binary(m.producer(value), "Add")
        if add is not None:
            a, b = self.linear(add[0], cols, depth - 1), self.linear(add[1], cols, depth - 1)
            return a.plus(b) if a is not None and b is not None else None
        bias = _weight(value)
        if bias is not None:
            return self._bias(bias, cols)
        mm = m.producer(value, "MatMul")
        if mm is not None and mm.inputs[0] is self.h_in:
            w = _weight(mm.inputs[1])
            return None if w is None or w.ndim != 2 else _Linear(wh=_cut(w, cols))
        return self._projection(value, cols)

    def _bias(self, bias: np.ndarray, cols: tuple[int, int] | None) -> _Linear | None:
        if bias.dtype != np.float32 or bias.ndim > 2:
            return None
        rows = bias.reshape(-1, bias.shape[-1]) if bias.ndim else bias.reshape(1, 1)
        if not np.all(rows == rows[:1]):
            return None
        return _Linear(b=_cut(rows[0], cols))

    def _projection(self, value: ir.Value, cols: tuple[int, int] | None) -> _Linear | None:
        """``Squeeze(Slice(P, t, t + 1, axes=[0]))`` (or a Reshape dropping that axis) with ``P = MatMul(xs, w)``
        computed before the Loop,
        or ``P`` that product plus a constant bias over its columns, or either made time-major by a
        ``Transpose(perm=[1, 0, 2])`` of the product over the batch-major sequence (Keras' GRU
        projects the whole ``[batch, steps, width]`` input, then scans the steps)."""
        row = m.producer(value, "Squeeze", "Reshape")
        sl = m.producer(row.inputs[0], "Slice") if row is not None else None
        if sl is None or len(sl.inputs) < 4:
            return None
        outer, bias, batch_major = _outer_product(sl.inputs[0])
        if outer is None or outer.graph is not self.loop.graph:
            return None
        axes = m.const(sl.inputs[3])
        w = _weight(outer.inputs[1])
        if axes is None or list(np.atleast_1d(axes)) != [0] or w is None or w.ndim != 2:
            return None
        if row.op_type == "Reshape" and not _drops_leading_one(row, sl.inputs[0], w.shape[1]):
            return None
        if not _is_counter_index(sl.inputs[1], self.counter):
            return None
        if self.xs is None:
            self.xs, self.batch_major = outer.inputs[0], batch_major
        if outer.inputs[0] is not self.xs or batch_major != self.batch_major:
            return None
        part = _Linear(wx=_cut(w, cols), projs=[outer])
        if bias is None:
            return part
        b = self._bias(bias.reshape(-1, bias.shape[-1]) if bias.ndim else bias, cols)
        return part.plus(b) if b is not None else None

    def gate(self, value: ir.Value | None) -> _Linear | None:
        """The pre-activation of ``value = sigmoid(a)`` or of columns of ``sigmoid(a)``."""
        pre = _sigmoid_of(value)
        if pre is not None:
            return self.linear(pre)
        sel = _columns(value, self.rows)
        if sel is None:
            return None
        pre = _sigmoid_of(sel[0])
        return self.linear(pre, sel[1:]) if pre is not None else None


def _weight(value: ir.Value | None, depth: int = 4) -> np.ndarray | None:
    """A constant, or a Concat / Reshape of constants (flax's fused Dense kernels and biases, before
    constant folding runs), or shape ops on one (haiku's GRU slices its kernels and bias)."""
    arr = m.folded(value)
    if arr is None and m.producer(value, "Slice", "Unsqueeze", "Transpose") is not None:
        arr = _constants.evaluate(value)
    if arr is not None or depth == 0:
        return arr
    node = m.producer(value, "Concat", "Reshape")
    if node is None or any(v is None for v in node.inputs):
        return None
    parts = [_weight(v, depth - 1) for v in node.inputs]
    if any(p is None for p in parts):
        return None
    try:
        if node.op_type == "Reshape":
            shape = [int(d) for d in np.atleast_1d(parts[1])]
            return None if 0 in shape else parts[0].reshape(shape)
        return np.concatenate(parts, axis=m.attr(node, "axis", 0))
    except ValueError:
        return None


def _cut(arr: np.ndarray, cols: tuple[int, int] | None) -> np.ndarray:
    return arr if cols is None else arr[..., cols[0]:cols[1]]


def _outer_product(value: ir.Value | None) -> tuple[ir.Node | None, np.ndarray | None, bool]:
    """(``MatMul(xs, w)``, a constant bias added to it or None, whether a ``Transpose(perm=[1, 0, 2])``
    made it time-major) for ``value``, the sequence of projected rows a Loop reads; (None, None, False)
    for any other value."""
    bias, batch_major = None, False
    for _ in range(2):  # the bias and the Transpose, in either order
        add = m.binary(m.producer(value), "Add")
        tr = m.producer(value, "Transpose")
        if add is not None and bias is None:
            for a, b in (add, add[::-1]):
                arr = _weight(b)
                if arr is not None and m.producer(a, "MatMul", "Transpose", "Add") is not None:
                    bias, value = arr, a
                    break
            else:
                return None, None, False
        elif tr is not None and not batch_major and list(m.attr(tr, "perm", []) or []) == [1, 0, 2]:
            batch_major, value = True, tr.inputs[0]
        else:
            break
    outer = m.producer(value, "MatMul")
    if outer is None or (bias is not None and (bias.ndim > 3 or bias.dtype != np.float32)):
        return None, None, False
    return outer, bias, batch_major


def _drops_leading_one(reshape: ir.Node, rows: ir.Value, width: int) -> bool:
    """True when ``reshape`` turns one step's ``[1, batch, width]`` of ``rows`` into ``[batch, width]``."""
    shape = m.const(reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    dims = _static_shape(rows)
    if shape is None or shape.ndim != 1 or len(shape) != 2 or dims is None or len(dims) != 3:
        return False
    return int(shape[1]) == width and (int(shape[0]) == -1 or int(shape[0]) == dims[1])


def _columns(value: ir.Value | None, rows_at_least: list[int | str]) -> tuple[ir.Value, int, int] | None:
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
        if src is None or m.rank(src) not in (2, None) or axis not in (1, -1) or sizes is None:
            return None
        k = value.index()
        start = int(np.sum(sizes[:k]))
        return src, start, start + int(sizes[k])
    if node.op_type != "Slice" or len(node.inputs) < 4:
        return None
    starts, axes = m.const(node.inputs[1]), m.const(node.inputs[3])
    ends = _slice_ends(node.inputs[2])
    steps = m.const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    src = node.inputs[0]
    if starts is None or ends is None or axes is None or m.rank(src) not in (2, None):
        return None
    if steps is not None and np.any(steps != 1):
        return None
    spans = {int(a) % 2: (int(s), e) for a, s, e in zip(np.atleast_1d(axes), np.atleast_1d(starts), ends)}
    rows = spans.get(0, (0, 1 << 62))
    if 1 not in spans or rows[0] != 0 or not isinstance(spans[1][1], int) or spans[1][0] < 0 or spans[1][1] < 0:
        return None
    rows_at_least.append(rows[1])
    return src, spans[1][0], spans[1][1]


def _slice_ends(value: ir.Value | None) -> list[int | str] | None:
    """A Slice's ends: numbers, or a symbolic size's name where one is computed from ``Shape`` (a symbolic
    batch's rows kept whole: the lowering reads the batch from the model's input, outside the Loop body)."""
    arr = m.const(value)
    if arr is not None:
        return [int(e) for e in np.atleast_1d(arr)]
    ends = symbolic.shape_values(value)
    return None if ends is None or any(isinstance(e, str) and e.startswith("?") for e in ends) else list(ends)


def _pair(value: ir.Value | None, op: str) -> tuple[ir.Value, ir.Value] | None:
    return m.binary(m.producer(value), op)


def _update(h_out: ir.Value, h_in: ir.Value) -> tuple[ir.Value, ir.Value, bool] | None:
    """(z, n, kept) for ``h_out = (1 - z) * n + z * h_in`` (kept: True), ``n + z * (h_in - n)`` (Equinox's
    GRUCell; kept: True, not bit for bit) or ``(1 - z) * h_in + z * n`` (haiku's GRU; kept: False, ONNX's
    z is ``1 - z``), any operand order."""
    terms = _pair(h_out, "Add")
    if terms is None:
        return None
    for n, scaled in (terms, terms[::-1]):
        factors = _pair(scaled, "Mul")
        for zz, diff in (factors, factors[::-1]) if factors is not None and n is not h_in else ():
            sub = _pair(diff, "Sub")
            if sub is not None and sub[0] is h_in and sub[1] is n:
                return zz, n, True
    for t1, t2 in (terms, terms[::-1]):
        a, b = _pair(t1, "Mul") or (None, None), _pair(t2, "Mul") or (None, None)
        for zz, other in ((b[0], b[1]), (b[1], b[0])):
            if zz is None or other is None:
                continue
            for one_minus, rest in ((a[0], a[1]), (a[1], a[0])):
                sub = _pair(one_minus, "Sub")
                if sub is None or sub[1] is not zz or not m.is_scalar_const(sub[0], 1.0) or rest is None:
                    continue
                if other is h_in and rest is not h_in:
                    return zz, rest, True
                if rest is h_in and other is not h_in:
                    return zz, other, False
    return None


def _candidate(cell: _Cell, n_pre: ir.Value) -> tuple[ir.Value, _Linear, _Linear, bool] | None:
    """(r, the x part of n, the h part of n, linear_before_reset) from ``n = tanh(n_pre)``."""
    terms = _add_terms(n_pre)
    for k, term in enumerate(terms):
        rest = terms[:k] + terms[k + 1:]
        mm = m.producer(term, "MatMul")
        rh = _pair(mm.inputs[0], "Mul") if mm is not None else None
        un = _weight(mm.inputs[1]) if mm is not None else None
        if rh is not None and un is not None and un.ndim == 2:  # (r * h) @ un
            for r, hh in (rh, rh[::-1]):
                if hh is cell.h_in:
                    x_part = _sum(cell, rest)
                    return (r, x_part, _Linear(wh=un), False) if x_part is not None else None
        mul = _pair(term, "Mul")
        for r, hn in ((mul, mul[::-1]) if mul is not None else ()):  # r * (h @ un + bun)
            h_part = cell.linear(hn)
            if h_part is not None and h_part.wh is not None and h_part.wx is None:
                x_part = _sum(cell, rest)
                return (r, x_part, h_part, True) if x_part is not None else None
    return None


def _add_terms(value: ir.Value, depth: int = 4) -> list[ir.Value]:
    pair = _pair(value, "Add")
    if pair is None or depth == 0:
        return [value]
    return _add_terms(pair[0], depth - 1) + _add_terms(pair[1], depth - 1)


def _sum(cell: _Cell, values: list[ir.Value]) -> _Linear | None:
    total = _Linear()
    for v in values:
        part = cell.linear(v)
        total = total.plus(part) if part is not None else None
        if total is None or total.wh is not None:
            return None
    return total


def _match(loop: ir.Node) -> dict | None:
    body = loop.attributes["body"].value
    if len(loop.inputs) != 4 or len(body.inputs) != 4 or (len(body.outputs), len(loop.outputs)) not in ((4, 3), (3, 2)):
        return None  # (3, 2): no ys (Keras' GRU without return_sequences keeps the final state only)
    if loop.inputs[0] is not None:
        return None
    steps = _loop_shape(loop)
    if steps is None:
        return None
    counter, h_in = body.inputs[2], body.inputs[3]
    h_out = body.outputs[2]
    if len(body.outputs) == 4:
        ys = body.outputs[3]
        ident = m.producer(ys, "Identity")
        if (ident.inputs[0] if ident is not None else ys) is not h_out:
            return None
    zn = _update(h_out, h_in)
    tanh = m.producer(zn[1], "Tanh") if zn is not None else None
    if tanh is None:
        return None
    cell = _Cell(loop, h_in, counter)
    found = _candidate(cell, tanh.inputs[0])
    if found is None:
        return None
    r_value, n_x, n_h, before = found
    z, r = cell.gate(zn[0]), cell.gate(r_value)
    if z is not None and not zn[2]:  # 1 - sigmoid(a) as ONNX's z: sigmoid(-a)
        z = _Linear(*(None if w is None else -w for w in (z.wx, z.wh, z.b)), projs=z.projs)
    seq = cell.sequence(steps)
    if z is None or r is None or seq is None:
        return None
    xs, batch, n_in = seq
    hidden = n_h.wh.shape[0]
    parts = {"z": z, "r": r, "n": n_x}
    wx = {k: p.wx if p.wx is not None else np.zeros((n_in, hidden), np.float32) for k, p in parts.items()}
    wh = {k: p.wh if p.wh is not None else np.zeros((hidden, hidden), np.float32)
          for k, p in (("z", z), ("r", r))}
    wh["n"] = n_h.wh
    bias = {k: p.b if p.b is not None else np.zeros(hidden, np.float32) for k, p in parts.items()}
    bias["rn"] = n_h.b if n_h.b is not None else np.zeros(hidden, np.float32)
    if any(w.shape != (n_in, hidden) or w.dtype != np.float32 for w in wx.values()):
        return None
    if any(w.shape != (hidden, hidden) or w.dtype != np.float32 for w in wh.values()):
        return None
    if any(b.shape != (hidden,) for b in bias.values()) or not _state_fits(loop, 3, batch, hidden):
        return None
    projs = list(dict.fromkeys(p for part in (z, r, n_x) for p in part.projs))
    return {"projs": projs, "xs": xs, "batch": batch, "batch_major": cell.batch_major, "wx": wx, "wh": wh, "b": bias,
            "hidden": hidden, "steps": steps, "h0": loop.inputs[3], "linear_before_reset": before}


def op_sequence(got: dict) -> tuple[list[ir.Node], ir.Value]:
    """(nodes to add, the value) for the ``[steps, batch, width]`` sequence an RNN op reads: the matched
    ``xs``, or its ``Transpose`` where the cell's projections read it batch-major (ORT's RNN ops reject
    ``layout=1``)."""
    xs = got["xs"]
    if not got["batch_major"]:
        return [], xs
    node = ir.node("Transpose", [xs], {"perm": [1, 0, 2]})
    node.outputs[0].type = xs.type or ir.TensorType(ir.DataType.FLOAT)  # the rules match float32 weights only
    dims = _static_shape(xs)
    if dims is not None:
        node.outputs[0].shape = ir.Shape([dims[1], dims[0], dims[2]])
    return [node], node.outputs[0]


def _onnx_weights(got: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX's W [1, 3H, I], R [1, 3H, H] and B [1, 6H] (gates z, r, h) from the matched parts."""
    w = np.concatenate([got["wx"][k].T for k in "zrn"])[None]
    r = np.concatenate([got["wh"][k].T for k in "zrn"])[None]
    b = got["b"]
    zero = np.zeros_like(b["z"])
    b = np.concatenate([b["z"], b["r"], b["n"], zero, zero, b["rn"]])[None]
    return tuple(np.ascontiguousarray(a, np.float32) for a in (w, r, b))


def _batch_size(got: dict) -> int:
    """The matched sequence's batch, a symbolic one at the largest size a model's thread record weighs."""
    batch = got["batch"]
    return batch if isinstance(batch, int) else max(thread_count.RECORD_SIZES)


def _runs_on_one_thread(graph: ir.Graph, matched: list[tuple[ir.Node, dict]]) -> bool:
    """True when the model will record one intra-op thread (``thread_count``) with the ``matched``
    scans as GRU ops: a second thread would cost it more than it saves, each scan's product weighed once
    per step. The scans' bodies are weighed as the op's recurrent products (shape inference leaves theirs
    unknown); their input projections, outside, as the op's."""
    weights = thread_count.weigh(graph, loop_steps=scan_steps, leave_out=[loop for loop, _ in matched])
    if weights is None:
        return False
    cost, saving = weights
    for _, got in matched:
        more = thread_count.two_thread_weights([(0.0, got["steps"], 0.0)])  # as the op's steps are weighed
        assert more is not None  # numbers, no polynomials
        cost, saving = cost + more[0], saving + more[1]
    return thread_count.one_thread_for(cost, saving) == 1


def rewrite(graph: ir.Graph) -> int:
    """Replace GRU-cell scans in ``graph`` (the main graph) by the GRU op; returns how many."""
    matched = [(loop, got) for loop in graph if loop.op_type == "Loop" and loop.domain == ""
               if (got := _match(loop)) is not None]
    by_run = set() if ENABLED else {id(loop) for loop, got in matched
                                     if _symbolic_batch(got) and _batch_bound(got["hidden"]) > 1}
    if not ENABLED:
        matched = [(loop, got) for loop, got in matched if id(loop) in by_run
                   or _one_thread(_batch_size(got), got["hidden"], limit=ONE_THREAD_LIMIT)]
    threaded = [(loop, got) for loop, got in matched
                if not (ENABLED or id(loop) in by_run or _one_thread(_batch_size(got), got["hidden"]))]
    if threaded and not _runs_on_one_thread(graph, matched):
        matched = [pair for pair in matched if pair not in threaded]
    count = 0
    for loop, _ in matched:
        # matched again: a Loop replaced before this one may have been its sequence's producer, whose output
        # then moved into an If's exact branch (the If's output takes its place)
        got = _match(loop)
        if got is None:
            continue
        w_arr, r_arr, b_arr = _onnx_weights(got)
        if not all(np.isfinite(a).all() for a in (w_arr, r_arr, b_arr)):
            continue
        hdim = got["hidden"]
        w, r, b = _const(graph, "gru_w", w_arr), _const(graph, "gru_r", r_arr), _const(graph, "gru_b", b_arr)
        axis0 = _const(graph, "gru_axis0", np.array([0], np.int64))
        axis1 = _const(graph, "gru_axis1", np.array([1], np.int64))
        h0 = _initial_state(got["h0"], axis0)
        pre, xs = op_sequence(got)
        gru = ir.node("GRU", [xs, w, r, b, None, h0.outputs[0] if h0 else None],
                      {"hidden_size": hdim, "linear_before_reset": int(got["linear_before_reset"])},
                      num_outputs=2)
        ys = ir.node("Squeeze", [gru.outputs[0], axis1])
        h_last = ir.node("Squeeze", [gru.outputs[1], axis0])
        batch = got["batch"]  # a number, or a symbolic size's name
        for out in (ys.outputs[0], h_last.outputs[0]):
            out.type = xs.type
        ys.outputs[0].shape = ir.Shape([got["steps"], batch, hdim])
        h_last.outputs[0].shape = ir.Shape([batch, hdim])
        counter_dtype = loop.outputs[0].dtype
        dtype = counter_dtype.numpy() if counter_dtype else np.int64
        final = ir.node("Constant", [], {"value": ir.tensor(np.array(got["steps"], dtype))})
        fast = [*pre, *(n for n in (h0, gru, ys, h_last, final) if n)]
        fast_out = [final.outputs[0], h_last.outputs[0], ys.outputs[0]][:len(loop.outputs)]
        also = _small_batch_test(got) if id(loop) in by_run else None
        _guarded(graph, loop, fast, fast_out, [got["xs"], got["h0"]], also)
        count += 1
    return count


def _symbolic_batch(got: dict) -> bool:
    return not isinstance(got["batch"], int)


def _batch_bound(hidden: int) -> int:
    """The batch sizes below this one keep each step's products under ``ONE_THREAD_LIMIT``."""
    return (ONE_THREAD_LIMIT - 1) // (2 * hidden * hidden) + 1


def _small_batch_test(got: dict) -> tuple[list[ir.Node], ir.Value]:
    """Nodes testing at run time that the sequence's symbolic batch is below ``_batch_bound``, and the test."""
    axis = 0 if got["batch_major"] else 1
    size = ir.node("Shape", [got["xs"]], {"start": axis, "end": axis + 1})
    bound = ir.node("Constant", [], {"value": ir.tensor(np.array([_batch_bound(got["hidden"])], np.int64))})
    small = ir.node("Less", [size.outputs[0], bound.outputs[0]])
    return [size, bound, small], small.outputs[0]
