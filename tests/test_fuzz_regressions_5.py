"""What the fifth campaign found with the model kinds of this round's rules (1-D convolutions over NWC
sequences, classifiers pooling by a mask or by attention weights).

One crash was the layout rule's (its trial copy of a graph whose If branch read a value made after the If);
the other difference is a sum's order near the largest float, known for every product. Each is a small
program compared with jax.jit here, with the fuzzer's known row where it has one.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import jaxconv  # noqa: E402
from conformance.fuzz import known  # noqa: E402
from jaxconv.runtimes.onnxrt import OnnxRunner  # noqa: E402

_RNG = np.random.default_rng(20261206)


def _onnx(fn, *args):
    model = jaxconv.to_onnx(fn, *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args], check=False)
    return OnnxRunner(model.SerializeToString()).run(list(args))


def _jit(fn, *args):
    out = jax.jit(fn)(*args)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


_G = _RNG.standard_normal(16).astype(np.float32)
_W = (_RNG.standard_normal((16, 16)) / 4).astype(np.float32)


def test_a_layer_norm_guard_before_a_head_split_converts():
    """Found as norm_var+dense_v+..+attend/f32/crash: the layout rule copies the graph to try a move, and the
    copy failed on the layer norm's If, whose branch read a value placed after the If in the node list. The
    rule now sorts the graph before copying it."""
    def fn(x, q):
        h = (x - jnp.mean(x, -1, keepdims=True)) * lax.rsqrt(jnp.var(x, -1, keepdims=True) + 1e-5) * _G
        v = (h @ _W).reshape(3, 1, 2, 8).transpose(0, 2, 1, 3)
        return (q @ v).transpose(0, 2, 1, 3).reshape(3, 1, 16)

    x = _RNG.standard_normal((3, 1, 16)).astype(np.float32)
    q = _RNG.standard_normal((3, 2, 1, 1)).astype(np.float32)
    (got,) = _onnx(fn, x, q)
    np.testing.assert_allclose(got, _jit(fn, x, q)[0], rtol=1e-5, atol=1e-5)


_F = _RNG.standard_normal((1, 4, 16)).astype(np.float32)
_H = _RNG.standard_normal((1, 4, 16)).astype(np.float32)


def _gated(v):
    dn = ("NWC", "WIO", "NWC")
    return jnp.tanh(lax.conv_general_dilated(v, _F, (1,), "VALID", dimension_numbers=dn)) * \
        jax.nn.sigmoid(lax.conv_general_dilated(v, _H, (1,), "VALID", dimension_numbers=dn))


def test_a_gated_conv_over_huge_values_overflows_in_its_own_order():
    """Found as gated_conv_nwc/f32/nan (silent, before this round's rules too): channels of 2.5e38 and 2.6e38
    times weights of either sign sum to inf - inf (NaN) in one order and to a finite value in another. Known
    (SUM_ORDER, a huge input): ordinary inputs keep jax.jit's numbers."""
    ordinary = _RNG.standard_normal((2, 9, 4)).astype(np.float32)
    np.testing.assert_allclose(_onnx(_gated, ordinary)[0], _jit(_gated, ordinary)[0], rtol=1e-5, atol=1e-6)
    huge = np.full((1, 1, 4), 1.0, np.float32)
    huge[0, 0, 1:3] = [2.5096005e38, 2.6127981e38]
    # which side overflows depends on the order of the GEMM kernel's sums (this machine's: the artifact's)
    assert np.isnan(_onnx(_gated, huge)[0]).any() != np.isnan(_jit(_gated, huge)[0]).any()
    assert known.match("gated_conv_nwc/f32/nan", known.facts([huge])) is not None
    assert known.match("conv_nwc+gelu_exact/f32/inf", known.facts([huge])) is not None
    assert known.match("gated_conv_nwc/f32/nan", known.facts([ordinary])) is None
