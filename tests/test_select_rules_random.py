"""Random piecewise programs on tensors big enough for the select rules (``clamps``, ``select_gathers``,
``where_products``: 8192 elements), which the fuzzer's small shapes do not reach: each program's graph
is bit for bit the graph without ``clamps`` and ``select_gathers``, and its NaNs are jax.jit's."""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxconv.onnx.rewrites import clamps, select_gathers
from lowering_check import assert_same_bits, convert_and_run

SHAPE = (8, 1024)
SIDES = ("x * x", "-x", "jnp.sqrt(jnp.abs(x))", "jnp.exp(x)", "jnp.log(jnp.abs(x))", "x * 0.0", "y", "y - x",
         "jnp.clip(x, -1, 2)", "jax.nn.softplus(x)", "jnp.expm1(x)", "jnp.log1p(jnp.abs(y))", "jnp.minimum(x, 0.0)")
CONDITIONS = ("x > {c}", "x < {c}", "jnp.abs(x) < {c}", "x >= y", "y <= {c}")
CONSTANTS = ("0.0", "0.5", "-1.0", "2.0", "1e30")


def _program(seed: int) -> str:
    rng = random.Random(seed)

    def select(depth: int) -> str:
        c = rng.choice(CONSTANTS)
        if rng.random() < 0.25:  # a clamp written as selects (jax.nn.hard_tanh's form), one side or both
            lo, hi = sorted(rng.sample(CONSTANTS, 2), key=float)
            return rng.choice((f"jnp.where(x > {c}, {c}, x)", f"jnp.where(x < {c}, {c}, x)",
                               f"jnp.where(x > {hi}, {hi}, jnp.where(x < {lo}, {lo}, x))"))
        cond = rng.choice(CONDITIONS).format(c=c)
        return f"jnp.where({cond}, {side(depth)}, {side(depth)})"

    def side(depth: int) -> str:
        return select(depth + 1) if depth < 2 and rng.random() < 0.3 else rng.choice(SIDES)

    return select(0)


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, y = ((rng.standard_normal(SHAPE) * 3).astype(np.float32) for _ in range(2))
    edges = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 0.5, -1.0, 2.0, 1e30, np.finfo(np.float32).max], np.float32)
    for a in (x, y):
        picks = rng.integers(0, a.size, 300)
        a.reshape(-1)[picks] = rng.choice(edges, 300)
    return x, y


@pytest.mark.parametrize("seed", range(16))
def test_random_piecewise_program(monkeypatch, seed):
    source = _program(seed)
    fn = eval(f"lambda x, y: {source}", {"jnp": jnp, "jax": jax})  # noqa: S307  (the test's own expression)
    x, y = _inputs(seed)
    _, got = convert_and_run(fn, x, y)
    with monkeypatch.context() as patch:
        patch.setattr(clamps, "rewrite", lambda *a, **k: 0)
        patch.setattr(select_gathers, "rewrite", lambda *a, **k: 0)
        _, plain = convert_and_run(fn, x, y)
    assert_same_bits(got, plain), source
    want = np.asarray(jax.jit(fn)(x, y))
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want), err_msg=source)


def test_programs_reach_the_rules():
    """The programs above do make the rules fire (else the test would check nothing)."""
    fired = {"clamps": 0, "select_gathers": 0}
    from jaxconv.onnx import rewrites

    original = rewrites.apply

    def counting(model, *args, **kwargs):
        result = original(model, *args, **kwargs)
        for k in fired:
            fired[k] += result.get(k, 0)
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rewrites, "apply", counting)
        for seed in range(16):
            fn = eval(f"lambda x, y: {_program(seed)}", {"jnp": jnp, "jax": jax})  # noqa: S307
            convert_and_run(fn, *_inputs(seed))
    assert fired["clamps"] >= 2 and fired["select_gathers"] >= 8, fired
