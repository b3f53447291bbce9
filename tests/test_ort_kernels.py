"""The installed ONNX Runtime against jaxconv's table of its CPU kernels (``dtypes.ORT_KERNELS``).

Each op runs as a one-node model per dtype, with graph optimizations off. A dtype has a kernel
when the session loads with the node as written; ONNX Runtime casts some dtypes to float32 itself
(the saved model then holds Casts); otherwise it refuses the model. An upgrade that adds a kernel
fails here and names the workaround in the lowering that can go.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from jaxconv.onnx import dtypes as dt

ort = pytest.importorskip("onnxruntime")

# How to build a one-node model of each op: inputs ("x" the probed dtype, "b" bool, a list an int64
# constant), outputs ("x", "b" bool, "i" int64), attributes, shape, opset.
X2 = {"inputs": ("x", "x")}
CMP = {"inputs": ("x", "x"), "outputs": ("b",)}
SPECS: dict[str, dict] = {
    **{op: X2 for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "BitwiseAnd", "BitwiseOr", "BitwiseXor")},
    **{op: CMP for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")},
    "Mod": {"inputs": ("x", "x"), "attrs": {"fmod": 1}},
    "IsNaN": {"outputs": ("b",)}, "IsInf": {"outputs": ("b",)},
    "Where": {"inputs": ("b", "x", "x")},
    "BitShift": {"inputs": ("x", "x"), "attrs": {"direction": "LEFT"}},
    "MatMul": {"inputs": ("x", "x"), "shape": (4, 4)},
    **{op: {"inputs": ("x", [1])} for op in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin")},
    "TopK": {"inputs": ("x", [2]), "outputs": ("x", "i")},
    "CumSum": {"inputs": ("x", 0)}, "CumProd": {"inputs": ("x", 0), "opset": 26},
    "Expand": {"inputs": ("x", [2, 4])}, "Tile": {"inputs": ("x", [1, 2])}, "Pad": {"inputs": ("x", [0, 1, 0, 1])},
    **{op: {"shape": (1, 1, 4, 4), "attrs": {"kernel_shape": [2, 2]}} for op in ("MaxPool", "AveragePool")},
    "Conv": {"inputs": ("x", "x"), "shape": (1, 1, 4, 4)},
    "ScatterND": {"inputs": ("x", [[0], [1]], "x"), "shape": (2,), "attrs": {"reduction": "max"}, "run": True},
}


def _model(op: str, dtype: str) -> onnx.ModelProto:
    spec = SPECS.get(op, {})
    shape = list(spec.get("shape", (2, 4)))
    elem = dt.onnx_type(dtype)
    inputs, names, inits = [], [], []
    for i, kind in enumerate(spec.get("inputs", ("x",))):
        name = f"in{i}"
        names.append(name)
        if kind in ("x", "b"):
            inputs.append(helper.make_tensor_value_info(name, elem if kind == "x" else onnx.TensorProto.BOOL, shape))
        else:
            inits.append(numpy_helper.from_array(np.array(kind, np.int64), name))
    kinds = {"x": elem, "b": onnx.TensorProto.BOOL, "i": onnx.TensorProto.INT64}
    outputs = [helper.make_tensor_value_info(f"out{j}", kinds[k], None) for j, k in enumerate(spec.get("outputs", "x"))]
    node = helper.make_node(op, names, [o.name for o in outputs], **spec.get("attrs", {}))
    graph = helper.make_graph([node], op, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", spec.get("opset", 21))])
    model.ir_version = 10
    return model


def probe(op: str, dtype: str, folder: str) -> str:
    """``kernel``, ``ort_casts`` or ``none``: what the installed ONNX Runtime does with ``op`` on ``dtype``."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # the refusals are expected
    options.optimized_model_filepath = os.path.join(folder, f"{op}-{dtype}.onnx")
    try:
        session = ort.InferenceSession(_model(op, dtype).SerializeToString(), options, providers=["CPUExecutionProvider"])
        if SPECS.get(op, {}).get("run"):  # a kernel that checks its dtype only when it runs
            session.run(None, {i.name: np.zeros(i.shape, dt.numpy_dtype(dtype) if i.type != "tensor(bool)" else bool)
                               for i in session.get_inputs()})
    except Exception:  # noqa: BLE001  (NOT_IMPLEMENTED, or a type the op's schema refuses)
        return "none"
    saved = onnx.load(options.optimized_model_filepath)
    return "ort_casts" if any(n.op_type == "Cast" for n in saved.graph.node) else "kernel"


def _ops() -> list[str]:
    return [op for k in dt.ORT_KERNELS for op in k.ops]


def test_every_probe_shape_is_of_an_op_in_the_table():
    assert set(SPECS) <= set(_ops()), set(SPECS) - set(_ops())  # ops without a shape are unary


@pytest.mark.parametrize("op", _ops())
def test_installed_onnxruntime_matches_the_kernel_table(op, tmp_path):
    entry = next(k for k in dt.ORT_KERNELS if op in k.ops)
    found = {dtype: probe(op, dtype, str(tmp_path)) for dtype in sorted(dt.ALL)}
    added = sorted(d for d, how in found.items() if how == "kernel" and d not in entry.dtypes)
    removed = sorted(d for d in entry.dtypes if found[d] != "kernel")
    casts = {d for d, how in found.items() if how == "ort_casts"}
    assert not added, (f"ONNX Runtime {ort.__version__} now has {op} kernels for {', '.join(added)}: add them to "
                       f"dtypes.ORT_KERNELS; the workaround for them can go: {entry.workaround or '(none named)'}")
    assert not removed, f"ONNX Runtime {ort.__version__} has no {op} kernel for {', '.join(removed)} any more"
    assert casts == set(entry.ort_casts), f"{op}: ONNX Runtime casts {sorted(casts)} to float32 itself"


def test_the_probe_tells_a_kernel_from_a_cast_from_a_refusal(tmp_path):
    assert probe("Add", "float32", str(tmp_path)) == "kernel"
    assert probe("Add", "float16", str(tmp_path)) == "ort_casts"
    assert probe("Add", "bfloat16", str(tmp_path)) == "none"
