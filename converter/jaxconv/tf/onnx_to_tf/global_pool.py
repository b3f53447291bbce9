"""Global average pooling (the pooling rewrite's finiteness test reads a pool's input with it)."""

from __future__ import annotations

from typing import Any

from jaxconv.tf.onnx_to_tf.table import handles
from jaxconv.tf.onnx_to_tf.values import Value


@handles("GlobalAveragePool")
def global_average_pool(tr: Any, node: Any, ins: list[Value], env: Any) -> Value:
    """The mean over every axis after the channels, kept as size-1 axes."""
    x = ins[0].t
    return Value(tr.tf.reduce_mean(x, axis=list(range(2, len(x.shape))), keepdims=True), ins[0].dtype)
