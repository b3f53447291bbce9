"""Known, named limitations: mismatch classes the fuzzer counts separately, each with its reason.

A class is ``op/dtype/kind`` (``where/f32/signed-zero``), prefixed with the target for
targets other than ONNX (``tflite:add/f16/value``). Patterns use shell wildcards. A row
belongs here only when the difference is not jaxconv's to fix: a documented difference
(README, "Known differences from jax.jit"), a bug in jax itself, or a limit of the runtime.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from conformance.fuzz.program import FuzzProgram


@dataclass(frozen=True)
class Known:
    """A class pattern, the reason, and facts the minimised failure must show (all of them).

    Facts: ``nan-input`` (an input holds a NaN), ``negative-nan-input``, ``inf-input``, ``huge-input`` (a finite input within
    a factor 16 of the dtype's largest value), ``square-overflow-input`` (a finite input within a factor 16 of the square
    root of the largest value: a sum of a row's squares can overflow), ``zero-size`` (some value has no elements), and from the program
    ``tan-in-loop``, ``window-2d``, ``nan-sign-in-body`` (see ``program_facts``) and ``repeated-index`` (a
    scatter's index input); ``litert-zero-size`` (a crash whose message is the converter's diagnosis of
    LiteRT's zero-size limit, added by the driver).
    """

    pattern: str
    reason: str
    needs: frozenset[str] = frozenset()


FTZ = "XLA on CPU flushes subnormal floats to zero, ONNX Runtime keeps them (README: Known differences)"
NAN_BITS = ("without ONNX BitCast (opset < 26) the sign and payload of a NaN cannot be read, and a NaN an op makes "
            "carries its runtime's sign and payload (XLA's float16 log(-1) is 0xFFFF, ONNX Runtime's 0xFE00) "
            "(README: Known differences)")
NAN_SIGN = ("without ONNX BitCast (opset < 26) the sign of a NaN cannot be read: copysign(x, -NaN) gives +|x| "
            "(README: Known differences)")

ULP_BITS = ("XLA's and ONNX Runtime's float functions may differ in the last bit (within float tolerance; XLA on CPU "
            "also contracts a fused a * b + c * d into an FMA); a later "
            "op (bitcast, rem, a cancellation, a cast to integer) magnifies it: jax.jit gives the artifact's result when "
            "that intermediate moves by one ulp")
DOT_ORDER = ("a float32/float64 dot sums its products in another order in XLA (its emitter) and ONNX Runtime "
             "(MLAS), each within the float rounding of the float64 dot; where the products cancel (or a cancellation "
             "after the dot) that rounding exceeds the tolerance: jax.jit gives the artifact's result when given the "
             "artifact's value of that dot")
XLA_SELECT = ("XLA rewrites x * convert(pred) as select(pred, x, 0), so 0 x negative gives +0 where IEEE (and ONNX) "
              "gives -0")
NAN_ORDER = "without ONNX BitCast (opset < 26) -NaN is ordered like +NaN (README: Known differences)"
SUM_ORDER = ("a sum or product that overflows or cancels near the largest float depends on the order of its terms; "
             "XLA and ONNX Runtime use different orders, and neither result is more accurate")
SCALE_FOLD = ("ONNX Runtime's graph optimizer (MatMulScaleFusion) folds a constant scale of a product's operand into "
              "the product, (q * c) @ k as c * (q @ k): where the unscaled product passes the largest float it "
              "overflows, where XLA's product of the scaled operand does not (README: Known differences)")
HUGE = frozenset({"huge-input"})
SQUARES = frozenset({"square-overflow-input"})  # an input whose square (or a row's sum of squares) can overflow
HUGE_WEIGHT = frozenset({"huge-weight"})  # a closed-over weight (a model layer's) within a factor 16 of the largest float
POW_FTZ = ("a power of a huge base with a negative exponent is subnormal: XLA on CPU flushes it to zero, ONNX Runtime "
           "keeps it, and a later division or comparison turns that into NaN/inf against a number")
VAR_ROUNDING = ("the variance of equal values is the square of the mean's rounding error: XLA's float32 sum rounds the "
                "mean back to the value (variance 0), ONNX Runtime's sum is one ulp off (variance (1 ulp)^2); acos/asin "
                "of that is a number in jax.jit and NaN in the artifact")
LOOP_TAN = ("XLA on CPU's float16/float32 tan inside a while loop body (trip count 2 or more) can be one ulp "
            "off its own tan outside loops (jax.jit: f16 tan(1.0) gives 1.5566 in the loop, 1.5576 straight; "
            "the artifact gives the correctly rounded 1.5576); repeated tan near pi/2 magnifies that ulp")
CONV_ZEROS = ("0 x inf is NaN: XLA on CPU multiplies a convolution's padding, lhs-dilation holes or the zero "
              "blocks of a grouped kernel for some shapes and skips them for others (emitters differ), so "
              "no lowering matches every shape; the artifact's result is that conv with those zeros "
              "multiplied or skipped")
ZERO_SIGN_DOT = ("the sign of a zero dot or conv result whose products are all -0 depends on XLA's "
                 "emitter for the shape (f32 [1,3]x[3,3] keeps -0, [2,8]x[8,4] gives +0); ONNX Runtime's "
                 "MatMul and Conv add to +0")
BF16_WINDOWS = ("XLA on CPU sums a bfloat16 (float16) window over 2 or more active dims in a shape-dependent order "
                "(row-major for some shapes, column-major or neither for others; measured) and rounds every "
                "step, so the last bits show it; the artifact folds row-major (exact for 1-D windows)")
SCATTER_ROUNDING = ("XLA on CPU applies a float16/bfloat16 scatter-add or -multiply's updates to a repeated "
                    "index one at a time, rounding after each; the artifact combines them in float32 and rounds "
                    "once (closer to the exact result)")
GELU_TAIL = ("exact GELU below about -7: jax.jit's erfc form keeps x * erfc(-x / sqrt 2) / 2 (-3.9e-13 at -7.4), "
             "ONNX Runtime's Gelu gives -0; within the tolerance, but an op after it that tells 0 from a tiny "
             "number (x ** y, 1 / x, log) gives inf or NaN on one side (tests/test_fuzz_regressions_3.py, xfail)")
GELU_TANH_TAIL = ("tanh GELU (jax.nn.gelu(approximate=True)) as ONNX Runtime's Gelu: below x = -4 the 1 + tanh(z) of "
                  "the formula cancels in float32, and jax.jit's formula and ORT's kernel both carry absolute errors "
                  "up to 8e-7 there (of the order of the value itself), differing from each other by up to 1.4e-6 "
                  "(README: Known differences); a huge weight after it magnifies the difference, an infinite one makes it "
                  "inf against NaN (jax.jit's 1 + tanh(z) is exactly 0 from x = -4.9: 0 x inf)")
XLA_DIV_DIV = ("XLA's algebraic simplifier rewrites (a / b) / c as a / (b * c): where a / b underflows to 0 "
               "or b * c overflows, jax.jit differs from IEEE division (jax without jit, and the artifact)")
ZERO_TIES = ("+0/-0 ties in max/min reductions and pooling follow ONNX Runtime's ReduceMax/ReduceMin/"
             "MaxPool, "
             "which may pick the other zero than jax.jit (README: Known differences)")
SINH_EDGE = ("XLA's float32 sinh overflows to inf on the last inputs below ln(2 FLT_MAX) = 89.41599 "
             "(measured: 89.415985), where the true sinh (and the artifact's) is just below FLT_MAX")
DIV_FTZ = ("a division by a huge value is subnormal: XLA on CPU flushes it to zero, ONNX Runtime keeps it, so an "
           "argmin/argmax over it picks another element (README: Known differences, subnormals)")
XLA_CLZ = ("XLA folds count_leading_zeros of a negative constant to -32 (clz(argmin(x) - 7) with one element, "
           "measured; clz of the same value at run time is 0); jax without jit and the artifact give 0 "
           "(README: Known differences)")
XLA_SQUARE_SIGN = ("XLA's simplifier folds x * x < 0 to false (and x * x >= 0 to true) for signed integers, "
                   "though the product wraps: (2^62 + 1)^2 is -2^63 + 1 in int64 (46341^2 is -2147479015 in int32); "
                   "jax.jit returns that negative product and calls it non-negative, jax without jit and the "
                   "artifact compare the wrapped value (README: Known differences)")
LAPACK_NAN = ("LAPACK's symmetric eigendecomposition (syevd: jax.jit's eigh, eigvalsh) of a matrix holding NaN returns "
              "values of its own making (eigenvalues -1.41 and 1.41 for [[NaN, 1], [1, 1]]); the artifact returns NaN "
              "(the check: undecided on edge values, nan_choices)")
LAPACK_NORM = ("an eigendecomposition is accurate to the float rounding of the matrix's norm: beside an entry of 1.8e19, "
               "jax.jit's reconstruction of the entries of 1 is off by up to 2e12 (eps x norm), the artifact's Jacobi "
               "by about 1; the check finds the artifact as close to float64 (ok (float64))")
LAPACK_LU = ("LAPACK's LU (getrf: jax.jit's det, slogdet and inv) of a matrix holding an infinity pivots and "
             "eliminates with it and returns numbers of its own making (det 0 for a 4 x 4 matrix with one -inf and two "
             "equal rows); the artifact's elimination meets inf - inf or inf x 0 and gives NaN")
LITERT_LOGISTIC = ("LiteRT's LOGISTIC kernel gives NaN for finite inputs of magnitude about 4e27 to 2e37 (jax.jit: 1 "
                   "or 0; at 1e10, 2.5e26 and 3.4e38 it agrees); the xla route's sigmoids (jax2tf's) become LOGISTIC, "
                   "the tf-ops route's do not (README: Known differences)")
LITERT_ZERO_SIZE_NOTE = "LiteRT rejects zero-size tensors"
LITERT_ZERO_SIZE = ("LiteRT fails to run a model with a zero-size tensor (\"Invalid tensor size\"); the converter's "
                    "check names the zero-size inputs and ops and raises (jaxconv.tf.tflite.run_error), a limit of "
                    "the runtime (README: Known differences)")
XLA_FMA = ("XLA on CPU contracts a multiply and an add or subtract of one fusion into an FMA, which rounds once, so a "
           "value it computes in two fusions can differ from itself: softmax(s * c) takes the max of s * c rounded "
           "and exp(s * c - max) as one FMA, which for a huge score is the product's rounding error (1.7e22 at "
           "s = 6.4e29) instead of 0, and exp overflows to NaN; jax.jit without FMA instructions "
           "(--xla_cpu_max_isa=AVX) and jax without jit give the artifact's result")
EXCESS = ("XLA on CPU keeps float16/bfloat16 intermediates of fused ops in float32 (XLA's excess precision, on by "
          "default); the artifact rounds every op to its dtype, as jax.jit does with "
          "XLA_FLAGS=--xla_allow_excess_precision=false")

# conformance/fuzz/models.py's FFT steps: in the artifact, products with DFT matrices (sums over each axis).
FFT_STEPS = ("fft2_real", "fft2_imag", "fft_abs", "ifft2_real", "ifft2_filter", "fnet")
DFT_ZEROS = ("an FFT is a product with a DFT matrix in the artifact (README: Known differences): every input element is "
             "multiplied by every twiddle factor, the exact zeros (sin 0, sin pi) included, so an inf or NaN input "
             "makes NaN (inf x 0) in outputs where XLA's FFT, like numpy's (pocketfft), skips the trivial twiddles of its "
             "butterflies and gives a number (jax.jit: fft2 of ones with one -inf has an imaginary half of zeros, "
             "the artifact NaN; ifft2 of a 1 x 1 value with a NaN imaginary part keeps its real part)")

FFT_ABSORBED = ("jax.jit's FFT (XLA's pocketfft butterflies) adds a huge input to the others before the twiddles that "
                "cancel it, and their digits are absorbed; the artifact multiplies each input by its own twiddle (exact "
                "zeros and ones at half and quarter turns) and keeps them: here the artifact has the exact value "
                "(ifft2 of a [2, 6] signal with one 3.4e38 imaginary part: 0.7501 exactly, jax.jit 0.2897)")

# The products of conformance/fuzz/models.py's layers: sums over a contracted axis, as matmul and conv.
MODEL_DOTS = ("dense", "dense_up", "dense_down", "dense_gate", "dense_q", "dense_k", "dense_v", "dense_out", "dense_qkv",
              "dense_head", "dense_pooler", "dense_gate_up", "scores", "attend", "conv_nhwc", "conv_nwc", "gated_conv_nwc",
              "lstm_fused", "lstm_flax",
              "gru_fused", "gru_flax", "gru_haiku", "unrolled_*", "scan_unrolled_*", "stacked_layers", "moe_router",
              "moe_up", "moe_down", "moe_combine")

# Chains that begin with such a product: a difference it makes near FLT_MAX (inf against a finite sum, or ONNX
# Runtime's optimizer folding a constant scale into the product: (q @ k) * c for (q * c) @ k, W * g in a Conv)
# reaches the softmax or the batch norm after it; the minimiser cannot cut there when only those show it. A rotary
# embedding's x * cos + rot(x) * sin is such a sum too (XLA contracts it into an FMA, which does not overflow);
# a projection that reaches it (``dense_q+dense_k+..+softmax``) cannot be cut off where only the rotary shows it.
MODEL_DOT_CHAINS = ("scores+*", "heads_*+scores*", "rotary_*", "attend+*", "conv_nhwc+*", "conv_nwc+*", "gated_conv_nwc+*",
                    "dense_*+*", "moe_*+*")

# conformance/fuzz/layers.py's forms that sum: products (matmuls, einsums, 1x1 convs, resizes by weight
# matrices, the cells' and attention's products) and reductions (a spatial sum, a group's mean, rows weighted)
LAYER_SUMS = ("weight_grad", "heads_grad", "heads_vjp", "gqa_scores", "gqa_values", "one_hot_rows",
              "gathered_product", "kv_scores", "kv_values", "kv_index", "pointwise_conv", "resize", "spatial_sum",
              "group_stats", "vmap_linear", "einsum_values", "weighted_rows", "scaled_heads", "heads_out",
              "attention", "cell_scan_*", "cell_unrolled_*", "eqx_scan_*")

# conformance/fuzz/models.py's norms: each sums a row (its mean, its mean square) before anything else
NORMS = ("norm_two_pass", "norm_one_pass", "norm_var", "norm_keras", "norm_rms", "norm_rms_f32")

MEAN_SQUARE = ("XLA's algebraic simplifier squares a mean of one element per batch row as the square of the sum times "
               "1/n^2 (the optimized HLO of mean(g * g) - mean(g) ** 2 at batch 1: multiply(reduce_sum, reduce_sum) * 1/n^2), "
               "which the artifact does too where the batch is known (jaxconv.onnx.xla_reassociation), but not for a "
               "symbolic batch, where the product may have more elements: where the sum's square exceeds the largest "
               "float, jax.jit at batch 1 has inf - inf = NaN where the artifact has inf (a group norm or a one-pass layer "
               "norm of values near 1e19 then normalizes to its bias)")

JUDGED = ("jaxconv's check, judging these very inputs, passes the artifact's outputs: they are as close to the "
          "float64 result as its tolerance asks (the sums run in another order than XLA's), or they are a result it "
          "knows XLA gives differently")

KNOWN: tuple[Known, ...] = (
    Known("*/*/subnormal", FTZ),
    Known("*/*/judged", JUDGED),
    Known("*/*/excess-precision", EXCESS),
    Known("*/*/xla-fma", XLA_FMA),
    Known("tflite:*/*/crash", LITERT_ZERO_SIZE, frozenset({"zero-size", "litert-zero-size"})),
    Known("*bitcast_*/*/nan-bits", NAN_BITS),
    Known("*+*/*/last-bit", ULP_BITS),
    *(Known(f"*/{dtype}/dot-order", DOT_ORDER) for dtype in ("f32", "f64")),
    Known("convert_bool_*+mul*", XLA_SELECT),
    *(Known(f"{op}/*/*", LAPACK_NAN, frozenset({"nan-input"})) for op in ("eigvalsh", "eigh_product")),
    Known("eigh_product/*/value", LAPACK_NORM, HUGE),
    *(Known(f"{op}/*/{kind}", LAPACK_LU, frozenset({"inf-input"}))
      for op in ("det", "slogdet", "inv") for kind in ("nan", "value", "inf")),
    Known("eigvalsh/*/value", LAPACK_NORM, SQUARES),  # an eigenvalue near 0 beside one of 1.8e19: both within eps x norm
    Known("eigvalsh+*/*/value", LAPACK_NORM, SQUARES),  # an op after it that tells that eigenvalue from 0 (jnp.all)
    *(Known(f"{op}/*/{kind}", NAN_ORDER, frozenset({"negative-nan-input"}))
      for op in ("top_k", "top_k_indices", "sort", "argsort", "moe_gates") for kind in ("nan", "inf", "value")),
    *(Known(f"{chain}/*/{kind}", SUM_ORDER, HUGE) for chain in MODEL_DOT_CHAINS for kind in ("value", "nan", "inf")),
    # such a product after a log-softmax of a huge input (-FLT_MAX in its row, then @ v; a softmax's output is
    # bounded): ORT's fused multiply-adds carry a product past FLT_MAX into the sum unrounded, XLA rounds it to inf
    *(Known(f"*log_softmax+{dot}/*/{kind}", SUM_ORDER, HUGE) for dot in MODEL_DOTS for kind in ("value", "nan", "inf")),
    # the same without a huge input: a mask's fill near the largest float (finfo.min) is about -FLT_MAX at the
    # log-softmax's masked places, and a value past 1 in v overflows its product in XLA only
    *(Known(f"*log_softmax+{dot}/*/{kind}", SUM_ORDER, frozenset({"huge-fill"}))
      for dot in MODEL_DOTS for kind in ("value", "nan", "inf")),
    # a product of two values near the square root of the largest float (q @ k of inputs near 1.8e19), one of
    # them scaled by a constant (q * c): ORT's MatMulScaleFusion folds c into the product, which then overflows
    # before the scale where XLA's scaled product does not
    *(Known(f"{chain}/*/{kind}", SCALE_FOLD, SQUARES | {"scaled-operand"})
      for chain in (*MODEL_DOT_CHAINS, "scores") for kind in ("value", "nan", "inf")),
    # a weight near the largest float: only where one side overflows (ORT folds a scale into a Conv's weights)
    *(Known(f"{op}/*/{kind}", SUM_ORDER, HUGE_WEIGHT)
      for op in (*MODEL_DOT_CHAINS, *MODEL_DOTS, "vjp", *LAYER_SUMS) for kind in ("nan", "inf")),
    # each also with a cast to an integer after it, which turns the sum's inf or NaN into an integer of its own
    # (a group's mean over -FLT_MAX and FLT_MAX: group_stats+convert_f32_i32)
    *(Known(f"{op}{cast}/*/{kind}", SUM_ORDER, HUGE)
      for op in ("reduce_sum", "reduce_mean", "reduce_var", "reduce_prod", "reduce_window_add", "cumsum", "cumprod",
                 "matmul", "dot_general_f32", "spatial_mean", "time_mean", "masked_mean", "attention_pool", "sum_pool",
                 "mean_pool", "conv_affine",
                 "vmap_matvec", "lstm_scan", "gru_scan", *MODEL_DOTS, "spatial_mean", "avg_pool", "vjp", *NORMS,
                 *LAYER_SUMS)
      for cast in ("", "+convert_*") for kind in ("value", "nan", "inf")),
    # a normalisation over -FLT_MAX and FLT_MAX: its variance is inf, each output (x - mean) * 0, a zero with the
    # sign of x - mean, and the mean is what its terms' order makes of the overflow (group_stats: +0.0 in jax.jit,
    # -0.0 in ORT)
    *(Known(f"{op}/*/signed-zero", SUM_ORDER, HUGE) for op in (*NORMS, "group_stats", "group_norm")),
    # a sigmoid after a product over a huge input (recurrent cells' gates): LiteRT's LOGISTIC
    *(Known(f"tflite:{op}/*/nan", LITERT_LOGISTIC, HUGE) for op in (*MODEL_DOT_CHAINS, *MODEL_DOTS, "deep_*")),
    *(Known(f"*{norm}*/*/{kind}", MEAN_SQUARE, facts | {"symbolic-batch"})
      for norm in ("group_norm", "norm_one_pass") for kind in ("nan", "inf", "value") for facts in (SQUARES, HUGE)),
    Known("pow+*/*/*", POW_FTZ, HUGE),
    Known("reduce_var+acos/*/nan", VAR_ROUNDING),
    Known("reduce_var+asin/*/nan", VAR_ROUNDING),
    Known("while_loop/*/value", LOOP_TAN, frozenset({"tan-in-loop"})),
    # a product in a loop body over a huge input: where its sums overflow depends on their order
    *(Known(f"{loop}/*/{kind}", SUM_ORDER, HUGE | {"product-in-loop"})
      for loop in ("fori_loop", "while_loop", "scan") for kind in ("value", "nan", "inf")),
    # Not NaN for conv: there a huge input proves nothing (convzeros.py tells padding x inf from inf - inf).
    *(Known(f"conv/*/{kind}", SUM_ORDER, HUGE) for kind in ("value", "inf")),
    Known("conv/*/overflow-order", SUM_ORDER),
    Known("*/*/conv-zeros", CONV_ZEROS),
    *(Known(f"{op}/*/{kind}", DFT_ZEROS, frozenset({fact})) for op in FFT_STEPS for fact in ("nan-input", "inf-input")
      for kind in ("nan", "inf", "value", "signed-zero")),
    # a filter in the frequency domain makes the infinity itself: a huge input's spectrum times the filter
    *(Known(f"ifft2_filter/*/{kind}", DFT_ZEROS, HUGE) for kind in ("nan", "inf", "value")),
    # so does a product over huge inputs: two values near FLT_MAX on one axis sum to inf, then inf x sin 0
    *(Known(f"{op}/*/nan", DFT_ZEROS, HUGE) for op in FFT_STEPS if op != "ifft2_filter"),
    *(Known(f"{op}/*/value", FFT_ABSORBED, HUGE) for op in FFT_STEPS if op != "ifft2_filter"),
    *(Known(f"{op}/*/signed-zero", ZERO_SIGN_DOT) for op in ("conv", "matmul", "dot_general_f32", "conv_affine",
                                                              "vmap_matvec", "lstm_scan", "gru_scan", *MODEL_DOTS)),
    Known("reduce_window_add/bf16/value", BF16_WINDOWS, frozenset({"window-2d"})),
    *(Known(f"{op}/{dtype}/value", BF16_WINDOWS, frozenset({"window-2d"}))
      for op in ("sum_pool", "mean_pool") for dtype in ("bf16", "f16")),
    Known("reduce_window_add/f16/value", BF16_WINDOWS, frozenset({"window-2d"})),
    Known("sinh/f32/inf", SINH_EDGE),
    *(Known(f"div+div/*/{kind}", XLA_DIV_DIV) for kind in ("nan", "inf", "value")),
    *(Known(f"{op}/*/signed-zero", ZERO_TIES)
      for op in ("reduce_max", "reduce_min", "reduce_window_max", "reduce_window_min")),
    Known("signbit/*/value", NAN_BITS, frozenset({"negative-nan-input"})),
    Known("argmin+*/i*/value", XLA_CLZ, frozenset({"clz"})),
    *(Known(f"*{op}+*/i*/value", XLA_SQUARE_SIGN, frozenset({"int-square-sign"})) for op in ("square", "integer_pow")),
    *(Known(f"*+{op}/f*/value", DIV_FTZ, HUGE) for op in ("argmin", "argmax")),
    *(Known(f"{op}/*/{kind}", NAN_SIGN,
            frozenset({"negative-nan-input"} | ({"nan-sign-in-body"} if op != "copysign" else set())))
      for op in ("copysign", "fori_loop", "while_loop", "scan", "cond") for kind in ("value", "inf", "signed-zero")),
    *(Known(f"scatter_{op}/{dtype}/{kind}", SCATTER_ROUNDING, frozenset({"repeated-index"}))
      for op in ("add", "mul") for dtype in ("f16", "bf16") for kind in ("value", "nan", "inf", "signed-zero")),
    *(Known(f"gelu_exact+*/*/{kind}", GELU_TAIL) for kind in ("nan", "inf", "signed-zero")),
    *(Known(f"gelu_tanh+*/f32/{kind}", GELU_TANH_TAIL) for kind in ("value", "nan", "inf")),
)


def facts(inputs: Sequence[np.ndarray], sizes: Sequence[int] = (), program: FuzzProgram | None = None) -> frozenset[str]:
    """What a failure's inputs (and its program's steps) show, for rows that need it."""
    found = set(program_facts(program) | _index_facts(program, inputs)) if program is not None else set()
    for a in inputs:
        a = np.asarray(a)
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            wide = a.astype(np.float64)
            if np.isnan(wide).any():
                found.add("nan-input")
                if (np.isnan(wide) & np.signbit(wide)).any():
                    found.add("negative-nan-input")
            if np.isinf(wide).any():
                found.add("inf-input")
            import ml_dtypes

            finite = wide[np.isfinite(wide)]
            if finite.size and np.abs(finite).max() >= float(ml_dtypes.finfo(a.dtype).max) / 16:
                found.add("huge-input")
            if finite.size and np.abs(finite).max() >= np.sqrt(float(ml_dtypes.finfo(a.dtype).max)) / 16:
                found.add("square-overflow-input")
        if a.size == 0:
            found.add("zero-size")
    if any(n == 0 for n in sizes):
        found.add("zero-size")
    return frozenset(found)


_PRODUCTS = (" @ ", "jnp.dot(", "jnp.matmul(", "einsum(", "dot_general(")
# a product's operand times a constant: jnp.einsum('...', {0} * 0.707107, {1}), ({0} * 0.5) @ {1}, and the
# scale written as (1 / np.sqrt(d))
_SCALE = r"(?:[-+0-9.e]+|\(1 / np\.sqrt\(\d+\)\))"
_SCALED_OPERAND = re.compile(rf"einsum\('[^']*', \{{\d+\}} \* {_SCALE}, |\(\{{\d+\}} \* {_SCALE}\) @ ")


def program_facts(program: FuzzProgram) -> frozenset[str]:
    """``tan-in-loop`` (a loop body applies tan), ``window-2d`` (a reduce_window over 2+ active dims),
    ``nan-sign-in-body`` (a loop or cond body reads a sign with copysign or signbit), ``product-in-loop`` (a
    loop body takes a matrix product), ``clz`` (a step counts
    leading zeros), ``int-square-sign`` (a signed integer's x * x compared with 0), ``huge-weight`` (a closed-over
    weight with edge values holds a finite value within a factor 16 of its dtype's largest), ``huge-fill`` (a step
    writes ``finfo.min`` or ``finfo.max``, or a literal within a factor 16 of its dtype's largest: a mask's fill),
    ``scaled-operand`` (a product's operand is multiplied by a literal inside it: attention's ``q * scale``),
    ``symbolic-batch`` (an input's batch is exported symbolic)."""
    found = {"symbolic-batch"} if any(v.batch_axis is not None for v in program.types.values()) else set()
    for step in program.steps:
        if step.op in ("while_loop", "fori_loop") and "jnp.tan(" in step.expr:
            found.add("tan-in-loop")
        if step.op in ("while_loop", "fori_loop", "scan") and any(p in step.expr for p in _PRODUCTS):
            found.add("product-in-loop")
        if (step.op.startswith("reduce_window") or step.op in ("sum_pool", "mean_pool")) \
                and _active_window_dims(step.expr) >= 2:
            found.add("window-2d")
        if "lax.clz(" in step.expr:
            found.add("clz")
        if _compares_a_square_with_zero(program, step):
            found.add("int-square-sign")
        if "_w(" in step.expr and any(_huge(w) for w in _weights(step.expr)):
            found.add("huge-weight")
        if _writes_a_huge_constant(program, step):
            found.add("huge-fill")
        if _SCALED_OPERAND.search(step.expr):
            found.add("scaled-operand")
        if step.op in ("while_loop", "fori_loop", "scan", "cond") and ("copysign(" in step.expr
                                                                         or "signbit(" in step.expr):
            found.add("nan-sign-in-body")
    return frozenset(found)


_WEIGHT_CALL = re.compile(r"_w\((\d+), (\([0-9, ]*\)), '(\w+)', ([-+0-9.e]+), ([-+0-9.e]+)\)")


def _weights(expr: str) -> list[np.ndarray]:
    """The closed-over weights ``_w(seed, shape, dtype, scale, edge)`` of a step with edge values (edge > 0)."""
    import ast

    from conformance.fuzz.program import WEIGHTS

    scope: dict = {"np": np}
    exec(WEIGHTS, scope)  # noqa: S102  (the generator's own weight function)
    out = []
    for seed, shape, dtype, scale, edge in _WEIGHT_CALL.findall(expr):
        if float(edge) > 0:
            out.append(scope["_w"](int(seed), ast.literal_eval(shape), dtype, float(scale), float(edge)))
    return out


def _huge(a: np.ndarray) -> bool:
    import ml_dtypes

    wide = np.asarray(a).astype(np.float64)
    finite = wide[np.isfinite(wide)]
    return bool(finite.size) and float(np.abs(finite).max()) >= float(ml_dtypes.finfo(a.dtype).max) / 16


_FINFO_LIMIT = re.compile(r"finfo\([\w.]+\)\.(min|max)")
_FLOAT_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d*)?e[+]?\d+")


def _writes_a_huge_constant(program: FuzzProgram, step) -> bool:
    """``step`` writes ``finfo(...).min``/``.max``, or a literal within a factor 16 of the largest value of its
    output's float dtype (float32 where the program does not say)."""
    import ml_dtypes

    if _FINFO_LIMIT.search(step.expr):
        return True
    value = program.types.get(step.out)
    name = "float32" if value is None else value.dtype
    try:
        largest = float(ml_dtypes.finfo(name).max)
    except ValueError:  # an integer or boolean step
        return False
    return any(float(x) >= largest / 16 for x in _FLOAT_LITERAL.findall(step.expr))


_SIGN_TESTS = ("{0} < 0", "{0} >= 0", "0 > {0}", "0 <= {0}")


def _compares_a_square_with_zero(program: FuzzProgram, step) -> bool:
    """``step`` compares (its first argument) with 0, and that argument is a signed integer's square x * x."""
    if not step.args or not any(t in step.expr for t in _SIGN_TESTS):
        return False
    source = next((s for s in program.steps if s.out == step.args[0]), None)
    if source is None or source.op not in ("square", "integer_pow") or len(source.args) != 1:
        return False
    if source.expr not in ("{0} * {0}", "jnp.square({0})", "lax.integer_pow({0}, 2)"):
        return False
    return program.types[source.out].dtype in ("int8", "int16", "int32", "int64")


def _index_facts(program: FuzzProgram, inputs: Sequence[np.ndarray]) -> frozenset[str]:
    """``repeated-index``: a scatter's index input names one row twice (also once clipped into range, or a
    negative index counted from the end)."""
    given = dict(zip(program.inputs, inputs))
    for step in program.steps:
        if not step.op.startswith("scatter_") or len(step.args) < 2 or step.args[1] not in given:
            continue
        idx = np.asarray(given[step.args[1]]).astype(np.int64).ravel()
        rows = program.types[step.args[0]].shape[0] if program.types[step.args[0]].shape else 1
        clipped = np.clip(idx, 0, max(rows - 1, 0))
        wrapped = np.where(idx < 0, idx + rows, idx)  # jnp's .at[] counts a negative index from the end
        if (len(set(idx.tolist())) < idx.size or len(set(clipped.tolist())) < idx.size
                or len(set(wrapped.tolist())) < idx.size):
            return frozenset({"repeated-index"})
    return frozenset()


class _Count(int):
    """A window's active dims, unchanged by the division a mean pooling step applies to the window sum."""

    def __truediv__(self, other: object) -> "_Count":
        return self


def _active_window_dims(expr: str) -> int:
    """How many dims a fuzz ``lax.reduce_window`` step's window touches (size, stride or padding)."""
    import jax.numpy as jnp

    class Lax:
        add = max = min = None

        @staticmethod
        def reduce_window(x: object, init: object, op: object, dims: tuple, strides: tuple, padding: object) -> int:
            pads = [(0, 0)] * len(dims) if padding in ("SAME", "VALID") else list(padding)
            return _Count(sum(1 for d, s, p in zip(dims, strides, pads) if d > 1 or s > 1 or tuple(p) != (0, 0)))

    try:
        return int(eval(expr.format("None"), {"lax": Lax, "np": np, "jnp": jnp}, {}))  # noqa: S307  (our own step)
    except Exception:  # noqa: BLE001  (an expression of another form: no fact)
        return 0


def match(klass: str, seen: frozenset[str] = frozenset(), table: tuple[Known, ...] = KNOWN) -> Known | None:
    """The first row whose pattern matches ``klass`` and whose needed facts are all in ``seen``."""
    for row in table:
        if fnmatch.fnmatchcase(klass, row.pattern) and row.needs <= seen:
            return row
    return None
