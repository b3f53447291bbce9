"""The large-model writers of ``convert.save`` and ``stream.save`` share one staging step:
the model and ``PATH.data`` appear together, or neither does."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from jaxconv.onnx import convert, stream


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64 * 1024, dtype=np.float32).reshape(256, 256), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 256])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_a_failure_while_staging_leaves_neither_file_nor_the_folder(tmp_path):
    path = tmp_path / "out" / "m.onnx"
    with pytest.raises(OSError, match="disk full"):
        with stream.staged_with_data(str(path)) as (model_path, data_path):
            open(data_path, "wb").write(b"x")
            raise OSError("disk full")
    assert os.listdir(tmp_path / "out") == []


def test_staged_files_are_renamed_into_place(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")
    with stream.staged_with_data(str(path)) as (model_path, data_path):
        assert os.path.dirname(model_path) == os.path.dirname(data_path) != str(tmp_path)
        assert os.path.basename(data_path) == "m.onnx.data"
        open(model_path, "wb").write(b"model")
        open(data_path, "wb").write(b"data")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    assert path.read_bytes() == b"model" and (tmp_path / "m.onnx.data").read_bytes() == b"data"


def test_convert_save_of_a_large_model_runs_from_its_data_file(tmp_path, monkeypatch):
    monkeypatch.setattr(convert, "EXTERNAL_DATA_BYTES", 100_000)  # stand-in for the 2 GB limit
    ort = pytest.importorskip("onnxruntime")
    model = _model()
    path = str(tmp_path / "m.onnx")
    convert.save(model, path)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    assert os.path.getsize(path) < 10_000 and model.graph.initializer[0].raw_data  # the caller's proto keeps its data
    x = np.ones((1, 256), np.float32)
    (got,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got, x @ numpy_helper.to_array(model.graph.initializer[0]))
