"""Typed PRNG key inputs: a ``jax.random.key`` argument, a Flax NNX state holding ``RngKey`` variables.

They failed with ``TypeError: Cannot interpret 'key<fry>' as a data type``. A key input now becomes its
key data (``uint32[*shape, *key_shape]``, what ``jax.random.key_data`` gives); the numbers are compared
with jax.jit on the keys themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxconv
from jaxconv.runtimes.onnxrt import OnnxRunner


def noisy(key, x):
    return x + jax.random.normal(key, x.shape)


def test_a_key_argument_becomes_its_key_data():
    key = jax.random.key(0)
    x_spec = jax.ShapeDtypeStruct((3, 4), jnp.float32)
    model = jaxconv.to_onnx(noisy, jax.ShapeDtypeStruct(key.shape, key.dtype), x_spec)
    first = model.graph.input[0]
    assert first.name == "key" and [d.dim_value for d in first.type.tensor_type.shape.dim] == [2]
    runner = OnnxRunner(model.SerializeToString())
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for seed in (1, 7, 123456):
        k = jax.random.key(seed)
        (got,) = runner.run([np.asarray(jax.random.key_data(k)), x])
        np.testing.assert_allclose(got, np.asarray(jax.jit(noisy)(k, x)), rtol=1e-6, atol=1e-6)


def test_another_implementation_keeps_its_key_shape():
    """An rbg key is 4 words; jax.export takes its data (ONNX refuses rbg's backend-defined generator)."""
    key = jax.random.key(0, impl="rbg")
    exported = jaxconv.to_stablehlo(noisy, jax.ShapeDtypeStruct(key.shape, key.dtype),
                                    jax.ShapeDtypeStruct((3,), jnp.float32))
    assert exported.in_avals[0].shape == (4,) and exported.in_avals[0].dtype == np.uint32


def test_a_batch_of_keys():
    keys = jax.random.split(jax.random.key(0), 5)
    fn = jax.vmap(lambda k: jax.random.uniform(k, (3,)))
    model = jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(keys.shape, keys.dtype))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [5, 2]
    (got,) = OnnxRunner(model.SerializeToString()).run([np.asarray(jax.random.key_data(keys))])
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(keys)))


def test_an_nnx_state_with_rng_keys():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self):
            self.dense = nnx.Linear(5, 4, rngs=nnx.Rngs(0))
            self.drop = nnx.Dropout(0.5, rngs=nnx.Rngs(1))

        def __call__(self, x):
            return self.drop(self.dense(x))

    graph, state = nnx.split(Net())

    def apply(state, x):
        return nnx.merge(graph, state)(x)

    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    model = jaxconv.to_onnx(apply, specs, jax.ShapeDtypeStruct(x.shape, x.dtype))
    names = [i.name for i in model.graph.input]
    assert any("key" in n for n in names)
    leaves = [np.asarray(jax.random.key_data(v)) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
              else np.asarray(v) for v in jax.tree.leaves(state)]
    (got,) = OnnxRunner(model.SerializeToString()).run([*leaves, x])
    want = np.asarray(jax.jit(apply)(state, x))
    assert (want == 0).any() and (want != 0).any()  # the dropout mask is drawn from the key
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_key_outputs_are_their_key_data():
    """``jax.random.split(key)`` returned typed keys, which failed the signature ('Cannot interpret key<fry>')."""
    key = jax.random.key(3)
    model = jaxconv.to_onnx(lambda k: jax.random.split(k, 4), jax.ShapeDtypeStruct(key.shape, key.dtype))
    out = model.graph.output[0]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [4, 2]
    (got,) = OnnxRunner(model.SerializeToString()).run([np.asarray(jax.random.key_data(key))])
    np.testing.assert_array_equal(got, np.asarray(jax.random.key_data(jax.random.split(key, 4))))


def test_an_nnx_state_updated_and_returned():
    from flax import nnx

    rngs = nnx.Rngs(0)
    graph, state = nnx.split(rngs)

    def draw(state, x):
        r = nnx.merge(graph, state)
        y = x + jax.random.normal(r(), x.shape)
        return y, nnx.split(r)[1]

    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
    x = np.zeros(3, np.float32)
    model = jaxconv.to_onnx(draw, specs, jax.ShapeDtypeStruct(x.shape, x.dtype))
    leaves = [np.asarray(jax.random.key_data(v)) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
              else np.asarray(v) for v in jax.tree.leaves(state)]
    got = OnnxRunner(model.SerializeToString()).run([*leaves, x])
    want = jax.tree.leaves(jax.jit(draw)(state, x))
    want = [np.asarray(jax.random.key_data(v)) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key)
            else np.asarray(v) for v in want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
