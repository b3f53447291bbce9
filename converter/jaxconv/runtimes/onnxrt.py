"""Run an ONNX model with ONNX Runtime (CPU), bfloat16 inputs and outputs included."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from jaxconv.errors import ArtifactError
from jaxconv.onnx.model_opset import default_opset

_BF16 = 16  # TensorProto.BFLOAT16


def default_threads() -> int | None:
    """One intra-op thread per physical core this process may run on, or None where that is unknown.

    It is the count ORT picks itself, but given explicitly: ORT pins its pool threads to cores only
    when it picks the count, and on a busy machine a pinned thread waits for its one core while
    the other is free (scripts/bench_sessions.py: BERT 1.08-1.17 x jax.jit with the count set,
    1.18-2.30 pinned, load 14-19). Linux only (sysfs topology); elsewhere ORT chooses.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = set()
    for cpu in os.sched_getaffinity(0):
        siblings = None
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/{name}") as f:
                    siblings = f.read().strip()
                break
            except OSError:
                continue
        cores.add(siblings if siblings is not None else str(cpu))
    return len(cores) or None


def spins_during_run(record: Any, threads: int | None, shapes: Sequence[Sequence[int]] | None,
                     spinning: bool | None = None) -> bool:
    """Whether jaxconv's session spins during each run (and stops after it): no spinning asked for or
    against, more than one thread, and the model's ``thread_count.Record`` says so at ``shapes``."""
    return spinning is None and threads != 1 and record.spins(shapes)


def session_options(threads: int | None = None, spinning: bool | None = None, model: str | bytes | None = None,
                    shapes: Sequence[Sequence[int]] | None = None, record: Any = None):
    """ONNX Runtime session options jaxconv uses everywhere (check, the benchmark, the C++ defaults).

    ORT's intra-op thread pool spins after each run by default; on a machine with few cores
    the spinning threads take CPU from whatever runs next in the process (another session,
    jax.jit, the application), so jaxconv's sessions never spin between runs. A model whose calls are
    short records that its pool should spin during each run and stop after it
    (``session.force_spinning_stop``; ``thread_count.SPIN_KEY``): its kernels then find the second thread
    awake, and the next caller pays nothing (docs/performance.md, "Session settings").

    Args:
        threads: intra-op threads; None: the count ``model`` records (``onnx.thread_count``: one for
            a model made of small products), else one per physical core (``default_threads``), not pinned.
        spinning: None: as ``model`` records (spinning during each run where it records so for ``shapes``
            and runs on more than one thread, else off); False: off (a busy machine, whose other work the spinning would
            slow); True: ORT's own default (spinning during and between runs).
        model: the model's path or bytes, for its recorded thread count and spinning.
        shapes: the shapes of the inputs the session will run on, in the model's input order: a model
            with symbolic sizes may record its products, to weigh at these sizes (``thread_count.Record``).
        record: the model's ``thread_count.Record``, read already (instead of ``model``).
    """
    import onnxruntime as ort

    from jaxconv.onnx.thread_count import Record, read_record

    if record is None:
        record = read_record(model) if model is not None else Record()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads is None:
        threads = record.threads(shapes)
    if threads is None:
        threads = default_threads()
    if threads is not None:
        opts.intra_op_num_threads = threads
    during_run = spins_during_run(record, threads, shapes, spinning)
    spin = bool(spinning) or during_run
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "1" if spinning else "0")
    if during_run:
        opts.add_session_config_entry("session.force_spinning_stop", "1")
    return opts


