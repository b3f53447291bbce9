"""A model of short calls records that its ORT pool should spin during each run and stop after it
(``thread_count.SPIN_KEY``): jaxconv's sessions, the benchmark's and the generated C++ class's options
then spin during runs, never between them; long calls, symbolic sizes and RNN ops keep spinning off
(thread_count's docstring, "Spinning during a run", has the measurements). With symbolic sizes the
record holds the kernels, weighed at each call's sizes."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
import pytest

import jaxconv
from jaxconv.onnx import thread_count
from jaxconv.runtimes.onnxrt import OnnxRunner, default_threads, session_options

_RNG = np.random.default_rng(3)
_W = [(_RNG.standard_normal((256, 256)) * 0.06).astype(np.float32) for _ in range(6)]
_BIG = [(_RNG.standard_normal((1024, 1024)) * 0.03).astype(np.float32) for _ in range(4)]


def _short(x):
    """Six [256, 256] x [256, 256] products with tanh between: 201 MFLOP, about a millisecond on one core
    (tests weigh at 190 GFLOP/s)."""
    for w in _W:
        x = jnp.tanh(x @ w)
    return x


def _long(x):
    """Four [512, 1024] x [1024, 1024] products: 4.3 GFLOP, milliseconds on one core."""
    for w in _BIG:
        x = jnp.tanh(x @ w)
    return x


def _metadata(model):
    return {p.key: p.value for p in model.metadata_props}


def _entry(opts, key):
    try:
        return opts.get_session_config_entry(key)
    except Exception:  # ORT raises for an entry not set
        return None


def test_a_short_call_records_spinning_and_the_sessions_spin_during_runs_only():
    x = _RNG.standard_normal((256, 256)).astype(np.float32)
    model = jaxconv.to_onnx(_short, x)  # checked against jax.jit
    meta = _metadata(model)
    assert meta.get(thread_count.SPIN_KEY) == "1"
    assert thread_count.THREADS_KEY not in meta and thread_count.BY_SIZE_KEY not in meta
    data = model.SerializeToString()
    assert thread_count.read_record(data).spin
    opts = session_options(model=data)
    assert opts.intra_op_num_threads == (default_threads() or 0)
    assert _entry(opts, "session.intra_op.allow_spinning") == "1"
    assert _entry(opts, "session.force_spinning_stop") == "1"  # not between runs
    assert _entry(opts, "session.inter_op.allow_spinning") == "0"
    off = session_options(model=data, spinning=False)  # a busy machine
    assert _entry(off, "session.intra_op.allow_spinning") == "0" and _entry(off, "session.force_spinning_stop") is None
    one = session_options(1, model=data)  # one thread: no pool to spin
    assert _entry(one, "session.intra_op.allow_spinning") == "0" and _entry(one, "session.force_spinning_stop") is None
    always = session_options(model=data, spinning=True)  # ORT's own default
    assert _entry(always, "session.intra_op.allow_spinning") == "1" and _entry(always, "session.force_spinning_stop") is None
    runner = OnnxRunner(data)
    assert _entry(runner.session.get_session_options(), "session.force_spinning_stop") == "1"
    (got,) = runner.run([x])
    np.testing.assert_allclose(got, np.asarray(jax.jit(_short)(x)), rtol=1e-5, atol=1e-6)


def test_long_calls_and_tiny_calls_keep_spinning_off():
    x = _RNG.standard_normal((512, 1024)).astype(np.float32)
    long_model = jaxconv.to_onnx(_long, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    assert thread_count.SPIN_KEY not in _metadata(long_model)
    kernels = thread_count.kernels_of(ir.serde.deserialize_model(long_model).graph, sizes={})
    assert thread_count.one_thread_seconds(kernels.products, kernels.elementwise) > thread_count.SPIN_CALL_SECONDS
    opts = session_options(model=long_model.SerializeToString())
    assert _entry(opts, "session.intra_op.allow_spinning") == "0"
    tiny = jaxconv.to_onnx(lambda a: a + 2.0, jax.ShapeDtypeStruct((64, 1024), np.float32), check=False)
    meta = _metadata(tiny)  # one Add: waking the pool once costs more than the second thread saves
    assert thread_count.SPIN_KEY not in meta and meta.get(thread_count.THREADS_KEY) == "1"
    half = jaxconv.to_onnx(_short, jax.ShapeDtypeStruct((128, 256), np.float32), check=False)
    assert thread_count.SPIN_KEY not in _metadata(half)  # 0.5 ms: an idle gap's wake-up costs more than it saves


def _many_kernels(x):
    """``_short``'s products beside 300 small kernels (a sine and a product a step on one row): a call of many
    kernels, as a small encoder-decoder runs."""
    y = x[0]
    for _ in range(150):
        y = jnp.sin(y) * 1.01
    return _short(x), y


def test_calls_up_to_3_ms_and_calls_of_many_small_kernels_record_spinning():
    """Two spinning threads gain on calls of 1.5-3 ms of kernels and on calls of many small kernels (HF BART,
    Pegasus, mT5, T5, keras-hub Mixtral: 0.61-0.77x one thread's time, thread_count's docstring); the
    spinning-off weighing (2 us every other kernel) gave them one thread."""
    x = _RNG.standard_normal((512, 256)).astype(np.float32)  # twice _short's rows: about 2 ms of products
    longer = jaxconv.to_onnx(_short, x)  # checked against jax.jit
    kernels = thread_count.kernels_of(ir.serde.deserialize_model(longer).graph, sizes={})
    seconds = thread_count.one_thread_seconds(kernels.products, kernels.elementwise)
    assert thread_count.SPIN_CALL_SECONDS / 2 < seconds <= thread_count.SPIN_CALL_SECONDS
    assert _metadata(longer).get(thread_count.SPIN_KEY) == "1"

    x = _RNG.standard_normal((256, 256)).astype(np.float32)
    many = jaxconv.to_onnx(_many_kernels, x)
    assert _metadata(many).get(thread_count.SPIN_KEY) == "1"
    kernels = thread_count.kernels_of(ir.serde.deserialize_model(many).graph, sizes={})
    assert kernels.others >= 300
    cost, saving = thread_count.two_thread_weights(kernels.products, kernels.others, elementwise=kernels.elementwise,
                                                   wake=thread_count.SPIN_WAKE_SECONDS)
    assert cost + thread_count.WAKE_SECONDS > saving  # weighed as with spinning off, one thread would win
    runner = OnnxRunner(many.SerializeToString())
    assert _entry(runner.session.get_session_options(), "session.force_spinning_stop") == "1"
    for got, want in zip(runner.run([x]), jax.jit(_many_kernels)(x)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_a_model_with_an_rnn_op_keeps_spinning_off():
    """The rules choose ORT's GRU op for one thread; such a model keeps its spinning-off record."""
    wx, wh = (_RNG.standard_normal((16, 48)) * 0.2).astype(np.float32), (_RNG.standard_normal((16, 48)) * 0.2).astype(np.float32)

    def gru(xs):
        def cell(h, x):
            gx, gh = x @ wx, h @ wh
            r = 1.0 / (1.0 + jnp.exp(-(gx[:, :16] + gh[:, :16])))
            z = 1.0 / (1.0 + jnp.exp(-(gx[:, 16:32] + gh[:, 16:32])))
            n = jnp.tanh(gx[:, 32:] + r * gh[:, 32:])
            h = (1.0 - z) * n + z * h
            return h, h
        return jax.lax.scan(cell, jnp.zeros((4, 16), jnp.float32), xs)[1]

    xs = _RNG.standard_normal((12, 4, 16)).astype(np.float32)
    model = jaxconv.to_onnx(gru, xs)
    graph = ir.serde.deserialize_model(model).graph
    assert any(n.op_type == "GRU" for n in ir.traversal.RecursiveGraphIterator(graph))
    assert not thread_count.spins_during_run(graph)
    assert thread_count.SPIN_KEY not in _metadata(model)


