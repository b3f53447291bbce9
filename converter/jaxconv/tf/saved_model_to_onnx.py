"""``jaxconv saved-model-to-onnx``: a SavedModel (jax2tf's, or TF around JAX) to one ONNX model per
signature.

tf2onnx converts the TF graph of each signature (variables frozen into initializers,
``If``/``While`` into ``If``/``Loop``) and every ``XlaCallModule`` in it goes through jaxconv's
StableHLO lowering (``tf2onnx_handler``). The model's inputs and outputs are named after the
signature's keys, in the signature's order (``signature_keys``); symbolic dimensions take the names
of the module's dimension variables (``b``).

The check (``saved_model_check``) runs the SavedModel's signature in TensorFlow and the ONNX model
in ONNX Runtime on the same inputs and judges every output with ``check``'s rules.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Sequence

from jaxconv.errors import ArtifactError, ConversionError, UnsupportedError, UsageError
from jaxconv.tf.saved_model import import_tensorflow, quiet_stderr, read_signature

SAVED_MODEL_FILE = "saved_model.pb"


@dataclass
class Converted:
    """One signature as an ONNX model.

    Attributes:
        signature: the signature's key (``serving_default``).
        model: the ONNX model.
        inputs, outputs: the signature's keys, in its order (the model's input/output names).
        modules: how many XlaCallModule ops were lowered.
        path: where the model was written, once it is.
    """

    signature: str
    model: Any
    inputs: list[str]
    outputs: list[str]
    modules: int = 0
    path: str = ""


# ---- reading the SavedModel ---------------------------------------------------------------------

def require_saved_model(path: str) -> None:
    """Raise a one-line error unless ``path`` is a SavedModel folder."""
    if not os.path.exists(path):
        raise UsageError(f"SavedModel folder not found: {path}")
    if not os.path.isdir(path):
        raise UsageError(f"{path} is a file; saved-model-to-onnx takes a SavedModel folder")
    if not os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)):
        raise ArtifactError(f"{path} is not a SavedModel folder (no {SAVED_MODEL_FILE})")


def signature_keys(path: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each serving signature's input and output keys, in the signature's order.

    Inputs follow the order of the function the signature serves (its positional arguments, read
    from the call inside the signature's wrapper function), else the sorted order TensorFlow gives
    them; outputs are in TensorFlow's order (sorted, ``output_10`` after ``output_9``). A jaxconv
    SavedModel's ``jaxconv_signature.json`` gives the converted program's order.

    Raises:
        ArtifactError: ``saved_model.pb`` does not parse.
    """
    import_tensorflow()
    from tensorflow.core.protobuf import saved_model_pb2

    from jaxconv.runtimes.tf import output_order

    proto = saved_model_pb2.SavedModel()
    try:
        with open(os.path.join(path, SAVED_MODEL_FILE), "rb") as f:
            proto.ParseFromString(f.read())
    except Exception as e:  # noqa: BLE001  (any parse failure is an unreadable artifact)
        raise ArtifactError(f"cannot read {path}/{SAVED_MODEL_FILE}: {_first_line(e)}") from e
    out: dict[str, tuple[list[str], list[str]]] = {}
    for meta in proto.meta_graphs[:1]:
        wrappers = _signature_wrappers(meta)
        library = {f.signature.name: f for f in meta.graph_def.library.function}
        for key in sorted(meta.signature_def):
            if key.startswith("_"):
                continue
            sig = meta.signature_def[key]
            inputs = _declared_order(sorted(sig.inputs), wrappers.get(key), library)
            out[key] = (inputs, output_order(list(sig.outputs)))
    stored = read_signature(path)
    if stored is not None:  # jaxconv's own SavedModel: the program's order
        for key, (inputs, outputs) in out.items():
            if {t.name for t in stored.inputs} == set(inputs):
                inputs[:] = [t.name for t in stored.inputs]
            if {t.name for t in stored.outputs} == set(outputs):
                outputs[:] = [t.name for t in stored.outputs]
    return out


