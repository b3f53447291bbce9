"""A tf2onnx handler for ``XlaCallModule``: jaxconv's StableHLO lowering in place of the op.

Importing this module registers, through tf2onnx's ``@tf_op`` mechanism:

- ``XlaCallModule``: the module inside the op is lowered by jaxconv (``xla_call_module``) and
  its ONNX nodes replace the op in tf2onnx's graph, wherever the op is (the main graph, or the
  body of an ``If``/``While`` that tf2onnx turns into ONNX ``If``/``Loop``);
- ``PreventGradient`` (jax2tf's marker on functions without gradients): ``Identity``.

It also teaches tf2onnx to read the op's attributes: its empty list attributes
(``function_list``, ``dim_args_spec``, ...) and output shapes (``Sout``) make tf2onnx stop with
"Could not infer the attribute type" before any handler runs.

Use::

    import jaxconv.tf.tf2onnx_handler  # noqa: F401  (registers the handlers)
    model, _ = tf2onnx.convert.from_function(fn, input_signature=..., opset=18)

    python -m jaxconv.tf.tf2onnx_handler --saved-model DIR --output model.onnx   # tf2onnx's CLI, opset 18

Opset: tf2onnx 1.17 writes ONNX opsets up to 18 and jaxconv's lowering starts at 18, so graphs
holding ``XlaCallModule`` are converted at opset 18 (``opset_range()``; it widens when tf2onnx
learns newer opsets).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Any, Iterator

import numpy as np

from jaxconv.errors import JaxconvError, MissingDependencyError, UnsupportedError
from jaxconv.tf.saved_model import import_tensorflow
from jaxconv.tf.xla_call_module import CallModule, LoweredCall, lower_call_module

import_tensorflow()  # quietly, before tf2onnx imports it

try:
    from tf2onnx import constants as _constants
    from tf2onnx import tf_utils as _tf_utils
    from tf2onnx import utils as _utils
    from tf2onnx.handler import tf_op
except ImportError as _e:
    raise MissingDependencyError(f"tf2onnx is needed to convert SavedModels ({_e}); install it with: "
                                 "pip install 'jaxconv[tf]'") from _e

# Attributes of XlaCallModule that carry nothing the lowering needs, or that onnx.helper cannot hold.
_SKIPPED_ATTRS = frozenset({"Tin", "Tout", "Sout", "_output_shapes", "disabled_checks",
                            "use_shardy_partitioner"})


def opset_range() -> tuple[int, int]:
    """The ONNX opsets a graph with ``XlaCallModule`` can be converted to: jaxconv's lowering
    (18..28) within what tf2onnx can write."""
    from jaxconv.onnx.convert import MAX_OPSET
    from jaxconv.onnx.driver import MIN_OPSET

    return MIN_OPSET, min(MAX_OPSET, max(_constants.OPSET_TO_IR_VERSION))


def _list_values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _read_attrs(node: Any) -> tuple[dict[str, Any], Any]:
    """``read_tf_node_attrs`` for XlaCallModule: the attributes the lowering uses, as ONNX can hold them."""
    from collections import Counter

    attr: dict[str, Any] = {}
    counts: Counter[str] = Counter()
    for name in node.node_def.attr:
        counts[name] += 1
        if name in _SKIPPED_ATTRS:
            continue
        value = node.get_attr(name)
        if name == "function_list":
            names = [getattr(f, "name", str(f)) for f in _list_values(value)]
            if names:
                attr[name] = [n.encode() for n in names]
        elif isinstance(value, list):
            if value:
                attr[name] = [v if isinstance(v, bytes) else str(v).encode() for v in value]
        elif isinstance(value, (bytes, bool, int, float)):
            attr[name] = int(value) if isinstance(value, bool) else value
    return attr, counts


_ORIGINAL_READ = _tf_utils.read_tf_node_attrs


def _read_tf_node_attrs(node: Any) -> Any:
    if node.type == "XlaCallModule":
        return _read_attrs(node)
    return _ORIGINAL_READ(node)


_read_tf_node_attrs.original = _ORIGINAL_READ  # type: ignore[attr-defined]
if getattr(_tf_utils.read_tf_node_attrs, "original", None) is None:
    _tf_utils.read_tf_node_attrs = _read_tf_node_attrs


# What a conversion records per XlaCallModule (saved_model_to_onnx names dimensions with it).
_RECORDS: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "jaxconv_xla_records", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    """Within the block, each converted XlaCallModule appends ``{"node", "platform", "inputs"}``:
    ``inputs`` maps the graph input it reads (through Identity ops) to ``{dimension: name}``."""
    records: list[dict[str, Any]] = []
    token = _RECORDS.set(records)
    try:
        yield records
    finally:
        _RECORDS.reset(token)


def call_module_of(node: Any) -> CallModule:
    """The lowering's view of a tf2onnx ``XlaCallModule`` node."""
    def strings(name: str) -> tuple[str, ...]:
        value = node.get_attr_value(name) or []
        return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in value)

    module = node.get_attr_value("module")
    if not isinstance(module, bytes) or not module:
        raise UnsupportedError(f"XlaCallModule {node.name} has no module attribute")
    return CallModule(module=module, version=int(node.get_attr_value("version") or 0),
                      platforms=strings("platforms"), dim_args_spec=strings("dim_args_spec"),
                      has_token_input_output=bool(node.get_attr_value("has_token_input_output") or 0),
                      function_list=strings("function_list"), name=f"XlaCallModule {node.name}")


