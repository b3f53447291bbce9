"""convert lowerings: graph structure below opset 26, NaN patterns, refusals (the comparisons are rows in
conformance/cases/op_convert.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from conformance.cases.op_convert import floats, patterns, precision_inputs
from conformance.values import BF16, F16, F32, Spec
from elementwise_support import check


@pytest.mark.parametrize("opset", [18, 21])
def test_bitcast_floats_without_bitcast_op(opset):
    u32, i32 = patterns(np.dtype(np.uint32)), patterns(np.dtype(np.int32))
    u16, i16 = patterns(np.dtype(np.uint16)), patterns(np.dtype(np.int16))
    model = check(lambda a, b, c, d, e, f, g, h: (
        lax.bitcast_convert_type(a, jnp.float32), lax.bitcast_convert_type(b, jnp.float32),
        lax.bitcast_convert_type(c, jnp.uint32), lax.bitcast_convert_type(c, jnp.int32),
        lax.bitcast_convert_type(d, jnp.bfloat16), lax.bitcast_convert_type(d, jnp.float16),
        lax.bitcast_convert_type(e, jnp.uint16), lax.bitcast_convert_type(f, jnp.int16),
        lax.bitcast_convert_type(g, jnp.bfloat16), lax.bitcast_convert_type(h, jnp.float16)),
        u32, i32, floats(F32), u16, floats(BF16), floats(F16), i16, patterns(np.dtype(np.int16)), opset=opset)
    assert "BitCast" not in {n.op_type for n in model.graph.node}


def test_bitcast_nan_patterns_without_bitcast_op():
    """NaN bit patterns (any sign or payload) give NaN; NaN floats give the bits of jnp.nan."""
    u32, u16 = patterns(np.dtype(np.uint32), nan=True), patterns(np.dtype(np.uint16), nan=True)
    assert u32.size > 0 and u16.size > 0
    check(lambda a, b: (lax.bitcast_convert_type(a, jnp.float32), lax.bitcast_convert_type(b, jnp.float16),
                        lax.bitcast_convert_type(b, jnp.bfloat16)), u32.view(np.uint32), u16.view(np.uint16))
    from jaxconv.onnx.convert import program_to_onnx
    from jaxconv.program import trace
    from jaxconv.runtimes.onnxrt import OnnxRunner

    fn = lambda x: lax.bitcast_convert_type(x, jnp.uint32)  # noqa: E731
    nans = u32.view(np.float32)
    model = program_to_onnx(trace(fn, [Spec(nans.shape, nans.dtype)]), 21)
    (got,) = OnnxRunner(model.SerializeToString()).run([nans])
    canonical = np.asarray(jax.jit(fn)(np.array([np.nan], np.float32)))
    assert np.all(got == canonical), "a NaN float gives the canonical quiet NaN bits below opset 26"


def test_reduce_precision_needs_opset_26():
    from jaxconv.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match=r"reduce_precision .*exponent 5, mantissa 10.*opset >= 26"):
        check(lambda x: lax.reduce_precision(x, 5, 10), precision_inputs(), opset=21)


def test_float64_to_float16_rounds_through_float32(tmp_path):
    """ONNX Runtime's Cast rounds float64 to float32, then to float16, as XLA does on most CPUs; XLA on a CPU
    with AVX512-FP16 rounds once, so a value just past a float16 halfway point lands one float16 step apart
    (about 1 in 20,000 normal samples). The artifact keeps one answer on every machine, and the check takes
    the step as within float16's tolerance."""
    import jaxconv
    from lowering_check import convert_and_run, x64_for

    x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40, -(1 + 2**-11 + 2**-45), 2.5 * 2**-24 + 2**-60], np.float64)
    through_f32 = x.astype(np.float32).astype(np.float16)
    once = x.astype(np.float16)  # numpy rounds float64 to float16 directly
    assert (through_f32 != once).sum() == 3

    def fn(v):
        return v.astype(jnp.float16)

    with x64_for(x):
        _, got = convert_and_run(fn, x)
        jit = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(got[0].view(np.uint16), through_f32.view(np.uint16))
    assert np.array_equal(jit, through_f32) or np.array_equal(jit, once)
    path = str(tmp_path / "cast.onnx")
    jaxconv.to_onnx(fn, "f64[4]", path=path, check=False)
    assert jaxconv.check(path, fn, "f64[4]", inputs=[x]).ok