@pytest.mark.parametrize("fn, shape, default", [(_short, (256, 256), "true"), (_long, (512, 1024), "false")])
def test_the_cpp_options_default_to_what_the_model_records(tmp_path, fn, shape, default):
    from jaxconv.cpp.project import write_project
    from jaxconv.program import trace

    program = trace(fn, [f"f32[{shape[0]},{shape[1]}]"], name="layers")
    write_project(program, str(tmp_path / "p"), check=False)
    header = (tmp_path / "p" / "layers.h").read_text()
    assert re.search(r"bool spin_during_run = (\w+);", header).group(1) == default
    helpers = (tmp_path / "p" / "jaxconv_ort.h").read_text()
    assert 'AddConfigEntry("session.force_spinning_stop", "1")' in helpers


def test_a_symbolic_batch_spins_at_the_sizes_where_its_call_is_short():
    """``f32[b, 256]`` through the six products: a call at b = 256 (201 MFLOP) spins during the run, one at
    b = 64 or 2048 does not; jaxconv's runner keeps a session for each and matches jax.jit."""
    model = jaxconv.to_onnx(_short, "f32[b,256]")  # checked against jax.jit
    meta = _metadata(model)
    assert meta[thread_count.SPIN_KEY].startswith("{")  # the kernels, as polynomials of b
    data = model.SerializeToString()
    record = thread_count.read_record(data)
    assert record.by_size and not record.spin
    assert record.spins([(256, 256)]) and not record.spins([(2048, 256)]) and not record.spins(None)
    assert not record.spins([(64, 256)])
    assert record.threads([(256, 256)]) is None
    assert _entry(session_options(model=data, shapes=[(256, 256)]), "session.force_spinning_stop") == "1"
    assert _entry(session_options(model=data, shapes=[(2048, 256)]), "session.intra_op.allow_spinning") == "0"
    runner = OnnxRunner(data)
    for b, spinning in ((256, "1"), (2048, "0"), (64, "0"), (256, "1")):
        x = _RNG.standard_normal((b, 256)).astype(np.float32)
        (got,) = runner.run([x])
        assert _entry(runner.session.get_session_options(), "session.intra_op.allow_spinning") == spinning
        np.testing.assert_allclose(got, np.asarray(jax.jit(_short)(x)), rtol=1e-5, atol=1e-6)


