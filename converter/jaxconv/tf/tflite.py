"""TFLite flatbuffer from the jax2tf serving function, with the program's input and output names.

The converter legalizes the StableHLO inside jax2tf's ``XlaCallModule`` into TFLite builtins. The
signature runner of the result is ``serving_default`` with inputs named like the program's flat
inputs and outputs ``output_0..output_{n-1}``.
"""

from __future__ import annotations

from typing import Any

from jaxconv.errors import ConversionError, UnsupportedError, UsageError
from jaxconv.program import Program

QUANTIZE_MODES = ("float16", "dynamic-range")
# Element types a TFLite model cannot take in or give out.
UNSUPPORTED_IO_DTYPES = {"complex64": "TFLite kernels have no complex arithmetic",
                         "complex128": "TFLite kernels have no complex arithmetic"}


def check_dtypes(program: Program) -> None:
    """Raise UnsupportedError naming every input and output whose dtype TFLite cannot hold."""
    sig = program.signature
    bad = [(kind, t) for kind, infos in (("input", sig.inputs), ("output", sig.outputs))
           for t in infos if t.dtype in UNSUPPORTED_IO_DTYPES]
    if bad:
        names = ", ".join(f"{kind} {t.name} ({t.dtype})" for kind, t in bad)
        raise UnsupportedError(f"TFLite cannot hold {names}: {UNSUPPORTED_IO_DTYPES[bad[0][1].dtype]}; "
                               "convert to SavedModel instead")


def _converter(program: Program, allow_flex: bool, quantize: str | None) -> Any:
    from jaxconv.tf.saved_model import import_tensorflow, module_for

    tf = import_tensorflow()
    module, concrete = module_for(program, clamp_gathers=True)  # TFLite's GATHER_ND does not clamp
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if allow_flex:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
    return converter


def convert(program: Program, *, allow_flex: bool = False, quantize: str | None = None) -> bytes:
    """Convert the program to a TFLite flatbuffer.

    Args:
        program: the traced program.
        allow_flex: also allow TF select ops (the model then needs the flex delegate to run).
        quantize: None, ``float16`` (weights stored as f16) or ``dynamic-range`` (int8 weights).

    Raises:
        UsageError: an unknown quantize mode.
        UnsupportedError: ops or dtypes TFLite cannot convert; names each op and the user's source line.
        ConversionError: the converter failed for another reason.
    """
    from jaxconv.tf.saved_model import quiet_stderr
    from jaxconv.tf.tflite_errors import converter_error

    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise UsageError(f"unknown quantize mode {quantize!r}; use one of: {', '.join(QUANTIZE_MODES)}")
    check_dtypes(program)
    converter = _converter(program, allow_flex, quantize)
    with quiet_stderr() as captured:
        try:
            data = converter.convert()
            error = None
        except Exception as e:  # ConverterError and friends
            error = e
    if error is not None:
        raise converter_error(program, str(error), captured.text, allow_flex=allow_flex) from None
    if not data:
        raise ConversionError("the TFLite converter returned an empty model")
    data = with_signature_metadata(bytes(data), program)
    _check_signature(program, data)
    return data


def with_signature_metadata(data: bytes, program: Program) -> bytes:
    """The model with the program's signature JSON added as metadata ``jaxconv_signature``.

    TFLite's converter reorders subgraph inputs; runners read the program's input order (and
    ``inspect`` the pytree paths) from this metadata.
    """
    import json

    import flatbuffers
    import numpy as np

    from jaxconv.runtimes.tflite import METADATA_NAME, schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    text = json.dumps(program.signature.to_json(), separators=(",", ":")).encode("utf-8")
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(text, dtype=np.uint8)
    model.buffers = list(model.buffers or []) + [buffer]
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = [m for m in (model.metadata or []) if _name(m.name) != METADATA_NAME] + [entry]
    builder = flatbuffers.Builder(len(data) + len(text) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _name(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _check_signature(program: Program, data: bytes) -> None:
    """Make sure the model's serving signature carries exactly the program's names."""
    from jaxconv.runtimes.tflite import signature_names

    inputs, outputs = signature_names(data)
    want_in = [t.name for t in program.signature.inputs]
    want_out = [t.name for t in program.signature.outputs]
    if inputs != want_in or outputs != want_out:
        raise ConversionError(f"the TFLite model's signature has inputs {inputs} and outputs {outputs}; "
                              f"expected {want_in} and {want_out}")
