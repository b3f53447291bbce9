"""bfloat16 arithmetic as XLA on the CPU computes it: in float32, rounded after each op, with one exception.

The CPU has no bfloat16 arithmetic, so XLA's float normalization gives each bfloat16 arithmetic op a
float32 result and rounds it back to bfloat16 for its users, as the lowering does (``compute_in`` and a
Cast back). Where a user is the program's own ``convert`` to float32 (``x.astype(jnp.float32)``, the
convert inside ``jax.nn.softmax`` and a norm's float32 statistics), XLA hands it the float32 result before
that rounding. Measured on jax 0.10.2, 64x128 random operands: ``exp(x).astype(f32)``, ``(x + y)`` and
``(x * y)`` so converted, ``x @ w``, a convolution, ``tanh``, ``sqrt``, ``rsqrt``, ``log``, ``erf``,
``sin``, ``atan2``, ``log1p``, ``expm1``, ``cbrt``, ``pow`` and the last op of ``logistic`` equal the
float32 computation in every element (the rounded value in 0-47% of them). Data movement (reshape,
transpose, slice, select, maximum, negation) between the op and the convert keeps the rounding, as do
reductions, reduce windows and cumulative sums (XLA accumulates those in bfloat16), and a convert pair the
program writes itself (``y.astype(bf16).astype(f32)``).
float16 is not normalized this way (its converts of computed values round, measured the same way).
jax 0.11.2's XLA rounds a dot's result before such a convert (every element of ``(x @ w).astype(f32)``, 64x128
by 128x128, is the rounded product there; the other ops above are as on jax 0.10.2), so dots follow the
version of the jax in the process (``dots_reach_converts_unrounded``).
"""

from __future__ import annotations

import onnx_ir as ir

# The StableHLO ops whose bfloat16 result XLA on the CPU computes in float32 (measured, above).
IN_FLOAT32 = frozenset({
    "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.power",
    "stablehlo.atan2", "stablehlo.exponential", "stablehlo.exponential_minus_one", "stablehlo.log",
    "stablehlo.log_plus_one", "stablehlo.logistic", "stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.cbrt",
    "stablehlo.tanh", "stablehlo.tan", "stablehlo.sine", "stablehlo.cosine", "stablehlo.dot_general",
    "stablehlo.dot", "stablehlo.convolution",
})
# The ops of IN_FLOAT32 whose rounding depends on the XLA version (dots_reach_converts_unrounded).
_DOTS = frozenset({"stablehlo.dot_general", "stablehlo.dot"})
# Composites whose native lowering is one float32 op XLA computes so too (chlo.erf is HLO's erf).
_COMPOSITE_OPS = frozenset({"Erf"})


def unrounded(cast: ir.Node | None) -> ir.Value | None:
    """The float32 value XLA hands a convert to float32 in place of ``cast``'s output, else None.

    ``cast`` produces the convert's bfloat16 operand; it counts when it is the lowering's own rounding of
    an op in ``IN_FLOAT32`` (or of an erf composite) from float32.
    """
    if cast is None or cast.op_type != "Cast" or cast.domain or cast.attributes["to"].as_int() != ir.DataType.BFLOAT16:
        return None
    source = cast.inputs[0]
    if source is None or source.dtype not in (None, ir.DataType.FLOAT):  # dtypes are inferred after lowering
        return None
    kind = cast.metadata_props.get("stablehlo.op", "")
    made = source.producer()
    if kind in IN_FLOAT32 and (kind not in _DOTS or dots_reach_converts_unrounded()):
        return source
    if kind == "stablehlo.composite" and made is not None and made.op_type in _COMPOSITE_OPS:
        return source
    return None


def dots_reach_converts_unrounded() -> bool:
    """Whether jax.jit on the CPU hands a convert to float32 the float32 value of a bfloat16 dot: jax 0.10's
    XLA does; jax 0.11.2's rounded it to bfloat16 first in a 64x128x128 and a 4x8x3 product (measured),
    though not in an 8x64x8 ``x @ x.T`` (the rule follows the first two)."""
    import jax

    return jax.__version_info__ < (0, 11)
