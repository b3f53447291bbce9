"""Protobuf's wire format, for the few places that read or write a model file's fields themselves.

Parsing a whole ``ModelProto`` holds every weight in memory; serializing one copies them again.
Three places work on the serialized bytes instead, field by field: ``thread_count.recorded`` reads
one metadata entry of a model file without its graph, ``convert.write_model`` and ``stream`` write a
graph's initializers one at a time, and ``runtimes.onnx_borrowed`` rewrites the big initializers of
a written file. This module is the wire format they share: varints, field keys, and the fields of a
message read from a seekable file (or ``io.BytesIO``) one at a time, never loaded whole.

A field is a key (``number << 3 | wire type``, a varint), then its value: a varint (wire type 0),
8 or 4 bytes (1, 5), or a varint length and that many bytes (2: strings, bytes, messages). Groups
(3, 4) are not used by ONNX and are refused.
"""

from __future__ import annotations

from typing import BinaryIO, Callable, Iterator, NamedTuple, TypeVar

T = TypeVar("T")

VARINT, I64, LEN, I32 = 0, 1, 2, 5  # wire types
_FIXED = {I64: 8, I32: 4}


class WireError(ValueError):
    """The bytes are not a protobuf message as this reader expects (truncated, a group, field 0)."""


class Field(NamedTuple):
    """Where one field of a message stands in the file, in bytes from its start."""

    number: int
    wire: int
    start: int  # its key
    value: int  # its value (after the length, for a length-delimited field)
    stop: int  # just past its value


def encode_varint(n: int) -> bytes:
    """``n`` (not negative) as a varint: 7 bits a byte, low bits first, the top bit set on all but the last
    byte."""
    if n < 0:
        raise ValueError(f"a varint here is not negative, got {n}")
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(f: BinaryIO) -> int:
    """The varint at ``f``'s position; ``f`` is left just past it."""
    value = shift = 0
    while True:
        b = f.read(1)
        if not b:
            raise WireError(f"truncated: a varint runs past the end of the data (at byte {f.tell()})")
        if shift > 63:
            raise WireError(f"a varint longer than 10 bytes (at byte {f.tell() - 1})")
        value |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return value
        shift += 7


def len_key(number: int, length: int) -> bytes:
    """The key and the length of a length-delimited field, to write its ``length`` bytes after."""
    return encode_varint(number << 3 | LEN) + encode_varint(length)


def len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: a string, bytes, or a serialized message."""
    return len_key(number, len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    """A varint field (an int, a bool, an enum)."""
    return encode_varint(number << 3 | VARINT) + encode_varint(value)


def fields(f: BinaryIO, start: int, end: int) -> Iterator[Field]:
    """Each field of the message in ``f``'s bytes ``[start, end)``, in file order.

    The file is read only for keys and lengths: values are skipped (``read`` them from ``Field.value``
    to ``Field.stop``). The caller may read and seek ``f`` between fields.

    Raises:
        WireError: a field is truncated or runs past ``end``, is a group, or has number 0.
    """
    pos = start
    while pos < end:
        f.seek(pos)
        key = read_varint(f)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value = f.tell()
            read_varint(f)
            stop = f.tell()
        elif wire in _FIXED:
            value = f.tell()
            stop = value + _FIXED[wire]
        elif wire == LEN:
            length = read_varint(f)
            value = f.tell()
            stop = value + length
        else:
            raise WireError(f"wire type {wire} at byte {pos}: not a field of a protobuf message")
        if number == 0:
            raise WireError(f"field number 0 at byte {pos}: not a protobuf message")
        if stop > end:
            raise WireError(f"truncated: field {number} at byte {pos} runs to byte {stop}, past the end at "
                            f"{end}")
        yield Field(number, wire, pos, value, stop)
        pos = stop


def read(f: BinaryIO, start: int, stop: int) -> bytes:
    """The bytes ``[start, stop)`` of ``f``."""
    f.seek(start)
    data = f.read(stop - start)
    if len(data) != stop - start:
        raise WireError(f"truncated: bytes {start} to {stop} asked for, the data ends at {start + len(data)}")
    return data


def strings(data: bytes) -> dict[int, str]:
    """The string fields of a small message (a ``StringStringEntryProto``: 1 key, 2 value), by number;
    the last of a repeated number, as protobuf parses it.

    Raises:
        WireError: a field that is not length-delimited, or malformed bytes.
    """
    import io

    f, out = io.BytesIO(data), {}
    for field in fields(f, 0, len(data)):
        if field.wire != LEN:
            raise WireError(f"field {field.number} is not a string (wire type {field.wire})")
        out[field.number] = read(f, field.value, field.stop).decode("utf-8", "replace")
    return out


def read_model(path_or_bytes: str | bytes, reader: Callable[[BinaryIO, int], T]) -> T | None:
    """``reader(f, size)`` on a model file (or its bytes), reading only what it asks for; None when the
    file cannot be read or its bytes are not a protobuf message (``WireError``)."""
    import io
    import os

    try:
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(path_or_bytes)
            return reader(io.BytesIO(data), len(data))
        with open(path_or_bytes, "rb") as f:
            return reader(f, os.fstat(f.fileno()).st_size)
    except (OSError, ValueError):  # WireError is a ValueError
        return None
