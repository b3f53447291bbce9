"""Single kernels, jaxconv's ONNX in ONNX Runtime against jax.jit, one thread each: which ones ORT runs slowly.

    .venv/bin/python scripts/bench_kernels.py [--only conv,pool] [--rounds 7] [--target-ms 15] [--ops]

Each case is one small jax function at a shape typical of deployed models (convolutions as jax writes
them, NHWC; pooling; reductions; norms; gathers; transposes; elementwise chains; activations and the
functions under them (expm1, log1p, clamps); cumsum; top_k; resize;
batched products). It is converted with ``jaxconv.to_onnx`` (no check) and run in ORT with one intra-op
thread and no spinning, beside ``jax.jit`` with XLA on one thread (the flags are set here, before jax is
imported). Both are timed in one process, alternating, as process CPU time over enough calls to take
about ``--target-ms``; the table gives each one's median per call and ``ORT/XLA``, the ratio of the
medians (above 1: ORT is slower). ``--ops`` adds the ONNX graph's op types. The load average is printed
with the table: compare rows of one run.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "converter"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

Case = tuple[Callable[..., Any], list[np.ndarray]]


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv(n: int, hw: int, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, dilation: int = 1,
          bias_relu: bool = False) -> Case:
    w = _rand(k, k, cin // groups, cout, seed=1) * 0.1
    b = _rand(cout, seed=2)

    def f(x):
        y = jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", rhs_dilation=(dilation, dilation),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)
        return jax.nn.relu(y + b) if bias_relu else y
    return f, [_rand(n, hw, hw, cin)]


def _pool(kind: str, n: int, hw: int, c: int, window: int, stride: int) -> Case:
    def f(x):
        dims, strides = (1, window, window, 1), (1, stride, stride, 1)
        if kind == "max":
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, strides, "SAME")
        return jax.lax.reduce_window(x, 0.0, jax.lax.add, dims, strides, "VALID") / (window * window)
    return f, [_rand(n, hw, hw, c)]


def _batch_norm(n: int, hw: int, c: int) -> Case:
    mean, var, g, b = _rand(c, seed=1), np.abs(_rand(c, seed=2)) + 0.5, _rand(c, seed=3), _rand(c, seed=4)
    return (lambda x: (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b), [_rand(n, hw, hw, c)]


def _group_norm(n: int, hw: int, c: int, groups: int) -> Case:
    g, b = _rand(c, seed=3), _rand(c, seed=4)

    def f(x):
        y = x.reshape(n, hw, hw, groups, c // groups)
        mean = y.mean(axis=(1, 2, 4), keepdims=True)
        var = ((y - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
        return ((y - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(x.shape) * g + b
    return f, [_rand(n, hw, hw, c)]


def _rms_norm(b: int, t: int, d: int) -> Case:
    w = _rand(d, seed=3)
    return (lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w), [_rand(b, t, d)]


def _layer_norm(b: int, t: int, d: int) -> Case:
    """Flax's LayerNorm: E[x^2] - E[x]^2 for the variance, scale and bias."""
    g, beta = _rand(d, seed=3), _rand(d, seed=4)

    def fn(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.maximum(jnp.mean(x * x, axis=-1, keepdims=True) - mean * mean, 0.0)
        return (x - mean) * jax.lax.rsqrt(var + 1e-6) * g + beta
    return fn, [_rand(b, t, d)]


def _gather(b: int, t: int, vocab: int, d: int) -> Case:
    table = _rand(vocab, d, seed=1)
    ids = np.random.default_rng(2).integers(0, vocab, (b, t)).astype(np.int32)
    return (lambda i: jnp.take(table, i, axis=0)), [ids]


def _one_hot(b: int, t: int, depth: int) -> Case:
    ids = np.random.default_rng(2).integers(0, depth, (b, t)).astype(np.int32)
    return (lambda i: jax.nn.one_hot(i, depth)), [ids]


def _upsample(kind: str, n: int, hw: int, c: int) -> Case:
    if kind == "repeat":
        return (lambda x: jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)), [_rand(n, hw, hw, c)]
    return (lambda x: jax.image.resize(x, (n, 2 * hw, 2 * hw, c), kind)), [_rand(n, hw, hw, c)]


