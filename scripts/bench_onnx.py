"""Speed of the ONNX models jaxconv writes, as a ratio to jax.jit measured in the same run.

    .venv/bin/python scripts/bench_onnx.py [--iters 50]

Each model runs alternately in jax.jit and in ONNX Runtime (CPU) on the same inputs; the table gives
medians and the ratio ORT / JAX (below 1 means ONNX Runtime is faster). Ratios, not absolute times,
are what to compare across machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "converter"))


def models():
    import jax
    import jax.numpy as jnp

    def mlp(x, w1, w2):
        return jax.nn.log_softmax(jax.nn.relu(x @ w1) @ w2)

    def attention(x, wq, wk, wv):
        q, k, v = x @ wq, x @ wk, x @ wv
        s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(x.shape[-1])
        mask = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
        return jnp.einsum("bts,bsd->btd", jax.nn.softmax(jnp.where(mask, s, -1e9)), v)

    def conv(x, k):
        y = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y).mean(axis=(1, 2))

    rng = np.random.default_rng(0)
    # weights scaled like a standard initialisation (std 1/sqrt(fan_in)), so softmax stays well conditioned
    f32 = lambda *s: (rng.standard_normal(s) / (np.sqrt(s[-2]) if len(s) == 2 else 1)).astype(np.float32)  # noqa: E731
    yield "mlp 64x784", mlp, (f32(64, 784), f32(784, 256), f32(256, 10))
    yield "attention 8x128x256", attention, (f32(8, 128, 256), f32(256, 256), f32(256, 256), f32(256, 256))
    yield "conv 16x32x32x16", conv, (f32(16, 32, 32, 16), f32(3, 3, 16, 32) / 12)


def bench(fn, iters: int) -> float:
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    import jax

    import jaxconv
    from jaxconv.runtimes.onnxrt import OnnxRunner

    print(f"{'model':<24} {'jax.jit ms':>10} {'ORT ms':>8} {'ORT/JAX':>8} {'nodes':>6}")
    for name, fn, inputs in models():
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs]
        model = jaxconv.to_onnx(fn, *specs)
        runner = OnnxRunner(model.SerializeToString())
        jitted = jax.jit(fn)
        jitted(*inputs).block_until_ready()
        runner.run(inputs)
        t_jax = bench(lambda: jitted(*inputs).block_until_ready(), args.iters)
        t_ort = bench(lambda: runner.run(inputs), args.iters)
        print(f"{name:<24} {t_jax * 1e3:>10.3f} {t_ort * 1e3:>8.3f} {t_ort / t_jax:>8.2f} {len(model.graph.node):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
