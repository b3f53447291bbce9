"""An ONNX model written with its big weights straight from their buffers.

``split`` serializes an ``onnx_ir`` model into a light ``ModelProto`` whose big initializers hold
no data (they are marked as external data at ``PAYLOAD_MARK``) plus their tensors, which for
closed-over weights are the caller's own numpy arrays. ``save`` writes the file from the two
without ever holding a serialized copy of the weights:

- a model under ``convert.EXTERNAL_DATA_BYTES`` as one ``.onnx`` file, byte for byte what
  ``SerializeToString()`` of the whole model gives;
- a larger one as ``PATH`` plus ``PATH.data`` (ONNX external data, each tensor at an offset
  aligned to 64 KiB so that ONNX Runtime can map it).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

import numpy as np
import onnx
import onnx_ir as ir

PAYLOAD_BYTES = 1 << 20
"""Initializers of this many bytes and more stay out of the light proto."""

PAYLOAD_MARK = "jaxconv:payload"
"""The external-data location of an initializer whose data is in ``Parts.payloads``."""

ALIGNMENT = 1 << 16
SMALL_ALIGNMENT = 64

INLINE_EXTERNAL_BYTES = 1 << 10
"""With external data, smaller initializers held in the light proto also move to the data file from this size."""

_RAW_DTYPES = frozenset({
    ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.BOOL,
    ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
    ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64,
})
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
_EXTERNAL = {onnx.TensorProto.DESCRIPTOR.fields_by_name[n].number for n in ("external_data", "data_location")}


@dataclass
class Parts:
    """A model split into its light proto and the data of its big initializers.

    Attributes:
        model: the ``ModelProto``; each big initializer has its name, type and dims, and is marked
            as external data at ``PAYLOAD_MARK``.
        payloads: the tensors of those initializers by name.
    """

    model: onnx.ModelProto
    payloads: dict[str, Any]

    @property
    def payload_bytes(self) -> int:
        return sum(int(t.nbytes) for t in self.payloads.values())

    def full(self) -> onnx.ModelProto:
        """The whole model, data included (a copy of the weights)."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        for t in model.graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL and t.name in self.payloads:
                del t.external_data[:]
                t.ClearField("data_location")
                t.raw_data = bytes(raw_bytes(self.payloads[t.name]))
        return model


def split(model: ir.Model) -> Parts:
    """Serialize ``model`` without the data of its initializers of ``PAYLOAD_BYTES`` and more."""
    payloads: dict[str, Any] = {}
    swapped = []
    for value in model.graph.initializers.values():
        t = value.const_value
        if (t is None or isinstance(t, (ir.ExternalTensor, ir.StringTensor)) or t.dtype not in _RAW_DTYPES
                or t.nbytes < PAYLOAD_BYTES):
            continue
        payloads[value.name] = t  # serialization names each initializer's tensor after its value
        swapped.append((value, t))
        value.const_value = ir.ExternalTensor(PAYLOAD_MARK, None, None, t.dtype, shape=t.shape, name=value.name,
                                              doc_string=t.doc_string, metadata_props=dict(t.metadata_props))
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value, t in swapped:
            value.const_value = t
    return Parts(proto, payloads)


def _is_payload(t: onnx.TensorProto) -> bool:
    return t.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == PAYLOAD_MARK for e in t.external_data)


def raw_bytes(tensor: Any) -> memoryview | bytes:
    """The bytes of ``raw_data`` for ``tensor``: its own buffer where numpy holds it as ONNX lays it out."""
    if tensor.dtype in _RAW_DTYPES:
        arr = tensor.numpy()
        if isinstance(arr, np.ndarray) and arr.flags.c_contiguous and arr.dtype.byteorder in "=|<" \
                and arr.nbytes == tensor.nbytes:
            return memoryview(arr.reshape(-1).view(np.uint8))
    return tensor.tobytes()


def _header(t: onnx.TensorProto) -> tuple[bytes, bytes]:
    """The serialized fields of a payload initializer before and after ``raw_data``."""
    before, after = onnx.TensorProto(), onnx.TensorProto()
    from jaxconv.onnx.convert import copy_proto_field

    for field, _ in t.ListFields():
        if field.number not in _EXTERNAL:
            copy_proto_field(t, before if field.number < _RAW_DATA else after, field.name)
    return before.SerializeToString(), after.SerializeToString()


