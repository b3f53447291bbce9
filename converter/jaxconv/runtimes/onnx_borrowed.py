"""The ONNX model as written, for ONNX Runtime, with its big weights borrowed from the buffers written.

ONNX Runtime loading a file of big weights holds its own copy of them beside the caller's arrays
(``scripts/bench_memory.py --check``: 2.45 x the weights on a 1.4 GB MLP). For the check of a model
written by ``onnx.stream`` from the caller's arrays, ``borrowed_model`` gives ONNX Runtime the
model with those arrays as the data of its big initializers instead:

1. The written ``.onnx`` file is read field by field (``onnx.proto_wire``). Every field is kept
   byte for byte as written, but for the top-level graph's initializers whose data has a buffer:
   their data, ``raw_data`` in the file or a range of the external data file, is compared byte
   for byte with the buffer (in chunks, through the page cache, so no copy of it is held), and
   the initializer is pointed at an in-memory file that holds the buffer.
2. ONNX Runtime parses those bytes and reads each borrowed initializer's type and shape from the
   file as written; ``session.use_external_initializer_file_buffers_directly`` makes it use the
   buffers in place.

So the session runs the graph as written, on data equal to the data written: a byte of the file
that differs from its buffer fails the check (``ArtifactError``), and a file this reader does not
expect (malformed, a tensor with two ``raw_data`` fields, data outside the model's folder) gets
``None``: the caller lets ONNX Runtime load the file itself.

On that MLP the session then adds 0.05 x the weights (ONNX Runtime loading the file: 1.3 x, its
copy and its prepacked copy; mapping a 64 KiB-aligned external data file instead counts the
mapped pages in the RSS once read, 1.07 x). What is left of the check's peak is jax.jit's: jax
takes a numpy array without a copy only when its data is 64-byte aligned, and numpy's big arrays
start 16 bytes into a page, so their reference run holds a copy of the weights (2.18 x in all;
1.37 x with weights held as jax arrays, as Flax and Haiku hold them, which is what building the
model takes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import numpy as np

from jaxconv.errors import ArtifactError
from jaxconv.onnx import proto_wire
from jaxconv.onnx.proto_wire import Field

BORROW_BYTES = 256 << 20
"""Models whose payload buffers weigh this much or more are checked with borrowed weights."""

DISABLE_PREPACKING = True
"""Borrowed weights are not prepacked: ONNX Runtime's prepacked MatMul/Conv weights are copies of
its own, which would add 1 x the weights again (the session then holds 1.07 x the weights instead
of 0.08 x). Its kernels pack weight panels at each run instead of once: the outputs are ONNX
Runtime's for the same graph and data, by the unpacked kernel path, and differ from a prepacked
session's by rounding (2e-6 to 4e-6 on MLPs with outputs up to 3: inside float32's tolerance of
1e-4 relative, 1e-5 absolute)."""

_CHUNK = 4 << 20
_GRAPH, _INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_NAME, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 8, 9, 13, 14  # TensorProto fields
_EXTERNAL = 1  # TensorProto.EXTERNAL
_LOCATION_PREFIX = "jaxconv-borrowed-"


class _Unexpected(Exception):
    """The file is not laid out as this reader expects: ONNX Runtime loads it itself."""


@dataclass
class Borrowed:
    """The model as ONNX Runtime gets it.

    Attributes:
        model: the serialized model, its borrowed initializers pointing at in-memory files.
        names: the in-memory file names.
        buffers: their contents (uint8 views of the caller's arrays); keep them alive as long as the session.
    """

    model: bytes
    names: list[str]
    buffers: list[np.ndarray]


def payload_buffers(payloads: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """uint8 views of the buffers ``onnx.stream`` wrote the payloads from, by initializer name; None
    when they weigh less than ``BORROW_BYTES`` (ONNX Runtime then loads the file itself)."""
    if sum(int(t.nbytes) for t in payloads.values()) < BORROW_BYTES:
        return None
    from jaxconv.onnx.stream import raw_bytes

    return {name: np.frombuffer(raw_bytes(t), np.uint8) for name, t in payloads.items()}


def borrowed_model(path: str, buffers: Mapping[str, np.ndarray]) -> Borrowed | None:
    """The model at ``path`` with the data of its big initializers taken from ``buffers``.

    Returns:
        None when the file is not laid out as expected or no initializer can borrow a buffer.

    Raises:
        ArtifactError: an initializer's data in the file differs from its buffer.
    """
    out = Borrowed(b"", [], [])
    try:
        with open(path, "rb") as f:
            out.model = _model(f, os.path.getsize(path), os.path.dirname(os.path.abspath(path)), buffers, out)
    except (_Unexpected, proto_wire.WireError, OSError, UnicodeDecodeError):
        return None
    return out if out.names else None


def _model(f: BinaryIO, size: int, folder: str, buffers: Mapping[str, np.ndarray], out: Borrowed) -> bytes:
    parts = []
    for number, wire, first, value, stop in list(proto_wire.fields(f, 0, size)):
        if number == _GRAPH and wire == proto_wire.LEN:
            parts.append(proto_wire.len_field(_GRAPH, _graph(f, value, stop, folder, buffers, out)))
        else:
            parts.append(proto_wire.read(f, first, stop))
    return b"".join(parts)


def _graph(f: BinaryIO, start: int, end: int, folder: str, buffers: Mapping[str, np.ndarray],
           out: Borrowed) -> bytes:
    parts = []
    for number, wire, first, value, stop in list(proto_wire.fields(f, start, end)):
        initializer = number == _INITIALIZER and wire == proto_wire.LEN
        tensor = _tensor(f, value, stop, folder, buffers, out) if initializer else None
        kept = proto_wire.read(f, first, stop) if tensor is None else proto_wire.len_field(_INITIALIZER, tensor)
        parts.append(kept)
    return b"".join(parts)


def _tensor(f: BinaryIO, start: int, end: int, folder: str, buffers: Mapping[str, np.ndarray],
            out: Borrowed) -> bytes | None:
    """The initializer's fields pointing at a borrowed buffer, or None to keep it as written."""
    fields = list(proto_wire.fields(f, start, end))
    by_number: dict[int, list[Field]] = {}
    for field in fields:
        by_number.setdefault(field.number, []).append(field)
    names = [fl for fl in by_number.get(_NAME, []) if fl.wire == proto_wire.LEN]
    if not names:
        return None
    name = proto_wire.read(f, names[-1].value, names[-1].stop).decode("utf-8")
    raws, entries = by_number.get(_RAW_DATA, []), by_number.get(_EXTERNAL_DATA, [])
    location = _location(f, by_number.get(_DATA_LOCATION, []))
    buffer = buffers.get(name)
    if location == _EXTERNAL:
        if raws:
            raise _Unexpected("raw_data in an external initializer")
        place = _external_place(f, entries, folder)
        if buffer is None or buffer.nbytes != place[2]:
            raise _Unexpected(f"no buffer for external initializer {name}")  # ORT would look for the file
        data_path, offset, length = place
    elif location == 0 and not entries and len(raws) == 1 and raws[0].wire == proto_wire.LEN \
            and buffer is not None and buffer.nbytes == raws[0].stop - raws[0].value:
        data_path, offset, length = None, raws[0].value, raws[0].stop - raws[0].value
    else:
        return None
    if not _same_bytes(f if data_path is None else None, data_path, offset, buffer):
        where = os.path.basename(data_path) if data_path else "the model file"
        raise ArtifactError(f"the data of initializer {name!r} in {where} differs from the weights it was "
                            f"written from ({length} bytes at offset {offset})")
    key = f"{_LOCATION_PREFIX}{len(out.names)}"
    out.names.append(key)
    out.buffers.append(buffer)
    kept = [proto_wire.read(f, first, stop) for number, _, first, _, stop in fields
            if number not in (_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION)]
    return b"".join(kept + [_entry("location", key), _entry("offset", "0"), _entry("length", str(length)),
                            proto_wire.varint_field(_DATA_LOCATION, _EXTERNAL)])


def _location(f: BinaryIO, fields: list[Field]) -> int:
    if not fields:
        return 0
    number, wire, _, value, _ = fields[-1]
    if wire != proto_wire.VARINT:
        raise _Unexpected("data_location is not a varint")
    f.seek(value)
    return proto_wire.read_varint(f)


def _external_place(f: BinaryIO, entries: list[Field],
                    folder: str) -> tuple[str, int, int]:
    """(data file, offset, length) of an external initializer, its file inside the model's folder."""
    import onnx

    info: dict[str, str] = {}
    for _, wire, _, value, stop in entries:
        data = proto_wire.read(f, value, stop) if wire == proto_wire.LEN else None
        entry = None if data is None else onnx.StringStringEntryProto.FromString(data)
        if entry is None or entry.key not in ("location", "offset", "length"):
            raise _Unexpected("external data entry")
        info[entry.key] = entry.value
    location = info.get("location", "")
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise _Unexpected("external data location")
    if not info.get("length", "").isdigit() or not info.get("offset", "0").isdigit():
        raise _Unexpected("external data range")
    return os.path.join(folder, location), int(info.get("offset", "0")), int(info["length"])


def _entry(key: str, value: str) -> bytes:
    entry = proto_wire.len_field(1, key.encode()) + proto_wire.len_field(2, value.encode())
    return proto_wire.len_field(_EXTERNAL_DATA, entry)


def _same_bytes(f: BinaryIO | None, data_path: str | None, offset: int, buffer: np.ndarray) -> bool:
    """Whether the file's bytes from ``offset`` equal ``buffer``, read in chunks of ``_CHUNK``."""
    if f is None:
        assert data_path is not None
        with open(data_path, "rb") as g:
            return _same_bytes(g, None, offset, buffer)
    f.seek(offset)
    done = 0
    while done < buffer.nbytes:
        chunk = np.frombuffer(f.read(min(_CHUNK, buffer.nbytes - done)), np.uint8)
        if not chunk.size or not np.array_equal(chunk, buffer[done:done + chunk.size]):
            return False
        done += chunk.size
    return True