class OnnxRunner:
    kind = "onnx"

    def __init__(self, path_or_bytes: str | bytes, threads: int | None = None, spinning: bool | None = None,
                 defer: bool = False, weights: Mapping[str, np.ndarray] | None = None, quiet: bool = False) -> None:
        """Load the model into an ONNX Runtime session.

        Args:
            defer: load it on the first ``run`` instead (the check computes every jax.jit reference
                first, so the session's copy of the weights and jax's compilation do not overlap).
            weights: with a path, the buffers the file's big initializers were written from, by name
                (``onnx_borrowed.payload_buffers``): the session uses them in place once the file's
                bytes are found equal to them (``onnx_borrowed``), instead of a copy of its own.
            quiet: ONNX Runtime logs nothing, not even a failing run's error (the check's loop-capped
                copy fails on purpose; the error it raises says what happened).

        Raises:
            ArtifactError: ONNX Runtime cannot load the model (on the first ``run`` with ``defer``),
                or the file's data differs from ``weights``.
        """
        from jaxconv.onnx.thread_count import read_record

        self._source: str | bytes | None = path_or_bytes
        self.path = path_or_bytes if isinstance(path_or_bytes, str) else None  # the check's capped copy reads it
        self.opset = default_opset(path_or_bytes)  # what the lowering could express (the check asks)
        self._threads, self._spinning = threads, spinning
        self._record = read_record(path_or_bytes)
        # a session per (thread count, spinning), picked per call where either depends on the call's sizes
        self._by_size = (threads is None and self._record.by_size) or \
            (spinning is None and self._record.spin_by_size is not None)
        self._sessions: dict[tuple[int | None, bool], Any] = {}  # by (thread count, spinning during runs)
        self._quiet = quiet
        self._weights = weights if isinstance(path_or_bytes, str) else None
        self.borrowed: list[np.ndarray] = []  # the buffers a session uses in place: alive as long as it
        if not defer:
            self._select(None)

    def _select(self, shapes: Sequence[Sequence[int]] | None) -> None:
        """Make ``self.session`` the session for a call on inputs of ``shapes``: the thread count asked for,
        else the one the model records for those sizes (``thread_count.Record``), loaded on first use."""
        threads = self._threads if self._threads is not None else self._record.threads(shapes)
        spins = spins_during_run(self._record, threads, shapes, self._spinning)
        if (threads, spins) not in self._sessions:
            self._load(threads, spins)
        self.session = self._sessions[threads, spins]

    def _load(self, threads: int | None, spins: bool) -> None:
        import onnxruntime as ort

        from jaxconv.onnx.thread_count import Record

        path_or_bytes = self._source
        assert path_or_bytes is not None
        opts = session_options(threads, self._spinning, record=Record(spin=spins))
        if self._quiet:
            opts.log_severity_level = 4  # fatal only
        model = self._borrow(path_or_bytes, opts) if self._weights else None
        try:
            self.session = ort.InferenceSession(path_or_bytes if model is None else model, opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:
            what = path_or_bytes if isinstance(path_or_bytes, str) else "the model"
            raise ArtifactError(f"ONNX Runtime cannot load {what}: {str(e).strip().splitlines()[0][:300]}") from e
        self._sessions[threads, spins] = self.session
        if not self._by_size:  # no other session will load: the bytes and buffers can go
            self._source = self._weights = None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._input_types = [(i.shape, _numpy_name(i.type)) for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._bf16_out = [o.type == "tensor(bfloat16)" for o in self.session.get_outputs()]
        self._complex_in, self._complex_out = _complex_io(self.session)

    def _borrow(self, path: str, opts: Any) -> bytes | None:
        """The model at ``path`` with its big initializers borrowing ``self._weights``; None: ORT loads the file."""
        from jaxconv.runtimes.onnx_borrowed import DISABLE_PREPACKING, borrowed_model

        if not hasattr(opts, "add_external_initializers_from_files_in_memory"):
            return None  # an ONNX Runtime without in-memory external data
        borrowed = borrowed_model(path, self._weights or {})
        if borrowed is None:
            return None
        opts.add_external_initializers_from_files_in_memory(borrowed.names, borrowed.buffers,
                                                            [b.nbytes for b in borrowed.buffers])
        opts.add_session_config_entry("session.use_external_initializer_file_buffers_directly", "1")
        if DISABLE_PREPACKING:
            opts.add_session_config_entry("session.disable_prepacking", "1")
        self.borrowed += borrowed.buffers
        return borrowed.model

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:

        if not self._sessions or self._by_size:  # a complex input goes in as (re, im) pairs on a last axis
            self._select([(*np.shape(a), 2) if np.asarray(a).dtype.kind == "c" else np.shape(a) for a in inputs])
        if len(inputs) != len(self.input_names):
            raise ArtifactError(f"the model takes {len(self.input_names)} inputs, got {len(inputs)}")
        if self._complex_in or self._complex_out:
            return self._run_complex(inputs)
        return self._run_session(inputs)

    def _run_session(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the selected session on inputs of its own types (complex ones as their pairs)."""
        import onnxruntime as ort

        self._check_inputs(inputs)
        try:
            if any(np.asarray(a).dtype.name == "bfloat16" for a in inputs) or any(self._bf16_out):
                return self._run_bound(inputs)
            feed = {n: np.asarray(a) for n, a in zip(self.input_names, inputs)}
            return [np.asarray(o) for o in self.session.run(self.output_names, feed)]
        except ort.capi.onnxruntime_pybind11_state.Fail as e:  # type: ignore[attr-defined]
            raise ArtifactError(f"ONNX Runtime failed while running: {_one_line(str(e))}") from e
        except Exception as e:
            if isinstance(e, ArtifactError):
                raise
            raise ArtifactError(f"ONNX Runtime failed while running: {type(e).__name__}: {_one_line(str(e))}") from e

    def _run_complex(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Complex inputs go in as (re, im) pairs on a trailing axis; complex outputs come back complex."""
        from jaxconv.onnx.complex_layout import from_pairs, to_pairs

        feeds = []
        for name, a in zip(self.input_names, inputs):
            a = np.asarray(a)
            if name in self._complex_in:
                if a.dtype.kind != "c":
                    raise ArtifactError(f"input {name!r} of the model is {self._complex_in[name]}, given {a.dtype.name}")
                a = to_pairs(a.astype(self._complex_in[name]))
            feeds.append(a)
        outs = self._run_session(feeds)
        return [from_pairs(o, self._complex_out[n]) if n in self._complex_out else o
                for n, o in zip(self.output_names, outs)]

    def _check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        """Refuse inputs whose dtype, rank or fixed sizes differ from the model's declared inputs.

        Raises:
            ArtifactError: naming the input, the model's shape and dtype, and the given ones.
        """
        for name, (shape, dtype), a in zip(self.input_names, self._input_types, inputs):
            a = np.asarray(a)
            if shape is None or dtype is None:  # a type ORT names differently from numpy: ORT checks it
                continue
            fits = a.dtype.name == dtype and a.ndim == len(shape)
            fits = fits and all(not isinstance(d, int) or d == n for d, n in zip(shape, a.shape))
            if not fits:
                declared = ",".join("?" if d is None else str(d) for d in shape)
                raise ArtifactError(f"input {name!r} of the model is {dtype}[{declared}], given "
                                    f"{a.dtype.name}[{','.join(str(n) for n in a.shape)}]")

    def _run_bound(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        import ml_dtypes
        import onnxruntime as ort

        binding = self.session.io_binding()
        for name, a in zip(self.input_names, inputs):
            a = np.asarray(a, order="C")  # keeps 0-d arrays 0-d
            if a.dtype.name == "bfloat16":
                value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), onnx_element_type=_BF16)
            else:
                value = ort.OrtValue.ortvalue_from_numpy(a)
            binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        outs = []
        for value, is_bf16 in zip(binding.get_outputs(), self._bf16_out):
            if is_bf16:
                outs.append(_bf16_from_ortvalue(value, ml_dtypes.bfloat16))
            else:
                outs.append(value.numpy())
        return outs


_ORT_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
              "tensor(bfloat16)": "bfloat16", "tensor(bool)": "bool",
              **{f"tensor({t}{n})": f"{t}{n}" for t in ("int", "uint") for n in (8, 16, 32, 64)}}


def _complex_io(session) -> tuple[dict[str, str], dict[str, str]]:
    """The complex inputs and outputs a jaxconv model declares in its metadata (see onnx.complex_layout)."""
    import json

    from jaxconv.onnx.complex_layout import METADATA_KEY

    value = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    if not value:
        return {}, {}
    data = json.loads(value)
    return dict(data.get("inputs", {})), dict(data.get("outputs", {}))


def _numpy_name(ort_type: str) -> str | None:
    """numpy dtype name of an ORT type string such as ``tensor(float)``; None for types not compared."""
    return _ORT_TYPES.get(ort_type)


def _one_line(message: str, limit: int = 300) -> str:
    """ONNX Runtime's message on one line (its messages may span several), cut to ``limit`` characters."""
    return " ".join(message.split())[:limit]


def _bf16_from_ortvalue(value, bf16) -> np.ndarray:
    """Copy a CPU bfloat16 OrtValue out (numpy() has no bfloat16 type)."""
    import ctypes

    shape = tuple(value.shape())
    count = int(np.prod(shape)) if shape else 1
    raw = ctypes.string_at(value.data_ptr(), count * 2) if count else b""
    return np.frombuffer(raw, np.uint16).reshape(shape).copy().view(bf16)
