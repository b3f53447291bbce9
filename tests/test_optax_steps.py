"""Optax update steps (``opt.update`` then ``optax.apply_updates``) through the ONNX lowering, checked
against jax.jit by the default check (random, symbolic-size and edge-value input sets)."""

from __future__ import annotations

import numpy as np
import pytest

import jaxconv
from jaxconv.check_context import check_options
from jaxconv.errors import MismatchError
from jaxconv.known_differences import PROGRAM_ORDER_NOTE

optax = pytest.importorskip("optax")

_PASSING = {
    "sgd_nesterov": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "lamb": lambda: optax.lamb(1e-3),
    "lion": lambda: optax.lion(1e-4),
    "adafactor": lambda: optax.adafactor(1e-3),
    "rmsprop_centered": lambda: optax.rmsprop(1e-3, momentum=0.9, centered=True),
    "adagrad": lambda: optax.adagrad(1e-2),
    "clip_adam_schedule": lambda: optax.chain(optax.clip_by_global_norm(1.0),
                                              optax.adam(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100))),
}
# Differ from jax.jit on the edge-value input sets only (a state holding values training never gives
# it), where jax.jit's compiled code leaves the program's order: a negative second moment next to
# -FLT_MIN decays to a subnormal that XLA on the CPU flushes to -0 (sqrt(-0) = -0, the update 0; float64
# and the artifact: NaN), and a first moment near FLT_MAX over the bias correction overflows in the
# program's order (mu / 0.1) where XLA's reordered code does not. The check passes them with a warning
# naming why (``known_differences.as_program_order``).
_PROGRAM_ORDER = {
    "adam": lambda: optax.adam(1e-3),
    "adamw": lambda: optax.adamw(1e-3, weight_decay=1e-2),
    "yogi": lambda: optax.yogi(1e-3),
    "adamax": lambda: optax.adamax(1e-3),
    "radam": lambda: optax.radam(1e-3),
    "adabelief": lambda: optax.adabelief(1e-3),
    "nadam": lambda: optax.nadam(1e-3),
}


def _step_args(make):
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((16, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    grads = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in params.items()}
    opt = make()
    state = opt.init(params)
    for _ in range(2):  # a state past its first step (counts above zero)
        updates, state = opt.update(grads, state, params)

    def step(grads, state, params):
        updates, new_state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), new_state

    return step, (grads, state, params)


@pytest.mark.parametrize("name", sorted(_PASSING))
def test_optax_step_matches_jax(name):
    step, args = _step_args(_PASSING[name])
    jaxconv.to_onnx(step, *args)  # raises MismatchError where any output differs from jax.jit


@pytest.mark.parametrize("name", sorted(_PROGRAM_ORDER))
def test_optax_adam_family_passes_with_edge_warnings(name):
    step, args = _step_args(_PROGRAM_ORDER[name])
    reports: list = []
    jaxconv.to_onnx(step, *args, report_to=reports)
    rows = [row for report in reports for row in report.rows]
    assert all(row.verdict in ("ok", "float64", "subnormal") for row in rows if row.inputs != "edge")
    flagged = [row for row in rows if row.verdict == "undecided"]
    assert flagged and all(row.inputs == "edge" and PROGRAM_ORDER_NOTE in row.note for row in flagged)
    with check_options(strict=True), pytest.raises(MismatchError):  # --strict refuses them
        jaxconv.to_onnx(step, *args)


def test_an_adam_step_on_a_layer_of_a_real_size_converts_with_the_default_check():
    """A 784 x 256 weight: its edge state holds every combination of edge values, among them one where
    jax.jit's flushed moment flips a zero's sign (tests/test_check_program_order.py)."""
    rng = np.random.default_rng(2)
    params = {"w": (rng.standard_normal((784, 256)) * 0.05).astype(np.float32)}
    opt = optax.adam(1e-3)
    grads = {"w": rng.standard_normal((784, 256)).astype(np.float32)}
    _, state = opt.update(grads, opt.init(params), params)

    def step(grads, state, params):
        updates, new_state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), new_state

    reports: list = []
    jaxconv.to_onnx(step, grads, state, params, report_to=reports)
    rows = [row for report in reports for row in report.rows]
    assert all(row.verdict in ("ok", "float64", "subnormal") for row in rows if row.inputs != "edge")