def test_a_malformed_spin_entry_records_nothing():
    """A spin entry that is neither "1" nor the kernels' JSON is read as no spinning."""
    x = _RNG.standard_normal((256, 256)).astype(np.float32)
    model = jaxconv.to_onnx(_short, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    for prop in model.metadata_props:
        if prop.key == thread_count.SPIN_KEY:
            prop.value = "yes"
    record = thread_count.read_record(model.SerializeToString())
    assert not record.spin and record.spin_by_size is None and not record.spins([x.shape])


def test_the_benchmarks_sessions_spin_at_the_sizes_they_time():
    """``jaxconv bench`` and scripts/bench.py time ``benchmark.ort_session``s made for their inputs' sizes."""
    from jaxconv.benchmark import ort_session

    data = jaxconv.to_onnx(_short, "f32[b,256]", check=False).SerializeToString()
    for b, spinning in ((256, "1"), (2048, "0")):
        x = np.ones((b, 256), np.float32)
        opts = ort_session(data, 2, None, inputs=[x]).get_session_options()
        assert _entry(opts, "session.intra_op.allow_spinning") == spinning
    peer = jaxconv.to_onnx(_long, jax.ShapeDtypeStruct((512, 1024), np.float32), check=False).SerializeToString()
    opts = ort_session(peer, None, None, spin_during_run=True).get_session_options()  # the peer, as ours records
    assert _entry(opts, "session.force_spinning_stop") == "1"


def test_a_runner_given_a_thread_count_still_weighs_the_spinning_at_each_calls_sizes():
    """``OnnxRunner(threads=2)`` on ``f32[b, 256]``: the count is fixed, the spinning follows each call's sizes."""
    data = jaxconv.to_onnx(_short, "f32[b,256]", check=False).SerializeToString()
    runner = OnnxRunner(data, threads=2)
    for b, spinning in ((2048, "0"), (256, "1"), (2048, "0")):
        x = _RNG.standard_normal((b, 256)).astype(np.float32)
        (got,) = runner.run([x])
        opts = runner.session.get_session_options()
        assert opts.intra_op_num_threads == 2
        assert _entry(opts, "session.intra_op.allow_spinning") == spinning
        np.testing.assert_allclose(got, np.asarray(jax.jit(_short)(x)), rtol=1e-5, atol=1e-6)
