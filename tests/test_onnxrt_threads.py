"""jaxconv's ONNX Runtime sessions: one intra-op thread per core, set explicitly, so ORT does not pin them."""

from __future__ import annotations

import os

import pytest

from jaxconv.runtimes import onnxrt

linux = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"),
                           reason="thread affinity is read from Linux's /proc")


def _tiny_model() -> bytes:
    import onnx
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def _thread_cpus() -> dict[str, str]:
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                out[tid] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list"))
        except (OSError, StopIteration):
            continue
    return out


@linux
def test_default_threads_counts_the_cores_this_process_may_use():
    n = onnxrt.default_threads()
    assert n is not None and 1 <= n <= len(os.sched_getaffinity(0))
    assert onnxrt.session_options().intra_op_num_threads == n
    assert onnxrt.session_options(threads=1).intra_op_num_threads == 1


@linux
def test_session_threads_are_not_pinned():
    import time

    import numpy as np
    import onnxruntime as ort

    if len(os.sched_getaffinity(0)) < 2 or (onnxrt.default_threads() or 1) < 2:
        pytest.skip("one core: a single-thread pool has no worker to pin")
    allowed = _thread_cpus()[str(threading_id())]
    before = set(_thread_cpus())
    runner = onnxrt.OnnxRunner(_tiny_model())
    ours = set(_thread_cpus()) - before
    # ORT picking the count itself pins its worker (once the thread has started): wait for that,
    # so that the check of our session's workers below has had the same time to go wrong
    before = set(_thread_cpus())
    pinned = ort.InferenceSession(_tiny_model(), ort.SessionOptions(), providers=["CPUExecutionProvider"])
    pinned.run(None, {"x": np.ones(2, np.float32)})
    runner.run([np.ones(2, np.float32)])
    theirs = set(_thread_cpus()) - before
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and all(_thread_cpus().get(t) == allowed for t in theirs):
        time.sleep(0.05)
    now = _thread_cpus()
    assert ours and theirs
    assert any(now.get(t) != allowed for t in theirs), {t: now.get(t) for t in theirs}
    assert all(now.get(t) == allowed for t in ours), {t: now.get(t) for t in ours}


def threading_id() -> int:
    """The calling thread's kernel thread id (its /proc/self/task entry)."""
    import threading

    return threading.get_native_id()
