"""Complex numbers and FFTs in the ONNX lowering: (re, im) pairs on a trailing axis, compared with jax.jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest

from cli_support import run_cli
from lowering_check import assert_onnx_matches_jax, x64_for

INF, NAN = np.inf, np.nan


def cplx(shape, dtype=np.complex64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)


def edge_pairs(dtype=np.complex64, big=3e38):
    """Every pairing of zeros, infinities, NaN and ordinary values as (re, im)."""
    vals = np.array([0.0, -0.0, 1.5, -2.0, INF, -INF, NAN, big])
    re, im = np.meshgrid(vals, vals, indexing="ij")
    out = np.empty(re.shape, dtype)
    out.real, out.imag = re, im
    return out


UNARY = {
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "tanh": jnp.tanh,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "expm1": jnp.expm1,
    "log1p": jnp.log1p,
    "neg": jnp.negative,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_match_jax(name):
    x = cplx((4, 5)) * 1.5
    assert_onnx_matches_jax(UNARY[name], x)


@pytest.mark.parametrize(
    "name", ["exp", "log", "sqrt", "rsqrt", "tanh", "tan", "sin", "abs", "sign", "expm1"]
)
def test_unary_edge_values_match_jax(name):
    """Zeros, infinities and NaN in either half come out as XLA gives them (NaN places, inf signs)."""
    with np.errstate(all="ignore"):
        assert_onnx_matches_jax(UNARY[name], edge_pairs())


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow"])
def test_binary_ops_match_jax_in_both_precisions(op):
    fn = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide, "pow": jnp.power}[op]
    for dtype in (np.complex64, np.complex128):
        a, b = cplx((3, 4), dtype, 1), cplx((3, 4), dtype, 2)
        with x64_for(a):
            assert_onnx_matches_jax(fn, a, b)


def test_division_uses_xlas_edge_cases():
    """Smith's algorithm plus XLA's fixes for a zero denominator and infinite parts, every pairing
    (the large value is 1e30: with 3e38 the ratio 1.5 / 3e38 is subnormal, which XLA flushes to zero)."""
    e = edge_pairs(big=1e30).reshape(-1)
    a, b = np.repeat(e, e.size), np.tile(e, e.size)
    with np.errstate(all="ignore"):
        assert_onnx_matches_jax(jnp.divide, a, b)


def test_division_does_not_overflow_where_the_quotient_is_finite():
    a = np.array([3e38 + 3e38j, 1e-30 + 2e-30j], np.complex64)
    b = np.array([2e38 + 1e38j, 1e-30 - 1e-30j], np.complex64)
    assert_onnx_matches_jax(jnp.divide, a, b)


def test_complex_real_imag_convert_and_compare():
    x, y = cplx((2, 3)).real.copy(), cplx((2, 3), seed=5).real.copy()
    assert_onnx_matches_jax(lambda a, b: jax.lax.complex(a, b) * 2j, x, y)
    z = cplx((2, 3))
    assert_onnx_matches_jax(lambda a: (a.real, a.imag, jnp.conj(a), a.astype(jnp.float32)), z)
    w = z.copy()
    w[0, 1] = NAN
    assert_onnx_matches_jax(lambda a, b: ((a == b).astype(jnp.int32), (a != b).astype(jnp.int32)), z, w)
    with x64_for(np.complex128(0)):
        assert_onnx_matches_jax(lambda a: a.astype(jnp.complex128) + 1, z)
    assert_onnx_matches_jax(lambda a: a.astype(jnp.complex64), np.array([INF, -INF, NAN, 1.0], np.float32))


def test_matmul_sums_and_data_movement():
    a, b = cplx((3, 4)), cplx((4, 5), seed=3)
    assert_onnx_matches_jax(lambda x, y: x @ y, a, b)
    assert_onnx_matches_jax(lambda x, y: x @ y, a.real.copy(), b)
    assert_onnx_matches_jax(lambda x: (jnp.sum(x, axis=1), jnp.cumsum(x, axis=0), x.T.reshape(2, 6)), a)
    assert_onnx_matches_jax(
        lambda x: (
            x[jnp.array([2, 0]), 1:3],
            x.at[jnp.array([1, 2])].add(x[0]),
            jnp.pad(x, 1, constant_values=1 + 2j),
            jnp.flip(x, 1),
            jnp.concatenate([x, x]),
            jnp.where(x.real > 0, x, 0),
        ),
        a,
    )
    i = np.int32(1)
    assert_onnx_matches_jax(
        lambda x, k: (
            jax.lax.dynamic_slice(x, (k, k), (2, 2)),
            jax.lax.dynamic_update_slice(x, x[:1, :2], (k, k)),
        ),
        a,
        i,
    )
    assert_onnx_matches_jax(lambda x: jax.lax.fori_loop(0, 3, lambda _, v: v * x + 1j, x), a)


FFTS = {
    "fft": jnp.fft.fft,
    "ifft": jnp.fft.ifft,
    "fft2": jnp.fft.fft2,
    "ifftn": lambda x: jnp.fft.ifftn(x, axes=(0, 1, 2)),
    "rfft": jnp.fft.rfft,
    "rfft2": jnp.fft.rfft2,
    "rfftn": lambda x: jnp.fft.rfftn(x, axes=(0, 1, 2)),
    "irfft": jnp.fft.irfft,
    "irfft2": lambda x: jnp.fft.irfft2(x, s=(3, 7)),
    "irfftn": lambda x: jnp.fft.irfftn(x, s=(2, 3, 6), axes=(0, 1, 2)),
}


@pytest.mark.parametrize("method", ["matmul", "dft"])
@pytest.mark.parametrize("name", sorted(FFTS))
def test_fft_kinds_and_ranks_match_jax(name, method, monkeypatch):
    from jaxconv.onnx.ops import fft

    monkeypatch.setattr(fft, "METHOD_OVERRIDE", method)
    x = cplx((2, 3, 7), seed=4)
    if name.startswith("rfft"):
        x = x.real.copy()
    if name.startswith("irfft"):
        x = cplx((2, 3, 4), seed=4)
    assert_onnx_matches_jax(FFTS[name], x)


@pytest.mark.parametrize("opset", [18, 21])
def test_dft_op_at_both_opset_forms(opset, monkeypatch):
    """DFT takes its axis as an attribute before opset 20 and as an input from 20."""
    from jaxconv.onnx.ops import fft

    monkeypatch.setattr(fft, "METHOD_OVERRIDE", "dft")
    model = assert_onnx_matches_jax(jnp.fft.fft2, cplx((3, 8)), opset=opset)
    assert any(n.op_type == "DFT" for n in model.graph.node)


def test_short_axes_use_a_matrix_and_long_ones_the_dft_op():
    short = assert_onnx_matches_jax(
        jnp.fft.rfft, np.random.default_rng(0).normal(size=(2, 64)).astype(np.float32)
    )
    long_ = assert_onnx_matches_jax(
        jnp.fft.rfft, np.random.default_rng(0).normal(size=(2, 2048)).astype(np.float32), rtol=1e-4, atol=1e-3
    )
    assert "DFT" not in [n.op_type for n in short.graph.node] and "MatMul" in [
        n.op_type for n in short.graph.node
    ]
    assert "DFT" in [n.op_type for n in long_.graph.node]


def test_irfft_ignores_the_imaginary_parts_xla_ignores():
    x = cplx((2, 5))  # n = 8: X_0 and X_4 have imaginary parts the c2r transform drops
    assert_onnx_matches_jax(lambda v: jnp.fft.irfft(v, n=8), x)


def test_complex_io_layout_and_metadata():
    from jaxconv.api import to_onnx
    from jaxconv.onnx.complex_layout import complex_io, from_pairs, to_pairs

    model = to_onnx(
        lambda x, y: (jnp.fft.fft(x), jnp.abs(x) + y),
        jax.ShapeDtypeStruct((3, 4), jnp.complex64),
        jax.ShapeDtypeStruct((3, 4), jnp.float32),
        check=False,
    )
    ins, outs = complex_io(model)
    graph_inputs = {i.name: i for i in model.graph.input}
    assert list(ins.values()) == ["complex64"] and len(outs) == 1 and list(outs.values()) == ["complex64"]
    x = graph_inputs[next(iter(ins))]
    assert x.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in x.type.tensor_type.shape.dim] == [3, 4, 2]
    assert not complex_io(to_onnx(jnp.sin, jax.ShapeDtypeStruct((2,), jnp.float32), check=False))[0]
    z = cplx((2, 2))
    assert np.array_equal(from_pairs(to_pairs(z), "complex64"), z)


def test_complex_edge_inputs_keep_their_parts():
    """The check's complex edge values hold the (re, im) parts they name: an infinite imaginary part
    does not turn the real part into NaN (as re + 1j * im would)."""
    from jaxconv.check_inputs import edge_values

    values = edge_values("complex64")
    real = edge_values("float32")
    np.testing.assert_array_equal(values.real, real)
    np.testing.assert_array_equal(values.imag, np.roll(real, 3))


def test_cli_to_onnx_checks_complex_inputs_and_outputs(user_file, tmp_path, capsys):
    path = user_file("""
        import jax.numpy as jnp

        def f(x):
            return jnp.fft.fft(x) * 2
    """)
    out = tmp_path / "f.onnx"
    code, stdout, err = run_cli(["to-onnx", path, "--fn", "f", "--specs", "c64[4,8]", "-o", str(out)], capsys)
    assert code == 0, err
    assert "complex64" in stdout and "MISMATCH" not in stdout
    from jaxconv.runtimes.onnxrt import OnnxRunner

    x = cplx((4, 8), seed=9)
    got = OnnxRunner(str(out)).run([x])[0]
    assert got.dtype == np.complex64
    np.testing.assert_allclose(
        got, np.asarray(jax.jit(lambda v: jnp.fft.fft(v) * 2)(x)), rtol=1e-5, atol=1e-5
    )


def test_unsupported_complex_ops_are_named_before_lowering():
    from jaxconv.api import to_onnx
    from jaxconv.errors import UnsupportedError

    spec = jax.ShapeDtypeStruct((3, 3), jnp.complex64)
    with pytest.raises(
        UnsupportedError,
        match=r"@lapack_cheevd_ffi x1 \(complex Hermitian eigendecomposition .*: complex LAPACK "
        r"routines are not lowered beyond getrf, potrf, trsm\)",
    ):
        to_onnx(lambda a: jnp.linalg.eigh(a)[0] + jax.scipy.linalg.solve_triangular(a, a)[0], spec, check=False)


def test_reader_decodes_complex_constants():
    from jaxconv.stablehlo.reader import read_module

    text = """
    func.func @main() -> tensor<2xcomplex<f32>> {
      %0 = stablehlo.constant dense<[(1.5,-2.0), (0x7F800000,3.0)]> : tensor<2xcomplex<f32>>
      return %0 : tensor<2xcomplex<f32>>
    }"""
    module = read_module(text)
    value = module.functions["main"].body.ops[0].attrs["value"]
    assert value.dtype == np.complex64
    assert value[0] == 1.5 - 2j and np.isinf(value[1].real) and value[1].imag == 3.0


NEGATE_FILE = """
module @jit_main {
  func.func public @main() -> tensor<2xcomplex<f32>> {
    %0 = call @inputs() : () -> tensor<2xcomplex<f32>>
    %1 = call @expected() : () -> tensor<2xcomplex<f32>>
    %2 = stablehlo.negate %0 : tensor<2xcomplex<f32>>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true}
      : (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) -> ()
    return %2 : tensor<2xcomplex<f32>>
  }
  func.func private @inputs() -> tensor<2xcomplex<f32>> {
    %cst = stablehlo.constant dense<[(1.0,2.0), (-3.0,0.5)]> : tensor<2xcomplex<f32>>
    return %cst : tensor<2xcomplex<f32>>
  }
  func.func private @expected() -> tensor<2xcomplex<f32>> {
    %cst = stablehlo.constant dense<[(-1.0,-2.0), (3.0,EXPECTED)]> : tensor<2xcomplex<f32>>
    return %cst : tensor<2xcomplex<f32>>
  }
}
"""


@pytest.mark.parametrize("expected, status", [("-0.5", "pass"), ("7.0", "fail")])
def test_testdata_complex_files_pass_or_fail_on_their_numbers(tmp_path, expected, status):
    """A complex test-data file is compared like any other: a wrong result is a failure, not 'unsupported'."""
    from conformance import testdata

    path = tmp_path / "neg_complex64_2.mlir"
    path.write_text(NEGATE_FILE.replace("EXPECTED", expected))
    result = testdata.run_file(str(path), str(tmp_path))
    assert result.status == status, result.error


def test_inspect_shows_the_complex_layout(tmp_path):
    from jaxconv.api import to_onnx
    from jaxconv.inspection import inspect_artifact

    path = str(tmp_path / "f.onnx")
    to_onnx(jnp.fft.fft, jax.ShapeDtypeStruct((4, 8), jnp.complex64), path=path, check=False)
    text = inspect_artifact(path)
    assert "complex64 [4,8]" in text and "as float32[4,8,2] (re, im)" in text


def test_reductions_with_general_bodies():
    """Products, lexicographic max/min and their cumulative forms: the body on whole (re, im) tensors."""
    x = cplx((5, 6), seed=11)
    x[1, 2] = x[3, 2].real + 1j * (x[3, 2].imag - 1)  # equal real parts: the imaginary parts decide
    assert_onnx_matches_jax(
        lambda v: (jnp.prod(v, axis=0), jnp.prod(v, axis=1), jnp.max(v, axis=0), jnp.min(v, axis=1)), x
    )
    assert_onnx_matches_jax(
        lambda v: (
            jnp.cumprod(v, axis=0),
            jax.lax.cummax(v, axis=1),
            jax.lax.cummin(v, axis=0, reverse=True),
        ),
        x,
    )
    assert_onnx_matches_jax(lambda v: jnp.argmax(jnp.abs(v), axis=1), x)


def test_bitcast_of_complex_to_its_own_type():
    x = cplx((2, 3))
    assert_onnx_matches_jax(lambda v: jax.lax.bitcast_convert_type(v, jnp.complex64) * 1j, x)


def test_sort_uses_jaxs_lexicographic_complex_order():
    re = np.array([1.0, -0.0, NAN, 1.0, 0.0, -INF, 1.0, 2.0], np.float32)
    im = np.array([2.0, 1.0, 0.0, -1.0, -3.0, 5.0, NAN, -0.0], np.float32)
    x = np.empty(8, np.complex64)
    x.real, x.imag = re, im
    assert_onnx_matches_jax(lambda v: (jnp.sort(v), jnp.argsort(v), jnp.sort(v, descending=True)), x)
    assert_onnx_matches_jax(lambda v: jnp.sort(v, axis=0), cplx((5, 3), seed=2))


def test_multiplication_fuses_like_xla():
    """XLA's CPU complex product has an FMA in each half: exact cancellation leaves the rounding
    residual, and a product that overflows alone need not make the half NaN."""
    e = edge_pairs(big=1e30).reshape(-1)
    with np.errstate(all="ignore"):
        assert_onnx_matches_jax(jnp.multiply, np.repeat(e, e.size), np.tile(e, e.size))
    a = np.array([1.5 + 1.5j, 3e20 + 3e20j, 0.1 + 0.3j], np.complex64)
    b = np.array([1e30 + 1e30j, 3e20 + 3e20j, 0.7 - 0.2j], np.complex64)
    assert_onnx_matches_jax(jnp.multiply, a, b, rtol=0, atol=0)


def test_default_check_passes_complex_means_and_matrix_products():
    """Edge inputs: a mean divides by a constant (XLA multiplies by its reciprocal); a complex matrix
    product overflows in XLA's own order (such elements are undecided, not mismatches)."""
    from jaxconv.api import to_onnx

    report: list = []
    to_onnx(lambda x: jnp.mean(x, axis=0), "c64[6,3]", report_to=report)
    to_onnx(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), "c64[2,3,4]", "c64[2,4,5]", report_to=report)
    assert all(r.ok for rep in report for r in rep.rows)


