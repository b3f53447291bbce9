"""The fuzzer's symbolic-batch programs (``scripts/fuzz.py --symbolic-batch``).

A model exported for any batch (``f32[b, ...]``) takes other lowerings and rewrites than the same model
at a static size. With ``--symbolic-batch`` each model-shaped program is exported with its inputs' batch
axes as one symbolic size, and its artifact is run at the program's own batch, at 1 and at 3 more, each
against jax.jit on the same inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from conformance.fuzz import run as fuzz_run  # noqa: E402
from conformance.fuzz.cli import jax_aborts  # noqa: E402
from conformance.fuzz.driver import fuzz_program  # noqa: E402
from conformance.fuzz.models import KINDS, generate_model  # noqa: E402


def _symbolic(seed: int, kind: str):
    return generate_model(seed, [kind], symbolic=True)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_exports_with_a_symbolic_batch(kind):
    """Every input that holds the batch names it ``b`` (one size for all), the others stay static, and jax
    exports the program for any batch: its steps read the batch from their inputs."""
    for seed in range(3):
        p = _symbolic(seed, kind)
        batched = [p.types[i] for i in p.inputs if p.types[i].batch_axis is not None]
        assert batched, p.source()
        assert len({t.shape[t.batch_axis] for t in batched}) == 1
        specs = p.specs()
        for i, spec in zip(p.inputs, specs):
            axis = p.types[i].batch_axis
            assert [str(d) for k, d in enumerate(spec.shape) if k == axis] == (["b"] if axis is not None else [])
            assert all(isinstance(d, int) for k, d in enumerate(spec.shape) if k != axis)
        with jax.enable_x64(p.uses_x64()):
            exported = jax.export.export(jax.jit(p.function()))(*specs)
        assert "b" in str(exported.in_avals[p.inputs.index(next(i for i in p.inputs if p.types[i].batch_axis is not None))])


def test_static_programs_are_unchanged_by_the_symbolic_mode():
    for seed in range(8):
        static = generate_model(seed)
        assert all(static.types[i].batch_axis is None for i in static.inputs)
        assert static.batch_size() is None and fuzz_run.batch_sizes(static) == [None]
        assert all(isinstance(d, int) for s in static.specs() for d in s.shape)


def test_a_symbolic_program_runs_at_its_own_batch_at_one_and_at_three_more(monkeypatch):
    p = next(q for q in (_symbolic(s, "encoder") for s in range(20)) if q.batch_size() == 2)
    seen: list[int] = []
    real = fuzz_run.run_artifact

    def recording(runner, inputs):
        batched = next(k for k, i in enumerate(p.inputs) if p.types[i].batch_axis is not None)
        seen.append(np.asarray(inputs[batched]).shape[p.types[p.inputs[batched]].batch_axis])
        return real(runner, inputs)

    monkeypatch.setattr(fuzz_run, "run_artifact", recording)
    outcome = fuzz_run.evaluate(p, "onnx", 0)
    assert outcome.status == "ok", outcome.detail
    assert sorted(set(seen)) == [1, 2, 5] and len(seen) == 3 * len(fuzz_run.INPUT_SETS)


def test_a_difference_at_another_batch_is_recorded_at_that_batch_with_a_symbolic_reproducer(monkeypatch, tmp_path):
    """An artifact wrong only at batch 1 (planted) is a mismatch at batch 1; the reproducer converts the function
    with the symbolic specs and runs the batch-1 inputs (the real converter gets them right: it exits 0)."""
    seed = next(s for s in range(20) if _symbolic(s, "mlp").batch_size() != 1)
    p = _symbolic(seed, "mlp")
    real = fuzz_run.convert

    def wrong_at_batch_one(program, target, tmp, opset=None):
        runner = real(program, target, tmp, opset)

        class Shifted:
            kind = "onnx"

            def run(self, inputs):
                out = runner.run(inputs)
                one = any(np.asarray(a).shape[:1] == (1,) for a in inputs)
                return [np.full_like(o, 7) if one else o for o in out]

        return Shifted()

    monkeypatch.setattr(fuzz_run, "convert", wrong_at_batch_one)
    rec = fuzz_program(p, seed, "onnx", str(tmp_path), do_minimise=False)
    assert rec["status"] == "mismatch" and rec["batch"] == 1, rec
    from conformance.fuzz import reproducer
    from conformance.fuzz.minimise import Failure

    sized = p.at_batch(1)
    inputs = fuzz_run.input_values(sized, "normal", seed)
    expected = fuzz_run.reference(sized, inputs)
    path = reproducer.write(Failure(sized, inputs, "mismatch", None, "", expected, expected), "x/f32/value", "silent",
                            "symbolic", "onnx", str(tmp_path), f"seed{seed}")
    text = open(path).read()
    specs = next(line for line in text.splitlines() if line.startswith("SPECS = "))
    assert "[b," in specs, specs
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "converter"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "onnx matches jax.jit" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_abort_probe_rebuilds_the_symbolic_program():
    assert jax_aborts(2, "model", ["fft"], symbolic=True) == ""


def test_cli_runs_a_symbolic_sample(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz.py"), "--family", "model", "--symbolic-batch",
                           "--kinds", "mlp,cnn", "--count", "3", "--seed", "2", "-o", str(tmp_path), "-q"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    import json

    records = [json.loads(line) for line in open(tmp_path / "results.jsonl")]
    assert len(records) == 3 and all(r["status"] == "ok" for r in records), records


def test_a_program_at_another_batch_has_its_steps_typed_at_that_batch():
    """The minimiser replaces steps by inputs of the steps' types: at another batch those are that batch's."""
    p = next(q for q in (_symbolic(s, "mlp") for s in range(20)) if q.batch_size() != 5)
    five = p.at_batch(5)
    assert five.batch_size() == 5 and five.types[p.outputs[0]].shape[0] == 5
    assert p.types[p.outputs[0]].shape[0] == p.batch_size()


# What the first symbolic-batch campaign (seed 11, 300 programs) found that the known table did not name. None is
# symbolic: each differs at the static batch it ran at too.

def test_a_rotary_embedding_near_the_largest_float_is_a_sum_order_difference():
    """x * cos + rot(x) * sin: XLA contracts it into an FMA (finite, as in float64), ONNX Runtime rounds each product
    (inf); the softmax after the scores turns that into NaN against 0."""
    v = np.ones((1, 1, 1, 2), np.float32)
    v[..., 0], v[..., 1] = 2.257787e38, -7.207443e37
    cos, sin = np.float32([[1.6, 1.6]]), np.float32([[-1.0, -1.0]])

    def rotary(x):
        return x * cos + jax.numpy.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape) * sin

    with np.errstate(over="ignore"):
        unfused = v * cos + np.stack([-v[..., 1::2], v[..., ::2]], -1).reshape(v.shape) * sin
        wide = v.astype(np.float64) * cos + np.stack([-v[..., 1::2], v[..., ::2]], -1).reshape(v.shape) * sin.astype(np.float64)
    assert np.isinf(unfused[..., 0]).all() and abs(wide[..., 0]).max() < np.finfo(np.float32).max
    assert np.isfinite(np.asarray(jax.jit(rotary)(v))[..., 0]).all()
    from conformance.fuzz import known

    assert known.match("rotary_k+scores+softmax/f32/nan", known.facts([v])) is not None
    assert known.match("rotary_k+scores+softmax/f32/nan", known.facts([np.ones(4, np.float32)])) is None
    # the rotary sum alone (seed 14, program 341), and the projections before it, where the minimiser cannot
    # cut them off (seed 13, program 270)
    assert known.match("rotary_q/f32/nan", known.facts([v])) is not None
    assert known.match("dense_q+dense_k+..+softmax/f32/nan", known.facts([v])) is not None
    assert known.match("dense_q+dense_k+..+softmax/f32/nan", known.facts([np.ones(4, np.float32)])) is None


def test_tanh_gelu_tail_times_an_infinite_weight_is_known():
    """jax.jit's tanh GELU is exactly -0 at x = -4.94 (1 + tanh(z) rounds to 0); ORT's Gelu gives -5.9e-7. Times an
    infinite weight: NaN against -inf."""
    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    x = np.float32([-4.938384])
    jit = np.asarray(jax.jit(lambda v: jax.nn.gelu(v, approximate=True))(x))
    model = jaxconv.to_onnx(lambda v: jax.nn.gelu(v, approximate=True), jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)
    ort = OnnxRunner(model.SerializeToString()).run([x])[0]
    assert jit[0] == 0 and ort[0] != 0 and abs(ort[0]) < 1e-6
    from conformance.fuzz import known

    assert known.match("gelu_tanh+moe_down/f32/nan") is not None and known.match("gelu_tanh+moe_down/f32/inf") is not None
    assert known.match("gelu_exact+moe_down/f32/value") is None


def test_a_gradient_through_a_weight_near_the_largest_float_is_a_sum_order_difference():
    from conformance.fuzz import known

    assert known.match("vjp/f32/nan", frozenset({"huge-weight"})) is not None
    assert known.match("vjp/f32/nan") is None


def test_a_frequency_filter_that_overflows_a_huge_input_meets_the_dft_zeros():
    """``ifft2(fft2(x) * w)`` with x = -FLT_MAX: the filtered spectrum holds -inf, which the artifact's DFT
    matrix multiplies by its exact zeros (NaN) where XLA's FFT skips them (seed 14, program 262)."""
    from conformance.fuzz import known

    x = np.full((1, 1, 1), -3.4028235e38, np.float32)
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32) * 3
    with np.errstate(over="ignore"):
        assert np.isinf(np.fft.fft2(x).real * w).any()
    assert known.match("ifft2_filter/f32/nan", known.facts([x])) is not None
    assert known.match("ifft2_filter/f32/nan", known.facts([np.ones(3, np.float32)])) is None


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_convolution_with_no_output_positions_over_a_symbolic_batch_runs(dtype):
    """A 3x3 VALID convolution of a 1x1 image has no output positions: XLA sums nothing, and the mean after it
    is NaN. On a symbolic batch the Conv was left in the graph, and ONNX Runtime rejected its input shape
    (seed 14, program 313: a pool before the second convolution left 1x1)."""
    import jax.numpy as jnp
    import ml_dtypes
    from jax import lax

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    w, b = np.ones((3, 3, 4, 8), dt), np.ones(8, dt)

    def fn(x):
        y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
        return jnp.mean(jax.nn.silu(y), axis=(1, 2))

    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    runner = OnnxRunner(jaxconv.to_onnx(fn, f"{short}[b,1,1,4]", check=False).SerializeToString())
    for n in (1, 3):
        x = np.ones((n, 1, 1, 4), dt)
        got, want = runner.run([x])[0], np.asarray(jax.jit(fn)(x))
        assert got.shape == want.shape == (n, 8) and np.isnan(got.astype(np.float32)).all() == np.isnan(want.astype(np.float32)).all()