def _signature_wrappers(meta: Any) -> dict[str, Any]:
    """Signature key -> its ``bare_concrete_function`` (argument keywords, wrapper function name)."""
    nodes = meta.object_graph_def.nodes
    if not nodes:
        return {}
    found: dict[str, Any] = {}
    for child in nodes[0].children:
        if child.local_name != "signatures" or child.node_id >= len(nodes):
            continue
        for ref in nodes[child.node_id].children:
            node = nodes[ref.node_id] if ref.node_id < len(nodes) else None
            if node is not None and node.WhichOneof("kind") == "bare_concrete_function":
                found[ref.local_name] = node.bare_concrete_function
    return found


def _declared_order(keys: list[str], wrapper: Any, library: dict[str, Any]) -> list[str]:
    """``keys`` in the order the served function takes them, when the wrapper shows it; else as given."""
    fn = library.get(wrapper.concrete_function_name) if wrapper is not None else None
    if fn is None:
        return keys
    arg_key = dict(zip((a.name for a in fn.signature.input_arg), wrapper.argument_keywords))
    for node in fn.node_def:
        if node.op in ("StatefulPartitionedCall", "PartitionedCall"):
            order = [arg_key[i.split(":")[0]] for i in node.input if i.split(":")[0] in arg_key]
            if sorted(order) == sorted(keys):
                return order
    return keys


def load(path: str) -> Any:
    """``tf.saved_model.load`` without TensorFlow's log lines.

    Raises:
        ArtifactError: TensorFlow cannot load the folder.
    """
    tf = import_tensorflow()
    try:
        with quiet_stderr():
            return tf.saved_model.load(path)
    except Exception as e:  # noqa: BLE001
        raise ArtifactError(f"TensorFlow cannot load {path}: {_first_line(e)}") from e


def pick_signatures(available: Sequence[str], wanted: str | None, path: str) -> list[str]:
    """The signatures to convert: ``wanted``, or every one.

    Raises:
        UsageError: ``wanted`` is not a signature of the SavedModel, or there is none.
    """
    if not available:
        raise ArtifactError(f"{path} has no serving signatures to convert")
    if wanted is None:
        return list(available)
    if wanted not in available:
        raise UsageError(f"{path} has no signature {wanted!r} (signatures: {', '.join(available)})")
    return [wanted]


def output_paths(output: str, signatures: Sequence[str], all_of_them: bool,
                 saved_model: str | None = None) -> dict[str, str]:
    """``OUT.onnx`` for one chosen signature; ``OUT_<signature>.onnx`` for each when converting all.

    Raises:
        UsageError: the output path is empty, a folder, a file of the SavedModel, or two paths
            would coincide.
    """
    if not output:
        raise UsageError("the output path is empty; give a file path such as -o model.onnx")
    if os.path.isdir(output) or output.endswith(("/", os.sep)):
        raise UsageError(f"output {output} is a folder; give a file path such as "
                         f"{os.path.join(output, 'model.onnx')}")
    if not all_of_them:
        if saved_model is not None:
            _not_in_saved_model(output, saved_model)
        return {signatures[0]: output}
    base, ext = os.path.splitext(output)
    from jaxconv.signature import sanitize

    paths = {s: f"{base}_{sanitize(s)}{ext or '.onnx'}" for s in signatures}
    if saved_model is not None:
        for p in paths.values():
            _not_in_saved_model(p, saved_model)
    if len(set(paths.values())) != len(paths):
        raise UsageError(f"signatures {', '.join(signatures)} give the same output file name; "
                         "pick one with --signature")
    return paths


def _not_in_saved_model(output: str, saved_model: str) -> None:
    """Refuse an output that would replace a file of the SavedModel."""
    inside = os.path.realpath(output).startswith(os.path.realpath(saved_model).rstrip(os.sep) + os.sep)
    if inside and os.path.lexists(output):
        raise UsageError(f"output {output} is a file of the SavedModel {saved_model}; "
                         "give another output path")


# ---- conversion -----------------------------------------------------------------------------------