def test_symbolic_batch_through_complex_ops_and_ffts():
    from jaxconv.api import to_onnx

    report: list = []
    to_onnx(jnp.fft.fft, "c64[b,8]", report_to=report)
    to_onnx(lambda x: jnp.fft.irfft(x, n=16), "c64[b,9]", report_to=report)
    to_onnx(lambda x, y: x * y / (y + 1), "c64[b]", "c64[b]", report_to=report)
    assert all(r.ok for rep in report for r in rep.rows)
    assert all(r.verdict != "mismatch" for rep in report for r in rep.rows if r.inputs != "edge")


def test_complex128_multiplication_keeps_the_fma_residual():
    a = np.array([1.5 + 1.5j, 0.1 + 0.3j, 1 / 3 + 1j / 7, np.inf + 1j], np.complex128)
    b = np.array([1e30 + 1e30j, 0.7 - 0.2j, 3 + 7j, 2 + 0j], np.complex128)
    with x64_for(a), np.errstate(all="ignore"):  # (the residual -1.4e14 is 100% of the real part there)
        assert_onnx_matches_jax(jnp.multiply, a, b)


SOLVE = """
module @solve {
  func.func public @main(%a: tensor<3x3xcomplex<f32>>, %b: tensor<B>) -> tensor<B> {
    %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = LEFT, lower = LOWER,
      transpose_a = #stablehlo<transpose MODE>, unit_diagonal = UNIT} : (tensor<3x3xcomplex<f32>>, tensor<B>) -> tensor<B>
    return %0 : tensor<B>
  }
}
"""


