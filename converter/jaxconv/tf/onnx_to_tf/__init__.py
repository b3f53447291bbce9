"""ONNX (as jaxconv's lowering writes it) -> a ``tf.function`` of plain TF ops, no XlaCallModule.

The route behind ``--route tf-ops``: TFLite's converter then needs only builtin ops, and the
SavedModel runs where XLA is missing or cannot run JAX's LAPACK custom calls. The lowering's
XLA-semantics guards (NaN, -0, integer overflow, out-of-range indices) come along for free.
Each ONNX op family is one module registering its handlers in ``table.HANDLERS``.
"""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf import (  # noqa: F401  (each registers its handlers)
    bitwise,
    control,
    elementwise,
    float64,
    global_pool,
    indexing,
    nn,
    reduce,
    rnn,
    shape,
)
from jaxconv.tf.onnx_to_tf.graph import Translator, Untranslatable, where
from jaxconv.tf.onnx_to_tf.origins import origin
from jaxconv.tf.onnx_to_tf.table import HANDLERS
from jaxconv.tf.onnx_to_tf.values import to_own, widen

# Opset 26 brings BitCast: bit reinterpretation as one TF bitcast, not the float64 arithmetic that
# stands in for it below 26 (TFLite has no float64 kernels).
OPSET = 26
__all__ = [
    "OPSET",
    "HANDLERS",
    "Untranslatable",
    "for_program",
    "serving_function",
    "unsupported_nodes",
    "float64_nodes",
]


def serving_function(tf: Any, model: Any, input_specs: list[Any]) -> Any:
    """A ``tf.function`` taking the model's inputs (typed and named as ``input_specs``) and returning
    ``{"output_0": ..., ...}``.

    Raises:
        Untranslatable: an ONNX node has no TF translation (names the op and source line).
    """
    missing = unsupported_nodes(model.graph)
    if missing:
        raise Untranslatable(f"no TF translation of {'; '.join(missing)}")
    graph = model.graph
    dtypes = [spec.dtype.name if spec.dtype != tf.bfloat16 else "bfloat16" for spec in input_specs]

    def serve(*inputs: Any) -> dict[str, Any]:
        feeds = {g.name: widen(tf, t, d) for g, t, d in zip(graph.input, inputs, dtypes)}
        outs = Translator(tf).run(graph, feeds)
        return {f"output_{i}": tf.identity(to_own(tf, v)) for i, v in enumerate(outs)}

    return tf.function(serve, input_signature=input_specs, autograph=False)


def for_program(program: Any, *, narrow_float64: bool = False) -> tuple[Any, Any, Any]:
    """The program's ONNX (jaxconv's lowering), its serving ``tf.function`` and concrete function.

    ``narrow_float64`` (for TFLite, which has no float64 kernels): the float32 arithmetic the lowering
    widens to float64 is computed in float32 (``float64.narrow_float64``).

    Raises:
        UnsupportedError: the ONNX lowering or the translation cannot handle an op (names it).
        ConversionError: TF failed while building the function.
    """
    from jaxconv.errors import ConversionError, UnsupportedError
    from jaxconv.onnx import convert
    from jaxconv.tf.saved_model import import_tensorflow, quiet_stderr, tensor_specs

    tf = import_tensorflow()
    try:
        model = convert.program_to_onnx(program, OPSET)
    except UnsupportedError as e:
        raise _with_lines(program, e) from e
    if narrow_float64:
        float64.narrow_float64(model)
    function = serving_function(tf, model, tensor_specs(program))
    try:
        with quiet_stderr():
            concrete = function.get_concrete_function()
    except Untranslatable:
        raise
    except Exception as e:
        raise ConversionError(
            f"building TF ops for {program.name} failed: {type(e).__name__}: {str(e).strip()[:300]}"
        ) from e
    return model, function, concrete


def _with_lines(program: Any, error: Exception) -> Exception:
    """The ONNX lowering's refusal followed by the source lines of the custom calls and composites it
    names (``stablehlo.custom_call @lapack_ssyevd_ffi at model.py:4``), when it gives none."""
    from jaxconv.tf.tflite_errors import failures_in_module

    text = str(error)
    try:
        found = failures_in_module(program)
    except Exception:  # noqa: BLE001  (a diagnosis aid only)
        return error
    lines = []
    for f in found:
        label = f"{f.op} at {f.where}"
        if f.where and f.op in text and f.where not in text and label not in lines:
            lines.append(label)
    if not lines:
        return error
    try:
        return type(error)(f"{text} ({'; '.join(lines)})")
    except TypeError:  # an error class with its own constructor
        return error


def _nodes(graph: Any) -> Any:
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from _nodes(a.g)
            for g in a.graphs:
                yield from _nodes(g)


def unsupported_nodes(graph: Any) -> list[str]:
    """``ONNX Foo (stablehlo.bar at model.py:3)`` for each node type with no handler (first of each)."""
    out, seen = [], set()
    for node in _nodes(graph):
        if node.op_type not in HANDLERS and node.op_type not in seen:
            seen.add(node.op_type)
            out.append(f"ONNX {node.op_type} ({where(node) or 'no source'})")
    return out


def float64_nodes(model: Any) -> list[str]:
    """Where the model computes in float64: ``model.py:3 (stablehlo.add)`` per distinct origin."""
    from onnx import TensorProto, shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001  (a diagnosis aid only)
        inferred = model
    f64 = {
        v.name
        for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
        if v.type.tensor_type.elem_type == TensorProto.DOUBLE
    }
    f64 |= {i.name for i in inferred.graph.initializer if i.data_type == TensorProto.DOUBLE}
    out: list[str] = []
    for node in _nodes(inferred.graph):
        if any(n in f64 for n in list(node.output) + list(node.input)):
            label = origin(node)
            if label not in out:
                out.append(label)
    return out