def cases() -> dict[str, Callable[[], Case]]:
    """Name -> a function building (jax function, inputs); names start with their group."""
    c: dict[str, Callable[[], Case]] = {}
    for n, hw, ci, co in [(1, 56, 64, 256), (8, 28, 128, 128), (16, 14, 256, 512)]:
        c[f"conv1x1 b{n} {hw}x{hw} {ci}->{co}"] = lambda n=n, hw=hw, ci=ci, co=co: _conv(n, hw, ci, co, 1)
    for n, hw, ci, co in [(1, 56, 64, 64), (8, 32, 64, 64), (4, 14, 256, 256), (8, 32, 3, 32)]:
        c[f"conv3x3 b{n} {hw}x{hw} {ci}->{co}"] = lambda n=n, hw=hw, ci=ci, co=co: _conv(n, hw, ci, co, 3)
    c["conv3x3+bias+relu b8 32x32 64->64"] = lambda: _conv(8, 32, 64, 64, 3, bias_relu=True)
    c["conv7x7s2 b1 224x224 3->64"] = lambda: _conv(1, 224, 3, 64, 7, stride=2)
    c["conv3x3s2 b8 56x56 64->128"] = lambda: _conv(8, 56, 64, 128, 3, stride=2)
    for n, hw, ch in [(1, 112, 32), (8, 56, 128), (16, 14, 512)]:
        c[f"depthwise3x3 b{n} {hw}x{hw} {ch}"] = lambda n=n, hw=hw, ch=ch: _conv(n, hw, ch, ch, 3, groups=ch)
    c["grouped3x3 g32 b4 56x56 128->128"] = lambda: _conv(4, 56, 128, 128, 3, groups=32)
    c["dilated3x3 d2 b4 56x56 64->64"] = lambda: _conv(4, 56, 64, 64, 3, dilation=2)
    c["pool max3x3s2 b8 112x112 64"] = lambda: _pool("max", 8, 112, 64, 3, 2)
    c["pool max2x2s2 b8 32x32 128"] = lambda: _pool("max", 8, 32, 128, 2, 2)
    c["pool avg2x2s2 b8 56x56 64"] = lambda: _pool("avg", 8, 56, 64, 2, 2)
    c["pool global-mean b16 7x7 512"] = lambda: ((lambda x: x.mean(axis=(1, 2))), [_rand(16, 7, 7, 512)])
    c["pool global-mean b8 56x56 64"] = lambda: ((lambda x: x.mean(axis=(1, 2))), [_rand(8, 56, 56, 64)])
    c["reduce mean-last b8 56x56 64"] = lambda: ((lambda x: x.mean(axis=-1)), [_rand(8, 56, 56, 64)])
    c["reduce var-spatial b8 28x28 128"] = lambda: ((lambda x: x.var(axis=(1, 2))), [_rand(8, 28, 28, 128)])
    c["reduce sum-mid b8 512x256"] = lambda: ((lambda x: x.sum(axis=1)), [_rand(8, 512, 256)])
    c["reduce sum-first 4096x512"] = lambda: ((lambda x: x.sum(axis=0)), [_rand(4096, 512)])
    c["reduce max-last b16 128x1024"] = lambda: ((lambda x: x.max(axis=-1)), [_rand(16, 128, 1024)])
    c["norm batch-inf b8 56x56 64"] = lambda: _batch_norm(8, 56, 64)
    c["norm group32 b8 32x32 128"] = lambda: _group_norm(8, 32, 128, 32)
    c["norm rms b8 128x512"] = lambda: _rms_norm(8, 128, 512)
    c["norm rms b16 64x4096"] = lambda: _rms_norm(16, 64, 4096)
    c["norm layer b8 128x512"] = lambda: _layer_norm(8, 128, 512)
    c["norm layer b16 64x4096"] = lambda: _layer_norm(16, 64, 4096)
    c["gather b8 t128 vocab32000 d512"] = lambda: _gather(8, 128, 32000, 512)
    c["gather b16 t512 vocab1000 d64"] = lambda: _gather(16, 512, 1000, 64)
    c["onehot b8 t128 depth1000"] = lambda: _one_hot(8, 128, 1000)
    c["transpose 0213 b8 128x8x64"] = lambda: ((lambda x: x.transpose(0, 2, 1, 3)), [_rand(8, 128, 8, 64)])
    c["transpose nhwc->nchw b8 56x56 64"] = lambda: ((lambda x: x.transpose(0, 3, 1, 2)), [_rand(8, 56, 56, 64)])
    c["transpose 2d 1024x1024"] = lambda: ((lambda x: x.T), [_rand(1024, 1024)])
    c["transpose 021 b16 512x64"] = lambda: ((lambda x: x.transpose(0, 2, 1)), [_rand(16, 512, 64)])
    c["concat last 2x b8 128x256"] = lambda: ((lambda x, y: jnp.concatenate([x, y], -1)), \
        [_rand(8, 128, 256), _rand(8, 128, 256, seed=1)])
    c["concat channels b8 28x28 64+64"] = lambda: ((lambda x, y: jnp.concatenate([x, y], -1)), \
        [_rand(8, 28, 28, 64), _rand(8, 28, 28, 64, seed=1)])
    c["slice mid b8 512x256"] = lambda: ((lambda x: x[:, 1:-1, 64:192]), [_rand(8, 512, 256)])
    c["pad spatial1 b8 56x56 64"] = lambda: ((lambda x: jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))), \
        [_rand(8, 56, 56, 64)])
    s_mid, b_last = _rand(128, 1, seed=1), _rand(256, seed=2)
    c["elementwise x*s[mid]+b b8 128x256"] = lambda: ((lambda x: x * s_mid + b_last), [_rand(8, 128, 256)])
    c["elementwise silu*y b8 128x1024"] = lambda: ((lambda x, y: jax.nn.silu(x) * y), \
        [_rand(8, 128, 1024), _rand(8, 128, 1024, seed=1)])
    c["elementwise gelu-erf b8 128x1024"] = lambda: ((lambda x: jax.nn.gelu(x, approximate=False)), \
        [_rand(8, 128, 1024)])
    c["elementwise x+y[bcast batch] b16 64x512"] = lambda: ((lambda x, y: x + y), \
        [_rand(16, 64, 512), _rand(1, 64, 512, seed=1)])
    activations = {"softplus": jax.nn.softplus, "log_sigmoid": jax.nn.log_sigmoid, "mish": jax.nn.mish,
                   "elu": jax.nn.elu, "selu": jax.nn.selu, "hard_tanh": jax.nn.hard_tanh, "sigmoid": jax.nn.sigmoid,
                   "sparse_plus": jax.nn.sparse_plus, "expm1": jnp.expm1, "log1p": lambda x: jnp.log1p(jnp.abs(x)),
                   "clip(x,0,1)": lambda x: jnp.clip(x, 0, 1), "minimum(x,0)": lambda x: jnp.minimum(x, 0.0),
                   "huber": lambda x: jnp.where(jnp.abs(x) < 1, 0.5 * x * x, jnp.abs(x) - 0.5),
                   "piecewise": lambda x: jnp.where(x > 0, jnp.sqrt(jnp.abs(x)), x * x)}
    for a, f in activations.items():  # x ~ N(0, 9): selects on x > 0 or |x| < 1 follow the data
        c[f"activation {a} b8 128x1024"] = lambda f=f: (f, [_rand(8, 128, 1024) * 3])
    c["cumsum b8 512x64 axis1"] = lambda: ((lambda x: jnp.cumsum(x, axis=1)), [_rand(8, 512, 64)])
    c["cumsum b16 4096 last"] = lambda: ((lambda x: jnp.cumsum(x, axis=-1)), [_rand(16, 4096)])
    c["topk k5 b16 1000"] = lambda: ((lambda x: jax.lax.top_k(x, 5)), [_rand(16, 1000)])
    c["topk k10 b8 32000"] = lambda: ((lambda x: jax.lax.top_k(x, 10)), [_rand(8, 32000)])
    c["argmax b8 128x1000"] = lambda: ((lambda x: jnp.argmax(x, -1)), [_rand(8, 128, 1000)])
    c["resize nearest2x b4 56x56 64"] = lambda: _upsample("nearest", 4, 56, 64)
    c["resize bilinear2x b4 56x56 64"] = lambda: _upsample("bilinear", 4, 56, 64)
    c["resize repeat2x b4 56x56 64"] = lambda: _upsample("repeat", 4, 56, 64)
    c["bmm b16 64x64@64x64"] = lambda: ((lambda x, y: x @ y), [_rand(16, 64, 64), _rand(16, 64, 64, seed=1)])
    c["bmm b8 256x64@64x256"] = lambda: ((lambda x, y: x @ y), [_rand(8, 256, 64), _rand(8, 64, 256, seed=1)])
    c["bmm xT@y b8 256x128,256x128"] = lambda: ((lambda x, y: jnp.einsum("bki,bkj->bij", x, y)), \
        [_rand(8, 256, 128), _rand(8, 256, 128, seed=1)])
    w_exp = _rand(4, 256, 256, seed=3)
    c["bmm experts b4 512x256@const"] = lambda: ((lambda x: jnp.einsum("ets,esd->etd", x, w_exp)), \
        [_rand(4, 512, 256)])
    w_v = _rand(512, 512, seed=4)
    c["matvec b16 512@512x512"] = lambda: ((lambda x: x @ w_v), [_rand(16, 512)])
    c["matmul xW b1 t64 512x2048"] = lambda: ((lambda x: x @ _rand(512, 2048, seed=5)), [_rand(64, 512)])
    return c


