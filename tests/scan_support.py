"""Helpers shared by the tests of the scan and RNN-cell rules (a graph's op types, ORT without its own
optimizations, bits compared but for a NaN's sign)."""

from __future__ import annotations

import collections

import jax
import numpy as np
import onnx
import onnxruntime as ort

import jaxconv


def convert(fn, x):
    """``fn``'s ONNX for one input shaped like ``x``, unchecked."""
    return jaxconv.to_onnx(fn, jax.ShapeDtypeStruct(x.shape, x.dtype), check=False)


def ops(model: onnx.ModelProto) -> tuple[collections.Counter, collections.Counter]:
    """(op types of the main graph, op types of every subgraph)."""
    main = collections.Counter(n.op_type for n in model.graph.node)
    body: collections.Counter = collections.Counter()

    def walk(graph):
        for n in graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    body.update(b.op_type for b in a.g.node)
                    walk(a.g)
    walk(model.graph)
    return main, body


def unoptimized(model: onnx.ModelProto):
    """``run(x)``: the model in ORT with its graph optimizations off (the graph's own kernels)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {session.get_inputs()[0].name: x})


def same_bits(got, want):
    """Bit for bit, but for the sign of a NaN (a negation folded into the weights can flip a NaN's)."""
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(g[~np.isnan(g)].view(np.uint32), w[~np.isnan(w)].view(np.uint32))