class _Problems(logging.Handler):
    """Collects tf2onnx's error records: unsupported TF ops and handler failures."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.unsupported: dict[str, int] = {}
        self.failures: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Tensorflow op [%s: %s] is not supported" and record.args:
            op = str(record.args[1])
            self.unsupported[op] = self.unsupported.get(op, 0) + 1
        elif record.exc_info and record.exc_info[1] is not None:
            self.failures.append(record.exc_info[1])

    def error(self, signature: str) -> Exception | None:
        """One error listing every problem, or None."""
        parts = [str(e) for e in self.failures if isinstance(e, UnsupportedError)]
        parts += [f"TensorFlow op {op} x{n} (tf2onnx has no conversion for it)"
                  for op, n in sorted(self.unsupported.items())]
        if parts:
            return UnsupportedError(f"cannot convert signature {signature!r} to ONNX: " + "; ".join(parts))
        if self.failures:
            e = self.failures[0]
            if isinstance(e, Exception) and hasattr(e, "exit_code"):
                return e
            return ConversionError(f"tf2onnx failed on signature {signature!r}: {type(e).__name__}: "
                                   f"{_first_line(e)}")
        return None


def _quiet_tf2onnx(problems: _Problems) -> list[tuple[logging.Logger, int, bool]]:
    """tf2onnx's loggers: nothing printed; errors (its children's included) go to ``problems``."""
    log = logging.getLogger("tf2onnx")
    saved = [(log, log.level, log.propagate)]
    log.propagate = False
    log.setLevel(logging.ERROR)
    log.addHandler(problems)
    return saved


def _restore_logging(saved: list[tuple[logging.Logger, int, bool]], problems: _Problems) -> None:
    logging.getLogger("tf2onnx").removeHandler(problems)
    for log, level, propagate in saved:
        log.setLevel(level)
        log.propagate = propagate


def convert_signature(imported: Any, path: str, signature: str, keys: tuple[list[str], list[str]],
                      opset: int) -> Converted:
    """Convert one signature with tf2onnx and jaxconv's XlaCallModule handler.

    Raises:
        UnsupportedError: every TF op tf2onnx cannot convert and every StableHLO op jaxconv cannot
            lower, in one message.
        ConversionError: freezing or tf2onnx fails otherwise.
    """
    tf = import_tensorflow()
    # isort: off
    from jaxconv.tf import tf2onnx_handler  # first: it says when tf2onnx is missing

    from tf2onnx import optimizer, tf_loader
    from tf2onnx.tfonnx import process_tf_graph
    # isort: on

    concrete = imported.signatures[signature]
    structured = [s for s in tf.nest.flatten(concrete.structured_input_signature)
                  if isinstance(s, tf.TensorSpec)]
    # the signature's placeholders come first (sorted by key, as ``structured``), captures after them
    input_names = [t.name for t in concrete.inputs if t.dtype != tf.dtypes.resource][:len(structured)]
    output_names = [t.name for t in concrete.outputs if t.dtype != tf.dtypes.resource]
    rename = dict(zip(input_names, [s.name for s in structured]))
    rename.update(zip(output_names, sorted(concrete.structured_outputs)))
    problems = _Problems()
    saved = _quiet_tf2onnx(problems)
    try:
        with quiet_stderr(), tf.device("/cpu:0"):
            frozen, tables = tf_loader.from_trackable(imported, concrete, input_names, output_names, False)
            with tf.Graph().as_default() as graph:
                tf.import_graph_def(frozen, name="")
                with tf2onnx_handler.recording() as records:
                    g = process_tf_graph(graph, continue_on_error=True, opset=opset,
                                         input_names=input_names, output_names=output_names,
                                         tensors_to_rename=rename, initialized_tables=tables)
        error = problems.error(signature)
        if error is not None:
            raise error
        with quiet_stderr():
            g = optimizer.optimize_graph(g, catch_errors=True)
            name = os.path.basename(os.path.abspath(path))
            model = g.make_model(f"converted from {name} signature {signature}")
    except (UnsupportedError, ConversionError):
        raise
    except Exception as e:  # noqa: BLE001  (tf2onnx and freezing raise anything)
        error = problems.error(signature)
        if error is not None:
            raise error from e
        raise ConversionError(f"converting signature {signature!r} failed: {type(e).__name__}: "
                              f"{_first_line(e)}") from e
    finally:
        _restore_logging(saved, problems)
    inputs, outputs = keys
    _finish(model, inputs, outputs, records, path, signature)
    return Converted(signature, model, inputs, outputs, modules=len(records))


def _finish(model: Any, inputs: list[str], outputs: list[str], records: list[dict[str, Any]], path: str,
            signature: str) -> None:
    """Order the graph's inputs/outputs as the signature does, name symbolic dimensions, add metadata."""
    graph = model.graph
    by_name = {v.name: v for v in graph.input}
    missing = [k for k in inputs if k not in by_name]
    if missing:
        raise ConversionError(f"signature {signature!r}: tf2onnx gave no graph input for "
                              f"{', '.join(missing)}")
    ordered = [by_name[k] for k in inputs] + [v for v in graph.input if v.name not in inputs]
    _reorder(graph.input, ordered)
    by_name = {v.name: v for v in graph.output}
    _reorder(graph.output, [by_name[k] for k in outputs if k in by_name]
             + [v for v in graph.output if v.name not in outputs])
    renamed: dict[str, str] = {}
    owner: dict[str, int] = {}  # a variable names dimensions of one module only: another's ``b`` may differ
    for k, record in enumerate(records):
        for name, dims in record["inputs"].items():
            v = _graph_input(graph, name)
            if v is None:
                continue
            for d, var in dims.items():
                dim = v.type.tensor_type.shape.dim[d] if d < len(v.type.tensor_type.shape.dim) else None
                if dim is not None and dim.HasField("dim_param") and owner.setdefault(var, k) == k:
                    renamed.setdefault(dim.dim_param, var)
    if renamed:
        _rename_dims(model, renamed)
    for key, value in (("jaxconv.source", "saved-model-to-onnx"),
                       ("jaxconv.saved_model_signature", signature)):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def _graph_input(graph: Any, name: str) -> Any:
    return next((v for v in graph.input if v.name == name), None)