@pytest.mark.parametrize("left, lower, mode, unit", [("true", "true", "NO_TRANSPOSE", "false"),
                                                     ("true", "false", "ADJOINT", "false"),
                                                     ("false", "true", "TRANSPOSE", "true"),
                                                     ("false", "false", "ADJOINT", "false")])
def test_complex_triangular_solve_matches_xla(tmp_path, left, lower, mode, unit):
    from conformance.xla_reference import run_with_xla
    from jaxconv.onnx.convert import stablehlo_file_to_onnx
    from jaxconv.runtimes.onnxrt import OnnxRunner

    b_type = "3x2xcomplex<f32>" if left == "true" else "2x3xcomplex<f32>"
    text = (SOLVE.replace("tensor<B>", f"tensor<{b_type}>").replace("LEFT", left).replace("LOWER", lower)
            .replace("MODE", mode).replace("UNIT", unit))
    a = cplx((3, 3), seed=7) + 4 * np.eye(3, dtype=np.complex64)
    b = cplx((3, 2) if left == "true" else (2, 3), seed=8)
    path = tmp_path / "solve.mlir"
    path.write_text(text)
    got = OnnxRunner(stablehlo_file_to_onnx(str(path)).SerializeToString()).run([a, b])[0]
    np.testing.assert_allclose(got, run_with_xla(text, [a, b], 3)[0], rtol=1e-5, atol=1e-5)