def _mlp_train_step(opt):
    """A training step as people write it: value_and_grad of a cross-entropy loss, then the optimizer."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(1)
    params = {"w1": (rng.standard_normal((12, 16)) * 0.3).astype(np.float32), "b1": np.zeros(16, np.float32),
              "w2": (rng.standard_normal((16, 5)) * 0.3).astype(np.float32), "b2": np.zeros(5, np.float32)}
    x = rng.standard_normal((8, 12)).astype(np.float32)
    y = rng.integers(0, 5, 8).astype(np.int32)

    def loss_fn(p, x, y):
        logits = jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return step, (params, opt.init(params), x, y), jnp


@pytest.mark.parametrize("make", [lambda: optax.adam(1e-3), lambda: optax.lion(1e-4)], ids=["adam", "lion"])
def test_a_training_step_converts_with_the_default_check(make):
    step, args, _ = _mlp_train_step(make())
    reports: list = []
    jaxconv.to_onnx(step, *args, report_to=reports)
    rows = [row for report in reports for row in report.rows]
    assert rows and all(row.verdict in ("ok", "float64", "subnormal") for row in rows if row.inputs != "edge")


def _cnn_train_step(opt, max_pool: bool = True):
    """Flax's MNIST CNN (conv, ReLU, 2x2 max pool, conv, ReLU, 2x2 average pool, dense) and its optax step on
    a batch of symbolic size, the parameters and state closed over; without ``max_pool``, a 2x2 average pool
    and a conv of stride 2 instead of the pools."""
    import jax
    import jax.numpy as jnp

    nn = pytest.importorskip("flax.linen")

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            if not max_pool:
                x = nn.avg_pool(nn.relu(nn.Conv(8, (3, 3))(x)), (2, 2), (2, 2))
                x = nn.relu(nn.Conv(16, (3, 3), strides=2)(x))
                return nn.Dense(10)(x.reshape(x.shape[0], -1))
            x = nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))
            x = nn.avg_pool(nn.relu(nn.Conv(32, (3, 3))(x)), (2, 2), (2, 2))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    model = CNN()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1) if max_pool else (1, 16, 16, 3)))
    state = opt.init(params)

    def step(x, y):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, _ = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), value

    return step


def test_a_cnn_training_step_with_max_pooling_converts_with_the_default_check():
    """On edge inputs XLA's max pooling keeps or drops a NaN by the tensor's size, so the gradient's picks, and
    every update after them, hold NaN in jax.jit where the artifact has a number and the other way round: the
    check leaves those rows undecided with the pooling note instead of failing the conversion."""
    from jaxconv.known_differences import POOLING_NAN_NOTE

    reports: list = []
    jaxconv.to_onnx(_cnn_train_step(optax.adamw(1e-3)), "f32[b,28,28,1]", "i32[b]", report_to=reports)
    rows = [row for report in reports for row in report.rows]
    assert rows and all(row.verdict in ("ok", "float64", "subnormal") for row in rows if row.inputs != "edge")
    assert all(row.verdict != "mismatch" for row in rows), [row for row in rows if row.verdict == "mismatch"]
    assert any(row.verdict == "undecided" and POOLING_NAN_NOTE in row.note for row in rows)


def test_a_cnn_training_step_whose_jit_gradient_is_nan_where_op_by_op_it_is_zero_converts():
    """Edge inputs make every activation of the second conv NaN, so ReLU's select gives a zero gradient: JAX run
    op by op and the artifact give zero updates, jax.jit NaN (its compiled code). Where jax.jit is NaN, the
    update's zero matches op by op of either sign (the artifact drops ``+ 0`` as XLA does: -0.0 where op by op
    adds +0.0), so those rows are undecided with the program-order note."""
    reports: list = []
    jaxconv.to_onnx(_cnn_train_step(optax.sgd(0.1, momentum=0.9), max_pool=False), "f32[b,16,16,3]", "i32[b]",
                    report_to=reports)
    rows = [row for report in reports for row in report.rows]
    assert rows and all(row.verdict != "mismatch" for row in rows), [row for row in rows if row.verdict == "mismatch"]
    assert any(row.verdict == "undecided" and PROGRAM_ORDER_NOTE in row.note for row in rows)


def _example(name: str):
    import importlib.util
    import os

    pytest.importorskip("flax")
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_training_step_example_matches_jax():
    """examples/train_cnn.py, the benchmark's training step, converted unchecked, matches jax.jit on a batch."""
    import jax

    from jaxconv.runtimes.onnxrt import OnnxRunner
    from lowering_check import assert_same_floats

    module = _example("train_cnn")
    model = jaxconv.to_onnx(module.step, "f32[b,28,28,1]", "i32[b]", check=False)
    rng = np.random.default_rng(0)
    images, labels = rng.standard_normal((8, 28, 28, 1)).astype(np.float32), np.arange(8, dtype=np.int32)
    got = OnnxRunner(model.SerializeToString()).run([images, labels])
    want = jax.tree_util.tree_leaves(jax.jit(module.step)(images, labels))
    assert len(got) == len(want) == 7
    for g, w in zip(got, want):
        assert_same_floats(np.asarray(g), w, 1e-4, 1e-5)


def test_the_lstm_training_step_example_matches_jax_with_its_backward_pass_a_scan():
    """examples/train_lstm.py on a symbolic batch: both passes over the steps are Scans (the backward one
    reads the saved rows as scan inputs), and the updated parameters match jax.jit's."""
    import jax

    from jaxconv.runtimes.onnxrt import OnnxRunner
    from lowering_check import assert_same_floats

    module = _example("train_lstm")
    model = jaxconv.to_onnx(module.step, "f32[b,32,64]", "i32[b]", check=False)
    loops = [n.op_type for n in model.graph.node if n.op_type in ("Loop", "Scan")]
    assert loops == ["Scan", "Scan"], loops
    rng = np.random.default_rng(1)
    sequences, labels = rng.standard_normal((4, 32, 64)).astype(np.float32), np.arange(4, dtype=np.int32)
    got = OnnxRunner(model.SerializeToString()).run([sequences, labels])
    want = jax.tree_util.tree_leaves(jax.jit(module.step)(sequences, labels))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_floats(np.asarray(g), w, 1e-4, 1e-5)