def _median_per_call(fn: Callable[[], Any], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


def measure(name: str, build: Callable[[], Case], rounds: int, target_ms: float, show_ops: bool) -> dict:
    import onnxruntime as ort

    import jaxconv
    from jaxconv.runtimes.onnxrt import session_options

    fn, args = build()
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], check=False)
    sess = ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), args)}
    jitted = jax.jit(fn)
    dev_args = [jax.device_put(a) for a in args]

    def run_ort():
        return sess.run(None, feeds)

    def run_xla():
        return jax.block_until_ready(jitted(*dev_args))

    got, want = run_ort(), jax.tree_util.tree_leaves(run_xla())
    close = all(np.allclose(np.asarray(w), g, rtol=1e-3, atol=1e-3) for w, g in zip(want, got))
    once = max(_median_per_call(run_ort, 3), _median_per_call(run_xla, 3), 1e-6)
    n = max(3, int(target_ms / 1e3 / once))
    ort_t, xla_t = [], []
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            if which == 0:
                ort_t.append(_median_per_call(run_ort, n))
            else:
                xla_t.append(_median_per_call(run_xla, n))
    o, x = statistics.median(ort_t), statistics.median(xla_t)
    ops = collections.Counter(node.op_type for node in model.graph.node)
    return {"name": name, "ort_ms": o * 1e3, "xla_ms": x * 1e3, "ratio": o / x, "close": close,
            "ops": " ".join(f"{k}{'x%d' % v if v > 1 else ''}" for k, v in sorted(ops.items())) if show_ops else ""}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated name prefixes (e.g. conv,pool); default all")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per case (median)")
    parser.add_argument("--target-ms", type=float, default=15.0, help="CPU time of one timed batch of calls")
    parser.add_argument("--ops", action="store_true", help="add the ONNX graph's op types")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args(argv)
    all_cases = cases()
    prefixes = [p for p in args.only.split(",") if p]
    chosen = {k: v for k, v in all_cases.items() if not prefixes or any(k.startswith(p) for p in prefixes)}
    if args.list:
        print("\n".join(chosen))
        return
    print(f"load {os.getloadavg()[0]:.1f}; one thread each; process CPU time, median of {args.rounds}\n")
    head = "| kernel | ORT ms | XLA ms | ORT/XLA |" + (" ONNX ops |" if args.ops else "")
    print(head)
    print("|" + "---|" * head.count(" |"))
    for name, build in chosen.items():
        r = measure(name, build, args.rounds, args.target_ms, args.ops)
        flag = "" if r["close"] else " (differs)"
        print(f"| {name} | {r['ort_ms']:.3f} | {r['xla_ms']:.3f} | {r['ratio']:.2f}{flag} |"
              + (f" {r['ops']} |" if args.ops else ""), flush=True)
    print(f"\nload {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