def test_xla_reference_specializes_complex_arguments():
    from conformance.xla_reference import specialize

    text = "func.func public @main(%x: tensor<?x4xcomplex<f32>>) -> tensor<?x4xcomplex<f32>> {\n  return %x\n}"
    special, kept = specialize(text, 3)
    assert "%x_static: tensor<3x4xcomplex<f32>>" in special and "dense<[3, 4]>" in special and kept == [0]


def test_two_loops_reading_one_outer_complex_value():
    """Halves split inside one loop body are not reused by another loop's body."""
    x = cplx((3,), seed=12)

    def f(v):
        a = jax.lax.fori_loop(0, 3, lambda _, c: c * v, v)
        b = jax.lax.fori_loop(0, 2, lambda _, c: c + v.real, v)
        return a + b * v

    assert_onnx_matches_jax(f, x)


COMPARE = """
module @cmp {
  func.func public @main(%a: tensor<Nxcomplex<f32>>, %b: tensor<Nxcomplex<f32>>) -> tensor<Nxi1> {
    %0 = stablehlo.compare DIR, %a, %b TYPE: (tensor<Nxcomplex<f32>>, tensor<Nxcomplex<f32>>) -> tensor<Nxi1>
    return %0 : tensor<Nxi1>
  }
}
"""


