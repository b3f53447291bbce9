"""An artifact file that cannot be read is an ArtifactError naming it and why (artifacts.read_bytes)."""

import pytest

from jaxconv.artifacts import read_bytes
from jaxconv.errors import ArtifactError
from jaxconv.onnx.convert import stablehlo_file_to_onnx
from jaxconv.stablehlo.export import load_exported


@pytest.mark.parametrize("read", [read_bytes, stablehlo_file_to_onnx, load_exported])
def test_a_missing_file_names_itself_and_why(tmp_path, read):
    path = str(tmp_path / "missing.mlir")
    with pytest.raises(ArtifactError, match=r"cannot read .*missing\.mlir: No such file or directory"):
        read(path)


def test_a_folder_is_not_a_file(tmp_path):
    with pytest.raises(ArtifactError, match=r"cannot read .*: Is a directory"):
        read_bytes(str(tmp_path))


def test_the_bytes_come_back_as_written(tmp_path):
    path = tmp_path / "m.mlirbc"
    path.write_bytes(b"ML\xefR\x00\x01")
    assert read_bytes(str(path)) == b"ML\xefR\x00\x01"
