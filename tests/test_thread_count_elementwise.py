"""A model with no products (an optimizer's update, an elementwise function) is weighed by its elementwise
kernels: ORT splits one from ``SPLIT_ELEMENTS`` elements on, and a second thread pays only for big ones
(thread_count's docstring has the measurements)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxconv
from jaxconv.onnx import thread_count
from jaxconv.runtimes.onnxrt import OnnxRunner, default_threads

_RNG = np.random.default_rng(0)


def _adam_update(g, mu, nu, p, count):
    """Adam's step on one parameter, as optax writes it: 14 elementwise kernels, no product."""
    mu = 0.9 * mu + 0.1 * g
    nu = 0.999 * nu + 0.001 * (g * g)
    t = count.astype(jnp.float32) + 1.0
    mu_hat = mu / (1.0 - 0.9 ** t)
    nu_hat = nu / (1.0 - 0.999 ** t)
    return p - 1e-3 * mu_hat / (jnp.sqrt(nu_hat) + 1e-8), mu, nu


def _inputs(n):
    g, mu, p = (_RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    return [g, mu, np.abs(_RNG.standard_normal(n)).astype(np.float32), p, np.array(3, np.int32)]


def _recorded(model):
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.THREADS_KEY)


def _spins(model):
    return {p.key: p.value for p in model.metadata_props}.get(thread_count.SPIN_KEY) == "1"


@pytest.mark.parametrize("n, expected, spins", [(1 << 12, "1", False), (1 << 17, "1", False), (1 << 20, None, False)])
def test_an_update_records_one_thread_below_the_size_where_its_kernels_gain_and_matches_jax(n, expected, spins):
    """Measured (ORT 1.32, two cores, spinning off; the update above): two threads took 1.0x the time of
    one at 16K elements, 1.19-1.36x at 128K, 0.91-0.94x at 256K and 0.69x at 1M. With the pool spinning
    during the run (AMD EPYC, calls back to back): 1.02x at 4K, 0.80x at 128K, 0.64x at 1M; neither records
    it (a call under 0.7 ms of kernels, where a run after an idle gap pays more for waking a core than it gains;
    one of 3 ms)."""
    inputs = _inputs(n)
    model = jaxconv.to_onnx(_adam_update, *inputs)
    assert _recorded(model) == expected
    assert _spins(model) is spins
    got = OnnxRunner(model.SerializeToString()).run(inputs)
    for a, b in zip(got, jax.jit(_adam_update)(*inputs)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-6, atol=1e-7)


def test_the_weighing_of_elementwise_kernels():
    """Below SPLIT_ELEMENTS a kernel costs what any other does; from it on a second thread costs WAKE_SECONDS
    and saves ELEMENTWISE_SAVES of its one-thread time: a cheap op gains from about 190K elements."""
    small = thread_count.SPLIT_ELEMENTS - 1
    cost, saving = thread_count.two_thread_weights([], 3.0, elementwise=[(small, 3, 1e-9)])
    assert (cost, saving) == (3 * thread_count.OTHER_SECONDS, 0.0)
    n = thread_count.SPLIT_ELEMENTS
    cost, saving = thread_count.two_thread_weights([], 2.0, elementwise=[(n, 2, 1e-9)])
    assert cost == pytest.approx(2 * thread_count.WAKE_SECONDS)
    assert saving == pytest.approx(2 * thread_count.ELEMENTWISE_SAVES * n * 1e-9)
    cheap = 0.2e-9
    assert thread_count.one_thread_for(*thread_count.two_thread_weights([], 1.0, elementwise=[(150_000, 1, cheap)])) == 1
    assert thread_count.one_thread_for(*thread_count.two_thread_weights([], 1.0, elementwise=[(250_000, 1, cheap)])) is None
    # with a product, the products decide as before: the elementwise kernels count as other kernels
    product = (1e9, 1, 0.0)
    assert thread_count.two_thread_weights([product], 1.0, elementwise=[(1 << 24, 1, cheap)]) == \
        thread_count.two_thread_weights([product], 1.0)


def test_costly_ops_gain_sooner():
    """Log (1.7 ns an element on one thread) gains from a second thread at 64K elements; Add does not."""
    x = np.abs(_RNG.standard_normal((64, 1024))).astype(np.float32) + 1.0
    assert _recorded(jaxconv.to_onnx(lambda a: jnp.log(a) * 2.0, x)) is None
    assert _recorded(jaxconv.to_onnx(lambda a: a + 2.0, x)) == "1"


def test_a_model_of_data_movement_alone_records_one_thread():
    """Concat, Slice and Where are not split, whatever their size: nothing for a second thread to gain."""
    x = _RNG.standard_normal((512, 1024)).astype(np.float32)
    model = jaxconv.to_onnx(lambda a: jnp.where(a[:256] > 0, a[256:], a[:256]), x)
    assert _recorded(model) == "1"


def test_a_symbolic_size_records_the_kernels_and_the_runner_weighs_them_at_each_call():
    """``f32[b, 1024]``: one thread for small batches, ORT's count for big ones (spinning during the run at
    b = 1024 and 2048, calls of about 1 and 2 ms; not at 512 or 4096), as a static export of each."""
    fn = jax.jit(lambda x, y: jnp.sqrt(x * x + 1.0) * y)
    model = jaxconv.to_onnx(fn, "f32[b,1024]", "f32[b,1024]")
    entries = {p.key for p in model.metadata_props}
    assert thread_count.BY_SIZE_KEY in entries and thread_count.THREADS_KEY not in entries
    data = model.SerializeToString()
    record = thread_count.read_record(data)
    for b in (1, 16):
        assert thread_count.recorded(data, [(b, 1024)] * 2) == 1 and not record.spins([(b, 1024)] * 2)
    assert thread_count.recorded(data, [(128, 1024)] * 2) == 1
    for b, spins in ((512, False), (1024, True), (2048, True), (4096, False)):
        assert thread_count.recorded(data, [(b, 1024)] * 2) is None
        assert record.spins([(b, 1024)] * 2) is spins
        static = jaxconv.to_onnx(fn, f"f32[{b},1024]", f"f32[{b},1024]", check=False)
        assert _recorded(static) is None and _spins(static) is spins
    runner = OnnxRunner(data)
    for b, threads in ((4, 1), (512, default_threads() or 0), (8, 1)):
        x, y = (_RNG.standard_normal((b, 1024)).astype(np.float32) for _ in range(2))
        (got,) = runner.run([x, y])
        assert runner.session.get_session_options().intra_op_num_threads == threads
        np.testing.assert_allclose(got, np.asarray(fn(x, y)), rtol=2e-6)


def test_a_complex_model_of_symbolic_size_runs_each_call_on_its_sizes_count():
    """Complex inputs go in as (re, im) pairs: the record is weighed at the pairs' shapes."""
    fn = jax.jit(lambda x, y: x * y + x)
    model = jaxconv.to_onnx(fn, "c64[b,1024]", "c64[b,1024]", check=False)
    runner = OnnxRunner(model.SerializeToString())
    for b, threads in ((2, 1), (1024, default_threads() or 0)):
        x, y = ((_RNG.standard_normal((b, 1024)) + 1j * _RNG.standard_normal((b, 1024))).astype(np.complex64)
                for _ in range(2))
        (got,) = runner.run([x, y])
        assert runner.session.get_session_options().intra_op_num_threads == threads
        np.testing.assert_allclose(got, np.asarray(fn(x, y)), rtol=1e-5, atol=1e-6)
