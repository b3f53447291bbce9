"""Edge values: NaN, +-inf, -0.0, empty tensors, integer overflow and division corner cases.

Subnormal inputs have cases of their own (``edge.subnormal.*``): XLA on the CPU flushes them
to zero and most runtimes do not, so their limitation rows must not hide the other edge values.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from conformance.case import arg, case

INF = float("inf")
SPECIAL = (0.0, -0.0, INF, -INF, float("nan"), 1.0, -2.5, 3e38, -1e-30, 7.0)  # no subnormals: see below
SUBNORMAL = (1e-40, -1e-40, 1e-45, -3e-39, 0.0, -0.0, 1.2e-38, -2.0, 1e-38, 5.0)  # 1.2e-38: the smallest normals
S = arg("f32[10]", "values", values=SPECIAL)
S2 = arg("f32[10]", "values", values=(float("nan"), 1.0, -INF, -0.0, 0.0, INF, 2.0, float("nan"), -3.0, 0.5))

case("edge.add_mul_special", lambda x, y: (x + y, x * y), S, S2, family="add", tags={"edge"})
case("edge.divide_special", lambda x, y: x / y, S, S2, family="divide", tags={"edge"})
case("edge.max_min_nan", lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y)), S, S2, family="maximum", tags={"edge"})
case("edge.reduce_max_nan", lambda x: (jnp.max(x), jnp.min(x)), S, family="reduce", tags={"edge"})
case("edge.argmax_nan", lambda x: (jnp.argmax(x), jnp.argmin(x)), S, family="reduce", tags={"edge"})
case("edge.sort_nan", jnp.sort, S, family="sort", tags={"edge"})
case("edge.sign_neg_zero", lambda x: (jnp.sign(x), 1.0 / jnp.sign(x)), S, family="sign", tags={"edge"})
case("edge.neg_zero_reciprocal", lambda x: 1.0 / (x * 0.0 - 0.0), arg("f32[4]", "values", values=(1.0, -1.0, 0.0, -0.0)),
     family="divide", tags={"edge"})
case("edge.exp_log_special", lambda x: (jnp.exp(x), jnp.log(x), jnp.sqrt(x)), S, family="exponential", tags={"edge"})
case("edge.tanh_logistic_special", lambda x: (jnp.tanh(x), jnp.exp(-x) * 0 + 1 / (1 + jnp.exp(-x))), S, family="tanh", tags={"edge"})
case("edge.round_special", lambda x: (jnp.round(x), jnp.floor(x), jnp.ceil(x)),
     arg("f32[8]", "values", values=(0.5, 1.5, 2.5, -0.5, -1.5, float("nan"), -0.0, INF)), family="round_nearest_even", tags={"edge"})
case("edge.is_finite", jnp.isfinite, S, family="is_finite", tags={"edge"})
case("edge.isnan_isinf", lambda x: (jnp.isnan(x), jnp.isinf(x)), S, family="compare", tags={"edge"})
case("edge.convert_f32_i32_saturate", lambda x: x.astype(jnp.int32),
     arg("f32[6]", "values", values=(float("nan"), INF, -INF, 3e9, -3e9, 2.7)), family="convert", tags={"edge"})
case("edge.convert_f32_u8_saturate", lambda x: x.astype(jnp.uint8), arg("f32[4]", "values", values=(300.0, -1.0, 255.5, 3.2)),
     family="convert", tags={"edge"})
case("edge.convert_i32_i8_wrap", lambda x: x.astype(jnp.int8), arg("i32[4]", "values", values=(200, -200, 127, 1000)),
     family="convert", tags={"edge"})
case("edge.int_divide_by_zero", lambda x, y: (lax.div(x, y), lax.rem(x, y)), arg("i32[4]", "values", values=(7, -7, 0, 5)),
     arg("i32[4]", "values", values=(0, 0, 0, 2)), family="divide", tags={"edge"})
case("edge.int_min_div_minus_one", lambda x, y: lax.div(x, y), arg("i32[2]", "values", values=(np.iinfo(np.int32).min, 4)),
     arg("i32[2]", "values", values=(-1, -1)), family="divide", tags={"edge"})
case("edge.int_overflow_wraps", lambda x: (x + x, x * 3, -x, jnp.abs(x)),
     arg("i32[3]", "values", values=(np.iinfo(np.int32).max, np.iinfo(np.int32).min, 5)), family="add", tags={"edge"})
case("edge.shift_out_of_range", lambda x, s: (lax.shift_left(x, s), lax.shift_right_arithmetic(x, s), lax.shift_right_logical(x, s)),
     arg("i32[4]", "values", values=(-8, 8, 1, -1)), arg("i32[4]", "values", values=(33, 32, -1, 31)), family="shift_left",
     tags={"edge"})
case("edge.empty_elementwise", lambda x: jnp.exp(x) + 1.0, arg("f32[0,3]"), family="exponential", tags={"edge", "empty"})
case("edge.empty_reduce", lambda x: (jnp.sum(x, axis=0), jnp.max(x, axis=0, initial=-jnp.inf)), arg("f32[0,3]"), family="reduce",
     tags={"edge", "empty"})
case("edge.empty_concat", lambda x, y: jnp.concatenate([x, y], axis=0), arg("f32[0,3]"), arg("f32[2,3]"), family="concatenate",
     tags={"edge", "empty"})
case("edge.empty_matmul_k0", jnp.matmul, arg("f32[3,0]"), arg("f32[0,2]"), family="dot_general", tags={"edge", "empty"})
case("edge.empty_slice", lambda x: x[2:2], arg("f32[4,3]"), family="slice", tags={"edge", "empty"})
case("edge.scalar_only", lambda x, y: x * y - 1.0, arg("f32[]"), arg("f32[]"), family="multiply", tags={"edge"})
case("edge.pow_special", lambda x, y: jnp.power(x, y), arg("f32[6]", "values", values=(-2.0, 0.0, -0.0, INF, 1.0, -1.0)),
     arg("f32[6]", "values", values=(3.0, -1.0, -1.0, 0.0, float("nan"), INF)), family="power", tags={"edge"})
case("edge.f16_overflow", lambda x: (x * 1000).astype(jnp.float16), arg("f32[3]", "values", values=(100.0, -70.0, 1.0)),
     family="convert", tags={"edge"})
case("edge.bf16_rounding", lambda x: x.astype(jnp.bfloat16), arg("f32[4]", "values", values=(1.00390625, 1.01171875, -3.3, 1e-39)),
     family="convert", tags={"edge"})

SUB = arg("f32[10]", "values", values=SUBNORMAL)
SUB2 = arg("f32[10]", "values", values=(2.0, 1e-40, -1e-40, 0.5, 1e-39, 3.0, -1e-45, 1e-40, 0.0, -1.0))
_SUB_TAGS = {"edge", "subnormal"}
case("edge.subnormal.add_mul", lambda x, y: (x + y, x * y, x * 1e38), SUB, SUB2, family="add", tags=_SUB_TAGS)
case("edge.subnormal.divide", lambda x, y: (x / y, 1.0 / x), SUB, SUB2, family="divide", tags=_SUB_TAGS)
case("edge.subnormal.max_min", lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y), jnp.max(x), jnp.min(x)), SUB, SUB2,
     family="maximum", tags=_SUB_TAGS)
case("edge.subnormal.compare", lambda x: (x == 0, x > 0, jnp.argmax(x), jnp.isfinite(x)), SUB, family="compare", tags=_SUB_TAGS)
case("edge.subnormal.sign", lambda x: (jnp.sign(x), 1.0 / jnp.sign(x), jnp.abs(x) * 1e38), SUB, family="sign", tags=_SUB_TAGS)
case("edge.subnormal.exp_log", lambda x: (jnp.exp(x), jnp.log(x), jnp.sqrt(x)), SUB, family="exponential", tags=_SUB_TAGS)
case("edge.subnormal.tanh_logistic", lambda x: (jnp.tanh(x) * 1e38, 1 / (1 + jnp.exp(-x))), SUB, family="tanh", tags=_SUB_TAGS)
case("edge.subnormal.sort", jnp.sort, SUB, family="sort", tags=_SUB_TAGS)
case("edge.subnormal.convert", lambda x: (x.astype(jnp.bfloat16), x.astype(jnp.float16), x.astype(jnp.int32)),
     SUB, family="convert", tags=_SUB_TAGS)
