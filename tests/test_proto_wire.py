"""jaxconv.onnx.proto_wire: varints and fields as protobuf writes and parses them, read from a file
without loading it, and truncated or malformed bytes refused with a WireError."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import helper

from jaxconv.onnx import proto_wire
from jaxconv.onnx.proto_wire import WireError


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**32, 2**63 - 1, 2**64 - 1])
def test_varints_round_trip_and_match_protobuf(n):
    data = proto_wire.encode_varint(n)
    assert proto_wire.read_varint(io.BytesIO(data)) == n
    # protobuf's own encoding of a uint64 field 1 is the key byte 0x08 then the varint
    message = onnx.TensorShapeProto.Dimension(dim_value=n) if n < 2**63 else None
    if message is not None:
        assert message.SerializeToString() == b"\x08" + data
    assert len(data) == max(1, (n.bit_length() + 6) // 7)


def test_known_varint_bytes():
    assert proto_wire.encode_varint(0) == b"\x00"
    assert proto_wire.encode_varint(1) == b"\x01"
    assert proto_wire.encode_varint(300) == b"\xac\x02"  # protobuf's documentation example
    assert proto_wire.encode_varint(2**64 - 1) == b"\xff" * 9 + b"\x01"


def test_a_negative_varint_is_refused():
    with pytest.raises(ValueError, match="not negative"):
        proto_wire.encode_varint(-1)


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])
    w = onnx.numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, producer_name="proto_wire test", opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, {"first": "1", "second": "zwei \u00e9"})
    return model


def test_fields_of_a_model_match_onnx_parse():
    model = _model()
    data = model.SerializeToString()
    f = io.BytesIO(data)
    found = list(proto_wire.fields(f, 0, len(data)))
    expected = {field.number for field, _ in model.ListFields()}
    assert {fl.number for fl in found} == expected
    assert found[-1].stop == len(data)
    by_number = {fl.number: fl for fl in found}
    ir = by_number[onnx.ModelProto.DESCRIPTOR.fields_by_name["ir_version"].number]
    assert ir.wire == proto_wire.VARINT
    f.seek(ir.value)
    assert proto_wire.read_varint(f) == model.ir_version
    producer = by_number[onnx.ModelProto.DESCRIPTOR.fields_by_name["producer_name"].number]
    assert proto_wire.read(f, producer.value, producer.stop).decode() == model.producer_name
    graph = by_number[onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number]
    assert onnx.GraphProto.FromString(proto_wire.read(f, graph.value, graph.stop)) == model.graph
    metadata_number = onnx.ModelProto.DESCRIPTOR.fields_by_name["metadata_props"].number
    entries = [proto_wire.strings(proto_wire.read(f, fl.value, fl.stop)) for fl in found if fl.number == metadata_number]
    assert [(e[1], e[2]) for e in entries] == [(p.key, p.value) for p in model.metadata_props]
    # the fields, each kept byte for byte, are the message again
    assert b"".join(proto_wire.read(f, fl.start, fl.stop) for fl in found) == data


def test_fields_read_from_a_file_between_reads(tmp_path):
    model = _model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    size = path.stat().st_size
    with open(path, "rb") as f:
        names = []
        for fl in proto_wire.fields(f, 0, size):
            f.seek(0)  # the caller reads elsewhere between fields
            f.read(5)
            names.append(fl.number)
    assert names == [fl.number for fl in proto_wire.fields(io.BytesIO(path.read_bytes()), 0, size)]


def test_written_fields_parse_with_onnx():
    entry = proto_wire.len_field(1, b"location") + proto_wire.len_field(2, "d\u00e9j\u00e0".encode())
    parsed = onnx.StringStringEntryProto.FromString(entry)
    assert (parsed.key, parsed.value) == ("location", "d\u00e9j\u00e0")
    tensor = onnx.TensorProto.FromString(proto_wire.varint_field(14, 1) + proto_wire.len_key(8, 1) + b"w")
    assert (tensor.data_location, tensor.name) == (onnx.TensorProto.EXTERNAL, "w")


@pytest.mark.parametrize("cut", [1, 3, 10, -1])
def test_truncated_bytes_raise_a_wire_error(cut):
    data = _model().SerializeToString()
    short = data[:cut]
    with pytest.raises(WireError, match="truncated"):
        list(proto_wire.fields(io.BytesIO(short), 0, len(short)))


def test_a_varint_cut_short_and_one_too_long():
    with pytest.raises(WireError, match="truncated: a varint runs past the end"):
        proto_wire.read_varint(io.BytesIO(b"\x80\x80"))
    with pytest.raises(WireError, match="longer than 10 bytes"):
        proto_wire.read_varint(io.BytesIO(b"\xff" * 11))
    with pytest.raises(WireError, match="truncated: bytes 2 to 9"):
        proto_wire.read(io.BytesIO(b"abcd"), 2, 9)


@pytest.mark.parametrize("data,message", [(b"\x0b", "wire type 3"), (b"\x07", "wire type 7"),
                                          (b"\x02\x00", "field number 0")])
def test_groups_and_field_zero_are_refused(data, message):
    with pytest.raises(WireError, match=message):
        list(proto_wire.fields(io.BytesIO(data), 0, len(data)))


def test_a_field_past_its_message_is_refused():
    inner = proto_wire.len_field(1, b"abcdef")
    with pytest.raises(WireError, match="past the end at 5"):
        list(proto_wire.fields(io.BytesIO(inner), 0, 5))
    with pytest.raises(WireError, match="not a string"):
        proto_wire.strings(proto_wire.varint_field(1, 3))
