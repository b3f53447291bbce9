"""TFLite flatbuffer with the program's input and output names, by one of two routes.

- ``xla``: the converter legalizes the StableHLO inside jax2tf's ``XlaCallModule`` into TFLite
  builtins (only partly: many ops and dtypes do not convert).
- ``tf-ops``: jaxconv's ONNX lowering translated to plain TF ops (``tf.onnx_to_tf``), which the
  converter maps onto builtins; dtypes TFLite lacks are computed wide and rounded back.
- ``auto`` tries ``xla`` and falls back to ``tf-ops`` per model when the conversion fails, LiteRT
  rejects the model, or the result differs from jax.jit (``convert_routed``).

The signature runner of the result is ``serving_default`` with inputs named like the program's flat
inputs and outputs ``output_0..output_{n-1}``; metadata ``jaxconv_route`` records the route.
"""

from __future__ import annotations

from typing import Any, Callable

from jaxconv.errors import ArtifactError, ConversionError, JaxconvError, UnsupportedError, UsageError
from jaxconv.program import Program

QUANTIZE_MODES = ("float16", "dynamic-range")
ROUTES = ("xla", "tf-ops", "auto")
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


def _converter(program: Program, allow_flex: bool, quantize: str | None, route: str) -> tuple[Any, Any, Any]:
    """The TFLite converter, the ONNX model (tf-ops route; else None) and the traced function."""
    from jaxconv.tf.saved_model import import_tensorflow, module_for

    tf = import_tensorflow()
    model = None
    if route == "tf-ops":
        from jaxconv.tf.onnx_to_tf import for_program

        module = tf.Module()
        model, _, concrete = for_program(program, narrow_float64=True)
        _check_float64(program, model)
    else:
        module, concrete = module_for(program, clamp_gathers=True)  # TFLite's GATHER_ND does not clamp
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if allow_flex:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    # By default the converter writes every +-inf constant as +-FLT_MAX (so a -inf mask fill, a max
    # pooling pad or a reduce_max init stops being -inf); XLA keeps the infinities.
    converter.canonicalizing_inf_as_min_max_float = False
    if quantize is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
    return converter, model, concrete


def convert(program: Program, *, allow_flex: bool = False, quantize: str | None = None,
            route: str = "xla") -> bytes:
    """Convert the program to a TFLite flatbuffer by one route (``xla`` or ``tf-ops``).

    Args:
        program: the traced program.
        allow_flex: also allow TF select ops (the model then needs the flex delegate to run).
        quantize: None, ``float16`` (weights stored as f16) or ``dynamic-range`` (int8 weights).
        route: ``xla`` (jax2tf's XlaCallModule) or ``tf-ops`` (jaxconv's ONNX as plain TF ops).

    Raises:
        UsageError: an unknown quantize mode.
        UnsupportedError: ops or dtypes TFLite cannot convert; names each op and the user's source line.
        ConversionError: the converter failed for another reason.
    """
    from jaxconv.tf.saved_model import quiet_stderr
    from jaxconv.tf.tflite_errors import converter_error

    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise UsageError(f"unknown quantize mode {quantize!r}; use one of: {', '.join(QUANTIZE_MODES)}")
    if route not in ROUTES[:2]:
        raise UsageError(f"unknown TFLite route {route!r}; use one of: {', '.join(ROUTES)}")
    check_dtypes(program)
    converter, model, concrete = _converter(program, allow_flex, quantize, route)
    with quiet_stderr() as captured:
        try:
            data = converter.convert()
            error = None
        except Exception as e:  # ConverterError and friends
            error = e
    if error is not None:
        if route == "tf-ops":
            raise tf_ops_error(str(error), allow_flex=allow_flex, model=model, concrete=concrete) from error
        raise converter_error(program, str(error), captured.text, allow_flex=allow_flex) from error
    if not data:
        raise ConversionError("the TFLite converter returned an empty model")
    data = with_signature_metadata(bytes(data), program, route)
    _check_signature(program, data)
    return data


def _check_float64(program: Program, model: Any) -> None:
    """Raise UnsupportedError naming the float64 inputs and outputs and where the ONNX ``model`` computes
    in float64 (TFLite has no float64 kernels)."""
    from jaxconv.tf.onnx_to_tf import float64_nodes

    sig = program.signature
    names = [t.name for t in list(sig.inputs) + list(sig.outputs) if t.dtype == "float64"]
    where = float64_nodes(model)
    if names or where:
        more = f" (+{len(where) - 4} more)" if len(where) > 4 else ""
        found = "; ".join(([", ".join(names)] if names else []) + where[:4]) + more
        ours = "" if names or "f64" in program.exported.mlir_module() else " (the ONNX lowering widens these)"
        hint = "compute in float32, or convert" if not ours else "convert"
        raise UnsupportedError(
            f"TFLite has no float64 kernels: float64 in {found}{ours}; {hint} to SavedModel or ONNX instead"
        )


def tf_ops_error(message: str, *, allow_flex: bool, model: Any = None, concrete: Any = None) -> JaxconvError:
    """The error for a converter failure on the tf-ops route: the TF ops TFLite has no builtin for,
    each with the StableHLO op and source line it was translated from (given the ONNX ``model`` and
    the traced ``concrete`` function)."""
    from jaxconv.tf.tflite_errors import summarize, tf_ops_failures

    # The converter's own locations are the translator's TF calls, not the user's source.
    failures = tf_ops_failures(message, _locator(model, concrete))
    if not failures:
        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "unknown error")
        return ConversionError(f"the TFLite converter failed on the tf-ops route: {first[:300]}")
    hint = "convert to SavedModel or ONNX instead"
    if not allow_flex and all(f.needs_flex for f in failures):
        hint = "these are TF ops: retry with --allow-flex (allow_flex=True), or convert to SavedModel or ONNX"
    return UnsupportedError(f"TFLite cannot convert (tf-ops route): {summarize(failures)}; {hint}")