_PASS_THROUGH = ("Identity", "IdentityN", "PreventGradient", "StopGradient")


def _graph_input_of(ctx: Any, name: str) -> str | None:
    """The graph input ``name`` reads through Identity/IdentityN ops, or None."""
    graph_inputs = {n.output[0] for n in ctx.inputs}
    for _ in range(64):
        if name in graph_inputs:
            return name
        producer = ctx.get_node_by_output(name, search_in_parent_graphs=False)
        if producer is None or producer.type not in _PASS_THROUGH:
            return None
        name = producer.input[producer.output.index(name) if producer.type == "IdentityN" else 0]
    return None


def _record(ctx: Any, node: Any, lowered: LoweredCall, inputs: list[str]) -> None:
    records = _RECORDS.get()
    if records is None:
        return
    named: dict[str, dict[int, str]] = {}
    for k, dims in lowered.dim_names.items():
        source = _graph_input_of(ctx, inputs[k]) if k < len(inputs) else None
        if source is not None:
            named.setdefault(source, {}).update(dims)
    records.append({"node": node.name, "platform": lowered.platform, "inputs": named})


def convert_node(ctx: Any, node: Any) -> None:
    """Replace the ``XlaCallModule`` ``node`` of tf2onnx graph ``ctx`` by the lowered module's nodes.

    Raises:
        UnsupportedError: the opset is outside ``opset_range()``, or the module cannot be lowered.
    """
    low, high = opset_range()
    if not low <= ctx.opset <= high:
        raise UnsupportedError(f"XlaCallModule {node.name}: jaxconv lowers StableHLO to ONNX opsets "
                               f"{low}..{high} with tf2onnx; the conversion asks for opset {ctx.opset}: "
                               f"pass --opset {high}")
    inputs, outputs = list(node.input), list(node.output)
    lowered = lower_call_module(call_module_of(node), ctx.opset, n_inputs=len(inputs))
    if len(lowered.model.graph.output) != len(outputs):
        raise UnsupportedError(f"XlaCallModule {node.name}: the module returns "
                               f"{len(lowered.model.graph.output)} arrays, the op has {len(outputs)} outputs")
    _record(ctx, node, lowered, inputs)
    splice(ctx, node, lowered.model, inputs, outputs)


