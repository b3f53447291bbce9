"""A helper for tests of the check's judging: one input set judged against the ONNX model of a function."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

import jaxconv
from jaxconv.judging import judge_set
from jaxconv.runtimes import open_artifact
from jaxconv.signature import Signature, input_infos, output_infos


def judge_one_set(fn: Callable[..., Any], inputs: Sequence[np.ndarray], label: str, folder: Any,
                  actual: Sequence[np.ndarray] | None = None, opset: int | None = None):
    """(rows, jax.jit's outputs, the outputs judged) of ``judge_set`` on ``inputs`` labelled ``label``,
    the artifact being ``fn``'s ONNX model written in ``folder``; ``actual`` replaces its outputs."""
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    path = str(folder / "m.onnx")
    jaxconv.to_onnx(fn, *specs, path=path, check=False, opset=opset)
    out = jax.eval_shape(fn, *specs)
    sig = Signature(input_infos(specs, [f"x{i}" for i in range(len(specs))]),
                    output_infos(jax.tree_util.tree_leaves(out), jax.tree_util.tree_structure(out)))
    runner = open_artifact(path)
    expected = [np.asarray(v) for v in jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))]
    got = list(actual) if actual is not None else [np.asarray(a) for a in runner.run(list(inputs))]
    return judge_set(runner, fn, specs, sig, list(inputs), expected, got, None, None, label), expected, got
