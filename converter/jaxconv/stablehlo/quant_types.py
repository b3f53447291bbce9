"""Quantized element types (``!quant.uniform``): the reader names a quantized value's dtype by
its MLIR type text, and ``parse`` reads the scales, zero points and storage range from it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

PREFIX = "!quant.uniform<"
_STORAGE = re.compile(r"^(u|ui|i|si)(\d+)(?:<\s*(-?\d+)\s*:\s*(-?\d+)\s*>)?$")
_FLOAT_NAMES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


@dataclass(frozen=True)
class QuantType:
    """A uniform quantized element type.

    Attributes:
        text: the type as written, ``!quant.uniform<i8:f32, 0.5:-128>``.
        signed: whether the storage integers are signed.
        bits: storage width (2 to 32).
        storage_min, storage_max: the storage range (the type's own, else the width's).
        expressed: the float dtype the values stand for (``float32``).
        scales, zero_points: one per tensor, or one per slice along ``axis``.
        axis: the quantized dimension of a per-axis type, None per tensor.
    """

    text: str
    signed: bool
    bits: int
    storage_min: int
    storage_max: int
    expressed: str
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None = field(default=None)

    @property
    def carrier(self) -> str:
        """The dtype holding the storage integers in a graph: widths under 8 bits use 8."""
        width = max(8, 1 << (self.bits - 1).bit_length())
        return f"{'' if self.signed else 'u'}int{width}"

    @property
    def per_axis(self) -> bool:
        return self.axis is not None


def is_quant(dtype: str) -> bool:
    """Whether a dtype name is a quantized type."""
    return dtype.startswith(PREFIX)


@lru_cache(maxsize=None)
def parse(text: str) -> QuantType:
    """Parse ``!quant.uniform<storage[<min:max>]:expressed[:axis], scale[:zp] | {scale:zp, ...}>``.

    Raises:
        ValueError: the text is not a uniform quantized type this reader understands.
    """
    if not (text.startswith(PREFIX) and text.endswith(">")):
        raise ValueError(f"not a uniform quantized type: {text}")
    body = text[len(PREFIX):-1].strip()
    head, sep, params = body.partition(",")
    if not sep:
        raise ValueError(f"quantized type without a scale: {text}")
    m = re.match(r"^\s*((?:u|ui|i|si)\d+(?:<[^<>]*>)?)\s*:\s*([a-z0-9]+)\s*(?::\s*(\d+))?\s*$", head)
    if m is None:
        raise ValueError(f"cannot read the storage and expressed types of {text}")
    storage, expressed, axis = m.group(1), m.group(2), m.group(3)
    sm = _STORAGE.match(storage.replace(" ", ""))
    if sm is None or expressed not in _FLOAT_NAMES:
        raise ValueError(f"unsupported storage or expressed type in {text}")
    signed, bits = sm.group(1) in ("i", "si"), int(sm.group(2))
    if not 2 <= bits <= 32:
        raise ValueError(f"storage width {bits} in {text}: only 2 to 32 bits are supported")
    lo = -(1 << (bits - 1)) if signed else 0
    hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    if sm.group(3) is not None:
        lo, hi = int(sm.group(3)), int(sm.group(4))
    params = params.strip()
    if axis is not None:
        if not (params.startswith("{") and params.endswith("}")):
            raise ValueError(f"per-axis quantized type without {{scale:zero_point, ...}}: {text}")
        pairs = [p.strip() for p in params[1:-1].split(",") if p.strip()]
    else:
        pairs = [params]
    scales, zps = [], []
    for pair in pairs:
        scale, _, zp = pair.partition(":")
        scales.append(float(scale))
        zps.append(int(zp) if zp.strip() else 0)
    return QuantType(text=text, signed=signed, bits=bits, storage_min=lo, storage_max=hi,
                     expressed=_FLOAT_NAMES[expressed], scales=tuple(scales), zero_points=tuple(zps),
                     axis=int(axis) if axis is not None else None)