def initializer_writer(parts: Parts):
    """``(size, write)`` for each initializer in order, as ``convert.write_model`` streams them."""
    from jaxconv.onnx.proto_wire import len_key

    out = []
    for t in parts.model.graph.initializer:
        if not _is_payload(t):
            out.append((t.ByteSize(), lambda f, t=t: f.write(t.SerializeToString())))
            continue
        before, after = _header(t)
        data = parts.payloads[t.name]
        n = int(data.nbytes)
        tag = len_key(_RAW_DATA, n)

        def write(f: BinaryIO, before=before, after=after, tag=tag, data=data) -> None:
            f.write(before)
            f.write(tag)
            f.write(raw_bytes(data))
            f.write(after)

        out.append((len(before) + len(tag) + n + len(after), write))
    return out


def write_single(parts: Parts, f: BinaryIO) -> None:
    """The bytes of ``parts.full().SerializeToString()``, the weights written from their buffers."""
    from jaxconv.onnx.convert import write_model

    write_model(parts.model, f, initializers=initializer_writer(parts))


def with_external_data(parts: Parts, data_name: str, f: BinaryIO) -> onnx.ModelProto:
    """Write the payloads into ``f`` (the data file); the light model pointing at them under ``data_name``."""
    model = onnx.ModelProto()
    model.CopyFrom(parts.model)
    offset = 0
    for t in model.graph.initializer:
        if _is_payload(t):
            data: memoryview | bytes = raw_bytes(parts.payloads[t.name])
        elif len(t.raw_data) >= INLINE_EXTERNAL_BYTES:  # many mid-sized weights add up past the limit too
            data = t.raw_data
            parts.payloads[t.name] = ir.Tensor(onnx.numpy_helper.to_array(t), name=t.name)  # for full()
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
        else:
            continue
        pad = -offset % (ALIGNMENT if len(data) >= PAYLOAD_BYTES else SMALL_ALIGNMENT)
        f.write(b"\0" * pad)
        offset += pad
        f.write(data)
        del t.external_data[:]
        entries = (("location", data_name), ("offset", str(offset)), ("length", str(len(data))))
        for key, value in entries:
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        offset += len(data)
    return model


def save(parts: Parts, path: str) -> bool:
    """Write ``parts`` atomically to ``path`` (and ``path.data`` when large); True with external data.

    With external data, ``parts.model`` becomes the model as written: its big initializers point
    into ``path.data``.

    Both files are written into a temporary folder next to ``path`` and then renamed, so a
    failure leaves neither behind.
    """
    from jaxconv.artifacts import atomic_file
    from jaxconv.onnx.convert import is_large, write_model

    if not is_large(parts.model, extra_bytes=parts.payload_bytes + 16 * len(parts.payloads)):
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            write_single(parts, f)
        return False
    with staged_with_data(path) as (model_path, data_path):
        with open(data_path, "wb") as f:
            model = with_external_data(parts, os.path.basename(data_path), f)
        with open(model_path, "wb") as f:
            write_model(model, f)
    parts.model = model
    return True


@contextlib.contextmanager
def staged_with_data(path: str) -> Iterator[tuple[str, str]]:
    """Paths to write the model ``path`` and its external data ``path.data`` to: both appear, or neither.

    Yields the two paths in a temporary folder beside ``path``; when the block ends without an error
    both files are renamed into place (``convert.save``, ``save``). The folder is removed either way.
    """
    import shutil
    import tempfile

    from jaxconv.artifacts import prepare_parent

    parent = prepare_parent(path)
    name = os.path.basename(path)
    staging = tempfile.mkdtemp(prefix=".jaxconv-", dir=parent)
    try:
        model_path, data_path = os.path.join(staging, name), os.path.join(staging, name + ".data")
        yield model_path, data_path
        os.replace(data_path, os.path.join(parent, name + ".data"))
        os.replace(model_path, os.path.abspath(path))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
