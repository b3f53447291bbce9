"""scripts/ab_graphs.py: zoo graphs saved with their inputs, two folders timed against each other with several
sessions a side, the outputs' largest difference reported, and usage errors for what is not there."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))

import ab_graphs  # noqa: E402


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")]


def test_saved_graphs_compare_with_their_nodes_ratios_and_difference(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert ab_graphs.main(["save", a, "--models", "tiny"]) == 0
    assert sorted(os.listdir(a)) == ["tiny.inputs.npz", "tiny.onnx"]
    shutil.copytree(a, b)
    (same,) = ab_graphs.compare(a, b, ["tiny"], sessions=2, iters=5)[2:]
    name, nodes, wall, cpu, apart, ms, diff, _ = _cells(same)
    assert name == "tiny" and nodes.split(" -> ")[0] == nodes.split(" -> ")[1] and diff == "0"
    assert 0.2 < float(wall) < 5 and 0.2 < float(cpu) < 5 and 0 < float(apart) <= 1 and float(ms) > 0
    model = onnx.load(os.path.join(b, "tiny.onnx"))  # B: a weight scaled, so its outputs move
    biggest = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    biggest.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(biggest) * 2, biggest.name))
    onnx.save(model, os.path.join(b, "tiny.onnx"))
    (moved,) = ab_graphs.compare(a, b, ["tiny"], sessions=1, iters=3)[2:]
    assert 0 < float(_cells(moved)[6]) < float("inf")  # a finite difference: the outputs' largest


def test_the_largest_difference_is_finite_unless_shapes_or_nan_places_differ():
    a = [np.array([1.0, np.nan, -0.0], np.float32)]
    assert ab_graphs._largest_difference(a, [np.array([1.5, np.nan, 0.0], np.float32)]) == 0.5
    assert ab_graphs._largest_difference(a, [np.array([1.0, 2.0, -0.0], np.float32)]) == float("inf")
    assert ab_graphs._largest_difference(a, [np.zeros(2, np.float32)]) == float("inf")
    assert ab_graphs._largest_difference(a, a) == 0.0


@pytest.mark.parametrize("argv, message", [
    (["save", "DIR", "--models", "nope"], "unknown model(s) nope"),
    (["compare", "DIR", "MISSING"], "MISSING: no such folder"),
    (["compare", "DIR", "DIR"], "not saved in both folders: any model"),
    (["compare", "DIR", "DIR", "--models", "tiny"], "not saved in both folders: tiny"),
])
def test_what_is_not_there_is_a_usage_error(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / a) if a in ("DIR", "MISSING") else a for a in argv]
    (tmp_path / "DIR").mkdir()
    with pytest.raises(SystemExit) as e:
        ab_graphs.main(argv)
    assert e.value.code == 2 and message.replace("MISSING", str(tmp_path / "MISSING")) in capsys.readouterr().err
