"""The product rate the thread-count weighing prices products at: this machine's, measured once.

The weighing was fitted on an Intel Xeon whose products ran at 190 GFLOP/s a core; on an AMD EPYC at about
100 the same products take twice as long, a second thread saves twice as much, and models that recorded
one thread ran faster on two. The tests elsewhere pin the fitted rate (conftest.py); these unpin it.
"""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import onnx_ir as ir
import pytest

import jaxconv
from jaxconv.errors import UsageError
from jaxconv.onnx import product_rate, thread_count

_rng = np.random.default_rng(0)
WEIGHTS = [_rng.standard_normal((256, 256)).astype(np.float32) * 0.05 for _ in range(4)]


def four_layers(x):
    for w in WEIGHTS:
        x = jnp.tanh(x @ w)
    return x


@pytest.fixture
def unpinned(monkeypatch):
    monkeypatch.delenv(product_rate.ENV, raising=False)
    product_rate._measured.cache_clear()
    yield
    product_rate._measured.cache_clear()


def test_the_rate_is_measured_once_a_process(unpinned, monkeypatch):
    calls = []
    fastest = product_rate._fastest_product
    monkeypatch.setattr(product_rate, "_fastest_product", lambda: calls.append(1) or fastest())
    rate = product_rate.core_flops()
    assert product_rate.core_flops() == rate and len(calls) == 1
    assert 1e9 < rate < 1e13  # a 2-core cloud machine's core runs ORT's products at 50-250 GFLOP/s


@pytest.mark.parametrize("seconds", [0.0, 1e-12, 1e3])
def test_an_implausible_measurement_falls_back_to_the_fitted_rate(unpinned, monkeypatch, seconds):
    monkeypatch.setattr(product_rate, "_fastest_product", lambda: seconds)
    assert product_rate.core_flops() == product_rate.FITTED


def test_a_failing_measurement_falls_back_to_the_fitted_rate(unpinned, monkeypatch):
    def broken():
        raise RuntimeError("no ORT")

    monkeypatch.setattr(product_rate, "_fastest_product", broken)
    assert product_rate.core_flops() == product_rate.FITTED


@pytest.mark.parametrize("rate,threads", [("1.9e11", "1"), ("1.0e11", None)])
def test_the_record_follows_the_rate(monkeypatch, rate, threads):
    """Four 6.3 MFLOP products: one thread at the Xeon's rate; at half of it they take twice as long,
    and a second thread saves more than waking it costs."""
    monkeypatch.setenv(product_rate.ENV, rate)
    x = np.random.default_rng(1).standard_normal((48, 256)).astype(np.float32)
    model = jaxconv.to_onnx(four_layers, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    # the weighing with spinning off (a call this short records spinning during the run instead)
    assert str(thread_count.recommend(ir.serde.deserialize_model(model))) == str(threads)


@pytest.mark.parametrize("text", ["fast", "0", "-1e11", "inf", "nan", ""])
def test_a_bad_rate_is_a_usage_error(monkeypatch, text):
    monkeypatch.setenv(product_rate.ENV, text)
    with pytest.raises(UsageError, match=r"JAXCONV_CORE_FLOPS must be a positive number of FLOP/s"):
        product_rate.core_flops()


def test_the_cli_names_a_bad_rate_in_one_line_and_writes_nothing(user_file, tmp_path):
    src = user_file("import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.tanh(x @ x.T)\n", "f.py")
    out = tmp_path / "f.onnx"
    env = {**__import__("os").environ, product_rate.ENV: "fast"}
    done = subprocess.run([sys.executable, "-m", "jaxconv", "to-onnx", src, "--specs", "f32[64,64]", "-o", str(out)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "jaxconv: error: JAXCONV_CORE_FLOPS must be a positive number of FLOP/s (such as 1.9e11), got 'fast'"]
    assert not out.exists()