def _reorder(field_: Any, items: list[Any]) -> None:
    copies = [type(v)() for v in items]
    for c, v in zip(copies, items):
        c.CopyFrom(v)
    del field_[:]
    field_.extend(copies)


def _rename_dims(model: Any, renamed: dict[str, str]) -> None:
    """Rename tf2onnx's ``unk__N`` dimension parameters after the module's dimension variables,
    on the inputs and on every output shape inference can tie to them."""
    import onnx

    graph = model.graph
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        for dim in v.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in renamed:
                dim.dim_param = renamed[dim.dim_param]
    try:
        inferred = onnx.shape_inference.infer_shapes(_without_output_params(model))
    except Exception:  # noqa: BLE001  (output dimensions keep tf2onnx's names)
        return
    names = set(renamed.values())
    for v, w in zip(graph.output, inferred.graph.output):
        for dim, new in zip(v.type.tensor_type.shape.dim, w.type.tensor_type.shape.dim):
            if dim.HasField("dim_param") and dim.dim_param.startswith("unk__") and new.dim_param in names:
                dim.dim_param = new.dim_param


def _without_output_params(model: Any) -> Any:
    """A light copy of ``model`` for shape inference: initializers of 1 KiB and more become typed
    inputs (shape inference reads small constants such as axes), outputs' ``unk__N`` dimensions unknown."""
    import onnx

    from jaxconv.onnx.convert import copy_proto_fields

    light = onnx.ModelProto()
    copy_proto_fields(model, light, skip="graph")
    copy_proto_fields(model.graph, light.graph, skip="initializer")
    for t in model.graph.initializer:
        if t.ByteSize() < 1024:
            light.graph.initializer.append(t)
        else:
            light.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for v in light.graph.output:
        for dim in v.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param.startswith("unk__"):
                dim.Clear()
    return light



