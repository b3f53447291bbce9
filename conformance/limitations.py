"""Known limitations: (case, target[, device]) -> the reason it is expected to fail.

Keys may use shell-style wildcards in the case part (``dtype.bf16.*``). A limited cell that
fails is reported as ``xfail (reason)``; a limited cell that passes fails the run, so a
row must be deleted as soon as the converter handles it. Every row needs a reason.
"""

from __future__ import annotations

import fnmatch
from typing import Mapping

ANY_DEVICE = "*"

_COMPLEX_ORT = "ONNX Runtime has no complex types"
_FTZ = "denormal inputs: XLA CPU flushes them to zero, {} does not"

# The TFLite converter's StableHLO legalization and LiteRT's kernels, by reason (measured with TF 2.21 and
# ai-edge-litert 2.3). These are limits of TFLite itself; jaxconv reports them at conversion.
TFLITE: dict[str, tuple[str, ...]] = {
    "LiteRT aborts (SIGFPE) on a matmul with a zero-size contraction": ("edge.empty_matmul_k0",),
    "LiteRT rejects zero-size tensors (\"Invalid tensor size\")": ("edge.empty_elementwise", "edge.empty_slice",),
    "LiteRT's reverse kernel rejects non-contiguous axes": ("op.reverse.f32",),
    "LiteRT's scatter kernel rejects this scatter (\"Only update, Add, Multiply, Maximum and Minimum ... supported\")": (
        "model.mlp_train_step", "op.scatter.add", "op.scatter.i32", "op.scatter.max", "op.scatter.min",
        "op.scatter.mul", "op.scatter.segment_sum",
    ),
    "LiteRT's gather_nd rejects out-of-bounds indices (XLA clamps or fills)": ("op.gather.fill_oob",),
    "LiteRT's integer division rejects a zero divisor (XLA defines x/0)": (
        "edge.int_divide_by_zero",
    ),
    "LiteRT's gather_nd rejects negative indices (XLA clamps them)": (
        "op.gather.out_of_bounds",
    ),
    "LiteRT's transpose_conv kernel rejects the legalized shapes (computed_input_height != SizeOfDimension)": (
        "op.convolution.transpose",
    ),
    "TFLite computes cbrt through pow: NaN for negative inputs": ("op.cbrt.f32",),
    "TFLite has no builtin for tf.BitwiseAnd (a TF op: needs flex)": (
        "op.and.i32", "op.bitcast_convert.u32_f32", "op.nextafter.f32",
    ),
    "TFLite has no builtin for tf.BitwiseOr (a TF op: needs flex)": ("op.or.i32",),
    "TFLite has no builtin for tf.Complex (a TF op: needs flex)": ("op.complex.abs",),
    "TFLite has no builtin for tf.LeftShift (a TF op: needs flex)": ("edge.shift_out_of_range", "op.shift_left.i32",),
    "TFLite has no builtin for tf.PopulationCount (a TF op: needs flex)": ("op.popcnt.u32",),
    "TFLite has no kernel for tfl.abs on int64": ("dtype.i64.negate_abs",),
    "TFLite has no kernel for tfl.add on this dtype": (
        "dtype.bf16.add", "dtype.f16.add", "dtype.f64.add", "dtype.i8.add", "dtype.u8.add",
    ),
    "TFLite has no kernel for tfl.batch_matmul on bfloat16": ("dtype.bf16.dot", "op.dot_general.bf16_to_f32",),
    "TFLite has no kernel for tfl.batch_matmul on float16": ("dtype.f16.dot",),
    "TFLite has no kernel for tfl.batch_matmul on float64": ("dtype.f64.dot",),
    "TFLite has no kernel for tfl.batch_matmul on int16": ("dtype.i16.dot",),
    "TFLite has no kernel for tfl.batch_matmul on int64": ("dtype.i64.dot",),
    "TFLite has no kernel for tfl.batch_matmul on int8": ("dtype.i8.dot",),
    "TFLite has no kernel for tfl.batch_matmul on this dtype": ("dtype.i32.dot",),
    "TFLite has no kernel for tfl.batch_matmul on uint32": ("dtype.u32.dot",),
    "TFLite has no kernel for tfl.batch_matmul on uint8": ("dtype.u8.dot",),
    "TFLite has no kernel for tfl.div on int16": ("dtype.i16.divide_remainder",),
    "TFLite has no kernel for tfl.div on int64": ("dtype.i64.divide_remainder",),
    "TFLite has no kernel for tfl.div on int8": ("dtype.i8.divide_remainder",),
    "TFLite has no kernel for tfl.div on this dtype": ("dtype.bf16.divide", "dtype.f16.divide", "dtype.f64.divide",),
    "TFLite has no kernel for tfl.div on uint32": ("dtype.u32.divide_remainder",),
    "TFLite has no kernel for tfl.div on uint8": ("dtype.u8.divide_remainder",),
    "TFLite has no kernel for tfl.equal on bfloat16": ("dtype.bf16.sort",),
    "TFLite has no kernel for tfl.equal on float16": ("dtype.f16.sort",),
    "TFLite has no kernel for tfl.equal on float64": ("dtype.f64.sort",),
    "TFLite has no kernel for tfl.exp on bfloat16": ("dtype.bf16.exp_tanh",),
    "TFLite has no kernel for tfl.exp on float16": ("dtype.f16.exp_tanh",),
    "TFLite has no kernel for tfl.exp on float64": ("dtype.f64.exp_tanh",),
    "TFLite has no kernel for tfl.less on bfloat16": ("dtype.bf16.compare",),
    "TFLite has no kernel for tfl.less on float16": ("dtype.f16.compare",),
    "TFLite has no kernel for tfl.less on float64": ("dtype.f64.compare",),
    "TFLite has no kernel for tfl.less on int8": ("dtype.i8.compare", "dtype.i8.sort",),
    "TFLite has no kernel for tfl.less on this dtype": ("dtype.bool.compare",),
    "TFLite has no kernel for tfl.less on uint32": ("dtype.u32.compare", "dtype.u32.sort",),
    "TFLite has no kernel for tfl.less on uint8": ("dtype.u8.compare", "dtype.u8.sort",),
    "TFLite has no kernel for tfl.maximum on this dtype": (
        "dtype.bf16.maximum", "dtype.bool.maximum", "dtype.f16.maximum", "dtype.f64.maximum", "dtype.i16.maximum",
        "dtype.i8.maximum", "dtype.u32.maximum", "dtype.u8.maximum",
    ),
    "TFLite has no kernel for tfl.mul on this dtype": (
        "dtype.bf16.multiply", "dtype.f16.multiply", "dtype.f64.multiply", "dtype.i8.multiply", "dtype.u8.multiply",
    ),
    "TFLite has no kernel for tfl.mul on uint32": (
        "model.vae_fixed_seed", "model.vae_key_input", "op.rng.threefry_fixed_seed", "op.rng.threefry_key_input",
    ),
    "TFLite has no kernel for tfl.neg on bfloat16": ("dtype.bf16.negate_abs",),
    "TFLite has no kernel for tfl.neg on float16": ("dtype.f16.negate_abs",),
    "TFLite has no kernel for tfl.neg on float64": ("dtype.f64.negate_abs",),
    "TFLite has no kernel for tfl.neg on int16": ("dtype.i16.negate_abs",),
    "TFLite has no kernel for tfl.neg on int8": ("dtype.i8.negate_abs",),
    "TFLite has no kernel for tfl.reduce_max on bfloat16": ("dtype.bf16.reduce",),
    "TFLite has no kernel for tfl.reduce_max on float16": ("dtype.f16.reduce",),
    "TFLite has no kernel for tfl.reduce_max on int16": ("dtype.i16.reduce",),
    "TFLite has no kernel for tfl.reduce_max on int8": ("dtype.i8.reduce",),
    "TFLite has no kernel for tfl.reverse_v2 on int8": ("dtype.i8.shape_ops",),
    "TFLite has no kernel for tfl.right_shift on uint32": ("op.rng.bernoulli", "op.rng.permutation",),
    "TFLite has no kernel for tfl.select on bfloat16": ("dtype.bf16.select",),
    "TFLite has no kernel for tfl.select on float16": ("dtype.f16.select",),
    "TFLite has no kernel for tfl.select on float64": ("dtype.f64.select",),
    "TFLite has no kernel for tfl.select on uint8": ("dtype.u8.select",),
    "TFLite has no kernel for tfl.sum on float64": ("dtype.f64.reduce",),
    "TFLite has no kernel for tfl.sum on uint32": ("dtype.u32.reduce",),
    "TFLite has no kernel for tfl.sum on uint32/uint8": ("dtype.u8.reduce",),
    "TFLite has no kernel for tfl.transpose on bfloat16": ("dtype.bf16.shape_ops",),
    "TFLite has no kernel for tfl.transpose on float16": ("dtype.f16.shape_ops", "op.convolution.f16",),
    "TFLite has no kernel for tfl.transpose on float64": ("dtype.f64.shape_ops",),
    "TFLite has no kernel for tfl.transpose on int16": ("dtype.i16.shape_ops",),
    "TFLite has no kernel for tfl.transpose on uint32": ("dtype.u32.shape_ops",),
    "TFLite kernels do not propagate NaN like XLA": (
        "edge.max_min_nan", "edge.reduce_max_nan", "edge.tanh_logistic_special",
    ),
    "TFLite legalizes shift_right_logical on signed ints as an arithmetic shift": ("op.shift_right_logical.i32",),
    "TFLite legalizes stablehlo.remainder as FLOOR_MOD: wrong sign for mixed-sign operands": (
        "dtype.i32.divide_remainder", "op.fmod.f32",
    ),
    "TFLite's arg_max/arg_min ignore NaN (XLA returns the first NaN's index)": ("edge.argmax_nan",),
    "TFLite's float -> int cast does not saturate (or map NaN to 0) like XLA": ("edge.convert_f32_i32_saturate",),
    "TFLite's integer division of INT_MIN by -1 differs from XLA (INT_MIN)": ("edge.int_min_div_minus_one",),
    "TFLite's legalization of is_inf differs from XLA on special values": ("edge.isnan_isinf",),
    "TFLite's sign(-0.0) is +0.0; XLA keeps -0.0": ("edge.sign_neg_zero",),
    "denormal inputs: XLA CPU flushes them to zero, TFLite does not": ("edge.exp_log_special",),
    "the TFLite converter does not legalize stablehlo.count_leading_zeros": ("op.count_leading_zeros.u32",),
    "the TFLite converter does not legalize stablehlo.custom_call": ("sym.cumsum",),
    "the TFLite converter does not legalize JAX's LAPACK custom calls (lapack_*_ffi)": (
        "op.linalg.cholesky", "op.linalg.eigh", "op.linalg.inv", "op.linalg.qr", "op.linalg.solve", "op.linalg.solve_triangular",
    ),
    "the TFLite converter does not legalize stablehlo.dynamic_conv": ("model.audio_conv1d_symbolic",),
    "the TFLite converter does not legalize stablehlo.dynamic_gather": ("sym.slice",),
    "the TFLite converter does not legalize stablehlo.dynamic_slice": ("sym.scan",),
    "the TFLite converter does not legalize stablehlo.reduce": ("op.reduce.variadic_max_index",),
    "the TFLite converter does not legalize stablehlo.reduce_precision": ("op.reduce_precision.f32",),
    "the TFLite converter does not legalize stablehlo.round_nearest_afz": (
        "op.floor_divide.f32", "op.round_nearest_afz.f32",
    ),
    "the TFLite converter does not legalize stablehlo.select_and_scatter": ("op.select_and_scatter.max_pool_grad",),
    "the TFLite converter does not legalize stablehlo.sort": (
        "dtype.f32.sort", "dtype.i16.sort", "dtype.i32.sort", "dtype.i64.sort", "edge.sort_nan", "op.sort.argsort",
        "op.sort.descending", "op.sort.f32", "op.sort.key_value", "op.sort.lexsort", "op.sort.median",
    ),
    "the TFLite converter does not legalize stablehlo.xor": ("op.xor.bool",),
}

