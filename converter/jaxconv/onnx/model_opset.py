"""The default-domain opset a model file imports, read from its top-level fields without parsing its graph.

The check asks it of an artifact (an ONNX file, or its bytes) to know what the lowering could express
there: below opset 26 no op reads a float's bits, so the sign of a NaN is out of reach.
"""

from __future__ import annotations

import io
from typing import BinaryIO

from jaxconv.onnx import proto_wire

_OPSET_IMPORT_FIELD = 8  # ModelProto.opset_import: OperatorSetIdProto {1: domain, 2: version}


def default_opset(path_or_bytes: str | bytes) -> int | None:
    """The version of the default domain ("" or "ai.onnx") in the model's ``opset_import``; None when it
    imports none or the data is not a model."""
    return proto_wire.read_model(path_or_bytes, _read)


def _read(f: BinaryIO, size: int) -> int | None:
    for field in proto_wire.fields(f, 0, size):
        if field.number != _OPSET_IMPORT_FIELD or field.wire != proto_wire.LEN:
            continue
        entry = proto_wire.read(f, field.value, field.stop)
        domain, version = "", None
        g = io.BytesIO(entry)
        for part in proto_wire.fields(g, 0, len(entry)):
            if part.number == 1 and part.wire == proto_wire.LEN:
                domain = proto_wire.read(g, part.value, part.stop).decode("utf-8", "replace")
            elif part.number == 2 and part.wire == proto_wire.VARINT:
                g.seek(part.value)
                version = proto_wire.read_varint(g)
        if domain in ("", "ai.onnx") and version is not None:
            return version
    return None
