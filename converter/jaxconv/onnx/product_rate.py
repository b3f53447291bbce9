"""This machine's float32 matrix-product rate on one core in ONNX Runtime, for the thread-count weighing.

The weighing (``thread_count.two_thread_weights``) prices a product's one-thread time as its flops over
the core's rate. It was fitted on a 2-core Intel Xeon (Sapphire Rapids), where ORT's products ran at
166-190 GFLOP/s a core (``thread_count.CORE_FLOPS``). On a 2-core AMD EPYC (Zen 4) they run at about
100: the same product takes twice as long there, a second thread saves twice as much against the same
cost of waking it, and 13 zoo models that recorded one thread ran at 0.78-0.94x the time on two.

``core_flops`` measures the rate once per process: a ``[256, 512] x [512, 512]`` MatMul (134 MFLOP, in
the 8-268 MFLOP range the weighing was fitted on) in a one-thread session, its fastest of ``RUNS`` runs
(other load only slows a run down). About 30 ms. ``JAXCONV_CORE_FLOPS`` sets the rate instead (the tests
pin it to the fitted value, so their records do not depend on the machine).
"""

from __future__ import annotations

import functools
import os
import time

from jaxconv.errors import UsageError

ENV = "JAXCONV_CORE_FLOPS"
FITTED = 1.9e11  # the Intel Xeon's rate the weighing was fitted with
RUNS = 15
_ROWS, _DEPTH, _COLS = 256, 512, 512
_SANE = (1e9, 1e13)  # a measurement outside this (a broken timer) falls back to FITTED


def core_flops() -> float:
    """One core's float32 product rate in ORT: ``JAXCONV_CORE_FLOPS`` when set, else measured (cached).

    Raises:
        UsageError: ``JAXCONV_CORE_FLOPS`` is set to something other than a positive number.
    """
    text = os.environ.get(ENV)
    if text is None:
        return _measured()
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 < rate < float("inf"):
        raise UsageError(f"{ENV} must be a positive number of FLOP/s (such as 1.9e11), got {text!r}")
    return rate


@functools.lru_cache(maxsize=1)
def _measured() -> float:
    try:
        seconds = _fastest_product()
    except Exception:  # noqa: BLE001  (no ORT, or it refuses: the fitted rate)
        return FITTED
    rate = 2.0 * _ROWS * _DEPTH * _COLS / seconds if seconds > 0 else 0.0
    return rate if _SANE[0] <= rate <= _SANE[1] else FITTED


def _fastest_product() -> float:
    """Seconds of the fastest of ``RUNS`` one-thread runs of the reference MatMul."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [_ROWS, _DEPTH])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [_ROWS, _COLS])
    w = np.random.default_rng(0).standard_normal((_DEPTH, _COLS)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["c"])], "rate", [a], [c],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {"a": np.random.default_rng(1).standard_normal((_ROWS, _DEPTH)).astype(np.float32)}
    session.run(None, feed)  # the first run prepacks the weight
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        session.run(None, feed)
        best = min(best, time.perf_counter() - start)
    return best