# (case pattern, target, device) -> reason. Device "*" means every device.
LIMITATIONS: dict[tuple[str, str, str], str] = {
    ("op.fft.*", "onnx", ANY_DEVICE): _COMPLEX_ORT,
    ("op.complex.*", "onnx", ANY_DEVICE): _COMPLEX_ORT,
    ("op.rng_bit_generator.*", "onnx", ANY_DEVICE): "XLA's backend-defined bit generator cannot be reproduced bit-exactly",
    ("edge.exp_log_special", "onnx", "cpu"): _FTZ.format("ONNX Runtime"),
    ("edge.sign_neg_zero", "onnx", "cpu"): _FTZ.format("ONNX Runtime"),
    ("sym.cumsum", "onnx", ANY_DEVICE): "jnp.cumsum along a symbolic axis: the window size depends on the symbolic dimension",
    ("edge.max_min_nan", "saved-model", "cpu"): "TF's XLA runtime does not propagate NaN through max/min like jax.jit",
    ("edge.reduce_max_nan", "saved-model", "cpu"): "TF's XLA runtime does not propagate NaN through max/min like jax.jit",
    ("op.linalg.qr", "onnx", ANY_DEVICE): "Householder QR (LAPACK geqrf/orgqr) has no ONNX lowering",
    ("op.linalg.eigh", "onnx", ANY_DEVICE): "symmetric eigendecomposition (LAPACK syevd) has no ONNX lowering",
    ("edge.empty_reduce", "tflite", ANY_DEVICE): "TFLite's reduce_max over an empty axis does not return the init value (-inf)",
    ("sym.slice_drop_last", "tflite", ANY_DEVICE): "the TFLite converter does not legalize stablehlo.dynamic_gather",
    ("sym.slice_half", "tflite", ANY_DEVICE): "the TFLite converter does not legalize stablehlo.dynamic_gather",
}
for _case in ("op.linalg.cholesky", "op.linalg.eigh", "op.linalg.inv", "op.linalg.qr", "op.linalg.solve", "op.linalg.solve_triangular"):
    LIMITATIONS[(_case, "saved-model", ANY_DEVICE)] = "TF has no FFI handlers for JAX's LAPACK custom calls (lapack_*_ffi)"
for _reason, _cases in TFLITE.items():
    for _case in _cases:
        LIMITATIONS[(_case, "tflite", ANY_DEVICE)] = _reason


def _key(entry: tuple[str, ...]) -> tuple[str, str, str]:
    if len(entry) == 2:
        return entry[0], entry[1], ANY_DEVICE
    if len(entry) == 3:
        return entry  # type: ignore[return-value]
    raise ValueError(f"limitation key {entry!r} must be (case, target) or (case, target, device)")


def validate(table: Mapping[tuple[str, ...], str]) -> None:
    """Every row has a non-empty reason and a well-formed key; raises ValueError otherwise."""
    for k, reason in table.items():
        _key(k)
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"limitation {k!r} has no reason: every limitation must say why")


def lookup(case: str, target: str, device: str, table: Mapping[tuple[str, ...], str] | None = None) -> str | None:
    """The reason ``case`` is expected to fail on ``target``/``device``, or None."""
    table = LIMITATIONS if table is None else table
    for k, reason in table.items():
        pattern, t, d = _key(k)
        if t == target and d in (ANY_DEVICE, device) and fnmatch.fnmatchcase(case, pattern):
            return reason
    return None


validate(LIMITATIONS)
