"""Runtimes: bfloat16 in and out of ONNX Runtime, artifact kinds, clear errors."""

import ml_dtypes
import numpy as np
import pytest

from jaxconv.errors import ArtifactError
from jaxconv.runtimes import artifact_kind, open_artifact
from lowering_check import assert_onnx_matches_jax


def test_bfloat16_inputs_and_outputs_round_trip():
    x = np.array([1.5, 2.25, -3, 1e30], ml_dtypes.bfloat16)
    y = np.array([3.1, 2, 7, 10], ml_dtypes.bfloat16)
    model = assert_onnx_matches_jax(lambda a, b: (a * b, (a + 1).reshape(2, 2)), x, y)
    assert model.graph.output[0].type.tensor_type.elem_type == 16  # BFLOAT16


def test_artifact_kinds(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "saved_model.pb").write_bytes(b"x")
    assert artifact_kind(str(tmp_path / "m.onnx")) == "onnx"
    assert artifact_kind(str(tmp_path / "saved")) == "saved-model"
    (tmp_path / "m.xyz").write_bytes(b"x")
    with pytest.raises(ArtifactError, match="unknown artifact type .xyz"):
        artifact_kind(str(tmp_path / "m.xyz"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="without saved_model.pb"):
        artifact_kind(str(tmp_path / "empty"))


def test_corrupt_onnx_is_an_artifact_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ArtifactError, match="ONNX Runtime cannot load"):
        open_artifact(str(path))


def test_corrupt_jaxexport_is_an_artifact_error(tmp_path):
    path = tmp_path / "bad.jaxexport"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ArtifactError, match="not a serialized jax.export artifact"):
        open_artifact(str(path))


def test_scalar_inputs_stay_scalars_next_to_bfloat16():
    assert_onnx_matches_jax(lambda s, x: x * s.astype(x.dtype), np.float32(3.0), np.array([1, 2], ml_dtypes.bfloat16))


def test_locations_skip_frames_inside_jaxconv():
    import os

    import jaxconv
    from jaxconv.stablehlo.ir import short_location

    own = os.path.join(os.path.dirname(jaxconv.__file__), "program.py")
    loc = f'loc(callsite("f"("{own}":89:1) at "model.py":12:3))'
    assert short_location(loc) == "model.py:12"
    assert short_location(f'loc("{own}":3:1)') == ""