@pytest.mark.parametrize("direction", ["LT", "LE", "GT", "GE", "EQ", "NE"])
def test_ordered_complex_compares_match_xla(tmp_path, direction):
    """XLA's CPU order: LT and GT lexicographic (real part, then imaginary part), LE and GE on the real
    parts alone; NaN unordered."""
    from conformance.xla_reference import run_with_xla
    from jaxconv.onnx.convert import stablehlo_file_to_onnx
    from jaxconv.runtimes.onnxrt import OnnxRunner

    text = (COMPARE.replace("DIR", direction).replace("TYPE", ", FLOAT " if direction == "GE" else "")
            .replace("tensor<N", "tensor<4096"))
    e = edge_pairs().reshape(-1)  # 64 values: every pairing of 8 edge values as (re, im)
    a, b = np.repeat(e, 64), np.tile(e, 64)  # every pairing of those
    path = tmp_path / "cmp.mlir"
    path.write_text(text)
    got = OnnxRunner(stablehlo_file_to_onnx(str(path)).SerializeToString()).run([a, b])[0]
    np.testing.assert_array_equal(got, run_with_xla(text, [a, b], 3)[0])


def test_complex_total_order_compare_and_remainder_are_refused_by_name(tmp_path):
    """XLA's verifier rejects TOTALORDER on complex values, and it has no complex remainder (lax.rem
    refuses complex operands); both are named before anything is written."""
    from jaxconv.errors import UnsupportedError
    from jaxconv.onnx.convert import stablehlo_file_to_onnx

    path = tmp_path / "cmp.mlir"
    path.write_text(COMPARE.replace("DIR", "LT").replace("TYPE", ", TOTALORDER ").replace("<N", "<64"))
    with pytest.raises(UnsupportedError, match=r"compare x1 \(complex comparison LT with TOTALORDER: XLA"):
        stablehlo_file_to_onnx(str(path))
    path.write_text(COMPARE.replace("stablehlo.compare DIR, %a, %b TYPE", "stablehlo.remainder %a, %b")
                    .replace("(tensor<Nxcomplex<f32>>, tensor<Nxcomplex<f32>>) -> tensor<Nxi1>",
                             "tensor<Nxcomplex<f32>>").replace("tensor<Nxi1>", "tensor<Nxcomplex<f32>>")
                    .replace("tensor<N", "tensor<64"))
    with pytest.raises(UnsupportedError, match=r"remainder x1 \(no ONNX lowering for this op on complex"):
        stablehlo_file_to_onnx(str(path))