def _locator(model: Any, concrete: Any) -> Callable[[str, str], list[str]]:
    """``(tf.AddV2 | tfl.add, element)`` -> where the ONNX nodes that built such TF ops came from."""
    import re

    from jaxconv.tf.onnx_to_tf.origins import sources_of

    def locate(name: str, element: str) -> list[str]:
        if model is None or concrete is None:
            return []
        dialect, _, op = name.partition(".")
        key = op.replace("_", "").lower()
        if dialect == "tf":
            return sources_of(model, concrete, lambda t: t == op, element)
        if dialect == "tfl":  # tfl.batch_matmul <- BatchMatMulV2, tfl.add <- AddV2
            return sources_of(model, concrete, lambda t: re.sub(r"v\d+$", "", t.lower()) == key, element)
        return []

    return locate


def convert_routed(program: Program, *, route: str = "auto", allow_flex: bool = False,
                   quantize: str | None = None,
                   judge: Callable[[bytes], Any] | None = None) -> tuple[bytes, Any]:
    """Convert by ``route``; with ``auto``, fall back from ``xla`` to ``tf-ops`` per model.

    ``auto`` keeps the ``xla`` model when it converts, LiteRT runs it and ``judge`` (a check against
    jax.jit returning a CheckReport, or ``run_once``, which returns None and only runs the model)
    finds no differing output. Otherwise the ``tf-ops`` model is
    taken, unless it fails worse (conversion, run or check), when the ``xla`` outcome stands.

    Returns:
        The flatbuffer and the judge's report of it (None without ``judge``).

    Raises:
        UsageError: an unknown route.
        UnsupportedError, ConversionError, ArtifactError: every tried route failed; the message names
            each route's failure.
    """
    if route not in ROUTES:
        raise UsageError(f"unknown TFLite route {route!r}; use one of: {', '.join(ROUTES)}")
    tried = ("xla", "tf-ops") if route == "auto" else (route,)
    kept: list[tuple[int, bytes, Any]] = []  # (badness, data, report)
    errors: list[tuple[str, JaxconvError]] = []
    for r in tried:
        try:
            data = convert(program, allow_flex=allow_flex, quantize=quantize, route=r)
            report = judge(data) if judge is not None else None
        except (UnsupportedError, ConversionError, ArtifactError) as e:
            errors.append((r, e))
            continue
        clean = report is None or (report.ok and not report.edge_differences)
        badness = 0 if clean else 1 if report.ok else 2
        if badness == 0:
            return data, report
        kept.append((badness, data, report))
    if kept:
        best = min(kept, key=lambda k: k[0])
        return best[1], best[2]
    first = errors[0][1]
    if len(errors) == 1:
        explained = run_error(program, first)
        if explained is first:
            raise first
        raise explained from first
    rest = "; ".join(f"the {r} route: {e}" for r, e in errors[1:])
    raise run_error(program, type(first)(f"{first}; {rest}")) from first


def run_once(program: Program) -> Callable[[bytes], None]:
    """A judge for ``convert_routed`` that compares nothing: it runs the model once in LiteRT on
    seeded random inputs (no jax.jit) and lets only a failure to run send ``auto`` to ``tf-ops``."""

    def judge(data: bytes) -> None:
        from jaxconv.check_inputs import make_inputs
        from jaxconv.runtimes.tflite import TFLiteRunner

        TFLiteRunner(data).run(make_inputs(program.signature, constraints=program.constraints))
        return None

    return judge


def run_error(program: Program, error: JaxconvError) -> JaxconvError:
    """``error`` (of any route) followed by the zero-size tensors and the ops making them, with source
    lines, when LiteRT failed to run a model at its zero-size limit ("Invalid tensor size")."""
    from jaxconv.tf.tflite_errors import summarize, zero_size_failures

    if "Invalid tensor size" not in str(error):
        return error
    inputs = [f"{t.name} {t.dtype}{list(t.shape)}" for t in program.signature.inputs if 0 in t.shape]
    found = zero_size_failures(program)
    if not found and not inputs:
        return error
    parts = ([f"input {', '.join(inputs)}"] if inputs else []) + ([summarize(found)] if found else [])
    return type(error)(f"{error} (LiteRT rejects zero-size tensors: {'; '.join(parts)})")


def with_signature_metadata(data: bytes, program: Program, route: str = "xla") -> bytes:
    """The model with the program's signature JSON as metadata ``jaxconv_signature`` and the route
    it was converted by as ``jaxconv_route``.

    TFLite's converter reorders subgraph inputs; runners read the program's input order (and
    ``inspect`` the pytree paths) from this metadata.
    """
    import json

    import flatbuffers
    import numpy as np

    from jaxconv.runtimes.tflite import METADATA_NAME, ROUTE_METADATA, schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    text = json.dumps(program.signature.to_json(), separators=(",", ":")).encode("utf-8")
    entries = {METADATA_NAME: text, ROUTE_METADATA: route.encode("utf-8")}
    model.metadata = [m for m in (model.metadata or []) if _name(m.name) not in entries]
    for name, payload in entries.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(payload, dtype=np.uint8)
        model.buffers = list(model.buffers or []) + [buffer]
        entry = schema.MetadataT()
        entry.name = name
        entry.buffer = len(model.buffers) - 1
        model.metadata.append(entry)
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
