"""Op rows: chlo.* composites (asin, acos, atanh, asinh, acosh, sinh, cosh, erf) in float16."""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np

from conformance.case import np_dtype, op_row

_EDGES = [0.0, -0.0, 1e-7, -1e-7, 1e-30]
UNIT = np.concatenate([np.linspace(-1, 1, 81), _EDGES, [0.999999, -0.999999, 1.5, -2.0]])
WIDE = np.concatenate([np.linspace(-12, 12, 81), _EDGES, [80.0, -80.0, 1e4, np.inf, -np.inf, np.nan]])
ABOVE_ONE = np.concatenate([np.linspace(1, 40, 81), [1.0, 1.0000001, 1e4, 1e20, np.inf, np.nan, 0.5]])

# composite name -> (jax function, inputs, ONNX op used for f32)
COMPOSITES = {
    "chlo.asin": (jnp.arcsin, UNIT, "Asin"),
    "chlo.acos": (jnp.arccos, UNIT, "Acos"),
    "chlo.atanh": (jnp.arctanh, UNIT, "Atanh"),
    "chlo.asinh": (jnp.arcsinh, WIDE, "Asinh"),
    "chlo.acosh": (jnp.arccosh, ABOVE_ONE, "Acosh"),
    "chlo.sinh": (jnp.sinh, WIDE, "Sinh"),
    "chlo.cosh": (jnp.cosh, WIDE, "Cosh"),
    "chlo.erf": (jsp.erf, WIDE, "Erf"),
}

for name, (fn, values, _) in sorted(COMPOSITES.items()):
    with np.errstate(over="ignore"):  # 1e20 becomes inf
        op_row(f"composite.{name}.float16", fn, values.astype(np.float16))


def _exact_gelu(x):
    import jax

    return jax.nn.gelu(x, approximate=False)


# jax's inline erfc of the exact GELU, put back as chlo.erfc (stablehlo.primitive_groups): Gelu from opset 20,
# below it the Erf form ONNX Runtime fuses; half floats in float32. A bare erfc keeps jax's decomposition.
GELU_GRID = np.concatenate([np.linspace(-12, 12, 481), _EDGES, [np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-40]])
for _dtype in ("float32", "float16", "bfloat16"):
    with np.errstate(over="ignore"):
        op_row(f"composite.chlo.erfc.gelu.{_dtype}", _exact_gelu, GELU_GRID.astype(np_dtype(_dtype)),
               opsets=(None, 18))
op_row("composite.chlo.erfc.bare.float32", jsp.erfc, WIDE.astype(np.float32))