# ---- the whole command ----------------------------------------------------------------------------

def check_opset(opset: int | None) -> int:
    """``--opset``: None gives the highest opset tf2onnx and jaxconv's lowering share (18 today).

    Raises:
        UsageError: the opset is outside that range.
        MissingDependencyError: tf2onnx is not installed.
    """
    from jaxconv.tf.tf2onnx_handler import opset_range

    low, high = opset_range()
    if opset is None:
        return high
    if not low <= opset <= high:
        raise UsageError(f"--opset {opset} is out of range for SavedModels: tf2onnx writes opsets up to "
                         f"{high} and jaxconv's lowering starts at {low}")
    return opset


def saved_model_to_onnx(path: str, output: str | None = None, signature: str | None = None,
                        opset: int | None = None, check: bool = True, rtol: float | None = None,
                        atol: float | None = None,
                        report_to: list[Any] | None = None) -> dict[str, Converted]:
    """Convert a SavedModel to ONNX, one model per signature, and check each against TensorFlow.

    Args:
        output: ``OUT.onnx``; with ``signature`` the model goes there, else each signature's to
            ``OUT_<signature>.onnx``. None: nothing is written.
        signature: one signature key; None converts every one.
        check: run TensorFlow and ONNX Runtime on the same inputs and compare (see ``check``).
        report_to: receives one report per signature.

    Returns:
        The converted signatures by key.

    Raises:
        UsageError: bad paths, an unknown signature, an opset out of range.
        ArtifactError: not a SavedModel; TensorFlow cannot load or run it (the check).
        UnsupportedError: every op that cannot be converted, in one message.
        MismatchError: an output differs from TensorFlow's (the models are written).
    """
    require_saved_model(path)
    opset = check_opset(opset)
    keys = signature_keys(path)
    chosen = pick_signatures(list(keys), signature, path)
    paths = output_paths(output, chosen, signature is None, path) if output is not None else {}
    imported = load(path)
    missing = [s for s in chosen if s not in imported.signatures]
    if missing:
        raise ArtifactError(f"TensorFlow does not load signature(s) {', '.join(missing)} of {path}")
    converted: dict[str, Converted] = {}
    problems: list[str] = []
    for s in chosen:  # every signature's unsupported ops, in one message
        try:
            converted[s] = convert_signature(imported, path, s, keys[s], opset)
        except UnsupportedError as e:
            problems.append(str(e))
    if problems:
        raise UnsupportedError("; ".join(problems))
    from jaxconv.onnx import convert

    for c in converted.values():
        convert.validate(c.model)
    from jaxconv.tf import saved_model_check as checking

    references = {}
    if check:  # TensorFlow first: when it cannot run the SavedModel, nothing is written
        for s, c in converted.items():
            runner = checking.SignatureRunner(imported, path, s, c.inputs, c.outputs)
            references[s] = checking.tf_references(runner, checking.model_signature(c.model),
                                                   loops=checking.open_loop(c.model))
    if paths:
        _write_all(converted, paths)
    if not check:
        return converted
    reports = [checking.check_against_tf(c.path or c.model, c.path or f"{s}.onnx", c.outputs, references[s],
                                         rtol, atol) for s, c in converted.items()]
    if report_to is not None:
        report_to.extend(reports)
    for r in reports:
        checking.raise_on_mismatch(r)
    return converted


def _write_all(converted: dict[str, Converted], paths: dict[str, str]) -> None:
    """Write every model, all or none (each to a temporary file renamed into place together)."""
    from jaxconv.artifacts import atomic_files
    from jaxconv.onnx.convert import write_model

    order = list(converted)
    with atomic_files([paths[s] for s in order]) as tmps:
        for s, tmp in zip(order, tmps):
            with open(tmp, "wb") as f:
                write_model(converted[s].model, f)
    for s in order:
        converted[s].path = paths[s]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


__all__ = ["Converted", "saved_model_to_onnx"]
