"""A batch norm after a convolution with a weight of -FLT_MAX: ONNX Runtime folds the scale into the Conv's
weights, whose products then overflow (inf - inf = NaN) where jax.jit's order gives -inf (README: Known
differences, the Conv scale fold). The known row needs a closed-over weight near the largest float, as the
input rows need a huge input."""

from __future__ import annotations

import numpy as np

from conformance.fuzz import known
from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types

CONV = ("lax.conv_general_dilated({0}, _w(36994585, (1, 1, 3, 16), 'float32', 1, 0), (1, 1), 'VALID', "
        "dimension_numbers=('NHWC', 'HWIO', 'NHWC'))")
NORM = "({0} - 0.5) * _w(811472334, (16,), 'float32', 1, EDGE) + 0.1"


def _program(edge: float) -> FuzzProgram:
    return infer_types(FuzzProgram(
        inputs=[0], steps=[Step("conv_nhwc", (0,), CONV, 1), Step("batch_norm", (1,), NORM.replace("EDGE", repr(edge)), 2)],
        outputs=[2], types={0: Value((1, 1, 1, 3), "float32")}))


def test_a_weight_near_the_largest_float_is_a_fact():
    from conformance.fuzz.program import PRELUDE

    scope: dict = {}
    exec(PRELUDE, scope)
    assert np.abs(scope["_w"](811472334, (16,), "float32", 1, 0.05)).max() == np.finfo(np.float32).max
    seen = known.facts([np.ones((1, 1, 1, 3), np.float32)], program=_program(0.05))
    assert "huge-weight" in seen and "huge-input" not in seen
    assert known.match("conv_nhwc+batch_norm/f32/nan", seen) is not None
    assert known.match("conv_nhwc+batch_norm/f32/value", seen) is None  # overflow shows as NaN or inf only
    plain = known.facts([np.ones((1, 1, 1, 3), np.float32)], program=_program(0.0))
    assert "huge-weight" not in plain and known.match("conv_nhwc+batch_norm/f32/nan", plain) is None
