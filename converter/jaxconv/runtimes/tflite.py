"""Run a TFLite model with LiteRT's interpreter through its signature runner, inputs by name."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from jaxconv.errors import ArtifactError, MissingDependencyError

SIGNATURE_KEY = "serving_default"
METADATA_NAME = "jaxconv_signature"
ROUTE_METADATA = "jaxconv_route"


def _schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError as e:
        raise MissingDependencyError("reading TFLite models needs LiteRT: pip install ai-edge-litert") from e
    return schema_py_generated


class _LazySchema:
    def __getattr__(self, name: str) -> Any:
        return getattr(_schema(), name)


schema = _LazySchema()


def _metadata(model: str | bytes, name: str) -> bytes | None:
    """The bytes of metadata entry ``name`` of a TFLite model, or None."""
    try:
        if isinstance(model, str):
            with open(model, "rb") as f:
                model = f.read()
        root = _schema().Model.GetRootAs(model, 0)
        for i in range(root.MetadataLength()):
            entry = root.Metadata(i)
            if (entry.Name() or b"").decode("utf-8", "replace") == name:
                return bytes(root.Buffers(entry.Buffer()).DataAsNumpy())
    except Exception:  # not a flatbuffer, or metadata from another tool
        return None
    return None


def read_signature(model: str | bytes) -> Any:
    """The jaxconv Signature stored in a TFLite model's metadata, or None when there is none."""
    import json

    from jaxconv.signature import Signature

    raw = _metadata(model, METADATA_NAME)
    if raw is None:
        return None
    try:
        return Signature.from_json(json.loads(raw.decode("utf-8")))
    except Exception:  # metadata from another tool: no stored signature
        return None


def read_route(model: str | bytes) -> str:
    """The route a jaxconv TFLite model was converted by (``xla`` or ``tf-ops``); '' when not recorded."""
    raw = _metadata(model, ROUTE_METADATA)
    return raw.decode("utf-8", "replace") if raw else ""


def _interpreter(model: str | bytes, *, delegates: bool = True) -> Any:
    from jaxconv.tf.saved_model import quiet_stderr

    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError as e:
        raise MissingDependencyError("running TFLite models needs LiteRT: pip install ai-edge-litert") from e
    what = model if isinstance(model, str) else "the TFLite model"
    if isinstance(model, str) and not os.path.isfile(model):
        raise ArtifactError(f"TFLite model not found: {model}")
    try:
        resolver = OpResolverType.AUTO if delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        with quiet_stderr():
            if isinstance(model, str):
                return Interpreter(model_path=model, experimental_op_resolver_type=resolver)
            return Interpreter(model_content=bytes(model), experimental_op_resolver_type=resolver)
    except Exception as e:
        raise ArtifactError(f"LiteRT cannot load {what}: {_first_line(e)}") from e


def _signature_key(interpreter: Any, what: str) -> str:
    keys = list(interpreter.get_signature_list())
    if SIGNATURE_KEY in keys:
        return SIGNATURE_KEY
    if len(keys) == 1:
        return keys[0]
    raise ArtifactError(f"{what} has no {SIGNATURE_KEY} signature (has: {', '.join(keys) or 'none'})")


def _ordered_io(interpreter: Any, key: str, stored: Any) -> tuple[list[str], list[str]]:
    """Signature input/output names: inputs in the stored program order when the model has it,
    else in the order of the model's subgraph inputs; outputs ``output_0, output_1, ...``."""
    from jaxconv.runtimes.tf import output_order

    runner = interpreter.get_signature_runner(key)
    in_details = runner.get_input_details()
    out_details = runner.get_output_details()
    if stored is not None and [t.name for t in stored.inputs] and {t.name for t in stored.inputs} == set(in_details):
        return [t.name for t in stored.inputs], output_order(list(out_details))
    position = {d["index"]: i for i, d in enumerate(interpreter.get_input_details())}
    inputs = sorted(in_details, key=lambda n: (position.get(in_details[n]["index"], len(position)), n))
    return inputs, output_order(list(out_details))


def signature_names(model: str | bytes) -> tuple[list[str], list[str]]:
    """Input names (in program order where stored) and output names of a TFLite model's serving signature."""
    interpreter = _interpreter(model)
    return _ordered_io(interpreter, _signature_key(interpreter, "the TFLite model"), read_signature(model))


class TFLiteRunner:
    """Runs a TFLite model (a path or the flatbuffer bytes) through its serving signature.

    Dynamic dimensions are resized to the given inputs on every call. LiteRT's default XNNPACK
    delegate cannot re-plan some graphs with dynamic shapes; those run on the builtin kernels
    (``delegates`` then reads False).
    """

    kind = "tflite"

    def __init__(self, path_or_bytes: str | bytes) -> None:
        self.what = path_or_bytes if isinstance(path_or_bytes, str) else "the TFLite model"
        self._model = path_or_bytes
        self.signature = read_signature(path_or_bytes) if not isinstance(path_or_bytes, str) or os.path.isfile(
            path_or_bytes) else None
        self.delegates = True
        outputs = self.signature.outputs if self.signature is not None else ()
        self._output_shapes = {t.name: tuple(t.shape) for t in outputs if all(isinstance(d, int) for d in t.shape)}
        self._prepare()
        details = self._runner.get_input_details()
        self.input_dtypes = [np.dtype(details[n]["dtype"]) for n in self.input_names]

    def _prepare(self) -> None:
        self._interpreter = _interpreter(self._model, delegates=self.delegates)
        self._key = _signature_key(self._interpreter, self.what)
        try:
            self.input_names, self.output_names = _ordered_io(self._interpreter, self._key, self.signature)
            self._runner = self._interpreter.get_signature_runner(self._key)
        except Exception as e:
            raise ArtifactError(f"LiteRT cannot prepare {self.what}: {_first_line(e)}") from e

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on flat inputs in signature order; returns the outputs in order."""
        from jaxconv.tf.saved_model import quiet_stderr

        if len(inputs) != len(self.input_names):
            raise ArtifactError(f"{self.what} takes {len(self.input_names)} inputs, got {len(inputs)}")
        feed = {}
        for name, dtype, a in zip(self.input_names, self.input_dtypes, inputs):
            a = np.asarray(a)
            if a.dtype != dtype:
                raise ArtifactError(f"input {name} of {self.what} is {dtype.name}, got {a.dtype.name}")
            feed[name] = np.ascontiguousarray(a)
        try:
            with quiet_stderr():
                out = self._runner(**feed)
        except Exception as e:
            if not self.delegates:
                raise ArtifactError(f"LiteRT failed while running {self.what}: {_first_line(e)}") from e
            self.delegates = False
            self._prepare()
            return self.run(inputs)
        return [self._as_stored_shape(n, np.array(out[n])) for n in self.output_names]

    def _as_stored_shape(self, name: str, value: np.ndarray) -> np.ndarray:
        """The output in the program's static shape (TFLite gives ``[1]`` for some scalars).

        Only a static stored shape with the same element count is applied.
        """
        stored = self._output_shapes.get(name)
        if stored is None or value.shape == stored or value.size != int(np.prod(stored, dtype=np.int64)):
            return value
        return value.reshape(stored)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