def _renamed(graph: Any, mapping: dict[str, str], prefix: str) -> None:
    """Rename every value and node of ``graph`` (and its subgraphs) in place: names in ``mapping``
    as it says, every other name under ``prefix``."""
    def new(name: str) -> str:
        if not name:
            return name
        if name not in mapping:
            mapping[name] = f"{prefix}/{name}"
        return mapping[name]

    for seq in (graph.input, graph.output, graph.value_info):
        for v in seq:
            v.name = new(v.name)
    for t in graph.initializer:
        t.name = new(t.name)
    for n in graph.node:
        n.input[:] = [new(i) for i in n.input]
        n.output[:] = [new(o) for o in n.output]
        n.name = f"{prefix}/{n.name or n.op_type}"
        for a in n.attribute:
            if a.HasField("g"):
                _renamed(a.g, mapping, prefix)
            for g in a.graphs:
                _renamed(g, mapping, prefix)


def _constant_value(node: Any) -> np.ndarray | None:
    from onnx import helper, numpy_helper

    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.name == "value":
            return numpy_helper.to_array(value)
        if a.name in ("value_float", "value_floats"):
            return np.array(value, np.float32)
        if a.name in ("value_int", "value_ints"):
            return np.array(value, np.int64)
    return None


def splice(ctx: Any, node: Any, model: Any, inputs: list[str], outputs: list[str]) -> None:
    """Put ``model``'s graph into tf2onnx graph ``ctx`` in place of ``node``: the model's inputs
    read ``inputs`` and its outputs become ``outputs``."""
    import onnx
    from onnx import numpy_helper
    from tf2onnx.graph import GraphUtil

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = onnx.GraphProto()
    graph.CopyFrom(inferred.graph)
    prefix = _utils.make_name(f"{node.name}/jaxconv")
    mapping = {v.name: name for v, name in zip(graph.input, inputs)}
    _renamed(graph, mapping, prefix)
    infos = list(graph.value_info) + list(graph.output)
    shapes, dtypes = GraphUtil._parse_shape_and_type_from_value_infos(infos)
    out_shapes = [ctx.get_shape(o) for o in outputs]
    out_dtypes = [ctx.get_dtype(o) for o in outputs]
    ctx.remove_node(node.name)
    for t in graph.initializer:
        ctx.make_const(t.name, numpy_helper.to_array(t))
    for n in graph.node:
        value = _constant_value(n) if n.op_type == "Constant" and not n.domain else None
        if value is not None:
            ctx.make_const(n.output[0], value)
            continue
        attrs = {a.name: a for a in n.attribute if not a.HasField("g") and not len(a.graphs)}
        branches = {a.name: GraphUtil.create_graph_from_onnx_graph(a.g, ctx.opset, ctx.extra_opset)
                    for a in n.attribute if a.HasField("g")}
        known = all(o in dtypes for o in n.output)
        ctx.make_node(n.op_type, list(n.input), attr=attrs, outputs=list(n.output), name=n.name,
                      domain=n.domain or _constants.ONNX_DOMAIN, branches=branches,
                      shapes=[shapes.get(o) for o in n.output] if known else None,
                      dtypes=[dtypes[o] for o in n.output] if known else None)
    for v, name, shape, dtype in zip(graph.output, outputs, out_shapes, out_dtypes):
        ctx.make_node("Identity", [v.name], outputs=[name], shapes=[shape], dtypes=[dtype])


@tf_op("XlaCallModule")
class XlaCallModuleHandler:
    """tf2onnx handler: jaxconv's lowering of the op's StableHLO module."""

    @classmethod
    def version_1(cls, ctx: Any, node: Any, **kwargs: Any) -> None:
        convert_node(ctx, node)


@tf_op("PreventGradient")
class PreventGradientHandler:
    """tf2onnx handler: ``PreventGradient`` only matters for gradients; inference is ``Identity``."""

    @classmethod
    def version_1(cls, ctx: Any, node: Any, **kwargs: Any) -> None:
        node.type = "Identity"
        for name in list(node.attr):
            del node.attr[name]


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxconv.tf.tf2onnx_handler ARGS``: tf2onnx's own CLI with these handlers, at
    the highest opset they support unless ``--opset`` says otherwise."""
    from tf2onnx import convert

    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--opset" or a.startswith("--opset=") for a in args):
        args += ["--opset", str(opset_range()[1])]
    saved = sys.argv
    sys.argv = ["tf2onnx.convert"] + args
    try:
        convert.main()
    except JaxconvError as e:
        print(f"jaxconv: error: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
