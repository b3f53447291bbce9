"""LiteRT cannot run a zero-size tensor; the converter's check says so and raises (found by the targets run,
seed 7177 program 58: tflite:cummax/i8/crash on i8[0, 1, 1]). The fuzzer counts that crash as known only when
the message is that diagnosis and some value has no elements."""

from __future__ import annotations

import numpy as np

from conformance.fuzz import known
from conformance.fuzz.driver import _classify
from conformance.fuzz.minimise import Failure
from conformance.fuzz.program import FuzzProgram, Step, Value, infer_types


def _cummax() -> FuzzProgram:
    return infer_types(FuzzProgram(inputs=[0], steps=[Step("cummax", (0,), "lax.cummax({0}, axis=0)", 1)],
                                   outputs=[1], types={0: Value((0, 1, 1), "int8")}))


def test_litert_zero_size_crash_is_known_only_with_the_diagnosis():
    detail = ("ArtifactError: LiteRT failed while running the TFLite model: Invalid tensor size. (LiteRT rejects "
              "zero-size tensors: input v0 int8[0, 1, 1])")
    rec: dict = {}
    row = _classify(Failure(_cummax(), [np.zeros((0, 1, 1), np.int8)], "crash", detail=detail), "tflite", rec)
    assert rec["class"] == "tflite:cummax/i8/crash" and row is not None and "litert-zero-size" in rec["facts"]
    other: dict = {}
    assert _classify(Failure(_cummax(), [np.zeros((0, 1, 1), np.int8)], "crash", detail="KeyError: 'x'"),
                     "tflite", other) is None
    assert known.match("cummax/i8/crash", frozenset({"zero-size", "litert-zero-size"})) is None  # ONNX: a bug
