"""Walk an ONNX graph node by node, building each node from TF ops through the op table."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from jaxconv.errors import UnsupportedError
from jaxconv.tf.onnx_to_tf.origins import scope_name
from jaxconv.tf.onnx_to_tf.table import EXACT, HANDLERS
from jaxconv.tf.onnx_to_tf.values import Value, constant, narrow


class Untranslatable(UnsupportedError):
    """An ONNX node the tf-ops route cannot build; names the op and the user's source line."""


def where(node: Any) -> str:
    """``stablehlo.sort at model.py:12`` for a node written by jaxconv's lowering ('' when unknown)."""
    from jaxconv.tf.onnx_to_tf.origins import source_of

    props = {p.key: p.value for p in node.metadata_props}
    source = source_of(node)
    return f"{props.get('stablehlo.op', '')}{' at ' + source if source else ''}".strip()


class Translator:
    """Builds TF ops for ONNX graphs; ``attrs`` and ``subgraph`` are what handlers use.

    Args:
        tf: the imported tensorflow module.
    """

    def __init__(self, tf: Any) -> None:
        self.tf = tf
        self.node: Any = None
        self.producers: dict[str, Any] = {}  # value name -> the ONNX node writing it (every graph so far)

    def run(
        self, graph: Any, feeds: Mapping[str, Value], outer: Mapping[str, Value] | None = None
    ) -> list[Value]:
        """Translate ``graph`` with its inputs bound to ``feeds``; names not found look in ``outer``."""
        from onnx import numpy_helper

        env: dict[str, Value] = dict(outer or {})
        for init in graph.initializer:
            env[init.name] = constant(self.tf, numpy_helper.to_array(init), _dtype_of(init.data_type))
        env.update(feeds)
        self.producers.update({o: node for node in graph.node for o in node.output if o})
        for i, node in enumerate(graph.node):
            self._node(node, env, i)
        return [env[o.name] for o in graph.output]

    def _node(self, node: Any, env: dict[str, Value], index: int) -> None:
        handler = HANDLERS.get(node.op_type)
        if handler is None or node.domain not in ("", "ai.onnx", "jaxconv.tf"):  # jaxconv.tf: float64.py
            raise Untranslatable(f"no TF translation of ONNX {node.op_type} ({where(node) or node.name})")
        inputs = [env[n] if n else None for n in node.input]
        outer, self.node = self.node, node
        try:
            with self.tf.name_scope(scope_name(node, index)):  # origins.sources_of reads it back
                out = handler(self, node, inputs, env)
        except UnsupportedError:
            raise
        except Exception as e:
            raise Untranslatable(
                f"ONNX {node.op_type} ({where(node) or node.name}) could not be built from TF ops: "
                f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
            ) from e
        finally:
            self.node = outer
        outs = out if isinstance(out, (list, tuple)) else [out]
        for name, v in zip(node.output, outs):
            if name:
                if node.op_type not in EXACT:
                    v = Value(narrow(self.tf, v.t, v.dtype), v.dtype)
                env[name] = v

    def subgraph(self, graph: Any, feeds: Sequence[Value], env: Mapping[str, Value]) -> list[Value]:
        """Run a Loop/If body with its inputs bound in order to ``feeds`` and the enclosing names visible."""
        bound = {i.name: v for i, v in zip(graph.input, feeds)}
        return self.run(graph, bound, env)


def attrs(node: Any) -> dict[str, Any]:
    """The node's attributes as Python values (tensors as numpy arrays)."""
    from onnx import helper, numpy_helper

    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.type == a.TENSOR:
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode("utf-8")
        out[a.name] = value
    return out


def static(tf: Any, v: Value | None) -> np.ndarray | None:
    """The value's contents when known while tracing (constants, static shapes), else None."""
    if v is None:
        return None
    return tf.get_static_value(v.t)


def _dtype_of(elem_type: int) -> str:
    from jaxconv.tf.onnx_to_tf.values import ONNX_DTYPES

    if elem_type not in ONNX_DTYPES:
        raise UnsupportedError(f"the tf-ops route has no tensors of ONNX element type {elem_type}")
    return ONNX_DTYPES[elem_type]