def test_an_expert_product_near_the_largest_float_is_a_sum_order_difference():
    """seed 15, program 333 (``moe_up+relu+moe_down/f32/nan``): an expert's hidden unit is 2.42e38 (finite), its
    down-projection weight -1.41, and another unit meets an infinite weight. Rounded on its own, the product
    -3.41e38 overflows to -inf, and inf + -inf is NaN (ONNX Runtime); fused into the running sum (XLA's FMA) it
    never stands alone, and the sum is inf (jax.jit). The expert chains are sum-order rows with a huge input."""
    hidden, weight = np.float32(2.4202596e38), np.float32(-1.4098642)
    with np.errstate(over="ignore", invalid="ignore"):
        alone = hidden * weight
        assert np.isneginf(alone) and np.isnan(np.float32(np.inf) + alone)
    fused = np.float64(hidden) * np.float64(weight) + np.float64(np.finfo(np.float32).max)  # an FMA's exact product
    assert np.isfinite(np.float32(fused))
    from conformance.fuzz import known

    huge = np.float32([-3.4028235e38, 1.0])
    assert known.match("moe_up+relu+moe_down/f32/nan", known.facts([huge])) is not None
    assert known.match("moe_up+relu+moe_down/f32/nan", known.facts([np.ones(4, np.float32)])) is None
